"""The chat's terminal: its one precondition, a terminal on both ends, and leaving it as it was
however the chat ends.

``vibechat < /dev/null > out`` used to start the chat anyway: Textual wrote its escape codes
into ``out`` and then waited for keys that could never come. A script wants ``vibechat run``;
the chat refuses to start, in one line, before it loads a model or writes a byte to stdout.

SIGTERM, SIGHUP and SIGINT sent to the chat (``kill``, a closing terminal window, a service
manager) used to end it on the spot: the alternate screen, mouse reporting and the hidden
cursor stayed on. ``SignalExit`` makes them end the chat the way Ctrl+Q does.

Imports inside functions are deliberate: termios exists on POSIX only; it is imported where the
terminal's settings are read. asyncio is imported where the signals are installed, on the running
loop: ``has_terminal`` is asked before the chat starts its engine process (cli.py), ahead of
asyncio's import (~30 ms)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Protocol

from vibechat.engine.errors import VibechatError

NO_TERMINAL = "the chat needs a terminal (stdin and stdout); for scripts use 'vibechat run'"
EXIT_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")
# A chat whose interface has not ended this long after the signal is ended at once.
FORCE_EXIT_S = 5.0
# What the chat turns on, turned off: mouse reporting (each mode), focus events, bracketed paste,
# the kitty keyboard protocol, line wrap back on, the normal screen, the cursor shown. Written only
# when the chat could not end by itself (Textual writes its own on every other way out).
RESTORE = (
    b"\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?1004l\x1b[?2004l"
    b"\x1b[<u\x1b[?7h\x1b[?1049l\x1b[?25h"
)


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        # Closed (`>&-`) or no stream at all.
        return False


def has_terminal() -> bool:
    """Stdin and stdout are terminals: the chat can open."""
    return _is_terminal(sys.stdin) and _is_terminal(sys.stdout)


def require_terminal() -> None:
    """Raise VibechatError (one line, exit status 1) unless stdin and stdout are terminals."""
    if not has_terminal():
        raise VibechatError(f"{NO_TERMINAL}.")


class Exitable(Protocol):
    """What ``SignalExit`` asks of the app (a Textual ``App``)."""

    @property
    def is_running(self) -> bool: ...

    def exit(self, result: Any = None, return_code: int = 0, message: Any = None) -> None: ...


class SignalExit:
    """SIGTERM, SIGHUP and SIGINT end the chat as Ctrl+Q does, with exit status 128 + the
    signal's number: the reply in progress is saved as stopped with its text, the terminal's
    modes are turned off and its settings given back by Textual, the engine process and the
    tool servers end. A signal that was ignored when the chat started (``nohup``) stays ignored.

    Should the process not end (a hung event loop, or a thread or a child it waits for once the
    interface has ended), ``FORCE_EXIT_S`` after the signal, or at a second signal, it ends at
    once: the terminal's modes turned off (``RESTORE``) and its settings as they were before the
    chat changed them, written back first."""

    def __init__(self, app: Exitable) -> None:
        self._app = app
        self._tty: list[Any] | None = None
        self._signum = 0

    def install(self) -> None:
        """Handle the signals on the running event loop (from its thread, the main one), before
        the app changes the terminal (Textual's ``Load``): its settings are kept for ``force``."""
        import asyncio

        loop = asyncio.get_running_loop()
        self._tty = _tty_settings()
        for name in EXIT_SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None or signal.getsignal(signum) is signal.SIG_IGN:
                continue
            try:
                loop.add_signal_handler(signum, self.received, signum)
            except (ValueError, RuntimeError, NotImplementedError):
                # Not the main thread, not POSIX.
                continue

    def received(self, signum: int) -> None:
        """One of the signals came (on the event loop): the app exits, as on Ctrl+Q."""
        # A second one: the first did not end it soon enough for someone.
        if self._signum:
            self.force()
            return
        self._signum = signum
        self._app.exit(return_code=128 + signum)
        # A daemon timer: it fires only while the process is still here, whether its interface
        # hangs or something after it does (a worker thread the interpreter waits for at exit,
        # an engine that does not close).
        watch = threading.Timer(FORCE_EXIT_S, self.force)
        watch.daemon = True
        watch.start()

    def force(self) -> None:
        """End the process now, the terminal left as it was."""
        try:
            os.write(sys.__stdout__.fileno() if sys.__stdout__ else 1, RESTORE)
        except (OSError, ValueError):
            pass
        # Only where termios was there to read them.
        if self._tty is not None:
            import termios

            try:
                termios.tcsetattr(
                    sys.__stdin__.fileno() if sys.__stdin__ else 0, termios.TCSANOW, self._tty
                )
            except (OSError, ValueError, termios.error):
                pass
        os._exit(128 + (self._signum or signal.SIGTERM))


def _tty_settings() -> list[Any] | None:
    """The terminal's settings (echo, canonical input ...) now, or None where there are none."""
    try:
        import termios
    except ImportError:
        return None
    try:
        return termios.tcgetattr(sys.__stdin__.fileno() if sys.__stdin__ else 0)
    except (OSError, ValueError, termios.error):
        # Not a terminal (termios.error is no OSError).
        return None
