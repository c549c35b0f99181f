"""``WorkerBackend``: a ``LlamaCppBackend`` in a child process, so that llama.cpp ending
its process (a segfault, a GGML_ASSERT abort, the OOM killer, a GPU driver error) ends
only the child: the chat stays up, says what happened in one line, writes a crash
report, and starts a fresh child for the next request.

Process model: ``python -m vibechat.engine.llama.worker_child`` (a plain ``subprocess``, in its
own session so the terminal's signals do not reach it; the child's side is worker_child.py).
Requests go down its stdin and answers come up its stdout as frames (worker_wire.py says what
travels; worker_pipes.py reads them); its stderr is drained into the crash report's tail and
the ``vibechat.llama_cpp`` logger: never the terminal. Reply pieces of one kind that come faster
than every few milliseconds are joined by the child.

This module is the Backend API the process offers (load, stream, count, prefill, reset, cancel)
and the process's life around it: started when a call needs the model, its end told apart (a
crash, a close, a quit: worker_crashes.py decides what a crash says and whether a fresh child
may follow), a hung one ended after a cancel (worker_watchdog.py), stopped and killed.
Quitting (``quit()``) is no stop: the request in flight gets ``QUIT_GRACE_S``, never a slow
model's longer grace, and then the child is killed; ``close()`` ends the child within
``CLOSE_LIMIT_S`` whatever it does (worker_process.py).
"""

from __future__ import annotations

import logging
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from ..errors import EngineCrashed, GenerationError
from ..settings.params import SamplingParams
from ..turns.backend import (
    ChatEvent,
    ChatMessage,
    GenerationDone,
    ModelInfo,
    ReplyPrefix,
    Side,
    SideEvent,
    SideRequest,
    TextDelta,
    ThinkingDelta,
)
from ..turns.tool_calls import ToolSpec
from .crash_report import write_crash_report
from .worker_ahead import EngineAhead
from .worker_crashes import CLOSED, Restarts, how_it_ended
from .worker_pipes import EnginePipes, forwarded_log_level, spawn
from .worker_preload import Preload
from .worker_process import (
    CLOSE_EXIT_S,
    CLOSE_LIMIT_S,
    CLOSE_TERM_S,
    QUIT_GRACE_S,
    REAP_S,
    close_quietly,
    end_process,
    end_unless_answered,
)
from .worker_watchdog import Watchdog, stop_grace
from .worker_wire import rebuild_error

log = logging.getLogger("vibechat.llama_cpp")


class WorkerBackend:
    """A ``LlamaCppBackend`` (same ``LlamaCppOptions``) in a child process. One thread drives
    it; ``cancel()`` may be called from any thread."""

    name = "llama.cpp"

    def __init__(self, options: Any, ahead: EngineAhead | None = None) -> None:
        """``options``: a LlamaCppOptions (not imported: no libllama here). ``ahead``: an engine
        process started before ``options`` were known (the chat's, before its config is read):
        the first child is that one, if it is still running."""
        self.options = options
        self._ahead = ahead
        # The child (None: none, or discarded).
        self._proc: subprocess.Popen[bytes] | None = None
        # The latest child's, kept until the next starts.
        self._pipes: EnginePipes | None = None
        self._info: ModelInfo | None = None
        # The current child has the model loaded.
        self._loaded = False
        self._next_id = 0
        # The request in flight (what cancel() stops).
        self._busy: int | None = None
        self._restarts = Restarts()
        # close() ends the child: its end is no crash.
        self._closing = False
        # A load begun ahead of the first load() call.
        self._preload: Preload | None = None
        self._preloading: threading.Thread | None = None
        self._watchdog = Watchdog(lambda: self._proc)
        # The child ended as the chat quits.
        self._quit: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------ process
    @property
    def pid(self) -> int | None:
        """The child's process id (None: no child running)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _start(self) -> None:
        """Start a fresh child and send it the options (its load is a request of its own)."""
        if self._closing:
            # A preload that reaches here while close() runs starts nothing.
            raise EngineCrashed("the engine was closed.")
        ahead, self._ahead = self._ahead, None
        proc = (ahead.take() if ahead is not None else None) or spawn()
        self._proc = proc
        if self._closing:
            # close() began while it started: it ends with the others.
            self._stop_child()
            close_quietly(proc.stdout)
            close_quietly(proc.stderr)
            raise EngineCrashed("the engine was closed.")
        # New ones: an old reader may still append to its own.
        self._pipes = EnginePipes(proc)
        self._loaded = False
        self._restarts.started()
        self._send(("init", self.options, forwarded_log_level()))

    def _send(self, msg: tuple[Any, ...]) -> bool:
        pipes = self._pipes
        if self._proc is None or pipes is None or pipes.proc is not self._proc:
            return False
        return pipes.send(msg)

    def _inbox(self) -> queue.Queue[Any]:
        """The latest child's answers (after its end: its ``("eof",)``)."""
        assert self._pipes is not None, "no engine process was started"
        return self._pipes.inbox

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _request(self, kind: str, *args: Any) -> int:
        self._next_id += 1
        rid = self._next_id
        self._busy = rid
        self._send((kind, rid, *args))
        return rid

    def _answer(
        self,
        rid: int,
        what: Callable[[], str],
        on_message: Callable[[tuple[Any, ...]], None] | None = None,
    ) -> Any:
        """Wait for request ``rid``'s result; messages on the way go to ``on_message``.
        Raises what the child raised, or ``EngineCrashed`` if it died (``what()``: doing what)."""
        inbox = self._inbox()
        while True:
            msg = inbox.get()
            kind = msg[0]
            if kind == "eof":
                self._busy = None
                raise self._crash(what())
            if kind in ("result", "error") and msg[1] != rid:
                # A late answer to an abandoned request.
                continue
            if kind == "result":
                self._busy = None
                return msg[2]
            if kind == "error":
                self._busy = None
                raise rebuild_error(msg[2], msg[3])
            if on_message is not None:
                on_message(msg)

    def _model_name(self) -> str:
        return Path(str(self.options.model_path)).name

    def _ensure_loaded(self, on_progress: Callable[[float], object] | None = None) -> ModelInfo:
        """The model, loaded: every call that needs it comes here first; one made while a
        preload runs waits for it and gets its result or its error."""
        preload = self._preload
        if preload is not None:
            try:
                return preload.take_over(on_progress)
            finally:
                # Taken over: from now on, calls load as usual.
                self._preload = None
        return self._load_now(on_progress)

    def _load_now(self, on_progress: Callable[[float], object] | None = None) -> ModelInfo:
        if self._loaded and self._alive() and self._info is not None:
            self._restarts.check(self.options)
            return self._info
        return self._finish_load(self._begin_load(), on_progress)

    def _begin_load(self) -> int:
        """Start a fresh child (or take the one started ahead) and ask it for the model: the
        request's id. Quick: the load runs in the child while ``_finish_load`` waits for it."""
        self._restarts.check(self.options)
        if self._proc is not None and not self._alive():
            # Died while idle (the OOM killer?).
            log.warning("%s", self._crash("while idle between requests"))
        if self._proc is not None:
            self._stop_child()
        self._restarts.check(self.options)
        self._start()
        return self._request("load")

    def _finish_load(
        self, rid: int, on_progress: Callable[[float], object] | None = None
    ) -> ModelInfo:
        """Wait for load request ``rid``'s answer (its progress to ``on_progress``)."""

        def progress(msg: tuple[Any, ...]) -> None:
            if msg[0] == "progress" and on_progress is not None:
                try:
                    on_progress(msg[1])
                except Exception:  # noqa: BLE001
                    pass

        try:
            info = self._answer(rid, lambda: f"while loading {self._model_name()}", progress)
        except EngineCrashed:
            raise
        except BaseException:
            # A failed or cancelled load: the next call starts afresh.
            self._stop_child()
            raise
        self._info = info
        self._loaded = True
        return info

    # --------------------------------------------------------- crashes
    def _crash(self, doing: str) -> EngineCrashed:
        """The child is gone: reap it, write the report, decide whether to restart later."""
        proc, pipes = self._proc, self._pipes
        # Ended on purpose (close(), a stopped load).
        if self._closing or proc is None or pipes is None:
            return EngineCrashed(CLOSED)
        if proc is self._quit:
            # Ended because the chat quits: reaped, no crash report.
            end_process(proc, wait_s=REAP_S)
            self._discard_child()
            return EngineCrashed(CLOSED)
        # It closed its pipe: it is ending (or is ended now).
        rc = end_process(proc, wait_s=2.0)
        # Not None: the watchdog ended it (no crash of llama.cpp's).
        hung_why = self._watchdog.why_ended(proc)
        how = how_it_ended(rc, hung_why)
        if hung_why is not None:
            doing = f"{doing} ({hung_why}), so vibechat ended it"
        # Its last lines (a fault handler's traceback).
        pipes.stderr_reader.join(timeout=2)
        report = write_crash_report(
            how, doing, rc, list(pipes.tail), list(pipes.stderr_tail), self.options, self._info
        )
        self._discard_child()
        return self._restarts.crashed(
            how, doing, report, self.options, self._info, rc, hung=hung_why is not None
        )

    def _discard_child(self) -> None:
        proc, self._proc = self._proc, None
        self._loaded = False
        self._busy = None
        if proc is not None:
            # Its stdout and stderr are closed by their reader threads.
            close_quietly(proc.stdin)

    def _stop_child(self) -> None:
        """End the child on purpose: its stdin ends (it stops what runs and exits), then
        SIGTERM, then SIGKILL (all a stopped or hung child acts on): under
        ``CLOSE_EXIT_S + CLOSE_TERM_S + REAP_S`` in all, whatever it is doing."""
        proc = self._proc
        if proc is None:
            return
        # Discarded first, so that a call waiting on its answer takes its end for a close, not
        # a crash; its stdin closes, and its request reader, seeing the end, stops what runs
        # and exits.
        self._discard_child()
        end_process(proc, wait_s=CLOSE_EXIT_S, term_s=CLOSE_TERM_S)

    # ------------------------------------------------------- Backend API
    def preload(self) -> None:
        """Start the engine process (or take the one started ahead) and ask it for the model now,
        in this thread, and wait for the load in a thread of this one: the chat calls it before
        its screen opens, so the load runs while the UI starts (asked here, not by the thread,
        which would wait for the interpreter's lock while this one imports Textual). The next
        call that needs the model (``load()`` first, in the chat) takes this load over: its
        progress, then its result or its error (a crash is reported once, not loaded again)."""
        if self._preload is not None or self._proc is not None:
            return
        state = self._preload = Preload()
        try:
            rid = self._begin_load()
        except BaseException as exc:  # noqa: BLE001 - handed to the load() that takes over
            state.error = exc
            state.done.set()
            return

        def run() -> None:
            try:
                state.info = self._finish_load(rid, state.progress)
            except BaseException as exc:  # noqa: BLE001 - handed to the load() that takes over
                state.error = exc
            finally:
                state.done.set()

        self._preloading = threading.Thread(target=run, daemon=True, name="vibechat-worker-preload")
        self._preloading.start()

    def load(self, on_progress: Callable[[float], object] | None = None) -> ModelInfo:
        return self._ensure_loaded(on_progress)

    def describe(self) -> ModelInfo:
        if self._info is None:
            raise GenerationError("no model is loaded yet.")
        return self._info

    def cancel(self) -> None:
        """Stop the request in flight (any thread). The engine process acknowledges the cancel
        at once and ends the request within milliseconds; one that has not ended it
        ``STOP_GRACE_S`` later (worker_watchdog.py) is ended by the watchdog and the call fails
        like a crash."""
        busy = self._busy
        if busy is not None:
            self._send(("cancel", busy))
            self._watch(busy)

    def _watch(self, rid: int) -> None:
        """Watch the current child answer the cancel of request ``rid`` (one watchdog a request)."""
        proc, pipes = self._proc, self._pipes
        if proc is not None and pipes is not None and pipes.proc is proc:
            self._watchdog.watch(proc, pipes.heard, rid)

    def quit(self) -> None:
        """The chat quits (any thread; returns at once): the request in flight is stopped, and
        an engine process that has not ended it ``QUIT_GRACE_S`` later is killed, whatever it
        is doing (stopped, hung, in a slow step), so the call waiting on it returns. The longer
        grace a stop gives a model with slow steps (``Heard.stop_grace``) is not waited for, not
        even for a stop made just before. Its end is no crash (no report); ``close()`` follows."""
        busy, proc, pipes = self._busy, self._proc, self._pipes
        if busy is None or proc is None or pipes is None:
            # Idle: close() ends it within CLOSE_LIMIT_S.
            return
        self._quit = proc
        self._send(("cancel", busy))
        threading.Thread(
            target=end_unless_answered,
            args=(proc, pipes.heard, busy, QUIT_GRACE_S),
            daemon=True,
            name="vibechat-worker-quit",
        ).start()

    def reset(self) -> None:
        if not (self._loaded and self._alive()):
            # A fresh child starts with an empty cache.
            return
        rid = self._request("reset")
        self._answer(rid, lambda: "while clearing the conversation cache")

    def prefill(
        self,
        messages: Sequence[ChatMessage],
        thinking: str = "auto",
        tools: Sequence[ToolSpec] = (),
    ) -> int:
        self._ensure_loaded()
        rid = self._request("prefill", list(messages), thinking, tuple(tools))
        result = int(self._answer(rid, lambda: "while evaluating the conversation"))
        self._restarts.answered()
        return result

    def count_tokens(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> int:
        self._ensure_loaded()
        rid = self._request("count", list(messages), thinking)
        return int(self._answer(rid, lambda: "while counting tokens"))

    def check_output_format(self, fmt: Any) -> None:
        """A one-line ``InvalidParameterError`` unless llama.cpp's grammar parser takes the
        grammar of ``fmt`` (an ``OutputFormat``; ``native.check_output_format``, what ``vibechat
        run`` checks), asked of the engine process: the chat's own process never loads libllama.
        A grammar that crashed the parser (past the bounds engine/settings/structured.py checks)
        ends only the engine process: the call raises ``EngineCrashed``. Blocks (the model is
        loaded first), like every request."""
        self._ensure_loaded()
        rid = self._request("check_format", fmt)
        self._answer(rid, lambda: f"while checking the reply format ({fmt.label})")

    def stream_chat(
        self,
        messages: Sequence[ChatMessage],
        params: SamplingParams,
        tools: Sequence[ToolSpec] = (),
        tool_choice: str = "auto",
        prefix: ReplyPrefix | None = None,
    ) -> Generator[ChatEvent, None, None]:
        self._ensure_loaded()
        rid = self._request("stream", list(messages), params, tuple(tools), tool_choice, prefix)
        tokens = 0

        def where() -> str:
            if tokens == 0:
                return "while evaluating the prompt"
            return f"mid-reply after {tokens} token{'s' if tokens != 1 else ''}"

        # Closed with this stream (a consumer that leaves early stops the request).
        with closing(self._received(rid, where)) as received:
            for msg in received:
                kind = msg[0]
                if kind in ("delta", "thinking"):
                    tokens = msg[2]
                    # with the generated tokens so far (the status bar's live count)
                    live = msg[3] if len(msg) > 3 else 0
                    delta = TextDelta if kind == "delta" else ThinkingDelta
                    yield delta(msg[1], live)
                elif kind == "event":
                    if isinstance(msg[1], GenerationDone):
                        tokens = max(tokens, msg[1].stats.completion_tokens)
                    yield msg[1]

    def stream_pair(self, a: SideRequest, b: SideRequest) -> Generator[SideEvent, None, None]:
        """Two replies at once in the engine process (``PairedReplies``, engine/llama/pairing.py):
        its ``SideEvent``s as they come."""
        self._ensure_loaded()
        rid = self._request("pair", a, b)
        with closing(self._received(rid, lambda: "while writing two replies")) as received:
            for msg in received:
                if msg[0] == "event" and isinstance(msg[1], SideEvent):
                    yield msg[1]

    def _received(
        self, rid: int, where: Callable[[], str]
    ) -> Generator[tuple[Any, ...], None, None]:
        """Request ``rid``'s messages as the engine process sends them (its deltas and events),
        until its answer: it ends at the request's result, raises its error, or raises
        ``EngineCrashed`` when the process ended (``where()``: where the request was). Closed
        early (or its consumer failed), it stops the request and waits for its end."""
        finished = False
        inbox = self._inbox()
        try:
            while True:
                msg = inbox.get()
                kind = msg[0]
                if kind == "eof":
                    finished = True
                    self._busy = None
                    raise self._crash(where())
                if kind in ("result", "error") and msg[1] != rid:
                    continue
                if kind == "result":
                    finished = True
                    self._busy = None
                    self._restarts.answered()
                    return
                if kind == "error":
                    finished = True
                    self._busy = None
                    raise rebuild_error(msg[2], msg[3])
                yield msg
        finally:
            if not finished:
                self._abandon(rid)

    def cancel_side(self, side: Side) -> None:
        """Stop side ``side`` of the pair in flight; the other goes on (any thread)."""
        busy = self._busy
        if busy is not None:
            self._send(("cancel_side", busy, side))

    def _abandon(self, rid: int) -> None:
        """Stop request ``rid``, whose caller left (a stream closed early), and wait for its
        end: a child that does not end it is killed."""
        self._send(("cancel", rid))
        # A hung child is ended within its stop grace: its end comes as "eof".
        self._watch(rid)
        pipes = self._pipes
        assert pipes is not None, "no engine process was started"
        inbox = pipes.inbox
        # The watchdog's time, then this loop's.
        limit = stop_grace(pipes.heard) + 2 * REAP_S
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                msg = inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if msg[0] == "eof":
                try:
                    crash = self._crash("while stopping a reply")
                    log.warning("%s", crash)
                except Exception:
                    log.exception("engine crash while stopping a reply")
                return
            if msg[0] in ("result", "error") and msg[1] == rid:
                self._busy = None
                return
        log.warning("the engine did not stop within %.3g s: ending it", limit)
        self._kill()

    def _kill(self) -> None:
        proc = self._proc
        self._discard_child()
        if proc is not None:
            end_process(proc, wait_s=0)

    def close(self) -> None:
        """End the engine process, whatever it is doing (stopped, hung, mid-reply): within
        ``CLOSE_LIMIT_S`` (2.5 s) in all, never waiting on its answers."""
        self._closing = True
        started = time.monotonic()
        ahead, self._ahead = self._ahead, None
        # Never taken: no load was asked for.
        if ahead is not None:
            ahead.end()
        try:
            self._stop_child()  # within CLOSE_LIMIT_S
            preloading = self._preloading
            # A load still under way ends with its child (not a crash); a child that _start() made
            # just as close() began is ended by _start() itself (it sees _closing). Whatever is
            # left when the time is up is killed without a further wait.
            while (
                preloading is not None
                and preloading.is_alive()
                and time.monotonic() < started + CLOSE_LIMIT_S
            ):
                preloading.join(timeout=0.05)
            proc = self._proc
            if proc is not None:
                self._discard_child()
                try:
                    proc.kill()
                    proc.wait(timeout=max(0.05, started + CLOSE_LIMIT_S - time.monotonic()))
                except (OSError, subprocess.TimeoutExpired):
                    pass
        finally:
            self._closing = False
        self._info = None
