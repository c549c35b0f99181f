"""The token lens's steps read back, and the sampler chain's cuts over a step's candidates.

A reply's lens is saved in OpenAI's ``logprobs`` shape (``TokenCandidates.to_openai``; the
history's ``messages.logprobs``, ``run --logprobs N --json``). ``saved_steps`` reads that object
back into ``TokenCandidates``: for the chat's lens on a reopened conversation, and for taking
another path from one of its tokens. What it reads came from a file or a server: every item is
checked, at most ``MAX_STEPS`` steps and ``MAX_LOGPROBS`` candidates a step are read, a token's
text is made again from its bytes (``escaped_token``: never raw), and a malformed item ends the
reading there (the steps after it could not be placed).

``chain_cuts`` says where a sampler chain at given slider values cuts a step's candidates, in
llama.cpp's order (top-k, top-p, min-p, then temperature): a server's candidates
(engine/remote/lens.py), and the chat's lens when a slider moves under an open step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, get_args

from ..sanitize import escaped_token
from ..settings.params import MAX_LOGPROBS, SamplingParams
from .backend import Candidate, CutStage, TokenCandidates

# Most steps read back from one saved reply (a reply's lens is bounded when saved too:
# ``lens_history_bytes``).
MAX_STEPS = 100_000
MAX_TOKEN_BYTES = 256
_STAGES: frozenset[str] = frozenset(get_args(CutStage))


def saved_steps(
    saved: Any, sliders: tuple[tuple[str, float | int | None], ...] = ()
) -> tuple[TokenCandidates, ...]:
    """The steps of a saved lens object (``{"content": [item, ...]}``), in order; ``sliders``:
    the reply's sampling values (its saved params), given to every step. Reads up to the first
    item that is not one (none: an object that is not a lens)."""
    content = saved.get("content") if isinstance(saved, dict) else None
    if not isinstance(content, list):
        return ()
    steps: list[TokenCandidates] = []
    for index, item in enumerate(content[:MAX_STEPS]):
        step = _step(item, index, sliders)
        if step is None:
            break
        steps.append(step)
    return tuple(steps)


def _step(
    item: Any, index: int, sliders: tuple[tuple[str, float | int | None], ...]
) -> TokenCandidates | None:
    chosen = _candidate(item)
    tops = item.get("top_logprobs") if isinstance(item, dict) else None
    if chosen is None or not isinstance(tops, list):
        return None
    top = tuple(c for c in map(_candidate, tops[:MAX_LOGPROBS]) if c is not None)
    # The chosen token as the step ranked it, when it is among the candidates.
    picked = next((c for c in top if _same(c, chosen)), chosen)
    return TokenCandidates(
        index=index,
        chosen=picked,
        top=top,
        sliders=sliders,
        thinking=item.get("thinking") is True,
    )


def _same(a: Candidate, b: Candidate) -> bool:
    if a.token_id >= 0 and b.token_id >= 0:
        return a.token_id == b.token_id
    return a.data == b.data


def _candidate(item: Any) -> Candidate | None:
    """A saved ``{token, logprob, bytes, p_after, cut, id}`` entry, checked (None: not one)."""
    if not isinstance(item, dict):
        return None
    logprob, raw = item.get("logprob"), item.get("bytes")
    if not isinstance(logprob, (int, float)) or isinstance(logprob, bool):
        return None
    if not math.isfinite(logprob) or logprob > 0:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_TOKEN_BYTES:
        return None
    if not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in raw):
        return None
    data = bytes(raw)
    kept = item.get("p_after", 0.0)
    p_after = float(kept) if _number(kept) and 0.0 <= kept <= 1.0 else 0.0
    cut = item.get("cut")
    token_id = item.get("id", -1)
    return Candidate(
        token_id=token_id if isinstance(token_id, int) and not isinstance(token_id, bool) else -1,
        data=data,
        text=escaped_token(data),
        logprob=float(logprob),
        p_after=p_after,
        cut=cut if cut in _STAGES else None,  # type: ignore[arg-type]
        penalized=item.get("penalized") is True,
    )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def chain_cuts(
    logprobs: Sequence[float], params: SamplingParams
) -> tuple[list[CutStage | None], list[float]]:
    """For candidates ranked by ``logprobs`` (best first): the stage of the chain that cuts each
    at ``params``' slider values (None: kept), and each one's probability in the draw."""
    cuts: list[CutStage | None] = [None] * len(logprobs)
    probs = [math.exp(lp) for lp in logprobs]
    if params.temperature <= 0:
        cuts[1:] = ["temperature"] * (len(logprobs) - 1)
        return cuts, [1.0 if i == 0 else 0.0 for i in range(len(logprobs))]
    if params.top_k > 0:
        for i in range(params.top_k, len(logprobs)):
            cuts[i] = "top-k"
    alive = [i for i, cut in enumerate(cuts) if cut is None]
    if params.top_p < 1.0 and alive:
        total, reached = sum(probs[i] for i in alive), 0.0
        for n, i in enumerate(alive):
            if reached >= params.top_p * total and n > 0:
                cuts[i] = "top-p"
            reached += probs[i]
    alive = [i for i, cut in enumerate(cuts) if cut is None]
    if params.min_p > 0 and alive:
        floor = params.min_p * max(probs[i] for i in alive)
        for i in alive:
            if probs[i] < floor:
                cuts[i] = "min-p"
    alive = [i for i, cut in enumerate(cuts) if cut is None]
    after = [0.0] * len(logprobs)
    if alive:
        scaled = [logprobs[i] / params.temperature for i in alive]
        best = max(scaled)
        weights = [math.exp(s - best) for s in scaled]
        norm = sum(weights)
        for i, w in zip(alive, weights, strict=True):
            after[i] = w / norm
    return cuts, after
