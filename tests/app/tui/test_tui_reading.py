"""A long prompt's reading on screen (issue 46, point 5): while the engine reads the prompt
(``PromptProgress``), the reply block and the status bar say how far it came, each as one
line repainted in place, until the reply's first words; Esc meanwhile stops the reading.
Pilot tests on the real app with a scripted backend (the engine's own events are tested on
the real model in tests/engine/llama/test_prompt_progress.py)."""

from __future__ import annotations

import threading

from textual.geometry import Region

from fakes import RecordingBackend, settle
from helpers import wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.assistant_message import AssistantMessage
from vibechat.app.tui.conversation.messages import ChatMessageWidget
from vibechat.engine.turns.backend import GenerationDone, GenerationStats, PromptProgress

TOTAL = 2700
WAIT_S = 60  # every wait of the scripted backend is bounded by this


class ReadsAtLength(RecordingBackend):
    """Reads its prompt before it replies: a ``PromptProgress`` for each of ``reads`` (of
    ``TOTAL``), each released by the test (``step``), then (a step more) the scripted reply. With
    ``until_cancelled``, after its progress it reads on until cancelled, and ends the reply
    cancelled with no text, as the engine does when Esc stops the reading."""

    def __init__(self, reads: tuple[int, ...], until_cancelled: bool = False) -> None:
        super().__init__("The answer is here.")
        self.reads = reads
        self.until_cancelled = until_cancelled
        self.step = threading.Semaphore(0)
        self.cancelled_while_reading = threading.Event()

    def cancel(self) -> None:
        super().cancel()
        self.step.release()  # a reading that waits for its next step stops at once

    def stream_chat(self, messages, params, tools=(), tool_choice="auto"):
        self._cancel.clear()
        for read in self.reads:
            self.step.acquire(timeout=WAIT_S)
            yield PromptProgress(read, TOTAL)
        if self.until_cancelled:
            if self._cancel.wait(WAIT_S):
                self.cancelled_while_reading.set()
            yield GenerationDone(
                "",
                GenerationStats(prompt_tokens=TOTAL, finish_reason="cancelled", seed=7),
                params=params.with_seed(),
            )
            return
        self.step.acquire(timeout=WAIT_S)  # the reading is over: the reply's words come
        yield from super().stream_chat(messages, params)


def reply_status(app) -> str:
    return app.chat.query(AssistantMessage).last().status_shown.plain.strip()


def bar_line(app) -> str:
    bar = app.status
    return "".join(
        piece.text for piece in bar.render_lines(Region(0, 0, bar.outer_size.width, 1))[0]
    )


def status_updates(monkeypatch) -> list[tuple[str, bool]]:
    """Each change of a message's lines (its label or its status line, which it draws itself):
    (its status line's text then, whether it asked for a layout)."""
    seen: list[tuple[str, bool]] = []
    changed = ChatMessageWidget._changed

    def recording(self, *regions, layout=False):
        seen.append((self.status_shown.plain, layout))
        changed(self, *regions, layout=layout)

    monkeypatch.setattr(ChatMessageWidget, "_changed", recording)
    return seen


async def test_the_reading_shows_in_the_reply_and_the_status_bar_until_the_first_words(monkeypatch):
    backend = ReadsAtLength((1200, 2000, TOTAL))
    updates = status_updates(monkeypatch)
    app = create_app(backend, blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("Sum up this long report.")
        await pilot.press("enter")
        backend.step.release()
        await wait_for(pilot, lambda: "1,200" in reply_status(app), "the first reading progress")
        assert reply_status(app) == "reading the prompt · 1,200 / 2,700 tokens"
        await wait_for(
            pilot, lambda: "reading the prompt · 1,200 / 2,700 tokens" in bar_line(app), "the bar's"
        )
        assert app.generating and len(bar_line(app)) == 80
        for read in ("2,000", "2,700"):
            backend.step.release()
            line = f"reading the prompt · {read} / 2,700 tokens"
            await wait_for(
                pilot,
                lambda line=line: reply_status(app) == line and line in bar_line(app),
                f"the reading at {read}",
            )
        # Each figure is only repainted, in place: the reply's status line stayed one line
        # (it is the reply's own line: nothing is laid out again).
        reading = [layout for text, layout in updates if text.startswith("reading the prompt")]
        assert reading == [False, False, False]
        backend.step.release()
        await settle(pilot)  # the reply's words came: the reading's lines are gone
        reply = app.chat.query(AssistantMessage).last()
        assert reply.text == "The answer is here."
        assert reply_status(app) == "" and "reading" not in bar_line(app)
        assert bar_line(app).rstrip().endswith("ready")


async def test_esc_while_the_prompt_is_read_stops_the_reading(monkeypatch):
    backend = ReadsAtLength((500,), until_cancelled=True)
    app = create_app(backend, blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        app.prompt_input.load_text("Sum up this long report.")
        await pilot.press("enter")
        backend.step.release()
        await wait_for(
            pilot, lambda: "reading the prompt · 500 / 2,700 tokens" in bar_line(app), "the reading"
        )
        await pilot.press("escape")
        await settle(pilot)
        assert backend.cancelled_while_reading.is_set()  # the engine was told to stop reading
        assert not app.generating
        assert "stopped" in reply_status(app) and "reading" not in reply_status(app)
        assert "reading" not in bar_line(app) and bar_line(app).rstrip().endswith("ready")
