"""The decode loop of speculative decoding by prompt lookup, for ``LlamaCppBackend``
(engine/llama/llamacpp.py), with the draft length chosen by a policy (engine/llama/speculative.py).
It is handed what it needs of the backend as a ``DecodeTarget`` (engine/llama/decoding.py: the
context, its memory, the tokens the KV cache holds, the cancel flag) and the reply's ``Emitter``.

After each token, its last words are looked up in the prompt and the reply so far
(llama-cpp-python's ``LlamaPromptLookupDecoding``); when they occurred before, the tokens that
followed are the draft. One ``llama_decode`` evaluates the token and the draft with logits at
every position; the sampler chain then samples position by position, keeping drafts while they
equal what it samples. The first sample that differs is kept as the next token and the rejected
drafts leave the KV cache; when every draft is accepted, the sample at the last position is the
extra token.

Why this keeps the model's distribution, sampled replies included: speculative sampling
(Leviathan et al. 2023; the seeds' ``reject_sampling``) accepts a drafted token x with
probability ``min(1, p(x) / q(x))`` and, on rejection, samples from ``norm(max(0, p - q))``,
where p is the target's distribution and q the draft's. A lookup draft is deterministic: q is
one-hot on x, so x is accepted with probability p(x) and the residual is p without x,
renormalised. Sampling y from p and accepting x when y == x does exactly that: P(accept) = p(x),
and a rejected draft leaves y drawn from p given y != x. So sample-and-compare with the
model's own chain is rejection sampling for a greedy draft, and every token is drawn from the
logits of exactly the tokens the plain loop would have decoded (seeds reproduce too).

Up to rounding: llama.cpp evaluates a batch of tokens with other kernels than a single token
(tiled attention, 4-row matmuls), and past a few hundred tokens of context the logits differ
by about 1 in 30, which can flip a near-tie (docs/PERFORMANCE.md).

Imports inside functions are deliberate: numpy and llama-cpp-python's lookup decoder (its
high-level half) load when drafting first runs, not on every start of the engine process
(tests/app/test_startup.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import llama_cpp as ll

from ..errors import GenerationError
from ..settings.choices import DRAFT_NGRAM
from ..turns.backend import GenerationStats
from ..turns.thinking import Piece
from .decoding import DecodeTarget, Emitter
from .draft_model import DraftModel
from .grammar_sampling import Sampler
from .speculative import AdaptiveDraft, FixedDraft


def prompt_lookup_tokens(
    target: DecodeTarget,
    policy: FixedDraft | AdaptiveDraft,
    sampler: Sampler,
    out: Emitter,
    prompt: Sequence[int],
    stats: GenerationStats,
    drafter: DraftModel | None = None,
) -> Iterator[list[Piece]]:
    """``target``: the backend's context, KV-cache bookkeeping (``tokens``) and failure
    handling, for this reply; ``out``: the reply's ``Emitter``. Yields the reply's pieces as
    they form; counts drafts in ``stats``, and leaves the policy's last draft length and
    verdict there too. With ``drafter``, the draft model proposes the drafts instead of the
    lookup."""
    import numpy as np
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    n_draft = policy.max_k
    lookup = LlamaPromptLookupDecoding(max_ngram_size=DRAFT_NGRAM, num_pred_tokens=n_draft)
    # The prompt and every emitted token.
    history = np.empty(target.context_size + 1, dtype=np.intc)
    history[: len(prompt)] = prompt
    n_history = len(prompt)
    n_batch = max(2, min(target.n_batch, target.context_size))
    ctx, mem, one, kept = target.ctx, target.memory, target.one, target.tokens
    sample, decode, batch_one = sampler.sample, ll.llama_decode, ll.llama_batch_get_one
    clock = policy.clock
    policy.new_reply()
    batch = ll.llama_batch_init(n_draft + 1, 0, 1)
    try:
        for i in range(n_draft + 1):
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
        # Sampled while verifying a draft, not emitted yet.
        pending: int | None = None
        while out.may_continue():
            token = sample(ctx, -1) if pending is None else pending
            pending = None
            split = out.emit(token)
            if split:
                yield split
            if out.done:
                return
            history[n_history] = token
            n_history += 1
            k = policy.draft_length()
            room = min(k, out.limit - out.generated, n_batch - 1)
            drafts: list[int] = []
            if room > 0:
                t0 = clock()
                if drafter is not None:
                    drafts = drafter.propose(history, n_history, room)
                    # Once per prompt: not what each draft costs.
                    t0 += drafter.prefill_s
                else:
                    drafts = lookup(history[:n_history])[:room].tolist()
                policy.looked_up(clock() - t0, len(drafts), room)
            if not drafts:
                one[0] = token
                t0 = clock()
                rc = decode(ctx, batch_one(one, 1))
                policy.single(clock() - t0)
                if rc != 0:
                    target.failed(rc, out)
                    return
                kept.append(token)
                continue
            n_kept = len(kept)
            batch.n_tokens = len(drafts) + 1
            for i, t in enumerate([token, *drafts]):
                batch.token[i] = t
                batch.pos[i] = n_kept + i
            t0 = clock()
            rc = decode(ctx, batch)
            elapsed = clock() - t0
            if rc != 0:
                target.failed(rc, out)
                return
            kept.append(token)
            # What the KV cache holds now; rejected ones go below.
            kept.extend(drafts)
            stats.drafted_tokens += len(drafts)
            accepted = 0
            for i, draft in enumerate(drafts):
                if not out.may_continue():
                    break
                sampled = sample(ctx, i)
                if sampled != draft:
                    pending = sampled
                    break
                accepted += 1
                split = out.emit(sampled)
                if split:
                    yield split
                history[n_history] = sampled
                n_history += 1
                if out.done:
                    break
            stats.accepted_draft_tokens += accepted
            # A draft cut short (end of reply, cancel) says nothing about the rest: judged by what
            # was tried.
            policy.verified(elapsed, len(drafts), accepted, rejected=pending is not None)
            keep = n_kept + 1 + accepted
            if keep < len(kept):
                if not ll.llama_memory_seq_rm(mem, 0, keep, -1):
                    raise GenerationError(
                        "llama.cpp could not drop rejected draft tokens from the KV cache; "
                        "start a new conversation, or turn speculative decoding off."
                    )
                del kept[keep:]
            if out.done:
                return
    finally:
        ll.llama_batch_free(batch)
        stats.drafting_turned_off = policy.turned_off
        # A probe that had not judged yet: still off.
        stats.draft_k = 0 if policy.turned_off else policy.k
