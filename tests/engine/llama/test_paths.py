"""Another path from a token on the real starter (issue 43, point 3): a reply goes on from the
original's first tokens and a candidate picked there (or text typed there), the prefix taken from
the KV cache the original left, so only the new token is evaluated; the steps before it are the
original's, the picked one is marked forced.

Relations only: which tokens the model writes after the prefix, and how many, differ between
CPUs."""

from __future__ import annotations

import pytest

from vibechat.engine.errors import ContextOverflowError, GenerationError
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import (
    ChatMessage,
    GenerationDone,
    ReplyPrefix,
    TokenCandidates,
    logprobs_object,
)
from vibechat.engine.turns.lens_steps import path_prefix

pytestmark = pytest.mark.model

PROMPT = [ChatMessage("user", "Write three sentences about the sea.")]
GREEDY = SamplingParams(temperature=0, repeat_penalty=1, max_tokens=12, logprobs=5, seed=3)


def stream(backend, params: SamplingParams, prefix: ReplyPrefix | None = None):
    """The lens's steps and the end of one reply, on whatever the cache holds."""
    extra = {"prefix": prefix} if prefix is not None else {}
    events = list(backend.stream_chat(PROMPT, params, **extra))
    done = events[-1]
    assert isinstance(done, GenerationDone)
    return [e for e in events if isinstance(e, TokenCandidates)], done


def shown(step: TokenCandidates) -> tuple[int, list[int], bool]:
    """What a step says, as saved (its probabilities are rounded there)."""
    return step.chosen.token_id, [c.token_id for c in step.top], step.forced


def other_candidate(steps: list[TokenCandidates]) -> tuple[int, int]:
    """A step past the first few and a candidate there that is not the chosen one and has text
    (not an end of turn): (the step's index, the candidate's id)."""
    for step in steps[2:] + steps[:2]:
        for c in step.top:
            if c.token_id != step.chosen.token_id and c.data.strip():
                return step.index, c.token_id
    raise AssertionError("no step with another candidate")


def test_a_path_from_a_picked_candidate_evaluates_only_the_new_token(backend):
    original, first = stream(backend, GREEDY)
    assert len(original) >= 4
    index, token = other_candidate(original)
    prefix = path_prefix(logprobs_object(original), index, token)
    # The cache holds the prompt and the original reply: the path reuses them.
    steps, done = stream(backend, GREEDY, prefix)
    ids = [s.chosen.token_id for s in steps]
    assert ids[: index + 1] == [s.chosen.token_id for s in original[:index]] + [token]
    assert [s.index for s in steps] == list(range(len(steps)))
    assert [shown(s) for s in steps[:index]] == [shown(s) for s in original[:index]]
    assert steps[index].forced and shown(steps[index])[1] == shown(original[index])[1]
    assert not any(s.forced for s in steps[index + 1 :])
    # Only the new token was evaluated (the engine's own count): not the prompt, nor the prefix.
    assert done.stats.prompt_tokens == first.stats.prompt_tokens
    assert 1 <= done.stats.prompt_tokens_evaluated <= 2
    assert done.stats.completion_tokens >= index + 1
    # Its speed counts the tokens decoded, not the prefix's.
    decoded = done.stats.completion_tokens - (index + 1)
    speed = decoded / (done.stats.decode_ms / 1000) if decoded else 0.0
    assert done.stats.decode_tokens_per_s == pytest.approx(speed)
    # The reply's text is the prefix's, then what follows it.
    said = b"".join(s.chosen.data for s in steps[: index + 1]).decode("utf-8", "ignore")
    assert done.text.startswith(said.lstrip()[:-1])
    # From an empty cache, the same path evaluates the prompt and the prefix.
    backend.reset()
    _steps, fresh = stream(backend, GREEDY, prefix)
    assert fresh.stats.prompt_tokens_evaluated == first.stats.prompt_tokens + index + 1


def test_a_path_from_typed_text(backend):
    original, _first = stream(backend, GREEDY)
    index = min(3, len(original) - 1)
    prefix = path_prefix(logprobs_object(original), index, -1, b" whales")
    steps, done = stream(backend, GREEDY, prefix)
    before = b"".join(s.chosen.data for s in original[:index]).decode("utf-8", "ignore")
    assert done.text.startswith(before.lstrip()[:-1])
    assert "whales" in done.text
    typed = [s for s in steps[index:] if s.forced]
    assert typed and all(s.top == () for s in typed)
    assert b"".join(s.chosen.data for s in typed) == b" whales"
    # The typed tokens only (a handful), never the prompt.
    assert done.stats.prompt_tokens_evaluated <= len(typed) + 1


def test_a_path_too_long_for_the_context_is_refused_before_evaluating(backend):
    n_ctx = backend.describe().context_size
    prefix = ReplyPrefix(tuple([236772] * (n_ctx - 5)))
    with pytest.raises(ContextOverflowError, match="raise --ctx"):
        stream(backend, GREEDY, prefix)


def test_a_token_outside_the_vocabulary_is_refused(backend):
    with pytest.raises(GenerationError, match="not in this model's vocabulary"):
        stream(backend, GREEDY, ReplyPrefix((10**7,)))
