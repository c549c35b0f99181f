"""Snapshots of the chat's /compare (issue 44): two columns side by side at 120×30, one column at
a time at 80×24 (its header ``A (1/2)``). Deterministic: a recording double that answers two at
once with fixed stats, fixed terminal sizes, no cursor blink; the notices are cleared first.
Update after an intended change with `pytest --snapshot-update`."""

from __future__ import annotations

from fakes import PairedFake, settle
from vibechat.app.tui import create_app

A = "Paris is the **capital** of France.\n\n- a city\n- on the Seine"
B = "It is Paris, of course: a city of *light*, museums and cafés."


async def _compare(pilot) -> None:
    app = pilot.app
    await app.workers.wait_for_complete()
    for text in ("/compare temperature=1.2", "What is the capital of France?"):
        app.prompt_input.load_text(text)
        await pilot.press("enter")
        await settle(pilot)
    app.clear_notifications()
    await pilot.pause()


def make_app():
    return create_app(PairedFake(A, B), blink=False)


def test_compare_side_by_side_120x30(snap_compare):
    assert snap_compare(make_app(), terminal_size=(120, 30), run_before=_compare)


def test_compare_one_column_at_a_time_80x24(snap_compare):
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=_compare)
