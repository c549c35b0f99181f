"""Full garbage collections wait while a reply streams (app/tui/gc_policy.py): they scan
every object the chat holds and were the longest pauses of a long streaming reply."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from vibechat.app.tui import gc_policy
from vibechat.app.tui.conversation.reply_stream import ReplyStream


@pytest.fixture(autouse=True)
def thresholds():
    """Whatever a test does, the process's collector is as it was afterwards (and a reply
    an earlier test left streaming does not defer full collections here)."""
    gc_policy.allow_full_collections(0)
    before = gc.get_threshold()
    yield before
    gc_policy.allow_full_collections(0)
    gc.set_threshold(*before)


def _chat_view_app():
    from textual.app import App, ComposeResult

    from vibechat.app.tui.conversation.chat_view import ChatView

    class OneView(App):
        def compose(self) -> ComposeResult:
            yield ChatView()

    return OneView()


@pytest.mark.parametrize("ending", ["finish", "fail"])
async def test_full_collections_wait_while_a_reply_streams_and_resume_when_it_ends(
    thresholds, ending
):
    from vibechat.app.tui.conversation.assistant_message import AssistantMessage
    from vibechat.app.tui.conversation.chat_view import ChatView

    app = _chat_view_app()
    async with app.run_test(size=(60, 20)) as pilot:
        reply = await app.query_one(ChatView).add(AssistantMessage(live=True))
        stream = ReplyStream(reply, generation=1)
        assert gc.get_threshold() == thresholds  # no reply has rendered yet
        for piece in ["The keeper ", "climbed ", "the stairs.\n\n", "Every night."]:
            stream.put(piece)
            await stream.render()
            await pilot.pause()
            # the young generations are collected as before; the full collection waits
            assert gc.get_threshold()[:2] == thresholds[:2]
            assert gc.get_threshold()[2] == gc_policy.DEFERRED
            assert gc_policy.full_collections_deferred()
        if ending == "finish":
            await stream.finish(reply.text)
        else:
            await stream.fail("the engine stopped")
        ended = time.monotonic()
        # not in the turn that draws the reply's end: a moment later, at a collection
        resume_at = gc_policy.full_collections_resume_at()
        assert resume_at is not None and resume_at <= ended + gc_policy.ENDED_S
        deadline = ended + gc_policy.ENDED_S + 10
        while gc_policy.full_collections_deferred() and time.monotonic() < deadline:
            gc.collect(0)
            await asyncio.sleep(0.05)
        assert gc.get_threshold() == thresholds
        assert "Every night." in reply.text


def test_a_deferral_that_no_render_renews_lapses_at_the_next_collection(thresholds):
    """A reply that ends without saying so (dropped, an error on the way) cannot keep full
    collections off: once no render has renewed the deferral for HOLD_S, the next collection
    of any generation gives the thresholds back."""
    now = [100.0]
    deferral = gc_policy._Deferral(clock=lambda: now[0])
    try:
        deferral.defer()
        assert gc.get_threshold()[2] == gc_policy.DEFERRED
        now[0] += gc_policy.HOLD_S / 2
        gc.collect(0)
        assert gc.get_threshold()[2] == gc_policy.DEFERRED  # still streaming, as far as it knows
        deferral.defer()  # a render renews it
        now[0] += gc_policy.HOLD_S - 0.1
        gc.collect(0)
        assert gc.get_threshold()[2] == gc_policy.DEFERRED
        now[0] += 0.2  # no render for HOLD_S
        gc.collect(0)
        assert gc.get_threshold() == thresholds
        assert deferral.saved is None
    finally:
        deferral.allow()
        if deferral._on_collection in gc.callbacks:
            gc.callbacks.remove(deferral._on_collection)
