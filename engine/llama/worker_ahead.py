"""An engine process started ahead of the settings it will load (``EngineAhead``): the chat starts
one before it reads its config, picks its model or imports Textual, so the process's own start
(the interpreter, llama-cpp-python's bindings, libllama) runs on another core while the chat gets
ready, and the model's load begins as soon as the chat knows which model it is. The first
``WorkerBackend`` that starts a process takes it (``take``); one nobody took (a remote server, a
refused start) is ended (``end``): it has been sent nothing, so it is killed without a wait."""

from __future__ import annotations

import subprocess
import threading

from .worker_pipes import spawn
from .worker_process import close_quietly, end_process


class EngineAhead:
    """One engine process, started now (``spawn``), sent nothing yet: taken once by the backend
    that will drive it, or ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = spawn()

    @property
    def pid(self) -> int | None:
        """The process's id while nobody took it (None after ``take`` or ``end``)."""
        proc = self._proc
        return proc.pid if proc is not None else None

    def take(self) -> subprocess.Popen[bytes] | None:
        """The process, once (None after, or when it has ended already: the taker starts a fresh
        one then); from now on the taker owns it."""
        with self._lock:
            proc, self._proc = self._proc, None
        # Ended before it was wanted.
        if proc is not None and proc.poll() is not None:
            _reap(proc)
            return None
        return proc

    def end(self) -> None:
        """End the process unless it was taken. It has been sent nothing and holds nothing (no
        model, no file), so it is killed at once: a start that does not need it (a remote server's
        chat) waits only for the reap, not for the interpreter it started to notice its stdin."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            _reap(proc)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    close_quietly(proc.stdin)
    end_process(proc, wait_s=0)
    close_quietly(proc.stdout)
    close_quietly(proc.stderr)
