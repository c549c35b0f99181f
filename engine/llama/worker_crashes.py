"""When an engine process ends on its own, what the chat is told and whether it starts another.

The child keeps its backend (and its KV cache) between requests. When the protocol pipe ends
before the answer, the child died: the call raises ``EngineCrashed`` naming the signal, what it
was doing and the crash report (crash_report.py); the next call starts a fresh child. A fresh
child that dies again during its load or its first request, with the same options, is not
restarted until the options change (``EngineCrashLoop``). A child the watchdog ended
(worker_watchdog.py) is no crash of llama.cpp's, and no step towards a crash loop: the user
stopped it. engine/llama/worker.py keeps one ``Restarts``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..errors import EngineCrashed, EngineCrashLoop
from ..turns.backend import ModelInfo
from .crash_report import signal_name, suggest_setting

CLOSED = "the engine was closed while it was busy."


def how_it_ended(rc: int | None, hung_why: str | None) -> str:
    """How the process ended, for the line: hung (ended by the watchdog), killed by a signal,
    or exited with a status."""
    if hung_why is not None:
        return "stopped responding"
    if rc is not None and rc < 0:
        return f"crashed ({signal_name(-rc)})"
    return f"exited unexpectedly (status {rc})"


class Restarts:
    """The crash history of the engine processes one backend started: whether the current one
    replaces one that crashed and has answered a request since, and the options (with their
    message) that no process is started with again."""

    def __init__(self) -> None:
        # Whether the current child replaces one that crashed, and has answered a request since.
        self._restarted = False
        self._proven = False
        self._crashed_before = False
        # (options, message): no restart with them.
        self._broken: tuple[Any, str] | None = None

    def check(self, options: Any) -> None:
        """Raise ``EngineCrashLoop`` when a process with ``options`` crashed in a loop; options
        that changed since start afresh."""
        if self._broken is not None:
            broken, message = self._broken
            if broken == options:
                raise EngineCrashLoop(message)
            self._broken = None
            self._crashed_before = False

    def started(self) -> None:
        """A new process started: it is a restart when the one before it crashed."""
        self._restarted, self._proven = self._crashed_before, False

    def answered(self) -> None:
        """The current process answered a request: a crash from now on is no crash loop."""
        self._proven = True

    def crashed(
        self,
        how: str,
        doing: str,
        report: Path | None,
        options: Any,
        info: ModelInfo | None,
        rc: int | None,
        hung: bool,
    ) -> EngineCrashed:
        """The error for a process that ended ``how`` while ``doing`` (``report``: its crash
        report, named in the line), counted towards a crash loop unless the watchdog ended it
        (``hung``)."""
        where = f"; crash report: {report}" if report else ""
        restarts = f"the engine {how} {doing}; it restarts with the next request{where}"
        if hung:
            return EngineCrashed(restarts, report)
        if self._restarted and not self._proven:
            setting = suggest_setting(options, info, doing, rc)
            message = (
                f"the engine {how} {doing} again right after a restart, so vibechat will not "
                f"restart it with the same settings: try {setting}{where}"
            )
            self._broken = (dataclasses.replace(options), message)
            return EngineCrashLoop(message, report)
        self._crashed_before = True
        return EngineCrashed(restarts, report)
