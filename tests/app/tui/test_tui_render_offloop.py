"""A streaming reply's Markdown renders in a worker thread
(assistant_message.AssistantMessage.append, markdown_segment.prepare): the event loop keeps
turning meanwhile, the render pacer still counts the work as the UI's, and the reply shows
exactly what it showed when rendered on the event loop."""

from __future__ import annotations

import asyncio

import pytest

from vibechat.app.tui.conversation.pacing import RenderPacer

REPLY = (
    "## The keeper\n\nHe climbed the stairs **every night** and lit the `lamp`.\n\n"
    "- first item\n- second item with `code`\n\n"
    "```python\ndef keep(light):\n    for k in range(10):\n        light += k\n    return "
    "light\n```\n\n"
    "---\n\n"
    "1. one\n2. two\n\n> the sea was calm\n\n"
) * 12


def _chat_view_app():
    from textual.app import App, ComposeResult

    from vibechat.app.tui.conversation.chat_view import ChatView

    class OneView(App):
        def compose(self) -> ComposeResult:
            yield ChatView()

    return OneView()


def _lines(reply) -> list[str]:
    """What the reply's text shows, top to bottom (its segments)."""
    from textual.geometry import Region

    body = reply.body
    strips = body.render_lines(Region(0, 0, body.size.width, body.size.height))
    return ["".join(piece.text for piece in strip).rstrip() for strip in strips]


async def test_the_event_loop_turns_while_a_slice_of_the_reply_renders():
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView

    app = _chat_view_app()
    async with app.run_test(size=(80, 30)) as pilot:
        reply = await app.query_one(ChatView).add(AssistantMessage(live=True))
        await reply.append("The first words.\n\n")
        await pilot.pause()  # laid out: later slices render at its width, off the loop
        turns = 0

        async def ticking() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(ticking())
        await asyncio.sleep(0)
        before = turns
        try:
            await reply.append(REPLY[:4000])
        finally:
            ticker.cancel()
        assert turns > before  # the loop ran other work while the slice rendered
        assert reply.offloop_cpu > 0  # the worker's CPU, kept for the pacer
        assert len(reply.body.markdowns) > 2  # the slice sealed segments


async def test_a_reply_streamed_in_slices_shows_what_the_whole_reply_shows():
    """Rendered off the loop slice by slice (segments sealed several at a time, below clean
    cuts and a horizontal rule), the finished reply is line for line the reply rendered whole."""
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView

    app = _chat_view_app()
    async with app.run_test(size=(80, 40)) as pilot:
        view = app.query_one(ChatView)
        streamed = await view.add(AssistantMessage(live=True))
        await streamed.append(REPLY[:7])
        await pilot.pause()
        for start in range(7, len(REPLY), 1300):
            await streamed.append(REPLY[start : start + 1300])
            await pilot.pause()
        assert len(streamed.body.markdowns) >= 3
        await streamed.finish()
        whole = await view.add(AssistantMessage(REPLY))
        await pilot.pause()
        await pilot.pause()
        assert _lines(streamed) == _lines(whole)


def test_the_pacer_counts_work_done_in_other_threads_as_the_uis():
    clock, cpu = [0.0], [0.0]
    pacer = RenderPacer(0.1, max_hz=10, min_hz=2, clock=lambda: clock[0], cpu=lambda: cpu[0])
    pacer.rendering()
    cpu[0] += 0.001  # the UI thread itself barely worked...
    pacer.spent(0.019)  # ... the render's Markdown took 19 ms in a worker thread
    clock[0] += 0.05
    pacer.rendering()
    assert pacer.interval == pytest.approx(0.2)  # 20 ms of UI work at 10 %: 200 ms apart


async def test_a_slice_rendering_in_a_worker_thread_does_not_hold_up_the_app():
    """The app's message handler that renders a slice returns while the slice's Markdown
    renders (a key pressed meanwhile is handled at once); the next render, the end of the
    reply and a failure all wait for that slice, so nothing is lost or drawn out of order."""
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView
    from vibechat.app.tui.conversation.reply_stream import ReplyStream
    from vibechat.engine.turns.backend import GenerationDone, GenerationStats

    app = _chat_view_app()
    async with app.run_test(size=(80, 30)) as pilot:
        reply = await app.query_one(ChatView).add(AssistantMessage(live=True))
        stream = ReplyStream(reply, generation=1)
        stream.put("The first words.\n\n")
        assert await stream.render() is False  # not laid out yet: drawn on the spot
        assert stream.pending is None
        await pilot.pause()
        stream.put(REPLY[:4000])
        assert await stream.render() is True  # come back: the slice is still rendering
        assert stream.pending is not None and not stream.pending.done()
        done = GenerationDone(
            "The first words.\n\n" + REPLY[:4000], GenerationStats(completion_tokens=9)
        )
        assert stream.hold(done)  # the end waits for the slice
        assert stream.take_done() is None
        for _ in range(50):  # each render waits for the slice before it (bounded: no hang)
            if not await stream.render() and stream.pending is None:
                break
            await pilot.pause()
        assert stream.pending is None
        assert "keeper" in reply.text
        assert stream.take_done() is done
        await stream.finish(done.text)
        assert reply.text == done.text
