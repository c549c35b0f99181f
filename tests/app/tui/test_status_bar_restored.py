"""The status bar after a reply that started from a restored KV snapshot (issue 27): it says
how much was restored and how long it took; a reply that restored nothing says nothing."""

from __future__ import annotations

import dataclasses

from textual.geometry import Region

from fakes import RecordingBackend, send, settle
from vibechat.app.report import format_stats, json_stats
from vibechat.app.tui import create_app
from vibechat.engine.turns.backend import GenerationDone, GenerationStats


class Restoring(RecordingBackend):
    """Its first reply restored 8,132 tokens in 0.11 s, its second nothing."""

    def __init__(self) -> None:
        super().__init__("a reply")
        self.replies = 0

    def stream_chat(self, messages, params):
        self.replies += 1
        for event in super().stream_chat(messages, params):
            if isinstance(event, GenerationDone) and self.replies == 1:
                event = dataclasses.replace(
                    event,
                    stats=dataclasses.replace(event.stats, restored_tokens=8132, restore_ms=110.0),
                )
            yield event


def bar_line(app) -> str:
    bar = app.status
    strips = bar.render_lines(Region(0, 0, bar.outer_size.width, 1))
    return "".join(piece.text for piece in strips[0])


async def test_the_bar_says_what_a_reply_restored():
    app = create_app(Restoring(), blink=False)
    async with app.run_test(size=(220, 24)) as pilot:
        await settle(pilot)
        await send(pilot, "Go on")
        assert "ttft 34 ms (restored 8,132 tokens in 0.11 s)" in bar_line(app)
        await send(pilot, "Again")
        assert "restored" not in bar_line(app)


def test_the_stats_line_and_json_carry_the_restore():
    stats = GenerationStats(
        prompt_tokens=8140, prompt_tokens_evaluated=8, restored_tokens=8132, restore_ms=110.4
    )
    assert "· restored 8132 tokens in 0.11 s" in format_stats(stats)
    data = json_stats(stats)
    assert data["restored_tokens"] == 8132 and data["restore_ms"] == 110.4
    assert "restored" not in format_stats(
        GenerationStats(prompt_tokens=5, prompt_tokens_evaluated=5)
    )
