"""``vibechat run``: one prompt, the reply streamed to stdout.

Exit statuses (``EXIT_*``; docs/USAGE.md lists them for users): 0 success, 1 a failure
(one line on stderr: a bad value, a missing model, a server that refuses, a prompt beyond
the context, a reply cut by a dying server), 2 a malformed command line (app/commands/cli.py), 3 a
structured reply (``--json-schema``/``--grammar``) that is not complete: cut by a limit or a
stop string before its grammar was, or JSON that does not match (printed as far as it went,
with one line on stderr naming the limit or the mismatch), 4 an empty
reply (the model or server ended it with no text: one line on stderr), 130 after Ctrl-C
(what was generated stays printed). A closed pipe (``| head``) ends quietly.

With ``--json``, stdout holds exactly one JSON object whatever happens (``JsonFailure``
writes it when the run fails before its reply): with ``error`` (message, kind, exit
status) when it failed.

``--image PATH`` and ``--file PATH`` (repeatable) attach files to the prompt
(``read_attachments``): read, checked and kept (engine/attach) before the model loads, so a
bad one is one line and exit status 2 with nothing loaded or saved; the prompt is then
checked (a model that takes no images refuses them in one line) and saved with them.
``--prompts-file`` refuses them (one line): its lines are prompts of their own, and one
image attached to each would be evaluated again for every line.

Imports inside functions are deliberate: attachment reading (Pillow for images) loads only when
a run attaches a file (start-up time).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from vibechat.engine.attach.store import AttachmentError, AttachmentStore
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.session import ChatSession
from vibechat.engine.chat.tool_turns import DENIED, NOT_RUN_ARGUMENTS, ToolBox, answer_with_tools
from vibechat.engine.chat.turn import Answer
from vibechat.engine.errors import LoadCancelled, StreamInterrupted, VibechatError
from vibechat.engine.sanitize import Sanitizer, sanitize
from vibechat.engine.settings.limits import MAX_CONTEXT, prompt_byte_limit
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.think_switch import unswitchable
from vibechat.engine.tools.results import ToolResult
from vibechat.engine.turns.attachments import Attachment, AttachmentKind
from vibechat.engine.turns.backend import (
    Backend,
    ChatEvent,
    ContextTrimmed,
    GenerationStats,
    ModelInfo,
    PromptProgress,
    ThinkingDelta,
)
from vibechat.engine.turns.tool_calls import ToolCall, ToolSpec

from ..progress import ReadingLine
from ..report import (
    ReplyMeter,
    RunResult,
    attachment_list,
    error_kind,
    error_object,
    format_stats,
    json_stats,
)
from .bounds import bound_line, limit_that_cut
from .clitools import fail, plain, quiet_stdout, safe_json
from .interrupt import CtrlC

EXIT_FAILED = 1  # a failure, said in one line on stderr
EXIT_USAGE = 2  # a malformed command line
EXIT_INCOMPLETE = 3  # a structured reply that is not complete: cut short, or JSON that does not match
EXIT_EMPTY = 4  # the model (or server) ended its reply without any text
EXIT_CANCELLED = 130  # Ctrl-C
LOGGED = 4000  # characters of a tool call's arguments and result in --json's "tool_calls"


@dataclass
class RunRequest:
    prompt: str
    system: str | None
    params: SamplingParams
    json_output: bool = False
    show_stats: bool = False
    raw: bool = False
    show_thinking: bool = False  # a reasoning model's thinking on stderr, as it streams
    # Tools (engine/chat/tool_turns.py): what the model is offered, and which calls run (run never
    # asks: only those ``allow_tool`` allows, from --allow-tool; the rest are denied, one stderr line each).
    tools: ToolBox | None = None
    allow_tool: Callable[[ToolSpec], bool] | None = None
    tool_choice: str = "auto"
    tool_rounds: int = 8
    verbose: bool = False  # vibechat --verbose: say what is only worth knowing when asked (no tool support)
    attachments: tuple[Attachment, ...] = ()  # --image / --file, read and kept (read_attachments)
    stdin_chars: int | None = None  # piped stdin joined before the prompt given (Prompt): --json's "stdin"
    # --json's "tool_calls": each call as it went (its tool, arguments, whether it ran, its result, cut)
    tool_log: list[dict[str, object]] = field(default_factory=list, init=False)
    printed: bool = field(default=False, init=False)  # --json: the object is on stdout already


class JsonFailure:
    """``--json``'s promise to scripts: stdout holds one JSON object, also when the run fails
    before its reply (a bad config, an unknown model, a server that refuses, a prompt beyond
    the context, Ctrl-C during a download): then an object with ``error`` and whatever is
    known (``known``: the model asked for, the parameters). ``--prompts-file`` prints its
    results as JSON Lines, so there it is one line with ``error``. Nothing is written once
    the run's own object is out (``request.printed``)."""

    def __init__(self, enabled: bool, out: TextIO) -> None:
        self.enabled, self.out = enabled, out
        self.request: RunRequest | None = None
        self.model: str | None = None  # the model asked for
        self.params: SamplingParams | None = None
        self.conversation_id: int | None = None
        self.attachments: tuple[Attachment, ...] = ()  # read before the failure

    def write(self, message: str, kind: str, exit_status: int) -> None:
        if not self.enabled or (self.request is not None and self.request.printed):
            return
        obj = RunResult(model=self.model, params=self.params, conversation_id=self.conversation_id,
                        attachments=attachment_list(self.attachments),
                        stdin_chars=self.request.stdin_chars if self.request is not None else None,
                        error=error_object(message, kind, exit_status)).to_json()
        try:
            self.out.write(safe_json(obj) + "\n")
            self.out.flush()
        except (OSError, ValueError, AttributeError):  # stdout closed or full: nothing to promise to
            quiet_stdout()
        if self.request is not None:
            self.request.printed = True

    def failed(self, exc: BaseException, exit_status: int = EXIT_FAILED) -> None:
        """``exc`` ends the run (its one line on stderr is the caller's)."""
        if isinstance(exc, KeyboardInterrupt):
            self.write("stopped by Ctrl-C", "cancelled", EXIT_CANCELLED)
        else:
            self.write(str(exc), error_kind(exc), exit_status)


class PromptMissing(VibechatError):
    """No prompt to send (none given, stdin empty, or blank text): a malformed command line,
    so ``guard`` ends the run with ``exit_status`` 2, as a missing argument does."""

    exit_status = EXIT_USAGE


@dataclass(frozen=True)
class Prompt:
    """The prompt a run sends: ``text``, and ``stdin_chars`` when piped stdin was joined
    with a prompt given on the command line (None: it was not; ``--json``'s ``stdin``)."""

    text: str
    stdin_chars: int | None = None


STDIN_JOIN = "\n\n"  # between piped stdin (the context, first) and the prompt given, as a blank line


def read_prompt(prompt: str | None, stdin: TextIO) -> Prompt:
    """The prompt given (``run PROMPT`` or ``--prompt``; ``-`` reads stdin), or piped stdin.
    Both a prompt and piped stdin are one prompt, as ollama and llm make them: stdin first,
    as the context, then a blank line and the prompt (``echo TEXT | vibechat run "Sum it up:"``).
    Stdin is read within the same bound whichever way it comes."""
    piped = not stdin.isatty()
    if prompt == "-" or (prompt is None and piped):
        text, joined = _read_stdin(stdin), None
    elif prompt is None:
        raise PromptMissing('no prompt: give it after run (vibechat run "Why is the sky blue?"), with --prompt '
                            "TEXT, or pipe text on stdin ('-' reads it).")
    else:
        context = _read_stdin(stdin).rstrip() if piped else ""
        text, joined = (f"{context}{STDIN_JOIN}{prompt}", len(context)) if context.strip() else (prompt, None)
    if not text.strip() and prompt is None:
        raise PromptMissing('no prompt: stdin was empty; give it after run (vibechat run "Why is the sky blue?") '
                            "or with --prompt TEXT, or pipe text on stdin.")
    if not text.strip():
        raise PromptMissing('the prompt is empty: give some text (vibechat run "TEXT", --prompt TEXT, or on stdin).')
    return Prompt(text, joined)


def _read_stdin(stdin: TextIO) -> str:
    """All of stdin, bounded: a runaway pipe is not read into memory."""

    most = prompt_byte_limit(MAX_CONTEXT)
    text = stdin.read(most + 1)
    if len(text) > most:
        raise VibechatError(f"the prompt on stdin is larger than {most >> 20} MiB, more than any context "
                            "holds: shorten it.")
    return text


def read_attachments(images: list[str] | None, files: list[str] | None, err: TextIO, *, batch: bool = False,
                     failure: JsonFailure | None = None) -> tuple[Attachment, ...]:
    """``--image`` and ``--file``, read, checked and kept (``read_attachment``, the default
    store) before any model loads: the images first, then the files, each in the order given.
    What reading changed (an image scaled, a file cut) is said on stderr, one line each. A bad
    one ends the run: one line on stderr and exit status 2 (a command line naming a file that
    cannot be attached), ``--json``'s object with the error; nothing is loaded or saved.
    ``batch`` (``--prompts-file``) refuses them: see the module docstring."""
    if not images and not files:
        return ()
    if batch:
        flag = "--image" if images else "--file"
        raise VibechatError(f"--prompts-file and {flag} do not mix: each line of the file is a prompt of its own; "
                            f"attach files to single prompts (vibechat run {flag} PATH \"PROMPT\"), or drop {flag}.")
    from vibechat.engine.attach.reading import read_attachment

    store = AttachmentStore.default()
    wanted: list[tuple[str, AttachmentKind]] = [(path, "image") for path in images or ()]
    wanted += [(path, "file") for path in files or ()]
    kept: list[Attachment] = []
    try:
        for path, kind in wanted:
            kept.append(read_attachment(path, store, kind=kind))
    except AttachmentError as problem:
        exc = AttachmentError(_as_flags(str(problem)))
        if failure is not None:
            failure.failed(exc, EXIT_USAGE)
        raise fail(str(exc), EXIT_USAGE) from None
    for attachment in kept:
        if attachment.note:
            err.write(plain(f"vibechat: {attachment.name}: {attachment.note}") + "\n")
    if failure is not None:
        failure.attachments = tuple(kept)
    return tuple(kept)


def _as_flags(message: str) -> str:
    """A reading error's fix in run's words: the chat's ``/image`` and ``/file`` ("attach an
    image with /image") are ``--image`` and ``--file`` here; a path the message quotes is left
    as it is (a word that goes on, ``/file.txt``, ``/images/``, is no command)."""

    return re.sub(r"(?<=\bwith )/(image|file)\b(?![\w./-])", r"--\1", message)


def execute(backend: Backend, request: RunRequest, out: TextIO, err: TextIO, chat: ChatLog | None = None) -> int:
    """Answer ``request.prompt``; ``chat`` holds the conversation it continues (and saves it
    when it has a history): the prompt is saved before generation, the reply as it streams.
    A failure once the model is loaded is raised after ``--json`` printed its object
    (what is known: the model, the engine, the parameters, the error)."""
    if out is None:  # `vibechat run … >&-`: Python has no sys.stdout at all
        raise VibechatError(STDOUT_CLOSED)
    session = ChatSession(backend, chat)
    conversation = session.conversation
    if request.system is not None:
        conversation.system = request.system or None
    conversation.params = request.params
    ctrl_c = CtrlC(session.cancel)
    with ctrl_c.installed():
        try:
            info = session.load()
        except LoadCancelled:  # Ctrl-C stopped the load: nothing was asked of the model yet
            if request.json_output:
                _end_output(request, out, "", _cancelled_load_object(request), "")
            raise KeyboardInterrupt from None
        # A Ctrl-C from here on, even one that landed just as the load ended, stops the reply,
        # not the command: the prompt is saved, the reply saved as stopped, --json prints its object.
        try:
            ignored = unswitchable(info.server, info.thinking_switch, request.params.thinking)
            for notice in (*info.notices, *([ignored] if ignored else [])):  # e.g. the context size rounded up
                err.write(plain(f"vibechat: {notice}") + "\n")
            # Before it is saved: a prompt that cannot fit is refused, and images a model cannot take.
            session.check_prompt(request.prompt, request.attachments)
            # --continue: one writer at a time. Another vibechat adding to the conversation is waited
            # for; its turns join what the model is sent, and this turn is saved after them.
            session.catch_up(wait=True, on_wait=lambda: _waiting(err, session), stop_requested=lambda: ctrl_c.requested)
            session.chat.add_user(request.prompt, request.attachments)
        except VibechatError as exc:
            session.stop_writing()
            if request.json_output:
                obj = RunResult(info=info, conversation_id=session.chat.conversation_id, params=request.params,
                                attachments=attachment_list(request.attachments), stdin_chars=request.stdin_chars,
                                error=error_object(str(exc), error_kind(exc), EXIT_FAILED)).to_json()
                _end_output(request, out, "", obj)
            raise
        try:
            return _answer(session, request, out, err, info, ctrl_c)
        finally:
            session.stop_writing()  # the reply is saved (or the run failed): the next writer may go on


def _waiting(err: TextIO, session: ChatSession) -> None:
    err.write(f"vibechat: waiting for another vibechat writing to conversation {session.chat.conversation_id}…\n")
    err.flush()


def trim_notice(err: TextIO, thinking: ThinkingEcho | None = None) -> Callable[[ChatEvent], None]:
    """``on_event`` for the one-shot commands: a trimmed context is said on stderr; with
    ``thinking``, the thinking is shown there too (``--show-thinking``)."""
    def on_event(event: ChatEvent) -> None:
        if isinstance(event, ContextTrimmed):
            err.write(f"vibechat: left out {event.dropped_messages} old messages to fit the context\n")
        elif isinstance(event, ThinkingDelta) and thinking is not None:
            thinking.feed(event.text)
    return on_event


class ThinkingEcho:
    """``--show-thinking``: a reasoning model's thinking on stderr as it streams, always
    sanitized (``--raw`` is about stdout), between a ``[thinking]`` line and an
    ``[end of thinking]`` line, so it reads apart from the answer on stdout."""

    def __init__(self, err: TextIO, label: str = "") -> None:
        self.err = err
        self.label = label  # e.g. " line 3" (--prompts-file)
        self._sanitizer = Sanitizer()
        self._open = False
        self._at_line_start = True

    def feed(self, text: str) -> None:
        text = self._sanitizer.feed(text)
        if not self._open:
            self._open = True
            self.err.write(f"[thinking{self.label}]\n")
        self._write(text)

    def close(self) -> None:
        """The thinking ended (the answer began, or the reply ended)."""
        if self._open:
            self._write(self._sanitizer.flush())
            self.err.write(("" if self._at_line_start else "\n") + f"[end of thinking{self.label}]\n")
            self.err.flush()
            self._open = False

    def _write(self, text: str) -> None:
        if text:
            self.err.write(text)
            self.err.flush()
            self._at_line_start = text.endswith("\n")


def incomplete_line(params: SamplingParams, stats: GenerationStats, info: ModelInfo, text: str,
                    fix_tokens: str = "raise --max-tokens") -> str | None:
    """The stderr line for a structured reply that is not complete (None: it is, or it is free
    text, or it ended in tool calls): cut by a limit (which one: the reply's token limit, or
    the context filling up, and what to raise), ended early (one of the user's ``--stop``
    strings, the model's end of turn), or JSON that is not what was asked. Whether it is
    complete is ``structured_state``'s to say, as ``--json`` says it."""
    fmt = params.output_format
    if fmt is None or stats.finish_reason not in ("stop", "length"):
        return None
    state, why = fmt.judge(text, stats.grammar_accepted)
    if state == "complete":
        return None
    if state == "invalid":
        return sanitize(f"the reply is not what was asked: {why}")
    what = "its grammar accepted it" if fmt.kind == "grammar" else "the JSON was complete"
    if stats.finish_reason == "stop":
        fix = "remove --stop, or try another --seed" if params.stop else "try again, or another --seed"
        return f"the reply ended before {what}: {fix}"
    which = limit_that_cut(params, stats, info)
    if which == "max_tokens":
        cut, fix = f"hit the {params.max_tokens}-token limit (--max-tokens)", fix_tokens
    elif which == "context":
        cut, fix = f"filled the {info.context_size}-token context (--ctx)", "raise --ctx, or shorten the prompt"
    else:  # a server's limit, or one the engine set: said as the reply's own
        cut, fix = f"hit its token limit after {stats.completion_tokens} tokens", fix_tokens
    if fmt.kind == "grammar":
        return f"the reply {cut} before it ended, so its grammar may be incomplete: {fix}"
    return f"the reply {cut} before the JSON was complete: {fix}"


def _cancelled_load_object(request: RunRequest) -> dict[str, object]:
    """``--json``'s object when Ctrl-C stopped the model's load: nothing generated, nothing saved."""
    params = request.params
    return RunResult(params=params, finish_reason="cancelled", attachments=attachment_list(request.attachments),
                     stdin_chars=request.stdin_chars,
                     structured=None if params.output_format is None else "incomplete").to_json()


def load_or_interrupt(session: ChatSession, ctrl_c: CtrlC) -> ModelInfo:
    """``session.load()``; Ctrl-C meanwhile (which stops llama.cpp's load) raises
    KeyboardInterrupt once it has returned (``--prompts-file``: no prompt was begun)."""
    try:
        info = session.load()
    except LoadCancelled:
        raise KeyboardInterrupt from None
    ctrl_c.raise_if_requested()
    return info


def _answer(session: ChatSession, request: RunRequest, out: TextIO, err: TextIO, info: ModelInfo,
            ctrl_c: CtrlC) -> int:
    # Streamed pieces can split an escape sequence: the sanitizer holds an unfinished one back,
    # so what streams is exactly sanitize(text), the text --json prints.
    sanitizer = None if request.raw else Sanitizer()
    echo = ThinkingEcho(err) if request.show_thinking else None
    # --stats on a terminal: a long prompt's reading progress, on a line of its own that goes
    # before anything else is written (scripts, --json: nothing).
    reading = ReadingLine.for_stream(err) if request.show_stats and not request.json_output else None
    meter = ReplyMeter()  # what is known of a reply that ends without the backend's stats
    notice = trim_notice(err, echo)
    shown: list[str] = []  # the reply so far, for --json when it fails (a crash) mid-reply
    stdout_failed: list[OSError] = []  # a write to stdout that failed (not a closed pipe)

    def show(text: str) -> None:
        if reading is not None:
            reading.clear()
        meter.piece()
        shown.append(text)
        if echo is not None:
            echo.close()
        if not request.json_output:
            try:
                out.write(text if sanitizer is None else sanitizer.feed(text))
                out.flush()
            except BrokenPipeError:
                raise
            except OSError as exc:  # /dev/full, a full disk: the reply is stopped and saved as such
                stdout_failed.append(exc)
                raise BrokenPipeError from None

    def on_event(event: ChatEvent) -> None:
        if isinstance(event, PromptProgress):
            if reading is not None:
                reading.show(event)
            return
        if reading is not None:
            reading.clear()
        if isinstance(event, ThinkingDelta):
            meter.piece(thinking=True)
        notice(event)

    def held_back() -> str:
        return "" if sanitizer is None or request.json_output else sanitizer.flush()

    chat = session.chat
    params = request.params.with_seed()  # drawn here, so an interrupted reply reports it too
    try:
        try:
            if request.tools is not None:
                if request.verbose and not info.tool_calls and request.tool_choice != "none":  # said when asked
                    err.write(plain(f"vibechat: {info.name}'s chat template has no tool support: it is offered "
                                    "no tools.") + "\n")
                result = _answer_with_tools(session, request, params, show, on_event, err, ctrl_c)
            else:
                result = session.answer(params, on_text=show, on_event=on_event,
                                        stop_requested=lambda: ctrl_c.requested)
        finally:
            if reading is not None:
                reading.clear()  # a reply stopped (or failed) while its prompt was read
            if echo is not None:
                echo.close()  # a reply that ended while thinking
    except VibechatError as exc:  # cut mid-reply (the partial text stays printed and saved), a crash
        partial = exc.partial if isinstance(exc, StreamInterrupted) else "".join(shown)
        _write_failed(request, out, partial, info, chat, exc, params, meter, held_back())
        raise
    pipe_closed = result.pipe_closed
    if chat.problem:  # saving stopped (a full disk): the reply is still printed, the run fails
        err.write(plain(f"vibechat: error: {chat.problem}") + "\n")
    if stdout_failed:
        raise stdout_error(stdout_failed[0])
    if pipe_closed:
        quiet_stdout()
        return EXIT_FAILED if chat.problem else 0
    code = _finish(request, out, err, result, info, meter, held_back(), chat.conversation_id, chat.problem)
    return EXIT_FAILED if chat.problem and code == 0 else code


def _answer_with_tools(session: ChatSession, request: RunRequest, params: SamplingParams,
                       show: Callable[[str], None], on_event: Callable[[ChatEvent], None], err: TextIO,
                       ctrl_c: CtrlC) -> Answer:
    """The reply, running the calls --allow-tool allows: run never asks. A denied call is one
    stderr line naming the flag that would allow it; the model is told it was denied."""
    assert request.tools is not None
    allow = request.allow_tool or (lambda spec: False)

    def on_call(call: ToolCall, spec: ToolSpec | None, allowed: bool, outcome: ToolResult) -> None:
        request.tool_log.append({
            "id": sanitize(call.id[:256]), "name": sanitize(call.name[:256]),
            "tool": spec.qualified if spec is not None else None, "arguments": sanitize(call.arguments[:LOGGED]),
            "ran": allowed, "error": outcome.is_error, "result": outcome.text[:LOGGED]})
        if spec is None:
            err.write(plain(f"vibechat: the model called a tool that does not exist: {call.name[:80]}") + "\n")
        elif not allowed and outcome.text == DENIED:
            err.write(plain(f"vibechat: denied the model's call to {spec.qualified} (--allow-tool "
                            f"{spec.qualified} allows it)") + "\n")
        elif allowed and outcome.is_error and outcome.text.startswith(NOT_RUN_ARGUMENTS):
            err.write(plain(f"vibechat: did not run the model's call to {spec.qualified}: "
                            f"{outcome.text[len(NOT_RUN_ARGUMENTS):][:200]}") + "\n")
        err.flush()

    return answer_with_tools(session, request.tools, lambda call, spec: allow(spec), rounds=request.tool_rounds,
                             tool_choice=request.tool_choice, params=params, on_text=show, on_event=on_event,
                             on_call=on_call, stop_requested=lambda: ctrl_c.requested)


def _finish(request: RunRequest, out: TextIO, err: TextIO, result: Answer, info: ModelInfo,
            meter: ReplyMeter, tail: str, conversation_id: int | None, save_problem: str | None = None) -> int:
    """The reply's end (its JSON object, the statistics, the lines for an empty or cut
    reply) and the exit status they give. ``save_problem``: saving stopped (its line is
    already on stderr): ``--json``'s object carries it as the error, kind ``history``."""
    done, interrupted, stats = result.done, result.interrupted, result.done.stats
    report = RunResult.of_answer(result, params=request.params, info=info, conversation_id=conversation_id,
                                 raw=request.raw, meter=meter)
    if request.tools is not None:
        report.tool_calls = request.tool_log
    report.attachments = attachment_list(request.attachments)
    report.stdin_chars = request.stdin_chars
    used = report.params or request.params
    empty_line = empty_reply_line(info, bool(done.thinking.strip())) if report.empty else None
    if empty_line is not None:
        report.error = error_object(empty_line, "empty", EXIT_EMPTY)
    elif save_problem is not None:
        report.error = error_object(save_problem, "history", EXIT_FAILED)
    if not _end_output(request, out, report.text, report.to_json(), tail):
        return 0
    if request.show_stats and not interrupted:
        err.write(plain(format_stats(done.stats, info)) + "\n")  # names the model's device or server
        err.flush()
    if interrupted:
        return EXIT_CANCELLED
    if empty_line is not None:  # a script would take silence for an answer
        err.write(plain(f"vibechat: {empty_line}") + "\n")
        err.flush()
        return EXIT_EMPTY
    cut = incomplete_line(used, stats, info, result.text)
    if cut is not None:  # half a JSON object is no success: `| jq` would fail on it
        err.write(f"vibechat: {cut}\n")
        err.flush()
        return EXIT_INCOMPLETE
    bound = bound_line(done, info, used, result.text)
    if bound is not None:  # a cut no one would see: a server's reply at vibechat's bound, thinking cut
        err.write(plain(f"vibechat: {bound}") + "\n")
        err.flush()
    return 0


def empty_reply_line(info: ModelInfo, thought: bool = False) -> str:
    """The stderr line for a reply that ended by itself with no text: who sent nothing, and
    where to look (a server's chat template or reasoning format, a model that needs a
    prompt format)."""
    what = "only thinking, no answer" if thought else "no text"
    if info.server:
        return (f"the reply from {info.server} was empty ({what}; finish_reason stop): check the server's chat "
                "template and reasoning format (its log), or try another model.")
    return (f"the model's reply was empty ({what}; finish_reason stop): try again, another --prompt-format, "
            "or another model.")


def _write_failed(request: RunRequest, out: TextIO, text: str, info: ModelInfo, chat: ChatLog,
                  error: VibechatError, params: SamplingParams, meter: ReplyMeter, tail: str = "") -> None:
    """Before the error line: end the partial reply's line, or (``--json``) print it as an
    object with the error (``finish_reason`` 'interrupted' for a stream cut mid-reply, else
    'error'); the backend sent no statistics, so they are what was measured here (pieces
    received, timings), null where unknown; the seed is the one sent."""
    text = text if request.raw else sanitize(text)
    cut = isinstance(error, StreamInterrupted)
    obj = RunResult(text=text, info=info, conversation_id=chat.conversation_id, params=params,
                    finish_reason="interrupted" if cut else "error", attachments=attachment_list(request.attachments),
                    stdin_chars=request.stdin_chars,
                    stats=json_stats(None, seed=params.seed, meter=meter),
                    structured=None if params.output_format is None else "incomplete",
                    error=error_object(str(error), error_kind(error), EXIT_FAILED)).to_json()
    _end_output(request, out, text, obj, tail)


def _end_output(request: RunRequest, out: TextIO, text: str, obj: dict, tail: str = "") -> bool:
    """End a reply's output: ``obj`` as one JSON line (``--json``), else the text the
    sanitizer held back (``tail``) and a newline after text (as shown) that lacks one.
    False when stdout was closed (``| head``)."""
    if request.json_output:
        request.printed = True  # one object at most, even if the write fails
    try:
        out.write(tail)
        if request.json_output:
            out.write(safe_json(obj) + "\n")
        elif text and not text.endswith("\n"):
            out.write("\n")
        out.flush()
    except BrokenPipeError:
        quiet_stdout()
        return False
    except OSError as exc:  # /dev/full, a full disk
        raise stdout_error(exc) from None
    return True


STDOUT_CLOSED = ("standard output is closed (>&-): send it somewhere, a file, a pipe or /dev/null "
                 "(vibechat run … > /dev/null).")


def stdout_error(exc: OSError) -> VibechatError:
    """The one line for a reply that could not be written to stdout (a full disk, /dev/full);
    stdout is pointed at /dev/null after, so that Python's own flush at exit stays quiet.
    What was saved of the reply stays saved (as stopped)."""
    quiet_stdout()
    return VibechatError(f"cannot write the reply to standard output ({exc.strerror or exc}): free some space "
                         "where it goes, or send it elsewhere.")
