"""How ``vibechat run`` ends: its exit status, ``--json``'s object and the last lines on stderr.

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
"""

from __future__ import annotations

from typing import TextIO

from vibechat.engine.chat.turn import Answer
from vibechat.engine.errors import StreamInterrupted, VibechatError
from vibechat.engine.sanitize import sanitize
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.attachments import Attachment
from vibechat.engine.turns.backend import GenerationStats, ModelInfo, logprobs_object

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
from .clitools import plain, quiet_stdout, safe_json
from .run_request import RunRequest

EXIT_FAILED = 1  # a failure, said in one line on stderr
EXIT_USAGE = 2  # a malformed command line
# a structured reply that is not complete: cut short, or JSON that does not match
EXIT_INCOMPLETE = 3
EXIT_EMPTY = 4  # the model (or server) ended its reply without any text
EXIT_CANCELLED = 130  # Ctrl-C

STDOUT_CLOSED = (
    "standard output is closed (>&-): send it somewhere, a file, a pipe or /dev/null "
    "(vibechat run … > /dev/null)."
)


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
        # The model asked for.
        self.model: str | None = None
        self.params: SamplingParams | None = None
        self.conversation_id: int | None = None
        # The attachments read before the failure.
        self.attachments: tuple[Attachment, ...] = ()

    def write(self, message: str, kind: str, exit_status: int) -> None:
        if not self.enabled or (self.request is not None and self.request.printed):
            return
        obj = RunResult(
            model=self.model,
            params=self.params,
            conversation_id=self.conversation_id,
            attachments=attachment_list(self.attachments),
            stdin_chars=self.request.stdin_chars if self.request is not None else None,
            error=error_object(message, kind, exit_status),
        ).to_json()
        try:
            self.out.write(safe_json(obj) + "\n")
            self.out.flush()
        except (OSError, ValueError, AttributeError):
            # Stdout closed or full: nothing to promise to.
            quiet_stdout()
        if self.request is not None:
            self.request.printed = True

    def failed(self, exc: BaseException, exit_status: int = EXIT_FAILED) -> None:
        """``exc`` ends the run (its one line on stderr is the caller's)."""
        if isinstance(exc, KeyboardInterrupt):
            self.write("stopped by Ctrl-C", "cancelled", EXIT_CANCELLED)
        else:
            self.write(str(exc), error_kind(exc), exit_status)


def finish(
    request: RunRequest,
    out: TextIO,
    err: TextIO,
    result: Answer,
    info: ModelInfo,
    meter: ReplyMeter,
    tail: str,
    conversation_id: int | None,
    save_problem: str | None = None,
) -> int:
    """The reply's end (its JSON object, the statistics, the lines for an empty or cut
    reply) and the exit status they give. ``save_problem``: saving stopped (its line is
    already on stderr): ``--json``'s object carries it as the error, kind ``history``."""
    done, interrupted, stats = result.done, result.interrupted, result.done.stats
    report = RunResult.of_answer(
        result,
        params=request.params,
        info=info,
        conversation_id=conversation_id,
        raw=request.raw,
        meter=meter,
    )
    if request.tools is not None:
        report.tool_calls = request.tool_log
    report.attachments = attachment_list(request.attachments)
    report.stdin_chars = request.stdin_chars
    report.compacted_from, report.left_out_messages = request.compacted_from, request.left_out
    used = report.params or request.params
    if used.logprobs:
        report.logprobs = logprobs_object(request.lens_log)
    empty_line = empty_reply_line(info, bool(done.thinking.strip())) if report.empty else None
    if empty_line is not None:
        report.error = error_object(empty_line, "empty", EXIT_EMPTY)
    elif save_problem is not None:
        report.error = error_object(save_problem, "history", EXIT_FAILED)
    if not end_output(request, out, report.text, report.to_json(), tail):
        return 0
    if request.show_stats and not interrupted:
        # names the model's device or server
        err.write(plain(format_stats(done.stats, info)) + "\n")
        err.flush()
    if interrupted:
        return EXIT_CANCELLED
    # A script would take silence for an answer.
    if empty_line is not None:
        err.write(plain(f"vibechat: {empty_line}") + "\n")
        err.flush()
        return EXIT_EMPTY
    cut = incomplete_line(used, stats, info, result.text)
    # Half a JSON object is no success: `| jq` would fail on it.
    if cut is not None:
        err.write(f"vibechat: {cut}\n")
        err.flush()
        return EXIT_INCOMPLETE
    bound = bound_line(done, info, used, result.text)
    # a cut no one would see: a server's reply at vibechat's bound, thinking cut
    if bound is not None:
        err.write(plain(f"vibechat: {bound}") + "\n")
        err.flush()
    return 0


def empty_reply_line(info: ModelInfo, thought: bool = False) -> str:
    """The stderr line for a reply that ended by itself with no text: who sent nothing, and
    where to look (a server's chat template or reasoning format, a model that needs a
    prompt format)."""
    what = "only thinking, no answer" if thought else "no text"
    if info.server:
        return (
            f"the reply from {info.server} was empty ({what}; finish_reason stop): check the "
            "server's chat template and reasoning format (its log), or try another model."
        )
    return (
        f"the model's reply was empty ({what}; finish_reason stop): try again, another "
        "--prompt-format, or another model."
    )


def incomplete_line(
    params: SamplingParams,
    stats: GenerationStats,
    info: ModelInfo,
    text: str,
    fix_tokens: str = "raise --max-tokens",
) -> str | None:
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
        fix = "try again, or another --seed"
        if params.stop:
            fix = "remove --stop, or try another --seed"
        return f"the reply ended before {what}: {fix}"
    which = limit_that_cut(params, stats, info)
    if which == "max_tokens":
        cut, fix = f"hit the {params.max_tokens}-token limit (--max-tokens)", fix_tokens
    elif which == "context":
        cut = f"filled the {info.context_size}-token context (--ctx)"
        fix = "raise --ctx, or shorten the prompt"
    else:
        # A server's limit, or one the engine set: said as the reply's own.
        cut, fix = f"hit its token limit after {stats.completion_tokens} tokens", fix_tokens
    if fmt.kind == "grammar":
        return f"the reply {cut} before it ended, so its grammar may be incomplete: {fix}"
    return f"the reply {cut} before the JSON was complete: {fix}"


def cancelled_load_object(request: RunRequest) -> dict[str, object]:
    """``--json``'s object when Ctrl-C stopped the model's load: nothing generated, nothing
    saved."""
    params = request.params
    return RunResult(
        params=params,
        finish_reason="cancelled",
        attachments=attachment_list(request.attachments),
        stdin_chars=request.stdin_chars,
        structured=None if params.output_format is None else "incomplete",
    ).to_json()


def write_failed(
    request: RunRequest,
    out: TextIO,
    text: str,
    info: ModelInfo,
    conversation_id: int | None,
    error: VibechatError,
    params: SamplingParams,
    meter: ReplyMeter,
    tail: str = "",
) -> None:
    """Before the error line: end the partial reply's line, or (``--json``) print it as an
    object with the error (``finish_reason`` 'interrupted' for a stream cut mid-reply, else
    'error'); the backend sent no statistics, so they are what was measured here (pieces
    received, timings), null where unknown; the seed is the one sent."""
    text = text if request.raw else sanitize(text)
    cut = isinstance(error, StreamInterrupted)
    obj = RunResult(
        text=text,
        info=info,
        conversation_id=conversation_id,
        params=params,
        finish_reason="interrupted" if cut else "error",
        attachments=attachment_list(request.attachments),
        stdin_chars=request.stdin_chars,
        stats=json_stats(None, seed=params.seed, meter=meter),
        structured=None if params.output_format is None else "incomplete",
        error=error_object(str(error), error_kind(error), EXIT_FAILED),
    ).to_json()
    end_output(request, out, text, obj, tail)


def end_output(request: RunRequest, out: TextIO, text: str, obj: dict, tail: str = "") -> bool:
    """End a reply's output: ``obj`` as one JSON line (``--json``), else the text the
    sanitizer held back (``tail``) and a newline after text (as shown) that lacks one.
    False when stdout was closed (``| head``)."""
    if request.json_output:
        # One object at most, even if the write fails.
        request.printed = True
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


def stdout_error(exc: OSError) -> VibechatError:
    """The one line for a reply that could not be written to stdout (a full disk, /dev/full);
    stdout is pointed at /dev/null after, so that Python's own flush at exit stays quiet.
    What was saved of the reply stays saved (as stopped)."""
    quiet_stdout()
    return VibechatError(
        f"cannot write the reply to standard output ({exc.strerror or exc}): free some space "
        "where it goes, or send it elsewhere."
    )
