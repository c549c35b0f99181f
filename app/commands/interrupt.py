"""Ctrl-C for the one-shot commands (``vibechat run``, ``--prompts-file``).

Python turns SIGINT into a KeyboardInterrupt at the next bytecode it runs, which
while a model loads or evaluates a prompt is often inside a ctypes callback
(llama.cpp's log, load-progress and abort callbacks). An exception there is printed
as "Exception ignored on calling ctypes callback function" and lost: the run went on
as if nothing had happened. So while the model works, Ctrl-C is a request instead:
the handler notes it and cancels the backend (llama.cpp checks that between steps,
during loading too), and the command ends at the next safe point with exit 130.
A second Ctrl-C raises at once (which a callback can still swallow), and a third
ends the process the way SIGINT does by default (what was said is saved already).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


class CtrlC:
    """Install with ``installed()``; ``requested`` turns true on Ctrl-C, and
    ``cancel()`` (the backend's) is called at once. ``raise_if_requested()`` ends the
    command at a safe point. While ``blocking_input`` is being read (stdin, a pipe),
    Ctrl-C raises at once: nothing else could notice the request."""

    def __init__(self, cancel: Callable[[], Any], blocking_input: bool = False) -> None:
        self._cancel = cancel
        self.blocking_input = blocking_input
        self.requested = False
        self._reading = False
        self._presses = 0

    def __call__(self, signum: int, frame: object) -> None:
        self._presses += 1
        if self._presses >= 2 or (self._reading and self.blocking_input):
            # A third press ends the process: nothing can swallow it.
            if self._presses >= 2:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
            raise KeyboardInterrupt
        self.requested = True
        self._cancel()

    @contextmanager
    def installed(self) -> Iterator[CtrlC]:
        usable = (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        )
        # SIGINT ignored (a background job), or not the main thread.
        if not usable:
            yield self
            return
        previous = signal.signal(signal.SIGINT, self)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)

    def raise_if_requested(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def read(self, read: Callable[[], T]) -> T:
        """``read()``, during which Ctrl-C raises at once if the input may block."""
        self._reading = True
        try:
            return read()
        finally:
            self._reading = False
