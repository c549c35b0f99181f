"""``WorkerBackend``: a ``LlamaCppBackend`` in a child process, so that llama.cpp ending
its process (a segfault, a GGML_ASSERT abort, the OOM killer, a GPU driver error) ends
only the child: the chat stays up, says what happened in one line, writes a crash
report, and starts a fresh child for the next request.

Process model: ``python -m vibechat.engine.llama.worker_child`` (a plain ``subprocess``, in its
own session so the terminal's signals do not reach it; the child's side is worker_child.py).
Requests go down its stdin and answers come up its stdout as frames (worker_wire.py says what
travels); its stderr is drained by a thread into the crash report's tail and the
``vibechat.llama_cpp`` logger: never the terminal. Reply pieces of one kind that come faster
than every few milliseconds are joined by the child.

The child keeps its backend (and its KV cache) between requests. When the protocol pipe
ends before the answer, the child died: the call raises ``EngineCrashed`` naming the
signal, what it was doing and the crash report (crash_report.py); the next call starts a
fresh child. A fresh child that dies again during its load or its first request, with the
same options, is not restarted until the options change (``EngineCrashLoop``).

A hung child is a dead one: after a cancel, a watchdog thread gives the request
``STOP_GRACE_S`` to end; a child that does not end it by then (stopped with SIGSTOP, frozen,
stuck in a native call after it acknowledged the cancel) is killed and the call fails like
a crash, with its own line, so a stop takes under 2 s whatever the engine does; a model whose
steps are slow here gets twice its recent slowest step more (one llama_decode cannot be
interrupted: ``Heard.stop_grace``, worker_process.py). Only a child
still starting (importing llama.cpp, before it can act on a cancel) gets longer
(``START_LIMIT_S``). Nothing else is timed: a slow load or prompt evaluation that nobody
stopped is no hang. Quitting (``quit()``) is no stop: the request in flight gets
``QUIT_GRACE_S``, never a slow model's longer grace, and then the child is killed; ``close()``
ends the child within ``CLOSE_LIMIT_S`` whatever it does (worker_process.py).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from .. import errors
from ..errors import EngineCrashed, EngineCrashLoop, GenerationError, VibechatError
from ..settings.params import SamplingParams
from ..turns.backend import (
    ChatEvent,
    ChatMessage,
    GenerationDone,
    ModelInfo,
    TextDelta,
    ThinkingDelta,
)
from ..turns.tool_calls import ToolSpec
from . import vision_errors
from .crash_report import signal_name, suggest_setting, write_crash_report
from .worker_preload import Preload
from .worker_process import (
    CLOSE_EXIT_S,
    CLOSE_LIMIT_S,
    CLOSE_TERM_S,
    QUIT_GRACE_S,
    REAP_S,
    Heard,
    close_quietly,
    end_process,
    end_unless_answered,
)
from .worker_wire import read_frame, write_frame

log = logging.getLogger("vibechat.llama_cpp")

LOG_TAIL = 50
# process, acknowledged or not: stopped with SIGSTOP, frozen with the GIL held (no
# acknowledgement), or stuck in a native call that never returns (its request reader
# acknowledged the cancel, its main thread never comes back). The watchdog ends it (SIGKILL) and
# the call in flight fails like a crash, so Esc ends a reply within 2 s whatever the engine does.
# A live process needs milliseconds: the cancel reaches llama.cpp at once (its reader thread sets
# the flag), which checks it between graph nodes (the abort callback: a prompt evaluation stops
# mid-batch), between tokens, between tensors of a load, and in a chat template's render.
# Nothing else is a deadline: a long prompt evaluation or a slow load that nobody stopped runs as
# long as it takes.
STOP_GRACE_S = 1.5
DUMP_S = 0.2  # a hung engine's time to write its threads' stacks (to its crash report) before it is ended
# The one exception: a process still starting (Python, then importing llama.cpp) cannot act on a
# cancel until it says "ready"; its start is no hang, up to this long (then STOP_GRACE_S more).
# Only a load is ever in flight then, never a reply.
START_LIMIT_S = 10.0


def forwarded_log_level() -> int:
    """The lowest level of the engine process's log records worth sending here: INFO (the
    crash report keeps the last INFO-and-above lines), DEBUG only when this process logs it
    (``--verbose``, VIBECHAT_DEBUG, or any ``vibechat.*`` logger set lower). A load writes ~1,300
    DEBUG lines of llama.cpp's: sent as frames, each was pickled there and unpickled here, on
    the chat's start, to be dropped."""
    loggers = [logger for name, logger in list(logging.Logger.manager.loggerDict.items())
               if name.startswith("vibechat.") and isinstance(logger, logging.Logger)]
    return min(logging.INFO, logging.getLogger("vibechat").getEffectiveLevel(),
               *(logger.getEffectiveLevel() for logger in loggers))


class WorkerBackend:
    """A ``LlamaCppBackend`` (same ``LlamaCppOptions``) in a child process. One thread drives
    it; ``cancel()`` may be called from any thread."""

    name = "llama.cpp"

    def __init__(self, options: Any) -> None:  # LlamaCppOptions (not imported: no libllama here)
        self.options = options
        self._proc: subprocess.Popen[bytes] | None = None
        self._inbox: queue.Queue[Any] = queue.Queue()
        self._write_lock = threading.Lock()
        self._tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
        self._info: ModelInfo | None = None
        self._loaded = False  # the current child has the model loaded
        self._next_id = 0
        self._busy: int | None = None  # the request in flight (what cancel() stops)
        self._restarted = False  # the current child replaces one that crashed ...
        self._proven = False  # ... and has answered a request since
        self._crashed_before = False
        self._broken: tuple[Any, str] | None = None  # (options, message): no restart until they change
        self._closing = False  # close() ends the child: its end is no crash
        self._stderr_reader: threading.Thread | None = None
        self._preload: Preload | None = None  # a load begun ahead of the first load() call
        self._preloading: threading.Thread | None = None
        self._heard = Heard()  # the current child's
        self._watched = 0  # the request the watchdog watches (one watchdog per stopped request)
        self._watch_lock = threading.Lock()
        self._hung: tuple[subprocess.Popen[bytes], str] | None = None  # (child, why) the watchdog ended
        self._quit: subprocess.Popen[bytes] | None = None  # the child ended because the chat quits

    # ------------------------------------------------------------ process
    @property
    def pid(self) -> int | None:
        """The child's process id (None: no child running)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _start(self) -> None:
        if self._closing:  # a preload that reaches here while close() runs starts nothing
            raise EngineCrashed("the engine was closed.")
        cmd = [sys.executable, "-m", "vibechat.engine.llama.worker_child"]
        kwargs: dict[str, Any] = {}
        if os.name == "posix":
            kwargs["start_new_session"] = True  # Ctrl-C / Ctrl-Z in the terminal are the chat's
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                close_fds=True, **kwargs)
        self._proc = proc
        if self._closing:  # close() began while it started: it ends with the others
            self._stop_child()
            close_quietly(proc.stdout)
            close_quietly(proc.stderr)
            raise EngineCrashed("the engine was closed.")
        self._inbox = queue.Queue()
        self._tail = collections.deque(maxlen=LOG_TAIL)  # new ones: an old reader may still append
        self._stderr_tail = collections.deque(maxlen=LOG_TAIL)
        self._heard = Heard()
        self._loaded = False
        self._restarted, self._proven = self._crashed_before, False
        threading.Thread(target=self._read_protocol, args=(proc, self._inbox, self._tail, self._heard), daemon=True,
                         name="vibechat-worker-reader").start()
        self._stderr_reader = threading.Thread(target=self._read_stderr, args=(proc, self._stderr_tail), daemon=True,
                                               name="vibechat-worker-stderr")
        self._stderr_reader.start()
        self._send(("init", self.options, forwarded_log_level()))

    @staticmethod
    def _read_protocol(proc: subprocess.Popen[bytes], inbox: queue.Queue[Any], tail: collections.deque[str],
                       heard: Heard) -> None:
        assert proc.stdout is not None
        try:
            while True:
                try:
                    msg = read_frame(proc.stdout)
                except Exception as exc:  # noqa: BLE001 - a torn frame: the child died mid-write
                    log.debug("worker protocol: %s", exc)
                    msg = None
                if msg is None:
                    break
                if msg[0] == "log":
                    _, name, level, text = msg
                    if level >= logging.INFO:  # llama.cpp's DEBUG lines (graph details) would crowd the report
                        tail.append(f"{logging.getLevelName(level)} {text}")
                    logging.getLogger(name).log(level, "%s", text)
                    continue
                if msg[0] == "ready":
                    heard.note(ready=True)
                    continue
                if msg[0] == "cancelling":
                    heard.note(acked=msg[1])
                    continue
                if msg[0] in ("result", "error"):
                    heard.note(ended=msg[1])
                elif msg[0] in ("delta", "thinking"):
                    heard.note_piece(time.monotonic())
                inbox.put(msg)
        finally:
            heard.note(gone=True)
            inbox.put(("eof",))
            close_quietly(proc.stdout)

    @staticmethod
    def _read_stderr(proc: subprocess.Popen[bytes], tail: collections.deque[str]) -> None:
        assert proc.stderr is not None
        try:
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip()
                if line:
                    tail.append(line)
                    log.warning("engine process: %s", line)
        except (OSError, ValueError):
            pass
        finally:
            close_quietly(proc.stderr)

    def _send(self, msg: tuple[Any, ...]) -> bool:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return False
        with self._write_lock:
            try:
                write_frame(proc.stdin, msg)
                return True
            except (OSError, ValueError):  # the child is gone: its answer pipe says so
                return False

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _request(self, kind: str, *args: Any) -> int:
        self._next_id += 1
        rid = self._next_id
        self._busy = rid
        self._send((kind, rid, *args))
        return rid

    def _answer(self, rid: int, what: Callable[[], str],
                on_message: Callable[[tuple[Any, ...]], None] | None = None) -> Any:
        """Wait for request ``rid``'s result; messages on the way go to ``on_message``.
        Raises what the child raised, or ``EngineCrashed`` if it died (``what()``: doing what)."""
        while True:
            msg = self._inbox.get()
            kind = msg[0]
            if kind == "eof":
                self._busy = None
                raise self._crash(what())
            if kind in ("result", "error") and msg[1] != rid:
                continue  # a late answer to an abandoned request
            if kind == "result":
                self._busy = None
                return msg[2]
            if kind == "error":
                self._busy = None
                raise _rebuild_error(msg[2], msg[3])
            if on_message is not None:
                on_message(msg)

    def _check_broken(self) -> None:
        if self._broken is not None:
            options, message = self._broken
            if options == self.options:
                raise EngineCrashLoop(message)
            self._broken = None
            self._crashed_before = False

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
                self._preload = None  # taken over: from now on, calls load as usual
        return self._load_now(on_progress)

    def _load_now(self, on_progress: Callable[[float], object] | None = None) -> ModelInfo:
        self._check_broken()
        if self._loaded and self._alive() and self._info is not None:
            return self._info
        if self._proc is not None and not self._alive():  # died while idle (the OOM killer?)
            log.warning("%s", self._crash("while idle between requests"))
        if self._proc is not None:
            self._stop_child()
        self._check_broken()
        self._start()

        def progress(msg: tuple[Any, ...]) -> None:
            if msg[0] == "progress" and on_progress is not None:
                try:
                    on_progress(msg[1])
                except Exception:  # noqa: BLE001
                    pass

        rid = self._request("load")
        try:
            info = self._answer(rid, lambda: f"while loading {self._model_name()}", progress)
        except EngineCrashed:
            raise
        except BaseException:
            self._stop_child()  # a failed or cancelled load: the next call starts afresh
            raise
        self._info = info
        self._loaded = True
        return info

    # --------------------------------------------------------- crashes
    def _crash(self, doing: str) -> EngineCrashed:
        """The child is gone: reap it, write the report, decide whether to restart later."""
        proc = self._proc
        if self._closing or proc is None:  # ended on purpose (close(), a stopped load), maybe just now
            return EngineCrashed("the engine was closed while it was busy.")
        if proc is self._quit:  # ended because the chat quits: reaped, no crash report
            end_process(proc, wait_s=REAP_S)
            self._discard_child()
            return EngineCrashed("the engine was closed while it was busy.")
        rc = end_process(proc, wait_s=2.0)  # it closed its pipe: it is ending (or is ended now)
        hung = self._hung
        if hung is not None and hung[0] is proc:  # the watchdog ended it: no crash of llama.cpp's
            how, doing = "stopped responding", f"{doing} ({hung[1]}), so vibechat ended it"
        else:
            hung = None
            how = (f"crashed ({signal_name(-rc)})" if rc is not None and rc < 0
                   else f"exited unexpectedly (status {rc})")
        if self._stderr_reader is not None:  # its last lines (a fault handler's traceback)
            self._stderr_reader.join(timeout=2)
        report = write_crash_report(how, doing, rc, list(self._tail), list(self._stderr_tail), self.options,
                                    self._info)
        self._discard_child()
        where = f"; crash report: {report}" if report else ""
        if hung is not None:  # a hang is not counted towards a crash loop: the user stopped it
            return EngineCrashed(f"the engine {how} {doing}; it restarts with the next request{where}", report)
        if self._restarted and not self._proven:
            setting = suggest_setting(self.options, self._info, doing, rc)
            message = (f"the engine {how} {doing} again right after a restart, so vibechat will not restart "
                       f"it with the same settings: try {setting}{where}")
            self._broken = (dataclasses.replace(self.options), message)
            return EngineCrashLoop(message, report)
        self._crashed_before = True
        return EngineCrashed(f"the engine {how} {doing}; it restarts with the next request{where}", report)

    def _discard_child(self) -> None:
        proc, self._proc = self._proc, None
        self._loaded = False
        self._busy = None
        if proc is not None:  # its stdout and stderr are closed by their reader threads
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
        """Start the engine process and its load now, in a thread of this one: the chat calls
        it before its screen opens, so the load runs while the UI starts. The next call that
        needs the model (``load()`` first, in the chat) takes this load over: its progress,
        then its result or its error (a crash is reported once, not loaded again)."""
        if self._preload is not None or self._proc is not None:
            return
        state = self._preload = Preload()

        def run() -> None:
            try:
                state.info = self._load_now(state.progress)
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
        ``STOP_GRACE_S`` later is ended by the watchdog and the call fails like a crash."""
        busy = self._busy
        if busy is not None:
            self._send(("cancel", busy))
            self._watch(busy)

    def _watch(self, rid: int) -> None:
        """Watch the current child answer the cancel of request ``rid`` (one watchdog a request)."""
        proc, heard = self._proc, self._heard
        with self._watch_lock:
            if proc is None or rid <= self._watched:
                return
            self._watched = rid
        threading.Thread(target=self._watchdog, args=(proc, heard, rid), daemon=True,
                         name="vibechat-worker-watchdog").start()

    def _watchdog(self, proc: subprocess.Popen[bytes], heard: Heard, rid: int) -> None:
        """One deadline, ``STOP_GRACE_S`` after the cancel, for the request to end, whether the
        child acknowledged the cancel or not: a live one needs milliseconds. Only a child still
        starting (not ready: it cannot act on a cancel yet) gets up to ``START_LIMIT_S`` first."""

        def ended() -> bool:
            return heard.gone or heard.ended >= rid

        if not heard.ready:  # its own start is no hang; its deadline runs from when it can stop
            heard.wait(lambda: ended() or heard.ready, START_LIMIT_S)
        grace = heard.stop_grace(STOP_GRACE_S)
        if heard.wait(ended, grace):
            return
        if heard.acked >= rid:  # its reader runs, the request never ends: a native call stuck
            why = f"the request did not end within {grace:.3g} s of the stop request"
        else:  # stopped, or frozen with the GIL held
            why = f"no answer to the stop request within {grace:.3g} s"
        if self._proc is not proc or proc.poll() is not None:
            return  # ended meanwhile, or on purpose
        log.warning("the engine process %s is hung (%s): ending it", proc.pid, why)
        self._hung = (proc, why)
        if heard.acked >= rid and hasattr(signal, "SIGUSR1"):  # where it hangs, for the crash report
            try:
                proc.send_signal(signal.SIGUSR1)
            except OSError:
                pass
            heard.wait(lambda: heard.gone, DUMP_S)
        try:
            proc.kill()  # the reader sees its pipe end; the waiting call reports it (_crash)
        except OSError:
            pass

    def quit(self) -> None:
        """The chat quits (any thread; returns at once): the request in flight is stopped, and
        an engine process that has not ended it ``QUIT_GRACE_S`` later is killed, whatever it
        is doing (stopped, hung, in a slow step), so the call waiting on it returns. The longer
        grace a stop gives a model with slow steps (``Heard.stop_grace``) is not waited for, not
        even for a stop made just before. Its end is no crash (no report); ``close()`` follows."""
        busy, proc, heard = self._busy, self._proc, self._heard
        if busy is None or proc is None:
            return  # idle: close() ends it within CLOSE_LIMIT_S
        self._quit = proc
        self._send(("cancel", busy))
        threading.Thread(target=end_unless_answered, args=(proc, heard, busy, QUIT_GRACE_S), daemon=True,
                         name="vibechat-worker-quit").start()

    def reset(self) -> None:
        if not (self._loaded and self._alive()):
            return  # a fresh child starts with an empty cache
        rid = self._request("reset")
        self._answer(rid, lambda: "while clearing the conversation cache")

    def prefill(self, messages: Sequence[ChatMessage], thinking: str = "auto", tools: Sequence[ToolSpec] = ()) -> int:
        self._ensure_loaded()
        rid = self._request("prefill", list(messages), thinking, tuple(tools))
        result = int(self._answer(rid, lambda: "while evaluating the conversation"))
        self._proven = True
        return result

    def count_tokens(self, messages: Sequence[ChatMessage], thinking: str = "auto") -> int:
        self._ensure_loaded()
        rid = self._request("count", list(messages), thinking)
        return int(self._answer(rid, lambda: "while counting tokens"))

    def check_output_format(self, fmt: Any) -> None:  # an OutputFormat
        """A one-line ``InvalidParameterError`` unless llama.cpp's grammar parser takes ``fmt``'s
        grammar (``native.check_output_format``, what ``vibechat run`` checks), asked of the
        engine process: the chat's own process never loads libllama. A grammar that crashed the
        parser (past the bounds engine/settings/structured.py checks) ends only the engine process: the
        call raises ``EngineCrashed``. Blocks (the model is loaded first), like every request."""
        self._ensure_loaded()
        rid = self._request("check_format", fmt)
        self._answer(rid, lambda: f"while checking the reply format ({fmt.label})")

    def stream_chat(self, messages: Sequence[ChatMessage], params: SamplingParams,
                    tools: Sequence[ToolSpec] = (), tool_choice: str = "auto") -> Generator[ChatEvent, None, None]:
        self._ensure_loaded()
        rid = self._request("stream", list(messages), params, tuple(tools), tool_choice)
        tokens = 0
        finished = False
        try:
            while True:
                msg = self._inbox.get()
                kind = msg[0]
                if kind == "eof":
                    finished = True
                    self._busy = None
                    raise self._crash("while evaluating the prompt" if tokens == 0
                                      else f"mid-reply after {tokens} token{'s' if tokens != 1 else ''}")
                if kind in ("result", "error") and msg[1] != rid:
                    continue
                if kind in ("delta", "thinking"):
                    tokens = msg[2]
                    # with the generated tokens so far (the status bar's live count)
                    live = msg[3] if len(msg) > 3 else 0
                    yield TextDelta(msg[1], live) if kind == "delta" else ThinkingDelta(msg[1], live)
                elif kind == "event":
                    if isinstance(msg[1], GenerationDone):
                        tokens = max(tokens, msg[1].stats.completion_tokens)
                    yield msg[1]
                elif kind == "result":
                    finished = True
                    self._busy = None
                    self._proven = True
                    return
                elif kind == "error":
                    finished = True
                    self._busy = None
                    raise _rebuild_error(msg[2], msg[3])
        finally:
            if not finished:  # closed early (or the consumer failed): stop it, wait for its end
                self._abandon(rid)

    def _abandon(self, rid: int) -> None:
        self._send(("cancel", rid))
        self._watch(rid)  # a hung child is ended within STOP_GRACE_S: its end comes as "eof"
        limit = self._heard.stop_grace(STOP_GRACE_S) + 2 * REAP_S  # the watchdog's, then this one's
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                msg = self._inbox.get(timeout=max(0.0, deadline - time.monotonic()))
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
        try:
            self._stop_child()  # within CLOSE_LIMIT_S
            preloading = self._preloading
            # A load still under way ends with its child (not a crash); a child that _start() made
            # just as close() began is ended by _start() itself (it sees _closing). Whatever is
            # left when the time is up is killed without a further wait.
            while (preloading is not None and preloading.is_alive()
                   and time.monotonic() < started + CLOSE_LIMIT_S):
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


def _rebuild_error(name: str, message: str) -> Exception:
    """The child's exception, as the same class when it is one of engine/errors.py's (or the
    vision path's, engine/llama/vision_errors.py)."""

    cls = getattr(errors, name, None) or getattr(vision_errors, name, None)
    if isinstance(cls, type) and issubclass(cls, VibechatError):
        try:
            return cls(message)
        except TypeError:
            return GenerationError(message)
    return GenerationError(f"the engine failed: {name}: {message}")
