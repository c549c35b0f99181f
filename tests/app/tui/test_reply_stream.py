"""ReplyStream's slices: a burst is drawn in slices sized by what rendering costs."""

from __future__ import annotations

from contextlib import contextmanager

from vibechat.app.tui.conversation import reply_stream
from vibechat.app.tui.conversation.reply_stream import (
    APPEND_LIMIT,
    APPEND_MAX,
    FIRST_LIMIT,
    ReplyStream,
)


def stream() -> ReplyStream:
    # limit() does not touch the widget
    return ReplyStream(widget=None, generation=1)  # type: ignore[arg-type]


def _chat_view_app():
    """A chat view alone in an app."""
    from textual.app import App, ComposeResult

    from vibechat.app.tui.conversation.chat_view import ChatView

    class OneView(App):
        def compose(self) -> ComposeResult:
            yield ChatView()

    return OneView()


@contextmanager
def _counting_layouts():
    """The screen's layouts while in the block, one entry each."""
    from textual.screen import Screen

    layouts: list[int] = []
    original = Screen._refresh_layout

    def counting(self, size=None, scroll=False):
        layouts.append(1)
        return original(self, size, scroll)

    Screen._refresh_layout = counting  # type: ignore[method-assign]
    try:
        yield layouts
    finally:
        Screen._refresh_layout = original  # type: ignore[method-assign]


def test_first_render_is_small_then_slices_follow_the_measured_cost():
    s = stream()
    assert s.limit() == FIRST_LIMIT
    s.started = True
    assert s.limit() == APPEND_LIMIT  # nothing measured yet
    s.s_per_char = reply_stream.SLICE_BUDGET_S / 3000
    assert s.limit() == 3000
    s.s_per_char = 1.0  # a very slow render (a busy machine): never below the floor
    assert s.limit() == APPEND_LIMIT
    s.s_per_char = 1e-9  # a very fast one: never above the cap
    assert s.limit() == APPEND_MAX


async def test_a_growing_reply_costs_one_layout_per_render_and_shows_every_line():
    """The live tail growing by a line asks for one layout of the screen, not two (Textual's
    virtual_size reactive asks again for each widget that grew: app/tui/one_layout.py), and
    that one layout still gives the reply the height of its text."""
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView

    app = _chat_view_app()
    async with app.run_test(size=(60, 30)) as pilot:
        reply = await app.query_one(ChatView).add(AssistantMessage())
        await pilot.pause()
        with _counting_layouts() as layouts:
            for line in range(1, 6):
                layouts.clear()
                await reply.append(f"line {line}\n\n")
                await pilot.pause()
                await pilot.pause()
                assert len(layouts) == 1, f"render {line}: {len(layouts)} layouts"
                body = reply.body
                assert body.size.height == line * 2 - 1  # each paragraph and the blank line between


def _segment_strips(segment) -> list[tuple]:
    """What the segment paints, line by line: each line's segments (text and style)."""
    from textual.geometry import Region

    return [
        tuple(strip)
        for strip in segment.render_lines(Region(0, 0, segment.size.width, segment.size.height))
    ]


def _segment_text(segment) -> list[str]:
    """What the segment shows, line by line."""
    return ["".join(piece.text for piece in line).rstrip() for line in _segment_strips(segment)]


async def test_a_streaming_reply_keeps_room_below_its_text_and_scrolls_once_every_few_lines():
    """While a reply streams in a full, anchored view, its tail keeps up to ROOM blank lines
    below the text: the view scrolls (a full layout) once every ROOM + 1 lines, not with
    every line, the newest line is always in view, and the room goes when the reply ends."""
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView
    from vibechat.app.tui.conversation.markdown_segment import MarkdownSegment

    app = _chat_view_app()
    async with app.run_test(size=(60, 20)) as pilot:
        view = app.query_one(ChatView)
        reply = await view.add(AssistantMessage(live=True))
        await pilot.pause()
        room = AssistantMessage.ROOM
        with _counting_layouts() as layouts:
            lines = 40  # one line of text per render, twice the view's height
            for n in range(1, lines + 1):  # hard line breaks: one line each
                await reply.append(f"line {n}  \n")
                await pilot.pause()
                await pilot.pause()
                tail = reply.body
                assert isinstance(tail, MarkdownSegment)
                shown = _segment_text(tail)
                written = [line for line in shown if line.strip()]
                assert len(written) == n, f"render {n}"
                assert written[-1].endswith(f"line {n}")
                assert n <= tail.size.height <= n + room  # the room below the text
                # the newest line is on screen: the view follows the reply (the view is
                # anchored: before it overflows, the conversation sits at its bottom)
                assert view.scroll_y == view.max_scroll_y or view.max_scroll_y == 0
                newest = tail.region.y + n - 1
                assert view.region.y <= newest < view.region.bottom
            assert len(layouts) <= lines // (room + 1) + 2, (
                f"{len(layouts)} layouts for {lines} lines"
            )
            await reply.finish()
            await pilot.pause()
            await pilot.pause()
            assert tail.size.height == lines  # settled: no room left
            assert view.scroll_y == view.max_scroll_y


async def test_a_render_repaints_only_the_lines_that_changed_and_shows_what_a_fresh_render_would():
    """A render of the same height re-renders only the lines from the first one that differs;
    the lines kept from before and the new ones are together exactly what a fresh segment
    with the whole text shows, also when the new text rewraps or restyles earlier lines."""
    from vibechat.app.tui.conversation.chat_view import ChatView
    from vibechat.app.tui.conversation.markdown_segment import MarkdownSegment

    app = _chat_view_app()
    pieces = [
        "The keeper ",
        "climbed the ",
        "stairs **every ",
        "night** and ",
        "lit the lamp; ",
        "the sea ",
        "was `calm` ",
        "and grey, ",
        "and the ships ",
        "passed far ",
        "away.\n\n",
        "- one ",
        "item\n",
        "- two ",
        "items\n\n",
        "# A ",
        "heading\n\n",
        "Last ",
        "words.",
    ]
    async with app.run_test(size=(40, 40)) as pilot:
        view = app.query_one(ChatView)
        live = MarkdownSegment("", room=3)
        await view.mount(live)
        await pilot.pause()
        rendered: list[int] = []
        original = MarkdownSegment._strips

        def counting(self, start, end):
            if self is live:
                rendered.extend(range(start, end))
            return original(self, start, end)

        MarkdownSegment._strips = counting  # type: ignore[method-assign]
        try:
            text = ""
            for piece in pieces:
                text += piece
                before = _segment_strips(live)
                rendered.clear()
                live.set_text(text)
                await pilot.pause()
                await pilot.pause()
                fresh = MarkdownSegment(text)
                await view.mount(fresh)
                await pilot.pause()
                expected = _segment_text(fresh)
                await fresh.remove()
                shown = _segment_text(live)
                assert shown[: len(expected)] == expected, piece
                assert not any(line.strip() for line in shown[len(expected) :])  # the room: blank
                if live.size.height == len(before) and rendered:  # no layout: only changed lines
                    after = _segment_strips(live)
                    first = next(
                        y for y, (a, b) in enumerate(zip(before, after, strict=False)) if a != b
                    )
                    assert min(rendered) >= first, (
                        f"{piece!r}: re-rendered line {min(rendered)}, first change {first}"
                    )
        finally:
            MarkdownSegment._strips = original  # type: ignore[method-assign]


async def test_a_failed_or_abandoned_reply_gives_back_its_room():
    """A reply that fails or is left (a new chat, another model) keeps its text and loses the
    blank room of a streaming reply."""
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView

    app = _chat_view_app()
    async with app.run_test(size=(60, 20)) as pilot:
        view = app.query_one(ChatView)
        failed = await view.add(AssistantMessage(live=True))
        stream = ReplyStream(failed, generation=1)
        stream.put("Half a rep")
        await stream.render()
        await pilot.pause()
        assert failed.body.size.height == 1 + AssistantMessage.ROOM
        await stream.fail("the engine stopped")
        await pilot.pause()
        await pilot.pause()
        assert failed.body.size.height == 1
        assert "Half a rep" in failed.text

        left = await view.add(AssistantMessage(live=True))
        await left.append("Left half")
        await pilot.pause()
        assert left.body.size.height == 1 + AssistantMessage.ROOM
        left.end_live()
        await pilot.pause()
        await pilot.pause()
        assert left.body.size.height == 1


async def test_a_layout_that_places_a_new_message_or_status_line_asks_for_no_other():
    """A message appearing, or its status line changing, is laid out once: no widget the
    layout sized (the message, its label, text and status lines, the chat view) asks for a
    second layout from within it (one_layout.py). In the chat the layout for a sent message
    runs while the model reads the prompt, so a second one would delay the first token."""
    from textual.geometry import Region
    from textual.screen import Screen
    from textual.widget import Widget

    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView
    from vibechat.app.tui.conversation.messages import ChatMessageWidget

    app = _chat_view_app()
    asked: list[str] = []  # widgets asking for a layout during a layout
    in_layout: list[bool] = [False]
    original_layout, original_refresh = Screen._refresh_layout, Widget.refresh

    def layout(self, size=None, scroll=False):
        in_layout[0] = True
        try:
            return original_layout(self, size, scroll)
        finally:
            in_layout[0] = False

    def refresh(self, *regions, repaint=True, layout=False, recompose=False):
        if layout and in_layout[0]:
            asked.append(type(self).__name__)
        return original_refresh(self, *regions, repaint=repaint, layout=layout, recompose=recompose)

    async with app.run_test(size=(60, 20)) as pilot:
        view = app.query_one(ChatView)
        await pilot.pause()
        Screen._refresh_layout = layout  # type: ignore[method-assign]
        Widget.refresh = refresh  # type: ignore[method-assign]
        try:
            await view.add(ChatMessageWidget("user", "What does a lighthouse keeper do?"))
            await pilot.pause()
            await pilot.pause()
            reply = await view.add(AssistantMessage(live=True))
            reply.set_status("waiting for the model to load…")
            await pilot.pause()
            await pilot.pause()
            reply.set_status("⚠ the engine stopped\nwhile reading the prompt", "error")
            await pilot.pause()
            await pilot.pause()
            # Its status line's two lines are its last two (drawn by the message itself).
            width, height = reply.outer_size
            lines = [strip.text for strip in reply.render_lines(Region(0, 0, width, height))]
            assert "the engine stopped" in lines[-2] and "while reading the prompt" in lines[-1]
            assert asked == []
        finally:
            Screen._refresh_layout = original_layout  # type: ignore[method-assign]
            Widget.refresh = original_refresh  # type: ignore[method-assign]


LONG_BLOCKS = [
    "Paragraph {i} " + "word " * 12,
    "line one\nline two\nline three",
    "# Heading {i}",
    "- a\n- b\n- c",
    "1. one\n2. two",
    "> quoted {i}\n> more",
    "| a | b |\n|---|---|\n| {i} | 2 |",
    "```python\nx = {i}\n" + "y = x + 1  # a long line of code\n" * 6 + "```",
    "---",
    "    indented code {i}",
    "- loose {i}\n\n- loose b\n\n  its second paragraph",
    "A paragraph {i} with no blank line for a while\n" * 5,
]


def _long_reply(blocks: int) -> str:
    import random

    rng = random.Random(26)
    return "\n\n".join(rng.choice(LONG_BLOCKS).format(i=i) for i in range(blocks))


async def test_a_long_streaming_reply_mounts_nothing_and_shows_what_the_whole_reply_shows(
    monkeypatch,
):
    """A reply of over 100 segments, streamed in pieces (some large enough to render in a worker
    thread), keeps the same widgets at every step, however long it gets: its text is one
    widget, the settled segments and the tail drawn by it. Finished (forced cuts merged), it
    shows line for line what the reply rendered whole shows, at two widths; so does the reply
    opened (from the history)."""
    import random

    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView

    monkeypatch.setattr(AssistantMessage, "SEAL_AT", 60)
    monkeypatch.setattr(AssistantMessage, "FORCE_AT", 150)
    text = _long_reply(300)
    app = _chat_view_app()
    async with app.run_test(size=(80, 16)) as pilot:
        view = app.query_one(ChatView)
        streamed = await view.add(AssistantMessage(live=True))
        widgets = list(streamed.query("*"))
        rng = random.Random(6)
        pos = 0
        while pos < len(text):
            step = 1500 if rng.random() < 0.1 else rng.randint(40, 600)
            await streamed.append(text[pos : pos + step])
            pos += step
            await pilot.pause()
            assert list(streamed.query("*")) == widgets
        assert len(streamed._segmenter.segments) >= 100  # streamed
        assert len(streamed.body.markdowns) == len(streamed._segmenter.segments)
        assert streamed.offloop_cpu > 0  # some pieces rendered in a worker
        await streamed.finish()
        assert len(streamed._segmenter.segments) == len(streamed.body.markdowns)  # merged

        class Uncut(AssistantMessage):  # the reference: the whole reply in one segment
            SEAL_AT = FORCE_AT = 1 << 30

        whole = await view.add(Uncut(text))
        opened = await view.add(AssistantMessage(text))  # from the history
        assert len(opened.body.markdowns) > 1
        for width in (80, 57):
            await pilot.resize_terminal(width, 16)
            await pilot.pause()
            await pilot.pause()
            expected = _shown_lines(whole)
            assert len(expected) > 400
            assert _shown_lines(streamed) == expected, f"at {width} columns"
            assert _shown_lines(opened) == expected, f"at {width} columns"


def _shown_lines(reply) -> list[str]:
    """What the reply's body shows, top to bottom (its segments)."""
    return _segment_text(reply.body)


async def test_a_growing_reply_never_renders_its_containers_whole_height(monkeypatch):
    """A streaming reply's message and body change size with every render; their own lines
    (never seen: their children cover them) are not rendered for their whole height each
    time, only a line (the message's background) or none (the body): the cost of a render
    stays that of the screen, not of the reply's length."""
    from textual.visual import Visual

    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView

    heights: list[tuple[object, int]] = []
    original = Visual.to_strips.__func__  # type: ignore[attr-defined]

    def recording(cls, widget, visual, width, height, *args, **kwargs):
        heights.append((widget, height or 0))
        return original(cls, widget, visual, width, height, *args, **kwargs)

    monkeypatch.setattr(Visual, "to_strips", classmethod(recording))
    app = _chat_view_app()
    async with app.run_test(size=(60, 20)) as pilot:
        reply = await app.query_one(ChatView).add(AssistantMessage(live=True))
        for n in range(40):
            await reply.append(f"Paragraph {n}, long enough to wrap " + "word " * 12 + "\n\n")
            await pilot.pause()
        assert reply.size.height > 100
        containers = [height for widget, height in heights if widget in (reply, reply.body)]
        assert containers and max(containers) <= 1
