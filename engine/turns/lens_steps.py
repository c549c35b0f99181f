"""The token lens's steps read back, and the sampler chain's cuts over a step's candidates.

A reply's lens is saved in OpenAI's ``logprobs`` shape (``TokenCandidates.to_openai``; the
history's ``messages.logprobs``, ``run --logprobs N --json``). ``saved_steps`` reads that object
back into ``TokenCandidates``: for the chat's lens on a reopened conversation, and for taking
another path from one of its tokens. What it reads came from a file or a server: every item is
checked, at most ``MAX_STEPS`` steps and ``MAX_LOGPROBS`` candidates a step are read, a token's
text is made again from its bytes (``escaped_token``: never raw), and a malformed item ends the
reading there (the steps after it could not be placed). ``path_prefix`` makes, from them, the
prefix a reply goes on from when the user takes another path at one of its tokens.

``chain_cuts`` says where a sampler chain at given slider values cuts a step's candidates, in
llama.cpp's order (top-k, top-p, min-p, then temperature): a server's candidates
(engine/remote/lens.py), and the chat's lens when a slider moves under an open step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, get_args

from ..errors import VibechatError
from ..sanitize import escaped_token
from ..settings.params import MAX_LOGPROBS, SamplingParams
from .backend import MAX_PREFIX_BYTES, Candidate, CutStage, ReplyPrefix, TokenCandidates

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
        forced=item.get("forced") is True,
        after_stop=item.get("after_stop") is True,
    )


class PathRefused(VibechatError):
    """Another path cannot be taken from that token: one line, naming why and what to do."""


# Why a server's reply cannot go on from a chosen token (engine/remote; the chat says it first).
PATH_NEEDS_LOCAL = (
    "another path from a token needs the local engine (a server is not asked to continue a "
    "reply from given tokens): load a local model to take one."
)


def path_overflow(n_prompt: int, n_path: int, context_size: int) -> str:
    """Why a prompt of ``n_prompt`` tokens and a path's ``n_path`` leave no room for a token in
    the context, in one line ("" when they do)."""
    if n_prompt + n_path < context_size:
        return ""
    return (
        f"the prompt ({n_prompt:,} tokens) and the reply up to the chosen token ({n_path:,}) "
        f"fill the {context_size:,}-token context: take the path from an earlier token, or "
        "raise --ctx."
    )


def path_prefix(
    saved: Any,
    index: int,
    token_id: int,
    data: bytes = b"",
    sliders: tuple[tuple[str, float | int | None], ...] = (),
) -> ReplyPrefix:
    """The prefix a new version of a reply goes on from when another path is taken at its step
    ``index`` (0 = its first generated token, thinking included): the chosen tokens of the
    reply's saved lens ``saved`` (its ``logprobs`` object) before that step, then the candidate
    ``token_id`` of that step, or (``token_id`` -1) the text ``data`` the user typed (UTF-8).
    ``sliders``: the reply's sampling values, given to its steps (``saved_steps``). Raises
    ``PathRefused`` when the lens was off, was cut before the step, has no token ids (a server's
    reply), or the step, the candidate or the text is not one."""
    steps = saved_steps(saved, sliders)
    if not steps:
        raise PathRefused(
            "this reply has no saved token lens (the lens was off when it was written): turn "
            "the lens on and regenerate it to take another path from its tokens."
        )
    if not 0 <= index < len(steps):
        raise PathRefused(_missing_step(saved, index, len(steps)))
    if any(step.chosen.token_id < 0 for step in steps[: index + 1]):
        raise PathRefused(
            "this reply's lens has no token ids (a server wrote it): another path can be taken "
            "only from a reply of the local engine."
        )
    step = steps[index]
    ids = tuple(s.chosen.token_id for s in steps[:index])
    # Tokens the original held back for a stop string are the new version's own start.
    before = tuple(replace(s, after_stop=False) for s in steps[:index])
    if token_id == -1:
        return ReplyPrefix(ids, _typed(data), before)
    picked = next((c for c in step.top if c.token_id == token_id), None)
    if picked is None:
        raise PathRefused(
            f"token {token_id} is not a candidate of step {index + 1}: pick one the lens "
            "shows there, or type a replacement."
        )
    if token_id == step.chosen.token_id:
        raise PathRefused(
            "that is the token the reply took there: pick another candidate, or type a replacement."
        )
    taken = replace(step, chosen=picked, forced=True, after_stop=False)
    return ReplyPrefix((*ids, token_id), b"", (*before, taken))


def _missing_step(saved: Any, index: int, known: int) -> str:
    """Why step ``index`` is not among the ``known`` steps of ``saved``."""
    if index < 0:
        return f"step {index + 1} is not one of this reply's (it has {known}): choose a token."
    content = saved.get("content") if isinstance(saved, dict) else None
    if isinstance(content, list) and len(content) > known and known < MAX_STEPS:
        return (
            f"this reply's saved lens cannot be read past its first {known} tokens (its copy "
            "in the history was changed): another path can be taken from those only."
        )
    if isinstance(saved, dict) and saved.get("truncated"):
        return (
            f"this reply's lens was kept only for its first {known} tokens (the "
            "lens_history_bytes setting bounds it): another path can be taken from those only."
        )
    return f"step {index + 1} is not one of this reply's (it has {known}): choose a token."


def _typed(data: bytes) -> bytes:
    """A typed replacement, checked: some UTF-8 text, bounded."""
    if not data:
        raise PathRefused("type the text to go on with, or pick another candidate.")
    if len(data) > MAX_PREFIX_BYTES:
        raise PathRefused(
            f"the replacement is {len(data):,} bytes; at most {MAX_PREFIX_BYTES:,} can be typed."
        )
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise PathRefused("the replacement is not UTF-8 text: type it again.") from None
    return data


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
