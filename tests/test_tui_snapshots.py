"""Snapshot tests of the main screen, the parameter panel and the help screen.

Deterministic: a recording backend with fixed stats, fixed terminal size, no cursor
blink, no clock. Update after an intended change with `pytest --snapshot-update`."""

from __future__ import annotations

from fakes import RecordingBackend, settle
from vibechat.app.tui import create_app

SIZE = (100, 32)
REPLY = ("Sure! Here is a **tiny** example:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\n"
         "- it adds\n- it returns")


def make_app():
    return create_app(RecordingBackend(reply=REPLY), blink=False)


async def _chat(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    pilot.app.prompt_input.load_text("Write an add function")
    await pilot.press("enter")
    await settle(pilot)


def test_main_screen(snap_compare):
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=_chat)


def test_parameter_panel(snap_compare):
    async def run_before(pilot) -> None:
        await _chat(pilot)
        await pilot.press("f2", "right", "down")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_help_screen(snap_compare):
    async def run_before(pilot) -> None:
        await pilot.app.workers.wait_for_complete()
        await pilot.press("f1")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)
