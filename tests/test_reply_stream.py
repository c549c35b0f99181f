"""ReplyStream's slices: a burst is drawn in slices sized by what rendering costs."""

from __future__ import annotations

from vibechat.app.tui import reply_stream
from vibechat.app.tui.reply_stream import APPEND_LIMIT, APPEND_MAX, FIRST_LIMIT, ReplyStream


def stream() -> ReplyStream:
    return ReplyStream(widget=None, generation=1)  # type: ignore[arg-type]  # limit() does not touch it


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
    from textual.app import App, ComposeResult
    from textual.screen import Screen

    from vibechat.app.tui.chat_view import AssistantMessage, ChatView

    class OneReply(App):
        def compose(self) -> ComposeResult:
            yield ChatView()

    layouts: list[int] = []
    original = Screen._refresh_layout

    def counting(self, size=None, scroll=False):
        layouts.append(1)
        return original(self, size, scroll)

    app = OneReply()
    async with app.run_test(size=(60, 30)) as pilot:
        reply = await app.query_one(ChatView).add(AssistantMessage())
        await pilot.pause()
        Screen._refresh_layout = counting  # type: ignore[method-assign]
        try:
            for line in range(1, 6):
                layouts.clear()
                await reply.append(f"line {line}\n\n")
                await pilot.pause()
                await pilot.pause()
                assert len(layouts) == 1, f"render {line}: {len(layouts)} layouts"
                body = reply.body
                assert body.size.height == line * 2 - 1  # each paragraph and the blank line between
        finally:
            Screen._refresh_layout = original  # type: ignore[method-assign]
