"""A message is one widget (issue 42, point 1): a prompt draws its label, its text and its
status line itself and mounts no child widget, so the frame that shows it lays out and paints
one widget, not four."""

from __future__ import annotations

from textual.geometry import Offset, Region
from textual.selection import Selection

from fakes import RecordingBackend, send, settle
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.messages import MessageText


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


def _in_messages(app, widget) -> bool:
    """``widget`` is a message of the conversation or in one."""
    return any(node in app.chat.messages() for node in [widget, *widget.ancestors])


def repainted_whole(app) -> str:
    """What the screen shows when every widget is painted again from scratch."""
    for widget in app.screen.walk_children(with_self=True):
        widget._set_dirty()
    return screen_text(app)


def screen_text(app) -> str:
    """What the screen shows now (the widgets' painted lines, as Textual keeps them)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def test_a_reply_draws_its_label_and_status_line_itself(monkeypatch):
    """A reply mounts only its text widget (and its thinking block when it has one): its label
    and status line are its own lines, drawn around them, so the frame that shows a sent prompt
    and the reply's first words sizes and repaints three widgets of the conversation, not five
    (the prompt, the reply, its text; no label and status line widgets)."""
    from textual.widget import Widget

    from fakes import OnePieceAtATime
    from helpers import wait_for
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage

    sized: list[Widget] = []  # widgets of the conversation given their first size
    whole: list[Widget] = []  # ... marked to repaint whole
    size_updated, set_dirty = Widget._size_updated, Widget._set_dirty

    def sizing(self, size, virtual_size, container_size, layout=True):
        if not self._size and size:
            sized.append(self)
        return size_updated(self, size, virtual_size, container_size, layout)

    def dirtying(self, *regions):
        if not regions:
            whole.append(self)
        return set_dirty(self, *regions)

    monkeypatch.setattr(Widget, "_size_updated", sizing)
    monkeypatch.setattr(Widget, "_set_dirty", dirtying)
    backend = OnePieceAtATime("The first words. And the rest of them.")
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=(100, 30)) as pilot:
        try:
            await settle(pilot)
            sized.clear()
            whole.clear()
            await send(pilot, "a question", wait=False)
            await wait_for(pilot, lambda: len(app.chat.messages()) == 2, "the reply")
            prompt, reply = app.chat.messages()
            assert isinstance(reply, AssistantMessage)
            backend.step.release(3)
            await wait_for(pilot, lambda: "words." in reply.text, "the first words")
            await pilot.pause()
            await pilot.pause()
            assert "The first words." in screen_text(app)
            # The widgets of the two messages sized, and repainted whole, meanwhile: the
            # prompt, the reply and its text (before: also the reply's label and status line).
            shown = {id(prompt), id(reply), id(reply.body)}
            assert sorted(id(w) for w in sized if _in_messages(app, w)) == sorted(shown)
            assert {id(w) for w in whole if _in_messages(app, w)} == shown
            assert list(reply.children) == [reply.body]
            await pilot.press("escape")  # stopped: its status line says so, on its last line
            backend.step.release(1000)
            await settle(pilot)
            assert "stopped" in reply.status_shown.plain
            lines = [line.strip("█▌ ") for line in drawn(reply)]
            assert lines[0] == "Assistant" == reply.label_shown.plain
            assert lines[-1] == reply.status_shown.plain.strip()
            assert "stopped" in screen_text(app).splitlines()[reply.region.bottom - 1]
            assert list(reply.children) == [reply.body]
            assert not reply.query(MessageText)
            reply.focus()  # its keys beside its label, on its first line
            await pilot.pause()
            await pilot.pause()
            assert "copy message" in screen_text(app).splitlines()[reply.region.y]
            assert screen_text(app) == repainted_whole(app)
        finally:
            backend.step.release(1000)


async def test_a_reply_with_thinking_mounts_only_its_thinking_block_and_text():
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage

    backend = RecordingBackend(reply="The answer.")
    backend.thinking = "Let me think about it."
    app = create_app(backend, blink=False, save=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await send(pilot, "a question")
        reply = app.chat.messages()[-1]
        assert isinstance(reply, AssistantMessage) and reply.thinking is not None
        assert list(reply.children) == [reply.thinking, reply.body]
        assert not reply.query(MessageText)
        screen = screen_text(app).splitlines()
        top = reply.region.y
        assert screen[top].strip("█▌ ") == "Assistant"
        assert "Thought for" in screen[top + 1] and "The answer." in screen[top + 2]
        reply.set_status("⚠ the server said no\nand why", "error")  # two lines, at its end
        await pilot.pause()
        await pilot.pause()
        screen = screen_text(app).splitlines()
        bottom = reply.region.bottom
        assert "the server said no" in screen[bottom - 2] and "and why" in screen[bottom - 1]
        assert "The answer." in screen[bottom - 3]
        height = reply.size.height
        await pilot.click(reply.thinking)  # opened: the reply grows, its status line moves down
        await pilot.pause()
        await pilot.pause()
        assert reply.thinking.expanded and reply.size.height > height
        screen = screen_text(app)
        assert "Let me think about it." in screen
        assert screen == repainted_whole(app)  # nothing left of the lines where it was
