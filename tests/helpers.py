"""Small helpers for the tests: what the app has told the user, waits on conditions, and a
``vibechat`` command run as a subprocess (``vibechat``).

The only place that knows how Textual keeps an app's notifications (``App._notifications``, a
private ``Notifications`` with no public reader in Textual 8.2): if a release changes it, this
file changes, not every test. A notification leaves Textual's list when its toast times out
(2 to 8 s), which on a slow or busy CPU can come before the test reads it; the tests read what
the app notified since it started, or since ``app.clear_notifications()``: ``keep_notifications``
(an autouse fixture in conftest.py) records each one as Textual adds it."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable

import pytest
from textual.app import App
from textual.notifications import Notification, Notifications

from conftest import VIBECHAT_BIN

WAIT_S = 120.0  # the default bound of every wait: far above any normal run, so a slow CPU passes


def keep_notifications(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every ``Notifications`` also keep what it was given, until cleared."""
    add, clear = Notifications.add, Notifications.clear

    def adding(self: Notifications, notification: Notification) -> Notifications:
        vars(self).setdefault("_kept", []).append(notification)
        return add(self, notification)

    def clearing(self: Notifications) -> Notifications:
        vars(self)["_kept"] = []
        return clear(self)

    monkeypatch.setattr(Notifications, "add", adding)
    monkeypatch.setattr(Notifications, "clear", clearing)


def notifications(app: App) -> list[Notification]:
    """What the app notified (``message``, ``severity``, ``title``), oldest first, since it
    started or since ``app.clear_notifications()``: those whose toast has timed out too."""
    return list(vars(app._notifications).get("_kept", []))


def notices(app: App) -> list[str]:
    """The messages of ``notifications(app)``."""
    return [str(n.message) for n in notifications(app)]


def was_notified(app: App, text: str) -> bool:
    """Whether the app notified a message containing ``text``."""
    return any(text in note for note in notices(app))


async def wait_for(
    pilot, condition: Callable[[], object], what: str = "the condition", bound: float = WAIT_S
) -> None:
    """Let the app run until ``condition()`` is true; fail after ``bound`` seconds, naming
    ``what`` was awaited. A wait on a condition, never a fixed sleep: as quick as the app on a
    fast CPU, and patient on a slow one."""
    deadline = time.monotonic() + bound
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {bound:g} s for {what}")
        await pilot.pause(0.01)


async def answer(pilot, key: str) -> None:
    """Answer the question on screen (``QuestionScreen``: tool approval, confirm) with ``key``,
    as a user does: once it is drawn and its settle time is over (a key pressed sooner is not
    taken as an answer)."""
    from vibechat.app.tui.screens.question import QuestionScreen

    screen = pilot.app.screen
    assert isinstance(screen, QuestionScreen), f"no question on screen ({type(screen).__name__})"
    await wait_for(pilot, lambda: screen.ready, "the question to take keys")
    await pilot.press(key)


def vibechat(
    *args: str, input: str | None = None, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    """The ``vibechat`` command with ``args``, as a script runs it: its output as text, stdin
    ``input`` (None: nothing to read, so a command that would wait on it does not), the
    environment with ``env`` on top (the test's user directories are in it already), killed
    after ``timeout`` seconds (far above a normal run: only a hang reaches it)."""
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=None if input is not None else subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
