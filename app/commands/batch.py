"""``vibechat run --prompts-file FILE.jsonl``: many prompts, one JSON result per line.

The model loads once; each prompt then runs as a conversation of its own, saved in
the history unless ``--no-save``. The KV cache keeps the token prefix a prompt shares
with the previous one (a common system prompt is evaluated once, not per line), as
llama-server's prompt cache does; ``--no-prefix-cache`` starts every prompt from an
empty cache instead, for results that cannot depend on line order even in the last
bit (llama.cpp does not promise bit-identical logits across batch sizes; in our
tests reuse never changed a reply). Results go to stdout as each prompt completes, one
JSON object per line, in the order of the file. A bad line (see ``engine/chat/batch.py``)
becomes a result with ``error`` and ``line``, plus one line on stderr; the rest run.

Exit codes: 0 every line succeeded, or there was none (nothing to do: one line on stderr,
nothing on stdout, as for an empty file), 1 at least one failed (or the command could not
start: one line on stderr), 3 none failed but a structured reply
(``--json-schema``/``--grammar``) was cut by a limit before its grammar was complete (its
result says ``"structured_output": "incomplete"``, with one line on stderr), 130 after Ctrl-C:
the prompt in progress stops at once and is reported with ``finish_reason: "cancelled"``; the
lines after it do not run.

Imports inside functions are deliberate: the backends and the download progress load only when a
batch runs.
"""

from __future__ import annotations

import itertools
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, TextIO

from vibechat.engine.chat.batch import BatchLineError, BatchRequest, read_requests
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.chat.session import ChatSession
from vibechat.engine.errors import VibechatError
from vibechat.engine.files import NotARegularFile, open_regular
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.settings.think_switch import unswitchable
from vibechat.engine.turns.backend import Backend, ModelInfo, TokenCandidates, logprobs_object

from ..report import ReplyMeter, RunResult, format_stats
from .bounds import bound_line
from .clitools import plain, quiet_stdout, safe_json
from .interrupt import CtrlC
from .run import load_or_interrupt
from .run_output import ThinkingEcho, compact_notice, trim_notice
from .run_result import EXIT_INCOMPLETE, empty_reply_line, incomplete_line

if TYPE_CHECKING:
    from ..run_plan import RunPlan


@dataclass
class BatchOptions:
    # The command's system prompt (flag > env > config).
    system: str | None
    # The command's parameters (flags > env > config > defaults).
    params: SamplingParams
    raw: bool = False
    show_stats: bool = False
    # Keep the prefix shared with the previous prompt in the KV cache.
    reuse_prefix: bool = True
    # A reasoning model's thinking on stderr, each reply's marked with its line.
    show_thinking: bool = False
    # What a prompt about to overflow the context does (the context_policy setting), as for
    # `run -p`: each line is a conversation of its own, so ``compact`` finds nothing before
    # the prompt to summarise and says so, and ``stop`` refuses the line.
    context_policy: str = "trim"


# 16 MiB: millions of tokens, beyond any context; a longer "line" is not a prompt.
MAX_PROMPT_LINE_BYTES = 16 << 20


def open_prompts(path: str, stdin: BinaryIO) -> tuple[BinaryIO, str]:
    """The prompts file (``-``: stdin) and how to name it in messages.

    A named file must be a regular file, checked on the open descriptor: a FIFO (it may never
    open or never end), ``/dev/zero`` or a folder is refused at once. Stdin may be a pipe
    (prompts run as they arrive); its lines are bounded by :func:`bounded_lines`."""
    if path == "-":
        return stdin, "stdin"
    try:
        return open_regular(path), path
    except NotARegularFile as exc:
        what = "it is a folder" if exc.kind == "a directory" else f"it is {exc.kind}, not a file"
        raise VibechatError(
            f"cannot read prompts file {path}: {what}; give a JSON Lines file, or '-' "
            "to read the prompts from stdin."
        ) from None
    except OSError as exc:
        raise VibechatError(f"cannot read prompts file {path}: {exc.strerror or exc}.") from None


def bounded_lines(stream: BinaryIO, source: str) -> Iterator[bytes]:
    """The lines of ``stream``, each read with a cap (:data:`MAX_PROMPT_LINE_BYTES`): an endless
    line (``/dev/zero`` on stdin) stops the batch with one line instead of filling memory."""
    number = 0
    while True:
        try:
            line = stream.readline(MAX_PROMPT_LINE_BYTES + 1)
        except OSError as exc:
            # Stdin redirected from a folder, an I/O error.
            raise VibechatError(
                f"cannot read prompts file {source}: {exc.strerror or exc}."
            ) from None
        if not line:
            return
        number += 1
        if len(line) > MAX_PROMPT_LINE_BYTES and not line.endswith(b"\n"):
            raise VibechatError(
                f"{source} line {number} is longer than {MAX_PROMPT_LINE_BYTES >> 20} MiB: not a "
                "prompt (is it a JSON Lines file?); the lines after it were not run."
            )
        yield line


def _is_regular(stream: BinaryIO) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


class _Batch:
    def __init__(
        self,
        session: ChatSession,
        info: ModelInfo,
        options: BatchOptions,
        history: History | None,
        source: str,
        out: TextIO,
        err: TextIO,
    ) -> None:
        self.session, self.info, self.options = session, info, options
        self.history, self.source, self.out, self.err = history, source, out, err
        self.failed = 0
        self.done = 0
        # Structured replies a limit cut before their grammar was complete.
        self.incomplete = 0

    def write(self, obj: dict[str, object]) -> None:
        self.out.write(safe_json(obj) + "\n")
        self.out.flush()

    def report(
        self,
        line: int,
        message: str,
        request_id: str | int | None,
        conversation_id: int | None = None,
    ) -> None:
        self.failed += 1
        self.err.write(plain(f"vibechat: {self.source} line {line}: {message}") + "\n")
        self.err.flush()
        self.write(
            RunResult(
                line=line,
                request_id=request_id,
                line_error=message,
                conversation_id=conversation_id,
            ).to_json()
        )

    def run_one(self, request: BatchRequest, stop_requested) -> None:
        params = request.params(self.options.params)
        system = self.options.system if request.system is None else (request.system or None)
        chat = ChatLog(Conversation(system=system, params=params), self.history, source="batch")
        # Without prefix reuse every prompt starts from an empty KV cache: order cannot matter.
        self.session.open(chat, reset_cache=not self.options.reuse_prefix)
        try:
            # Checked before the prompt is saved.
            self.session.check_prompt(request.prompt)
        except VibechatError as exc:
            self.report(request.line, str(exc).rstrip("."), request.id)
            return
        chat.add_user(request.prompt)
        # The reply's wall time (elapsed_ms).
        meter = ReplyMeter()
        # --logprobs N: the line's "logprobs".
        lens: list[TokenCandidates] = []
        try:
            echo = (
                ThinkingEcho(self.err, f" line {request.line}")
                if self.options.show_thinking
                else None
            )
            try:
                result = self.session.answer(
                    params,
                    on_event=trim_notice(self.err, echo, lens),
                    stop_requested=stop_requested,
                    on_compact=lambda notice: compact_notice(
                        self.err, notice, f" {self.source} line {request.line}:"
                    ),
                )
            finally:
                if echo is not None:
                    echo.close()
        except VibechatError as exc:
            # E.g. a prompt longer than the context.
            self._after(chat)
            self.report(request.line, str(exc).rstrip("."), request.id, chat.conversation_id)
            return
        self._after(chat)
        done = result.done
        report = RunResult.of_answer(
            result,
            params=params,
            info=self.info,
            conversation_id=chat.conversation_id,
            raw=self.options.raw,
            meter=meter,
        )
        report.line, report.request_id = request.line, request.id
        used = report.params or params
        if used.logprobs:
            report.logprobs = logprobs_object(lens)
        self.done += 1
        self.write(report.to_json())
        # An empty reply is said as `run` says it (which exits 4); the batch goes on.
        if report.empty:
            self.err.write(
                plain(
                    f"vibechat: {self.source} line {request.line}: "
                    f"{empty_reply_line(self.info, bool(done.thinking.strip()))}"
                )
                + "\n"
            )
            self.err.flush()
        if self.options.show_stats and done.finish_reason != "cancelled":
            self.err.write(
                plain(
                    f"vibechat: {self.source} line {request.line}: "
                    f"{format_stats(done.stats, self.info)}"
                )
                + "\n"
            )
            self.err.flush()
        cut = (
            None
            if result.interrupted
            else incomplete_line(
                used,
                done.stats,
                self.info,
                result.text,
                fix_tokens="raise --max-tokens (or the line's max_tokens)",
            )
        )
        if cut is not None:
            self.incomplete += 1
            self.err.write(plain(f"vibechat: {self.source} line {request.line}: {cut}") + "\n")
            self.err.flush()
        bound = (
            None
            if result.interrupted or cut is not None
            else bound_line(
                done,
                self.info,
                used,
                result.text,
                fix_tokens="--max-tokens (or the line's max_tokens)",
            )
        )
        # A cut no one would see, said as `run` says it.
        if bound is not None:
            self.err.write(plain(f"vibechat: {self.source} line {request.line}: {bound}") + "\n")
            self.err.flush()

    def exit_code(self) -> int:
        """1 if a line failed, else 3 if a structured reply was cut short, else 0."""
        return 1 if self.failed else EXIT_INCOMPLETE if self.incomplete else 0

    def _after(self, chat: ChatLog) -> None:
        """A failed save is reported once; the rest of the batch is not saved."""
        if chat.problem and self.history is not None:
            self.err.write(plain(f"vibechat: {chat.problem}") + "\n")
            self.history = None


def run_batch(
    backend: Backend,
    prompts: BinaryIO,
    source: str,
    options: BatchOptions,
    history: History | None,
    out: TextIO,
    err: TextIO,
    lines: Iterator[bytes] | None = None,
) -> int:
    """Run every line of ``prompts`` (``lines``: its lines, some read already) on ``backend``
    (loaded here, once); returns the exit code."""
    session = ChatSession(backend)
    session.context_policy = options.context_policy
    interrupt = CtrlC(session.cancel, blocking_input=not _is_regular(prompts))
    items = read_requests(lines if lines is not None else bounded_lines(prompts, source))
    try:
        with interrupt.installed():
            info = load_or_interrupt(session, interrupt)
            ignored = unswitchable(info.server, info.thinking_switch, options.params.thinking)
            # The load's notices, e.g. the context size rounded up.
            for notice in (*info.notices, *([ignored] if ignored else [])):
                err.write(plain(f"vibechat: {notice}") + "\n")
            batch = _Batch(session, info, options, history, source, out, err)
            while not interrupt.requested:
                item = interrupt.read(lambda: next(items, None))
                if item is None:
                    break
                if isinstance(item, BatchLineError):
                    batch.report(item.line, item.message, item.id)
                else:
                    batch.run_one(item, lambda: interrupt.requested)
    except BrokenPipeError:  # `| head -n 3`
        quiet_stdout()
        return batch.exit_code()
    if interrupt.requested:
        err.write("\n")
        return 130
    if batch.done + batch.failed == 0:
        return nothing_to_do(source, err)
    return batch.exit_code()


def nothing_to_do(source: str, err: TextIO) -> int:
    """No prompt in ``source`` (empty, or blank lines only): nothing to do, which is no failure
    (a script's generator found nothing today): one line on stderr, no result, exit status 0."""
    line = f"vibechat: no prompts in {source} (it is empty or blank): nothing to do."
    err.write(plain(line) + "\n")
    err.flush()
    return 0


def first_prompt(prompts: BinaryIO, source: str) -> Iterator[bytes] | None:
    """The lines of ``prompts``, read up to its first non-blank one (a file at once, stdin as
    it arrives), or None when it has none (empty, or blank lines only): known before anything
    loads."""
    lines = bounded_lines(prompts, source)
    read: list[bytes] = []
    for line in lines:
        read.append(line)
        if line.strip():
            return itertools.chain(read, lines)
    return None


def check_conflicts(
    *,
    prompt: str | None,
    continue_latest: bool,
    conversation_id: int | None,
    prompt_flag: str = "--prompt",
) -> None:
    """--prompts-file makes each line its own conversation: the single-prompt options do not mix
    (``prompt_flag``: how the prompt was given, ``--prompt`` or a positional ``PROMPT``)."""
    for given, flag in (
        (prompt is not None, prompt_flag),
        (continue_latest, "--continue"),
        (conversation_id is not None, "--conversation"),
    ):
        if given:
            raise VibechatError(
                f"--prompts-file and {flag} do not mix: each line of the file is a prompt "
                f"and a new conversation; drop {flag}."
            )


def batch_main(
    path: str,
    plan: RunPlan,
    *,
    no_save: bool,
    raw: bool,
    show_stats: bool,
    reuse_prefix: bool = True,
    show_thinking: bool = False,
) -> int:
    """``vibechat run --prompts-file PATH`` as ``plan`` says (the model, the command's system
    prompt and parameters; each line may set its own)."""
    from ..backends import make_backend
    from ..progress import pull_with_progress

    prompts, source = open_prompts(path, sys.stdin.buffer)
    history: History | None = None
    backend: Backend | None = None
    try:
        # Nothing to do: no model loads (stdin: once it ends without a prompt).
        lines = first_prompt(prompts, source)
        if lines is None:
            return nothing_to_do(source, sys.stderr)
        if not no_save:
            # A read-only data dir fails here, in one line, before any work.
            history = History().open()
            history.lens_bytes = plan.config.lens_history_bytes
        # No KV snapshots: each line is a conversation of its own, which the run's prefix reuse
        # serves; a snapshot per line would churn the disk, and with --no-prefix-cache a restored
        # one would make a line's result depend on the lines (and runs) before it. Those on disk
        # stay (kv_snapshot_cache_mib = 0 would delete them: the user's off).
        backend = make_backend(plan.engine, pull=pull_with_progress, kv_snapshots=False)
        options = BatchOptions(
            system=plan.system,
            params=plan.params,
            raw=raw,
            show_stats=show_stats,
            reuse_prefix=reuse_prefix,
            show_thinking=show_thinking,
            context_policy=plan.config.context_policy,
        )
        return run_batch(
            backend, prompts, source, options, history, sys.stdout, sys.stderr, lines=lines
        )
    finally:
        if backend is not None:
            backend.close()
        if history is not None:
            history.close()
        if prompts is not sys.stdin.buffer:
            prompts.close()
