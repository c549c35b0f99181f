"""A hung engine process is a dead one: after a cancel, the ``Watchdog`` gives the request
``STOP_GRACE_S`` to end; a child that does not end it by then (stopped with SIGSTOP, frozen,
stuck in a native call after it acknowledged the cancel) is killed and the call fails like a
crash, with its own line, so a stop takes under 2 s whatever the engine does; a model whose
steps are slow here gets twice its recent slowest step more (one llama_decode cannot be
interrupted: ``Heard.stop_grace``, worker_process.py). Only a child still starting (importing
llama.cpp, before it can act on a cancel) gets longer (``START_LIMIT_S``). Nothing else is
timed: a slow load or prompt evaluation that nobody stopped is no hang.
engine/llama/worker.py starts one watchdog per stopped request."""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
from collections.abc import Callable

from .worker_process import Heard

log = logging.getLogger("vibechat.llama_cpp")

# After a cancel, the request in flight gets this long to end before the engine process is
# ended as hung, acknowledged or not: stopped with SIGSTOP, frozen with the GIL held (no
# acknowledgement), or stuck in a native call that never returns (its request reader
# acknowledged the cancel, its main thread never comes back). The watchdog ends it (SIGKILL) and
# the call in flight fails like a crash, so Esc ends a reply within 2 s whatever the engine does.
# A live process needs milliseconds: the cancel reaches llama.cpp at once (its reader thread sets
# the flag), which checks it between graph nodes (the abort callback: a prompt evaluation stops
# mid-batch), between tokens, between tensors of a load, and in a chat template's render.
# Nothing else is a deadline: a long prompt evaluation or a slow load that nobody stopped runs as
# long as it takes.
STOP_GRACE_S = 1.5
# A hung engine's time to write its threads' stacks (to its crash report) before it is ended.
DUMP_S = 0.2
# The one exception: a process still starting (Python, then importing llama.cpp) cannot act on a
# cancel until it says "ready"; its start is no hang, up to this long (then STOP_GRACE_S more).
# Only a load is ever in flight then, never a reply.
START_LIMIT_S = 10.0


def stop_grace(heard: Heard) -> float:
    """The time a stopped request of the process that ``heard`` listens to gets to end."""
    return heard.stop_grace(STOP_GRACE_S)


class Watchdog:
    """Watches the engine processes answer their cancels, one thread per stopped request, and
    ends one that does not (``hung``: which process it ended, and why, for the crash's line).
    ``current()`` is the process the backend drives now: one ended meanwhile, or replaced, is
    left alone."""

    def __init__(self, current: Callable[[], subprocess.Popen[bytes] | None]) -> None:
        self._current = current
        # The request watched last (one watchdog per stopped request).
        self._watched = 0
        self._lock = threading.Lock()
        self.hung: tuple[subprocess.Popen[bytes], str] | None = None

    def watch(self, proc: subprocess.Popen[bytes] | None, heard: Heard, rid: int) -> None:
        """Watch ``proc`` answer the cancel of request ``rid`` (once a request)."""
        with self._lock:
            if proc is None or rid <= self._watched:
                return
            self._watched = rid
        threading.Thread(
            target=self._watch,
            args=(proc, heard, rid),
            daemon=True,
            name="vibechat-worker-watchdog",
        ).start()

    def why_ended(self, proc: subprocess.Popen[bytes]) -> str | None:
        """Why the watchdog ended ``proc`` (None: it did not)."""
        hung = self.hung
        return hung[1] if hung is not None and hung[0] is proc else None

    def _watch(self, proc: subprocess.Popen[bytes], heard: Heard, rid: int) -> None:
        """One deadline, ``STOP_GRACE_S`` after the cancel, for the request to end, whether the
        child acknowledged the cancel or not: a live one needs milliseconds. Only a child still
        starting (not ready: it cannot act on a cancel yet) gets up to ``START_LIMIT_S`` first."""

        def ended() -> bool:
            return heard.gone or heard.ended >= rid

        if not heard.ready:
            # Its own start is no hang; its deadline runs from when it can stop.
            heard.wait(lambda: ended() or heard.ready, START_LIMIT_S)
        grace = stop_grace(heard)
        if heard.wait(ended, grace):
            return
        if heard.acked >= rid:
            # Its reader runs, the request never ends: a native call stuck.
            why = f"the request did not end within {grace:.3g} s of the stop request"
        else:
            # Stopped, or frozen with the GIL held.
            why = f"no answer to the stop request within {grace:.3g} s"
        if self._current() is not proc or proc.poll() is not None:
            # Ended meanwhile, or on purpose.
            return
        log.warning("the engine process %s is hung (%s): ending it", proc.pid, why)
        self.hung = (proc, why)
        if heard.acked >= rid and hasattr(signal, "SIGUSR1"):
            # Where it hangs, for the report (SIGUSR1: a traceback of every thread).
            try:
                proc.send_signal(signal.SIGUSR1)
            except OSError:
                pass
            heard.wait(lambda: heard.gone, DUMP_S)
        try:
            # The reader sees its pipe end; the waiting call reports it (its crash).
            proc.kill()
        except OSError:
            pass
