"""tests/helpers.py itself: what a Pilot test reads of the app's notifications, and its wait."""

from __future__ import annotations

import pytest
from textual.app import App

from helpers import notices, notifications, wait_for, was_notified


async def test_a_notice_whose_toast_timed_out_is_still_read_until_cleared():
    """Textual drops a toast after its timeout; on a slow CPU that can come before the test reads
    it. The helpers read every notice the app gave since it started or was cleared."""
    app = App()
    async with app.run_test(notifications=True) as pilot:
        app.notify("Saved [b]it[/b]", timeout=0.3, markup=False)
        app.notify("Second", severity="warning", title="Disk", timeout=60)
        # The app takes them in order (the second stays 60 s), then drops the first at its timeout.
        await wait_for(
            pilot, lambda: "Second" in [n.message for n in app._notifications], "the notices"
        )
        await wait_for(
            pilot,
            lambda: "Saved [b]it[/b]" not in [n.message for n in app._notifications],
            "Textual to drop the timed-out toast",
        )
        assert notices(app) == ["Saved [b]it[/b]", "Second"]
        assert was_notified(app, "[b]it") and not was_notified(app, "Third")
        assert [(n.severity, n.title) for n in notifications(app)][-1] == ("warning", "Disk")
        app.clear_notifications()
        assert notices(app) == [] and not notifications(app)
        app.notify("After", timeout=60)
        await wait_for(pilot, lambda: notices(app), "the next notice")
        assert notices(app) == ["After"]


async def test_wait_for_returns_once_the_condition_holds_and_names_what_never_came():
    app = App()
    async with app.run_test() as pilot:
        app.set_timer(0.05, lambda: setattr(app, "flag", True))
        await wait_for(pilot, lambda: getattr(app, "flag", False), "the timer")
        assert getattr(app, "flag", False)
        with pytest.raises(AssertionError, match="waited 0.1 s for the never"):
            await wait_for(pilot, lambda: False, "the never", bound=0.1)
