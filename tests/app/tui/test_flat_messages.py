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
