"""The chat's /compare on the real starter model (issue 44): two temperatures, one seed, both
columns get text from one pair of the engine (the shared prompt evaluated once, as the engine
counts it), and the pick of B with 2 on the focused view becomes the conversation's branch, A its
sibling, the pick counted by compare-stats' tally."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes import send, settle
from helpers import wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.compare_view import CompareView
from vibechat.engine.chat.history import History
from vibechat.engine.settings.params import SamplingParams

pytestmark = pytest.mark.model


def starter_chat(backend, tmp_path: Path, max_tokens: int):
    """The chat on the starter, a saved history, greedy-ish settings with a seed: the app and
    its history."""
    history = History(tmp_path / "history.db")
    params = SamplingParams(temperature=0.2, max_tokens=max_tokens, seed=11)
    return create_app(backend, params=params, blink=False, history=history), history


async def compared(pilot, spec: str) -> CompareView:
    """The model ready, ``/compare SPEC`` armed and a question sent: the comparison's view."""
    await pilot.app.workers.wait_for_complete()
    await settle(pilot)
    await send(pilot, f"/compare {spec}")
    await send(pilot, "What is the capital of France?")
    await settle(pilot)
    return pilot.app.chat.query(CompareView).last()


async def test_two_temperatures_on_the_starter_then_pick_b(backend, tmp_path: Path):
    app, history = starter_chat(backend, tmp_path, max_tokens=16)
    async with app.run_test(size=(120, 36)) as pilot:
        view = await compared(pilot, "temperature=1.2")
        a, b = view.replies
        assert a.text.strip() and b.text.strip()
        stored = history.get(history.latest().id)
        replies = [m for m in stored.messages if m.role == "assistant"]
        siblings = history.siblings(replies[0].id)
        assert len(siblings) == 2
        rows = {row: history.get(stored.id, through=row).messages[-1] for row in siblings}
        a_row, b_row = siblings
        # The pair ran: side B evaluated only its own rest (the last prompt token, for its own
        # logits); the shared prompt was evaluated once, by side A.
        assert rows[b_row].stats["prompt_tokens_evaluated"] == 1
        assert rows[a_row].stats["prompt_tokens_evaluated"] > 1
        assert rows[a_row].params["temperature"] == 0.2 and rows[b_row].params["temperature"] == 1.2

        view.focus()
        await pilot.pause()
        await pilot.press("2")
        await wait_for(pilot, lambda: not app.chat.query(CompareView), "the pick")
        await settle(pilot)
        reply = app.chat.messages()[-1]
        assert reply.message_id == b_row and "‹ 2/2 ›" in str(reply.label_shown)
    assert history.get(history.latest().id).leaf_id == b_row
    assert history.pick_count() == 1
    tally = {(t.kind, t.name, t.value): (t.wins, t.picks) for t in history.pick_tally()}
    assert tally[("setting", "temperature", "1.2")] == (1, 1)
    assert tally[("setting", "temperature", "0.2")] == (0, 1)


async def test_a_thinking_budget_beyond_the_context_on_side_b_is_its_line_and_a_answers(
    backend, tmp_path: Path
):
    """The engine refuses a pair whose side's thinking budget is beyond the model's context:
    side B's column says so in one line, and side A answers alone, saved as the reply."""
    app, history = starter_chat(backend, tmp_path, max_tokens=8)
    async with app.run_test(size=(120, 36)) as pilot:
        view = await compared(pilot, "think_budget=900000")
        a, b = view.replies
        assert a.text.strip()
        assert "think budget 900,000 is beyond the model's context" in str(b.status_shown)
        assert "beyond" not in str(a.status_shown)
    stored = history.get(history.latest().id)
    assert [m.role for m in stored.messages] == ["user", "assistant"]
    assert stored.messages[-1].content.strip()
