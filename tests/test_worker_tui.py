"""The chat on a ``WorkerBackend`` whose engine process is killed mid-reply: the app stays
up, shows the one line, keeps the partial reply (saved with status 'error'), and answers
the next prompt from a fresh engine process."""

from __future__ import annotations

import os
import signal
import time

import pytest

from fakes import settle
from vibechat.app.tui import create_app
from vibechat.app.tui.chat_view import AssistantMessage
from vibechat.engine.history import History
from vibechat.engine.llamacpp import LlamaCppOptions
from vibechat.engine.params import SamplingParams
from vibechat.engine.worker import WorkerBackend

pytestmark = pytest.mark.model


async def test_the_chat_survives_its_engine_killed_mid_reply(starter_path):
    backend = WorkerBackend(LlamaCppOptions(model_path=starter_path, context_size=2048, repack="off"))
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=400), blink=False)
    try:
        async with app.run_test(size=(110, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.status.model is not None and app.status.state == "ready"
            app.prompt_input.load_text("Write a long story about a dragon who learns to bake bread.")
            await pilot.press("enter")
            deadline = time.monotonic() + 120
            while not (app.replies.stream and app.replies.stream.started):  # the reply is on screen: kill its engine
                assert time.monotonic() < deadline, "no reply text within 120 s"
                await pilot.pause(0.01)
            os.kill(backend.pid, signal.SIGKILL)
            await settle(pilot)

            assert app.is_running and not app.generating
            reply = app.chat.query(AssistantMessage).last()
            status = str(reply.query_one(".message--status").render())
            assert "SIGKILL" in status and "mid-reply" in status and "crash report" in status
            assert reply.has_class("-error") and reply.text.strip()  # the partial text stays
            with History() as history:
                stored = history.get(history.latest().id)
            user, failed = stored.messages
            assert failed.status == "error" and "SIGKILL" in (failed.error or "")
            assert failed.content.strip() and failed.content.split()[0] in reply.text  # the partial reply, saved

            app.prompt_input.load_text("List three colours.")
            await pilot.press("enter")
            await settle(pilot)
            last = app.chat.query(AssistantMessage).last()
            assert last is not reply and last.text.strip() and not last.has_class("-error")
            assert app.status.stats.finish_reason in ("stop", "length")
            with History() as history:
                stored = history.get(history.latest().id)
            assert [(m.role, m.status) for m in stored.messages] == [
                ("user", "complete"), ("assistant", "error"), ("user", "complete"), ("assistant", "complete")]
    finally:
        backend.close()
