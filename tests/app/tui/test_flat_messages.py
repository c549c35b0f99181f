"""A message is one widget (issue 42, point 1): a prompt draws its label, its text and its
status line itself and mounts no child widget, so the frame that shows it lays out and paints
one widget, not four."""

from __future__ import annotations

from textual.geometry import Offset, Region
from textual.selection import Selection

from fakes import RecordingBackend, send, settle
from vibechat.app.tui import create_app


def drawn(widget) -> list[str]:
    """The lines the widget paints (border and padding included), as text."""
    width, height = widget.outer_size
    return [strip.text.rstrip() for strip in widget.render_lines(Region(0, 0, width, height))]


async def test_a_prompt_is_one_widget_that_draws_its_label_text_and_status():
    app = create_app(RecordingBackend(reply="ok"), blink=False, save=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await send(pilot, "a question\nover two lines")
        prompt = app.chat.messages()[0]
        assert prompt.role == "user"
        assert list(prompt.query("*")) == []  # no child widget
        lines = drawn(prompt)
        assert [line.strip("█▌ ") for line in lines] == [
            "You",
            "a question",
            "over two lines",
            "",  # the status line, empty
        ]
        # Its text is selectable with the mouse, as the text widget's was.
        text, _end = prompt.get_selection(Selection(Offset(0, 1), Offset(5, 2)))
        assert text == "a question\nover "

        prompt.focus()  # its keys show beside its label, on its one line
        await pilot.pause()
        assert "copy message" in str(prompt.label_shown)
        assert len(drawn(prompt)) == 4
        assert "You" in drawn(prompt)[0] and "copy" in drawn(prompt)[0]


PARAGRAPH = " ".join(["A paragraph of words that goes on for a while so that it wraps."] * 12)
LONG_REPLY = "\n\n".join(["Here is the start."] + [PARAGRAPH] * 4 + ["And a last line."])


async def test_a_reply_whose_segments_seal_mounts_nothing(monkeypatch):
    """While a reply streams and its segments seal, nothing is mounted in it: its text is
    one widget, which draws its settled segments and its growing tail."""
    from textual.widget import Widget

    from fakes import OnePieceAtATime
    from helpers import wait_for
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage

    mounted: list[Widget] = []  # widgets mounted in a reply (composed or not)
    original = Widget.mount

    def counting(self, *widgets, **kwargs):
        if any(isinstance(node, AssistantMessage) for node in [self, *self.ancestors]):
            mounted.extend(widgets)
        return original(self, *widgets, **kwargs)

    monkeypatch.setattr(Widget, "mount", counting)
    backend = OnePieceAtATime(LONG_REPLY)
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=(100, 40)) as pilot:
        try:
            await settle(pilot)
            await send(pilot, "a long answer, please", wait=False)
            await wait_for(pilot, lambda: len(app.chat.messages()) == 2, "the reply")
            prompt, reply = app.chat.messages()
            assert isinstance(reply, AssistantMessage)
            assert list(prompt.query("*")) == []
            backend.step.release(3)
            await wait_for(pilot, lambda: "Here is" in reply.text, "the first words")
            widgets = list(reply.query("*"))
            sealed = len(reply._segmenter.segments)
            mounted.clear()  # from here on
            words = LONG_REPLY.split(" ")
            for _ in range(len(words) // 20):
                backend.step.release(20)
                await pilot.pause(0.02)
                assert list(reply.query("*")) == widgets
            backend.step.release(len(words))
            await settle(pilot)
            assert reply.text == LONG_REPLY
            assert len(reply._segmenter.segments) >= sealed + 3  # segments sealed meanwhile
            assert list(reply.query("*")) == widgets
            assert mounted == []
        finally:
            backend.step.release(1000)
