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


async def test_the_freeze_once_the_model_is_ready_runs_after_the_markdown_warm_up(monkeypatch):
    """The chat freezes what it built once the model is ready (``freeze_gc``), and the Markdown's
    warm-up, in a worker after the ``ready`` frame, builds modules, lexers and caches that live as
    long as the chat: the freeze waits for it, so they leave the collector's sight too. Frozen
    before it, they stayed in the young generations, scanned by the first reply's collections."""
    from fakes import RecordingBackend
    from helpers import wait_for
    from vibechat.app.tui import create_app
    from vibechat.app.tui.controllers import model_loads

    events: list[str] = []
    warm_up = model_loads.warm_up_markdown

    def warming(*args):
        warm_up(*args)
        events.append("warm-up ended")

    monkeypatch.setattr(model_loads, "warm_up_markdown", warming)
    # The collector itself is left alone: the test process keeps collecting what it makes.
    monkeypatch.setattr(gc_policy.gc, "collect", lambda *args: 0)
    monkeypatch.setattr(gc_policy.gc, "freeze", lambda: events.append("frozen"))
    app = create_app(RecordingBackend(), save=False, freeze_gc=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: len(events) == 2, "the warm-up and the freeze")
    assert events == ["warm-up ended", "frozen"]


def test_the_startup_freeze_runs_no_full_collection_while_a_reply_streams(monkeypatch):
    """A prompt sent while the model loads streams its reply as the freeze comes (after the
    warm-up): the freeze collects only the young generations then, not all of them (a full
    collection, ~60 ms there, is what ``defer_full_collections`` keeps out of a reply)."""
    generations: list[int] = []

    def collected(phase: str, info: dict) -> None:
        if phase == "start":
            generations.append(info["generation"])

    # The test process's own objects stay in the collector's sight.
    monkeypatch.setattr(gc_policy.gc, "freeze", lambda: None)
    freeze = gc_policy._StartupFreeze()
    gc_policy.defer_full_collections()
    gc.callbacks.append(collected)
    try:
        freeze.freeze()
    finally:
        gc.callbacks.remove(collected)
    assert generations == [1]
    gc_policy.allow_full_collections(0)
    gc.callbacks.append(collected)
    try:
        freeze.freeze()
    finally:
        gc.callbacks.remove(collected)
    assert generations == [1, 2]  # no reply: everything collected first, as before
