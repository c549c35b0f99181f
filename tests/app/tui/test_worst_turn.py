"""The worst turn of the event loop while a reply grows (issue 42, round four;
bench/bench_worst_turn.py): the frame that lays the view out and paints it after a render.

- A reply that grows repaints only its lines from its old bottom down (and its text from the
  first line that changed): Textual repaints a resized widget whole, every line of the reply
  on screen, twice (the message's own lines and its text's), whenever it grew by a line.
- A burst's next slice begins only after the screen showed the last one: its Markdown renders
  in a worker thread, which shared the interpreter with that frame's layout and paint."""

from __future__ import annotations

from collections import Counter

from vibechat.app.tui.conversation.markdown_segment import MarkdownSegment
from vibechat.app.tui.conversation.messages import ChatMessageWidget

PARAGRAPH = "A paragraph of words that goes on for a while so that it wraps. " * 3


def _chat_view_app():
    """A chat view alone in an app."""
    from textual.app import App, ComposeResult

    from vibechat.app.tui.conversation.chat_view import ChatView

    class OneView(App):
        def compose(self) -> ComposeResult:
            yield ChatView()

    return OneView()


def _screen_text(app) -> list[str]:
    """What the screen shows now, line by line (the widgets' painted lines, as Textual keeps
    them)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def _repainted_whole(app) -> list[str]:
    """What the screen shows when every widget is painted again from scratch."""
    for widget in app.screen.walk_children(with_self=True):
        widget._set_dirty()
    return _screen_text(app)


async def test_a_growing_reply_repaints_only_its_new_lines(monkeypatch):
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView

    painted: Counter[str] = Counter()
    for cls in (ChatMessageWidget, MarkdownSegment):
        original = cls.render_line

        def counting(self, y, original=original):
            painted[type(self).__name__] += 1
            return original(self, y)

        monkeypatch.setattr(cls, "render_line", counting)
    app = _chat_view_app()
    async with app.run_test(size=(80, 30)) as pilot:
        view = app.query_one(ChatView)
        reply = await view.add(AssistantMessage(live=True))
        await reply.append("\n\n".join([PARAGRAPH] * 6) + "\n\n")
        await pilot.pause()
        await pilot.pause()
        shown_height = reply.size.height
        assert shown_height > 20  # the reply fills the view
        for n in range(3):
            painted.clear()
            heights = reply.size.height, reply.body.size.height
            await reply.append(f"{n} {PARAGRAPH}\n\n")
            await pilot.pause()
            await pilot.pause()
            # It grew: laid out again, and the view scrolled to its new end.
            assert (reply.size.height, reply.body.size.height) != heights
            # Its new paragraph (a few lines and the room below it), not the reply's
            # lines on screen (~28 each): the lines above were painted already.
            assert painted["AssistantMessage"] <= 8, painted
            assert painted["MarkdownSegment"] <= 10, painted
            # What it shows is what a paint from scratch shows.
            assert _screen_text(app) == _repainted_whole(app)


async def test_a_burst_shows_a_slice_before_its_next_slice_begins():
    """The slice that just rendered (in a worker thread) is shown first: the render that
    settles it starts no other, and says to come back after the screen's refresh."""
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView
    from vibechat.app.tui.conversation.reply_stream import ReplyStream

    app = _chat_view_app()
    async with app.run_test(size=(80, 30)) as pilot:
        reply = await app.query_one(ChatView).add(AssistantMessage(live=True))
        stream = ReplyStream(reply, generation=1)
        stream.put("The first words.\n\n")
        assert await stream.render() is False
        await pilot.pause()
        stream.put("\n\n".join([PARAGRAPH] * 60))  # a burst: several slices
        assert await stream.render() is True
        first = stream.pending
        assert first is not None  # its Markdown renders in a worker thread
        assert await stream.render() is True
        # The slice was settled and no other began: the screen shows it first.
        assert first.done() and stream.pending is None
        assert stream.deltas.pending
        shown = len(reply.text)
        await pilot.pause()
        assert await stream.render() is True  # after the refresh: the next slice
        assert stream.pending is not None
        await stream.pending
        assert len(reply.text) > shown
        for _ in range(100):  # the rest (bounded: no hang)
            if not await stream.render() and stream.pending is None:
                break
            await pilot.pause()
        await stream.finish(reply.text)
        assert reply.text.count("A paragraph") == 60 * 3
        assert _screen_text(app) == _repainted_whole(app)


async def test_lines_scrolled_out_of_view_are_forgotten_and_those_in_view_stay_painted(
    monkeypatch,
):
    """A long streaming reply drops the strips of its lines that scrolled above the view
    (memory stays bounded), and keeps those in view: no frame repaints the reply's lines on
    screen again once a view's height has scrolled by."""
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView

    painted: list[int] = []
    original = MarkdownSegment.render_line

    def counting(self, y):
        painted.append(y)
        return original(self, y)

    monkeypatch.setattr(MarkdownSegment, "render_line", counting)
    app = _chat_view_app()
    async with app.run_test(size=(80, 30)) as pilot:
        view = app.query_one(ChatView)
        reply = await view.add(AssistantMessage(live=True))
        most = 0
        for n in range(40):  # ~6 views' height of text, a paragraph per render
            painted.clear()
            await reply.append(f"{n} {PARAGRAPH}\n\n")
            await pilot.pause()
            await pilot.pause()
            if n >= 10:  # the reply fills the view
                most = max(most, len(painted))
        body = reply.body
        assert body.size.height > 5 * view.size.height
        assert most <= 12, most  # its new paragraph and the room below it, never the view's
        # What Textual keeps for it: the lines in view and those painted since the last drop.
        assert len(body._styles_cache._cache) <= 3 * view.size.height
        assert _screen_text(app) == _repainted_whole(app)
