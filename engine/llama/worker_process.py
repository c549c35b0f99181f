"""The parent's side of one engine process, apart from the requests: what the process has said
(``Heard``, for the watchdog), and ending it within a bound whatever it does (``end_process``).
engine/llama/worker.py drives them."""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Callable
from typing import IO

log = logging.getLogger("vibechat.llama_cpp")

# close(): how long the engine process gets to exit by itself, then after SIGTERM, before
# SIGKILL (a stopped process acts on SIGKILL only), and a bound on close() in all: quitting
# never waits more than 3 s for the engine.
CLOSE_EXIT_S = 1.0
CLOSE_TERM_S = 0.5
# A gap between a reply's pieces from which a stop gets more time (Heard.stop_grace), up to
# SLOW_STEP_LIMIT_S more.
SLOW_STEP_S = 0.25
SLOW_STEP_LIMIT_S = 60.0
# A past slow step counts less with each piece since.
STEP_DECAY = 0.9
# The wait after SIGKILL (only a process in an uninterruptible wait takes longer: left to init).
REAP_S = 1.0
# Quitting: the request in flight gets this long to end after its cancel (a live engine needs
# milliseconds), then the engine process is killed. Not ``Heard.stop_grace``: a model whose steps
# are slow gets more time for a stop, which keeps it loaded, never for a quit, which takes at
# most ~3 s whatever the engine does (the app's exit waits for the thread that drives it).
QUIT_GRACE_S = 1.0
CLOSE_LIMIT_S = CLOSE_EXIT_S + CLOSE_TERM_S + REAP_S


class Heard:
    """What one engine process has said, as its protocol reader sees it: for the watchdog,
    which needs it while the thread that drives the engine waits on the inbox. Request ids
    only grow, so "the highest so far" tells about every earlier request too."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        # Its backend exists: it acts on a cancel at once from now on.
        self.ready = False
        # The highest request id whose cancel it acknowledged.
        self.acked = 0
        # The highest request id it answered (a result or an error).
        self.ended = 0
        # Its protocol pipe ended.
        self.gone = False
        # The recent slowest gap between a reply's pieces (decays per piece).
        self.step_s = 0.0
        self._last_piece: float | None = None

    def note(
        self, *, ready: bool = False, acked: int = 0, ended: int = 0, gone: bool = False
    ) -> None:
        with self._cond:
            self.ready |= ready
            self.acked = max(self.acked, acked)
            self.ended = max(self.ended, ended)
            self.gone |= gone
            if ended:
                # The next request's wait for its first piece is its prompt's.
                self._last_piece = None
            self._cond.notify_all()

    def note_piece(self, now: float) -> None:
        """A reply's piece arrived at ``now``: how long one step of this model takes here."""
        with self._cond:
            gap = 0.0 if self._last_piece is None else now - self._last_piece
            self.step_s = max(gap, self.step_s * STEP_DECAY)
            self._last_piece = now

    def stop_grace(self, grace: float) -> float:
        """The time a request gets to end after a stop: ``grace``, and more for a model whose
        steps are slow here (a big model on the CPU, a busy machine): a token's llama_decode
        cannot be interrupted, so a live engine ends its request only after the current one."""
        step = self.step_s
        return grace if step < SLOW_STEP_S else grace + min(SLOW_STEP_LIMIT_S, 2 * step)

    def wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(condition, max(0.0, timeout))


def end_process(proc: subprocess.Popen[bytes], wait_s: float, term_s: float = 0.0) -> int | None:
    """Wait up to ``wait_s`` for ``proc`` to exit by itself, then SIGTERM it and wait up to
    ``term_s`` (when given), then SIGKILL it and wait up to ``REAP_S``: its exit status, or
    None if even that did not end it (an uninterruptible wait: init reaps it later)."""
    steps: list[tuple[Callable[[], None] | None, float]] = [(None, wait_s)]
    if term_s > 0:
        steps.append((proc.terminate, term_s))
    steps.append((proc.kill, REAP_S))
    for send, wait in steps:
        if send is not None:
            try:
                # Popen: no signal once the process was reaped (no pid reused).
                send()
            except OSError:
                pass
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    log.warning("the engine process %s did not end after SIGKILL", proc.pid)
    return None


def end_unless_answered(
    proc: subprocess.Popen[bytes], heard: Heard, rid: int, grace: float
) -> None:
    """Kill ``proc`` unless it ends request ``rid`` (or its pipe ends) within ``grace`` seconds
    (a thread's work, after the request's cancel was sent)."""
    if heard.wait(lambda: heard.gone or heard.ended >= rid, grace):
        return
    log.info(
        "the engine process %s did not end its request within %.3g s: ending it", proc.pid, grace
    )
    try:
        # Its protocol reader sees the pipe end: the call waiting on it returns.
        proc.kill()
    except OSError:
        pass


def close_quietly(pipe: IO[bytes] | None) -> None:
    try:
        if pipe is not None:
            pipe.close()
    except (OSError, ValueError):
        pass
