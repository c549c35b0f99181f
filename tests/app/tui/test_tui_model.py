"""The TUI end to end on the real starter model, headless."""

from __future__ import annotations

import re

import pytest

from conftest import worker_threads
from fakes import send, settle
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.assistant_message import AssistantMessage
from vibechat.engine.llama.llamacpp import LlamaCppBackend
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams

pytestmark = pytest.mark.model


# Gemma's turn format (prompt_format gemma) where a test needs a reply of its full length: in its
# own format, the completion frame, the starter ends "List three colours." after a few tokens.
GEMMA = "gemma"


async def test_real_model_streams_a_reply_with_stats_and_cache_reuse(starter_path):
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=2048,
            repack="off",
            prompt_format=GEMMA,
        )
    )
    seen: list[str] = []
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=24), blink=False)
    try:
        async with app.run_test(size=(110, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert app.status.model is not None and app.status.model.architecture == "gemma3"

            # Move sliders: the real backend must echo exactly these values back.
            await pilot.press("f2", "right", "right", "down", "left", "f2")
            shown = app.panel.params
            app.prompt_input.load_text("List three colours.")
            original = AssistantMessage.append

            async def spy(self, text):
                seen.append(text)
                await original(self, text)

            AssistantMessage.append = spy  # type: ignore[method-assign]
            try:
                await pilot.press("enter")
                await settle(pilot)
            finally:
                AssistantMessage.append = original  # type: ignore[method-assign]

            reply = app.chat.query(AssistantMessage).last()
            assert (
                len(seen) >= 3 and reply.text.strip()
            )  # streamed in pieces (renders are capped at 10/s)
            stats = app.status.stats
            assert stats.completion_tokens == 24 and stats.decode_tokens_per_s > 0
            assert "tok/s" in str(app.status.render())
            assert app.status.context_used == stats.prompt_tokens + stats.completion_tokens
            assert (shown.temperature, shown.top_k) == (0.1, 39)
            used = (
                app.replies.last.params
            )  # echoed by the real backend, "auto" made the model's own value
            assert used.replace(seed=None) == shown.resolved(app.status.model.chat_format)
            assert shown.repeat_penalty is None and used.repeat_penalty == 1.0  # a turn format: off

            first_prompt = stats.prompt_tokens
            await send(pilot, "And three animals?")
            second = app.status.stats
            assert second.prompt_tokens > first_prompt
            assert second.prompt_tokens_evaluated < second.prompt_tokens / 2  # cache reused

            await pilot.press("ctrl+n")
            await app.workers.wait_for_complete()
            await send(pilot, "And three animals?")
            third = app.status.stats
            assert third.prompt_tokens_evaluated == third.prompt_tokens  # cache was reset
    finally:
        backend.close()


async def test_the_status_bar_shows_drafting_acceptance_and_the_draft_length(
    starter_path, monkeypatch
):
    from vibechat.app.tui.widgets.status_bar import StatusBar
    from vibechat.engine.llama import replying

    monkeypatch.setattr(replying, "DRAFT_PROGRESS_S", 0.0)  # live figures after every piece
    live: list[
        tuple[str, bool]
    ] = []  # the bar as each live figure arrived, and whether a reply was streaming

    def watch_drafting(self, value) -> None:
        if value is not None:
            live.append((self.render().plain, self.app.generating))

    monkeypatch.setattr(StatusBar, "watch_drafting", watch_drafting, raising=False)
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=2048,
            repack="off",
            speculative="auto",
            draft_tokens=6,
            prompt_format=GEMMA,
        )
    )
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=40), blink=False)
    try:
        async with app.run_test(size=(160, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            code = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(6))
            await send(pilot, f"Rewrite this code with x renamed to y:\n\n{code}")
            # while the reply streamed: the accepted share so far and the draft length now
            assert live and all(streaming for _, streaming in live)
            assert all(
                re.search(r" · draft (\d+% )?(k[0-6]|off) +generating…$", text) for text, _ in live
            ), live
            assert app.status.drafting is None  # after the reply: its own stats
            stats = app.status.stats
            assert stats.completion_tokens == 40 and stats.drafted_tokens > 0
            assert (
                0 <= stats.accepted_draft_tokens <= stats.drafted_tokens and 0 <= stats.draft_k <= 6
            )
            shown = app.status.render().plain
            rate = f"{stats.accepted_draft_tokens / stats.drafted_tokens:.0%}"
            assert (
                f"draft {rate} " + ("off" if stats.drafting_turned_off else f"k{stats.draft_k}")
                in shown
            )
    finally:
        backend.close()


async def test_the_status_bar_names_the_draft_model_and_its_memory(starter_path):
    from vibechat.engine.settings.knobs import human_mib

    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=1024,
            repack="off",
            draft_model_path=starter_path,
        )
    )
    app = create_app(backend, params=SamplingParams(temperature=0, max_tokens=8), blink=False)
    try:
        async with app.run_test(size=(200, 36)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            info = app.status.model
            assert info is not None and info.draft_model and info.draft_model_bytes
            assert (
                info.draft_model_bytes > starter_path.stat().st_size
            )  # its weights and its KV cache
            shown = app.status.render().plain
            assert f"draft {info.draft_model} {human_mib(info.draft_model_bytes)}" in shown
    finally:
        backend.close()
