"""The chat's slash commands (``/set``, ``/show``, ``/load``, ``/format``, ``/think``,
``/system``, ``/new``, ``/stats``, ``/help``, ``/bye``): parsed by ``app/slash.py``, run here
against the app's public face. What they report of the chat (the model, the last reply) comes
from its ``ChatState``, never a widget.

Imports inside functions are deliberate: the preset picker and GGUF reading load only when their
commands are used (start-up time)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from vibechat.engine.errors import InvalidParameterError, VibechatError
from vibechat.engine.settings.params import PARAM_SPECS
from vibechat.engine.settings.think_switch import (
    NO_SWITCH,
    check_budget,
    check_thinking,
    describe_switch,
    no_levels,
)

from ... import slash
from ...report import format_stats
from ..conversation.messages import ChatMessageWidget
from ..laid_out import LaidOut
from ..outside import one_line
from ..screens import show_info
from .attachments import COMMANDS as ATTACH_COMMANDS
from .host import ChatHost

if TYPE_CHECKING:
    from vibechat.engine.chat.session import ChatSession
    from vibechat.engine.settings.params import SamplingParams

    from .compactions import Compactions
    from .models import Models


class SlashHost(ChatHost, Protocol):
    """The app as the slash commands see it: its public face, and its model manager (``/load``)."""

    models: Models
    compactions: Compactions

    def action_models(self) -> None: ...


SHOW_WHAT = ("info", "parameters", "system", "template")


async def run(app: SlashHost, command: slash.SlashCommand) -> None:
    name, arg = command.name, command.arg
    # /image, /file, /detach: the attachments controller's.
    if name in ATTACH_COMMANDS:
        await app.attachments.command(name, arg)
    elif not command.known:
        app.notify(slash.suggestion(name), severity="warning", timeout=6)
    elif name == "/set":
        await _set(app, arg)
    elif name == "/show":
        await _show(app, arg)
    elif name == "/load":
        if arg:
            app.models.load(arg)
        else:
            # F3: pick one, or open a file.
            app.action_models()
    elif name == "/format":
        await _format(app, arg)
    elif name == "/think":
        await _think(app, arg)
    elif name == "/system":
        await _system(app, arg)
    elif name == "/compare":
        await app.comparisons.command(arg)
    elif name == "/compact":
        app.compactions.command(arg)
    elif name == "/preset":
        from . import presets

        await presets.run(app, arg)
    elif name == "/save":
        await note(
            app,
            slash.SAVE_NOTE
            if app.history is not None
            else "This chat is not being saved (--no-save). "
            "To keep these parameters as your defaults, press Ctrl+S in the parameter panel (F2).",
        )
    elif name in ("/new", "/clear"):
        await app.action_new_conversation()
    elif name == "/stats":
        # The last reply that ended (the status bar shows a streaming one's).
        last = app.state.last
        await note(
            app, format_stats(last.stats, app.state.model) if last is not None else "No reply yet."
        )
    elif name == "/help":
        app.action_help()
    elif name == "/bye":
        app.exit()


async def _set(app: ChatHost, arg: str) -> None:
    """``/set NAME VALUE``, ollama's ``/set parameter NAME VALUE`` and ``/set system TEXT``;
    ``/set`` alone lists the parameters (``slash.parse_set`` reads the spellings)."""
    params = app.session.conversation.params
    request = slash.parse_set(arg)
    if request.kind == "list":
        await note(app, show_info.parameters_text(params))
        return
    if request.kind == "system":
        await _system(app, request.value)
        return
    if request.kind == "info":
        app.notify(request.value, timeout=8)
        return
    key, value = request.name, request.value
    if key in ("think", "thinking"):
        await _think(app, value)
        return
    if key in ("format", "output_format"):
        await _format(app, value or "off")
        return
    if key == "context_policy":
        _context_policy(app, value)
        return
    try:
        params = params.set_from_text(key, value)
    except VibechatError as exc:
        app.notify(
            f"{exc} ({slash.SET_USAGE})" if key not in params.to_dict() else str(exc),
            severity="error",
            timeout=8,
        )
        return
    app.set_params(params)
    app.notify(f"{key} = {slash.shown(key, getattr(params, key))}", timeout=2)


def _context_policy(app: ChatHost, value: str) -> None:
    """``/set context_policy trim|compact|stop``: what a prompt that would overflow the context
    does, from now on in this chat (the config's context_policy keeps it)."""
    from vibechat.engine.settings.choices import check_context_policy

    try:
        app.session.context_policy = check_context_policy(value)
    except VibechatError as exc:
        app.notify(str(exc), severity="error", timeout=6)
        return
    app.notify(f"context_policy = {app.session.context_policy}", timeout=2)


async def _show(app: ChatHost, arg: str) -> None:
    """``/show [info|parameters|system|template]``, as ollama's ``/show``."""
    what = arg.strip().lower() or "info"
    matches = [w for w in SHOW_WHAT if w.startswith(what)]
    if len(matches) != 1:
        app.notify(
            f"/show {one_line(arg, limit=40)}: show what? "
            f"/show {'|'.join(SHOW_WHAT)} (/show alone: info).",
            severity="warning",
            timeout=6,
        )
        return
    conversation = app.session.conversation
    info, params, system = app.state.model, conversation.params, conversation.system
    if matches[0] == "info":
        heading, rows = show_info.info_rows(info, params, system)
        # Laid out for the chat's width: a long value goes on under itself, not under the labels.
        await note(app, heading + show_info.table(rows), LaidOut.rows(rows, heading))
    elif matches[0] == "parameters":
        await note(app, show_info.parameters_text(params))
    elif matches[0] == "system":
        await note(app, show_info.system_text(system))
    else:
        template = None
        if info is not None and info.chat_format == "gguf" and not info.server:
            # The file's header: off the UI thread.
            template = await asyncio.to_thread(_read_template, info.path)
        await note(app, show_info.template_text(info, template))


def _read_template(path: str) -> str | None:
    from vibechat.engine.models.gguf import inspect_gguf

    try:
        return inspect_gguf(path).chat_template
    except VibechatError as exc:
        return f"(the template cannot be read: {exc})"


async def _format(app: ChatHost, arg: str) -> None:
    """``/format json|FILE|off``: what the next replies must be (kept with the conversation's
    parameters). What ``vibechat run`` refuses, this refuses, in one line, the format staying
    as it was: the file is read and a schema converted here (within engine/settings/structured.py's
    bounds), and whether llama.cpp's parser takes the grammar is asked of the engine's process
    (the chat's own never loads libllama), in a worker: the check waits for the engine (a
    reply in progress ends first) while the chat goes on. For a server, as for ``run``: a
    schema that parses and no grammar (the server judges the schema when it is used)."""
    params = app.session.conversation.params
    if not arg:
        fmt = params.output_format
        await note(
            app,
            f"Reply format: {fmt.label}"
            if fmt
            else "Reply format: free text (/format json|FILE|off).",
        )
        return

    async def check_then_set() -> None:
        try:
            checked = await asyncio.to_thread(_checked_format, app.session, params, arg)
        except VibechatError as exc:
            app.notify(one_line(str(exc), limit=None), severity="error", timeout=8)
            return
        # Onto the parameters as they are now (a slider may have moved).
        fmt = checked.output_format
        app.set_params(app.session.conversation.params.replace(output_format=fmt))
        app.notify(f"Reply format: {fmt.label}." if fmt else "Reply format: free text.", timeout=2)

    # The last /format wins: an earlier one still waiting for the engine is dropped.
    app.run_worker(check_then_set(), group="format", exclusive=True, exit_on_error=False)


def _checked_format(session: ChatSession, params: SamplingParams, arg: str) -> SamplingParams:
    """``params`` with the format ``arg``, checked as ``run`` checks it (blocks: the file, the
    schema's conversion, and a local engine's parser, which waits for the engine lock: a
    reply in progress ends first)."""
    params = params.set_from_text("format", arg)
    fmt = params.output_format
    info = session.info
    if fmt is None:
        return params
    if info is not None and info.server is not None:
        fmt.check_remote()
        return params
    # The bounds and the conversion, before the engine sees the grammar.
    fmt.check()
    with session.engine_lock:
        # The engine process's parser (a backend in the chat's process has none: it parses at
        # the request).
        check = getattr(session.backend, "check_output_format", None)
        if check is not None:
            try:
                check(fmt)
            except InvalidParameterError:
                raise
            # The engine could not answer (it crashed on it, or no model).
            except VibechatError as exc:
                raise VibechatError(f"{fmt.label}: not checked, so not used: {exc}") from None
    return params


async def _think(app: ChatHost, arg: str) -> None:
    """``/think on|off|low|medium|high|auto``: the thinking switch or effort of the next replies
    (kept with the conversation's parameters), refused for a local model whose template has no
    switch; an effort for a template that is only on or off says so. ``/think budget N|off``:
    the thinking budget (``_think_budget``)."""
    word, _, rest = arg.partition(" ")
    if word.lower() == "budget":
        await _think_budget(app, rest.strip())
        return
    params = app.session.conversation.params
    info = app.session.info
    switch = info.thinking_switch if info is not None else None
    server = info.server if info is not None else None
    how = (
        "the server's template (chat_template_kwargs enable_thinking; an effort as "
        "reasoning_effort too)"
        if server
        else describe_switch(switch)
    )
    if not arg:
        budget = PARAM_SPECS["think_budget"].show(params.think_budget)
        await note(
            app,
            f"Thinking: {params.thinking}, through {how}; budget {budget} "
            "(/think on|off|low|medium|high|auto, /think budget N|off).",
        )
        return
    try:
        mode = check_thinking(arg)
    except VibechatError as exc:
        app.notify(str(exc), severity="error", timeout=6)
        return
    if info is not None and mode != "auto" and server is None and switch is None:
        app.notify(f"Thinking stays as the model does: {NO_SWITCH}.", severity="warning", timeout=8)
        return
    app.set_params(params.replace(thinking=mode))
    levels = no_levels(switch, mode) if server is None else None
    if levels:
        app.notify(f"{levels[0].upper()}{levels[1:]}", severity="warning", timeout=8)
        return
    app.notify(
        f"Thinking {mode} for the next replies, through {how}."
        if mode != "auto"
        else "Thinking auto: as the model's template does by default.",
        timeout=3,
    )


async def _think_budget(app: ChatHost, arg: str) -> None:
    """``/think budget N|off``: most tokens the next replies may think (kept with the
    conversation's parameters); 0, a negative number or one beyond the model's context is
    refused in one line, and nothing changes."""
    params = app.session.conversation.params
    spec = PARAM_SPECS["think_budget"]
    if not arg:
        await note(app, f"Thinking budget: {spec.show(params.think_budget)} (/think budget N|off).")
        return
    info = app.session.info
    try:
        budget = spec.parse(arg)
        assert budget is None or isinstance(budget, int)
        check_budget(budget, info.context_size if info is not None else 0)
    except VibechatError as exc:
        app.notify(str(exc), severity="error", timeout=6)
        return
    app.set_params(params.replace(think_budget=budget))
    if budget is None:
        app.notify("No thinking budget: replies think as long as the model does.", timeout=3)
        return
    where = (
        "the server is sent it (llama-server's thinking_budget_tokens, vLLM's "
        "thinking_token_budget; other servers ignore it)"
        if info is not None and info.server
        else "at it the engine closes the thinking and the answer begins"
    )
    app.notify(f"Thinking budget {budget:,} tokens for the next replies: {where}.", timeout=4)


async def _system(app: ChatHost, arg: str) -> None:
    chatlog = app.session.chat
    if not arg:
        await note(app, f"System prompt: {chatlog.conversation.system or '(none)'}")
        return
    chatlog.set_system(None if arg.lower() in ("clear", "none", "off") else arg)
    app.notify(
        "System prompt cleared." if chatlog.conversation.system is None else "System prompt set.",
        timeout=2,
    )


async def note(app: ChatHost, text: str, body: LaidOut | None = None) -> None:
    """A note in the chat: ``text``, shown as it is or as ``body`` lays it out."""
    await app.chat.add(ChatMessageWidget("note", text, body=body))
