"""``vibechat run``: one prompt, the reply streamed to stdout.

``execute`` loads the model, checks and saves the prompt, and answers it (with the tools
``--allow-tool`` allows). Its parts, each in a module of its own: what the run asks
(``run_request.RunRequest``), the prompt and the files it sends (``run_input``), how the
reply is written as it streams (``run_output``), and how the run ends: ``--json``'s object,
the last lines on stderr and the exit status (``run_result``, which lists the statuses).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.session import ChatSession
from vibechat.engine.chat.tool_turns import DENIED, NOT_RUN_ARGUMENTS, answer_with_tools
from vibechat.engine.chat.turn import Answer
from vibechat.engine.errors import LoadCancelled, StreamInterrupted, VibechatError
from vibechat.engine.sanitize import sanitize
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.think_switch import unswitchable
from vibechat.engine.tools.results import ToolResult
from vibechat.engine.turns.backend import Backend, ChatEvent, ModelInfo
from vibechat.engine.turns.tool_calls import ToolCall, ToolSpec

from ..report import RunResult, attachment_list, error_kind, error_object
from .clitools import plain, quiet_stdout
from .interrupt import CtrlC
from .run_output import ReplyPrinter, compact_notice
from .run_request import RunRequest
from .run_result import (
    EXIT_FAILED,
    STDOUT_CLOSED,
    cancelled_load_object,
    end_output,
    finish,
    stdout_error,
    write_failed,
)

# Characters of a tool call's arguments and result in --json's "tool_calls".
LOGGED = 4000


def execute(
    backend: Backend, request: RunRequest, out: TextIO, err: TextIO, chat: ChatLog | None = None
) -> int:
    """Answer ``request.prompt``; ``chat`` holds the conversation it continues (and saves it
    when it has a history): the prompt is saved before generation, the reply as it streams.
    A failure once the model is loaded is raised after ``--json`` printed its object
    (what is known: the model, the engine, the parameters, the error)."""
    # `vibechat run … >&-`: Python has no sys.stdout at all.
    if out is None:
        raise VibechatError(STDOUT_CLOSED)
    session = ChatSession(backend, chat)
    conversation = session.conversation
    if request.system is not None:
        conversation.system = request.system or None
    conversation.params = request.params
    session.context_policy = request.context_policy
    ctrl_c = CtrlC(session.cancel)
    with ctrl_c.installed():
        try:
            info = session.load()
        except LoadCancelled:
            # Ctrl-C stopped the load: nothing was asked of the model yet.
            if request.json_output:
                end_output(request, out, "", cancelled_load_object(request), "")
            raise KeyboardInterrupt from None
        if request.compact:
            return _compact(session, request, out, err, info, ctrl_c)
        # A Ctrl-C from here on, even one that landed just as the load ended, stops the reply,
        # not the command: the prompt is saved, the reply saved as stopped, --json prints its
        # object.
        try:
            _ask(session, request, err, info, ctrl_c)
        except VibechatError as exc:
            session.stop_writing()
            if request.json_output:
                end_output(request, out, "", _refused_object(session, request, info, exc))
            raise
        try:
            return _answer(session, request, out, err, info, ctrl_c)
        finally:
            # the reply is saved (or the run failed): the next writer may go on
            session.stop_writing()


def _ask(
    session: ChatSession, request: RunRequest, err: TextIO, info: ModelInfo, ctrl_c: CtrlC
) -> None:
    """The prompt, once the model is loaded: the load's notices said, the prompt checked
    against the model, then added to the conversation (saved) after any other writer's turns."""
    ignored = unswitchable(info.server, info.thinking_switch, request.params.thinking)
    # e.g. the context size rounded up
    for notice in (*info.notices, *([ignored] if ignored else [])):
        err.write(plain(f"vibechat: {notice}") + "\n")
    # Before it is saved: a prompt that cannot fit is refused, and images a model cannot take.
    session.check_prompt(request.prompt, request.attachments)
    # --continue: one writer at a time. Another vibechat adding to the conversation is waited
    # for; its turns join what the model is sent, and this turn is saved after them.
    session.catch_up(
        wait=True,
        on_wait=lambda: _waiting(err, session),
        stop_requested=lambda: ctrl_c.requested,
    )
    session.chat.add_user(request.prompt, request.attachments)


def _compact(
    session: ChatSession,
    request: RunRequest,
    out: TextIO,
    err: TextIO,
    info: ModelInfo,
    ctrl_c: CtrlC,
) -> int:
    """``run --continue --compact``: the model summarises the conversation (``request.prompt``:
    the instructions) and it goes on from a new branch that starts with the summary (the
    original kept); the summary on stdout (``--json``: its object, with ``compacted_from``).
    A summary refused (empty, not shorter) is one line, and nothing is replaced."""
    try:
        session.catch_up(
            wait=True,
            on_wait=lambda: _waiting(err, session),
            stop_requested=lambda: ctrl_c.requested,
        )
        compaction = session.compact(request.prompt, stop_requested=lambda: ctrl_c.requested)
        session.accept_compaction(compaction)
    except VibechatError as exc:
        if request.json_output:
            end_output(request, out, "", _refused_object(session, request, info, exc))
        raise
    finally:
        session.stop_writing()
    text = compaction.summary if request.raw else sanitize(compaction.summary)
    report = RunResult(
        text=text,
        info=info,
        conversation_id=session.chat.conversation_id,
        params=request.params,
        finish_reason="stop",
        compacted_from=session.compacted_from,
    )
    if not request.json_output:
        out.write(text)
    end_output(request, out, text, report.to_json())
    return 0


def _refused_object(
    session: ChatSession, request: RunRequest, info: ModelInfo, exc: VibechatError
) -> dict[str, object]:
    """``--json``'s object for a prompt refused before its reply began (``_ask``)."""
    return RunResult(
        info=info,
        conversation_id=session.chat.conversation_id,
        params=request.params,
        attachments=attachment_list(request.attachments),
        stdin_chars=request.stdin_chars,
        error=error_object(str(exc), error_kind(exc), EXIT_FAILED),
    ).to_json()


def _waiting(err: TextIO, session: ChatSession) -> None:
    conversation_id = session.chat.conversation_id
    err.write(
        f"vibechat: waiting for another vibechat writing to conversation {conversation_id}…\n"
    )
    err.flush()


def load_or_interrupt(session: ChatSession, ctrl_c: CtrlC) -> ModelInfo:
    """``session.load()``; Ctrl-C meanwhile (which stops llama.cpp's load) raises
    KeyboardInterrupt once it has returned (``--prompts-file``: no prompt was begun)."""
    try:
        info = session.load()
    except LoadCancelled:
        raise KeyboardInterrupt from None
    ctrl_c.raise_if_requested()
    return info


def _answer(
    session: ChatSession,
    request: RunRequest,
    out: TextIO,
    err: TextIO,
    info: ModelInfo,
    ctrl_c: CtrlC,
) -> int:
    """The reply, streamed by a ``ReplyPrinter``, and the exit status its end gives."""
    printer = ReplyPrinter(request, out, err)
    chat = session.chat
    # The seed is drawn here, so an interrupted reply reports it too.
    params = request.params.with_seed()
    try:
        try:
            result = _reply(session, request, params, printer, err, info, ctrl_c)
        finally:
            printer.close()
    except VibechatError as exc:
        # cut mid-reply (the partial text stays printed and saved), a crash
        partial = exc.partial if isinstance(exc, StreamInterrupted) else "".join(printer.shown)
        tail = printer.held_back()
        write_failed(
            request, out, partial, info, chat.conversation_id, exc, params, printer.meter, tail
        )
        raise
    # --json's "compacted_from" and "left_out_messages".
    request.compacted_from = session.compacted_from
    request.left_out = session.left_out_messages()
    # Saving stopped (a full disk): the reply is still printed, the run fails.
    if chat.problem:
        err.write(plain(f"vibechat: error: {chat.problem}") + "\n")
    if printer.stdout_failed is not None:
        raise stdout_error(printer.stdout_failed)
    if result.pipe_closed:
        quiet_stdout()
        return EXIT_FAILED if chat.problem else 0
    tail = printer.held_back()
    code = finish(
        request, out, err, result, info, printer.meter, tail, chat.conversation_id, chat.problem
    )
    return EXIT_FAILED if chat.problem and code == 0 else code


def _reply(
    session: ChatSession,
    request: RunRequest,
    params: SamplingParams,
    printer: ReplyPrinter,
    err: TextIO,
    info: ModelInfo,
    ctrl_c: CtrlC,
) -> Answer:
    """The model's answer, with the tools when the run offers them."""
    if request.tools is None:
        return session.answer(
            params,
            on_text=printer.show,
            on_event=printer.on_event,
            stop_requested=lambda: ctrl_c.requested,
            on_compact=lambda notice: compact_notice(err, notice),
        )
    # said when asked
    if request.verbose and not info.tool_calls and request.tool_choice != "none":
        line = f"vibechat: {info.name}'s chat template has no tool support: it is offered no tools."
        err.write(plain(line) + "\n")
    return _answer_with_tools(session, request, params, printer.show, printer.on_event, err, ctrl_c)


def _answer_with_tools(
    session: ChatSession,
    request: RunRequest,
    params: SamplingParams,
    show: Callable[[str], None],
    on_event: Callable[[ChatEvent], None],
    err: TextIO,
    ctrl_c: CtrlC,
) -> Answer:
    """The reply, running the calls --allow-tool allows: run never asks. A denied call is one
    stderr line naming the flag that would allow it; the model is told it was denied."""
    assert request.tools is not None
    allow = request.allow_tool or (lambda spec: False)

    def on_call(call: ToolCall, spec: ToolSpec | None, allowed: bool, outcome: ToolResult) -> None:
        request.tool_log.append(_logged_call(call, spec, allowed, outcome))
        if spec is None:
            line = f"vibechat: the model called a tool that does not exist: {call.name[:80]}"
        elif not allowed and outcome.text == DENIED:
            line = (
                f"vibechat: denied the model's call to {spec.qualified} (--allow-tool "
                f"{spec.qualified} allows it)"
            )
        elif allowed and outcome.is_error and outcome.text.startswith(NOT_RUN_ARGUMENTS):
            line = (
                f"vibechat: did not run the model's call to {spec.qualified}: "
                f"{outcome.text[len(NOT_RUN_ARGUMENTS) :][:200]}"
            )
        else:
            line = ""
        if line:
            err.write(plain(line) + "\n")
        err.flush()

    return answer_with_tools(
        session,
        request.tools,
        lambda call, spec: allow(spec),
        rounds=request.tool_rounds,
        tool_choice=request.tool_choice,
        params=params,
        on_text=show,
        on_event=on_event,
        on_call=on_call,
        stop_requested=lambda: ctrl_c.requested,
        on_compact=lambda notice: compact_notice(err, notice),
    )


def _logged_call(
    call: ToolCall, spec: ToolSpec | None, allowed: bool, outcome: ToolResult
) -> dict[str, object]:
    """A tool call as ``--json``'s ``tool_calls`` lists it, each text cut and sanitized."""
    return {
        "id": sanitize(call.id[:256]),
        "name": sanitize(call.name[:256]),
        "tool": spec.qualified if spec is not None else None,
        "arguments": sanitize(call.arguments[:LOGGED]),
        "ran": allowed,
        "error": outcome.is_error,
        "result": outcome.text[:LOGGED],
    }
