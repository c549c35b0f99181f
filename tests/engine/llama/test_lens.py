"""The token lens on the real starter (issue 43, points 1 and 5): each step's candidates come
from the logits llama.cpp computed for it, their probabilities are a softmax of those logits
before the chain (after temperature) and over the survivors after it, the chosen token is never
one the chain cut, and the lens changes no token drawn (greedy and seeded, on and off).

Relations only: which tokens the model writes, and how many, differ between CPUs."""

from __future__ import annotations

import numpy as np
import pytest

from vibechat.engine.llama import lens
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage, GenerationDone, TokenCandidates

pytestmark = pytest.mark.model

PROMPT = [ChatMessage("user", "Write three sentences about the sea.")]


def reply(backend, params: SamplingParams) -> tuple[list[TokenCandidates], GenerationDone]:
    """The lens's steps and the end of one reply from an empty cache."""
    backend.reset()
    events = list(backend.stream_chat(PROMPT, params))
    done = events[-1]
    assert isinstance(done, GenerationDone)
    return [e for e in events if isinstance(e, TokenCandidates)], done


@pytest.fixture
def rows(monkeypatch):
    """A copy of each logits row the lens read (llama.cpp's own, passed through unchanged)."""
    seen: list[np.ndarray] = []
    real = lens.logits_row

    def spy(ctx, idx, n_vocab):
        row = real(ctx, idx, n_vocab)
        seen.append(row.astype(np.float64))
        return row

    monkeypatch.setattr(lens, "logits_row", spy)
    return seen


def softmax(values: np.ndarray) -> np.ndarray:
    weights = np.exp(values - values.max())
    return weights / weights.sum()


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.5])
def test_probabilities_are_a_softmax_of_the_steps_logits(backend, rows, temperature):
    params = SamplingParams(
        temperature=temperature,
        top_k=10,
        top_p=0.9,
        min_p=0.02,
        # Off: the logits after the chain are the row's, divided by the temperature.
        repeat_penalty=1,
        seed=7,
        max_tokens=24,
        logprobs=20,
    )
    steps, done = reply(backend, params)
    assert steps and len(steps) == done.stats.completion_tokens
    # One row read per draw; the last draw (the end of the turn, if any) has no step.
    assert len(rows) in (len(steps), len(steps) + 1)
    for step, row in zip(steps, rows, strict=False):
        assert [c.token_id for c in step.top] == list(np.argsort(-row, kind="stable")[:20]) or (
            # ties in the row may order differently
            sorted(row[[c.token_id for c in step.top]]) == sorted(np.sort(row)[-20:])
        )
        before = softmax(row / temperature)
        for c in step.top:
            assert abs(np.exp(c.logprob) - before[c.token_id]) < 1e-4
        assert sum(np.exp(c.logprob) for c in step.top) <= 1 + 1e-6
        kept = [c for c in step.top if c.cut is None]
        # top-k 10 < 20 shown: every survivor is among them.
        assert 0 < len(kept) <= 10
        assert all(c.cut is not None for c in step.top[10:])
        assert {c.cut for c in step.top[10:]} == {"top-k"}
        after = softmax(row[[c.token_id for c in kept]] / temperature)
        for c, p in zip(kept, after, strict=True):
            assert abs(c.p_after - p) < 1e-4
        assert all(c.p_after == 0 for c in step.top if c.cut is not None)
        assert abs(sum(c.p_after for c in step.top) - 1) < 1e-4
        # The token drawn was never one the chain cut.
        assert step.chosen.cut is None and step.chosen.p_after > 0
        assert step.chosen in kept
        assert step.slider("temperature") == temperature and step.slider("top_k") == 10


def test_greedy_and_seeded_draws_are_the_same_with_the_lens_on_and_off(backend):
    for params in (
        SamplingParams(temperature=0, max_tokens=32),
        SamplingParams(temperature=0.9, seed=11, max_tokens=32, repeat_penalty=1.1),
    ):
        off_steps, off = reply(backend, params)
        on_steps, on = reply(backend, params.replace(logprobs=10))
        assert off_steps == []
        assert on.text == off.text
        assert on.stats.completion_tokens == off.stats.completion_tokens
        assert len(on_steps) == on.stats.completion_tokens
        assert [s.index for s in on_steps] == list(range(len(on_steps)))
        assert all(s.chosen.cut is None for s in on_steps)
        assert (
            "".join(s.chosen.data.decode("utf-8", "replace") for s in on_steps)
            .strip()
            .startswith(on.text.strip()[:8])
        )


def test_greedy_marks_the_pick_and_cuts_the_rest(backend):
    steps, _ = reply(backend, SamplingParams(temperature=0, max_tokens=8, logprobs=5))
    for step in steps:
        assert step.chosen.p_after == 1.0
        # The pick is the best logit: the first candidate.
        assert step.top[0] == step.chosen
        assert all(c.cut == "temperature" and c.p_after == 0 for c in step.top[1:])
        assert len(step.top) == 5
