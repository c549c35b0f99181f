"""A draft model for speculative decoding (``--draft-model REF``): a small model of the
target's family, loaded next to it with its own llama_context, that proposes the next k
tokens greedily. The target verifies them in engine/llama/drafting.py exactly as it verifies a
prompt-lookup draft (a greedy draft is deterministic, so sample-and-compare is rejection
sampling: the reply keeps the target's distribution).

The draft's KV cache follows the conversation: before each proposal it keeps the longest
common prefix of what it holds and what the target has emitted (rejected drafts leave it
then), evaluates the rest in one batch, and drafts one token per ``llama_decode``.

A draft model must tokenize like the target: the same vocabulary size, the same BOS and EOS
ids, and the same text for a sample of token ids; anything else is refused in one line
before a token is drafted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import llama_cpp as ll

from ..errors import GenerationError, ModelLoadError
from .loading import LoadRequest, free_model, kv_cache_computed
from .memory_checks import check_draft_memory

# A catch-up longer than this is a prefill (propose's prefill_s).
PREFILL_TOKENS = 32
# Token ids compared between draft and target (spread over the vocabulary).
VOCAB_SAMPLE = 256


def vocab_signature(vocab) -> tuple[int, int, int, list[bytes]]:
    """(n_vocab, BOS id, EOS id, the text of VOCAB_SAMPLE token ids spread over the vocabulary)."""
    n = int(ll.llama_vocab_n_tokens(vocab))
    step = max(1, n // VOCAB_SAMPLE)
    ids = sorted({*range(0, n, step), *range(max(0, n - 8), n)})[: VOCAB_SAMPLE + 8]
    texts = [ll.llama_vocab_get_text(vocab, i) or b"" for i in ids]
    return n, int(ll.llama_vocab_bos(vocab)), int(ll.llama_vocab_eos(vocab)), texts


def vocab_mismatch(draft_vocab, target_vocab) -> str | None:
    """What differs between two vocabularies, in a few words (None: they match)."""
    dn, dbos, deos, dtexts = vocab_signature(draft_vocab)
    tn, tbos, teos, ttexts = vocab_signature(target_vocab)
    if dn != tn:
        return f"{dn:,} tokens against the model's {tn:,}"
    if (dbos, deos) != (tbos, teos):
        return f"BOS/EOS ids {dbos}/{deos} against the model's {tbos}/{teos}"
    differ = sum(a != b for a, b in zip(dtexts, ttexts, strict=True))
    if differ:
        return f"{differ} of {len(ttexts)} sampled tokens spelled differently"
    return None


class DraftModel:
    """The draft model and its context. ``propose`` is called by the decode loop only, on
    the thread that owns the target (a llama_context is not thread-safe)."""

    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int,
        n_threads: int,
        n_gpu_layers: int,
        extra_buffers: bool,
        target_vocab,
        name: str,
        check_kv: Callable[[Any], int | None] | None = None,
    ) -> None:
        """``check_kv(model)``: given the loaded draft model, before its context is made, the
        bytes its KV cache will take (it raises when they do not fit: the memory check)."""
        self.path = path
        self.name = name
        self.file_size = path.stat().st_size
        self.kv_bytes: int | None = None
        # Of the last proposal, the time spent on a prefill (see propose).
        self.prefill_s = 0.0
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        mparams.use_extra_bufts = extra_buffers
        self._model = ll.llama_model_load_from_file(str(path).encode("utf-8"), mparams)
        self._ctx = None
        if not self._model:
            raise ModelLoadError(
                f"llama.cpp could not load the draft model {path.name}: try another file, "
                "or drop --draft-model."
            )
        self._vocab = ll.llama_model_get_vocab(self._model)
        why = vocab_mismatch(self._vocab, target_vocab)
        if why:
            self.close()
            raise ModelLoadError(
                f"the draft model {path.name} does not share the model's vocabulary ({why}): "
                f"choose a draft model of the same family as {name}, or drop --draft-model."
            )
        if check_kv is not None:
            try:
                self.kv_bytes = check_kv(self._model)
            except BaseException:
                self.close()
                raise
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = min(512, n_ctx)
        cparams.n_threads = cparams.n_threads_batch = n_threads
        self._ctx = ll.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            raise ModelLoadError(
                f"llama.cpp could not create a context for the draft model {path.name} "
                f"({n_ctx} tokens): lower --ctx, or drop --draft-model."
            )
        self._mem = ll.llama_get_memory(self._ctx)
        self._n_batch = int(cparams.n_batch)
        # What the draft's KV cache holds.
        self._tokens: list[int] = []
        self._greedy = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        ll.llama_sampler_chain_add(self._greedy, ll.llama_sampler_init_greedy())
        self._one = (ll.llama_token * 1)()

    def reset(self) -> None:
        if self._ctx is not None:
            ll.llama_memory_clear(self._mem, True)
        self._tokens = []

    def close(self) -> None:
        if getattr(self, "_greedy", None) is not None:
            ll.llama_sampler_free(self._greedy)
            self._greedy = None
        free_model(self._ctx, self._model)
        self._ctx = self._model = None

    def _decode(self, tokens: Sequence[int]) -> None:
        for start in range(0, len(tokens), self._n_batch):
            chunk = tokens[start : start + self._n_batch]
            arr = (ll.llama_token * len(chunk))(*chunk)
            rc = ll.llama_decode(self._ctx, ll.llama_batch_get_one(arr, len(chunk)))
            if rc != 0:
                self.reset()
                raise GenerationError(
                    f"llama.cpp failed in the draft model (llama_decode returned {rc}); "
                    "start a new conversation, or drop --draft-model."
                )
            self._tokens.extend(chunk)

    def propose(self, history, n_history: int, k: int) -> list[int]:
        """Up to ``k`` tokens the draft model expects after ``history[:n_history]`` (greedy;
        fewer when it expects the end of the reply)."""
        if k <= 0 or n_history <= 0:
            return []
        held = self._tokens
        keep = 0
        # Evaluate at least the last token for fresh logits.
        limit = min(len(held), n_history - 1)
        while keep < limit and held[keep] == history[keep]:
            keep += 1
        if keep < len(held):
            if not ll.llama_memory_seq_rm(self._mem, 0, keep, -1):
                ll.llama_memory_clear(self._mem, True)
                keep = 0
            del held[keep:]
        catch_up = [int(t) for t in history[keep:n_history]]
        t0 = time.perf_counter()
        self._decode(catch_up)
        # A catch-up longer than a step's (the prompt, after a reset or a probe long after the
        # last one) is the draft's prefill: paid once, not a cost of each draft.
        self.prefill_s = time.perf_counter() - t0 if len(catch_up) > PREFILL_TOKENS else 0.0
        drafts: list[int] = []
        one, ctx = self._one, self._ctx
        while True:
            token = int(ll.llama_sampler_sample(self._greedy, ctx, -1))
            if ll.llama_vocab_is_eog(self._vocab, token):
                break
            drafts.append(token)
            if len(drafts) >= k:
                # The last draft is not evaluated here: the next proposal does it if it is kept.
                break
            one[0] = token
            if ll.llama_decode(ctx, ll.llama_batch_get_one(one, 1)) != 0:
                self.reset()
                break
            held.append(token)
        return drafts

    @property
    def memory_bytes(self) -> int:
        """What it holds in memory: its weights and its KV cache (when known)."""
        return self.file_size + (self.kv_bytes or 0)

    @property
    def context(self) -> int:
        return int(ll.llama_n_ctx(self._ctx)) if self._ctx is not None else 0


def load_draft(
    request: LoadRequest,
    context_size: int,
    n_threads: int,
    n_gpu_layers: int,
    extra_buffers: bool,
    on_cpu: bool,
    target_vocab: Any,
) -> DraftModel:
    """The draft model of ``request`` (--draft-model), beside the model loaded (whose
    vocabulary is ``target_vocab``); ``on_cpu``: its KV cache is checked in RAM."""
    draft_info = request.draft_gguf
    assert draft_info is not None
    gguf = request.gguf

    def check_kv(draft_model: object) -> int | None:
        """The draft's KV cache (f16, the context's size), checked in RAM beside both
        models' weights (the model's own KV cache is allocated by now: what is
        available already leaves it out)."""
        draft_kv = kv_cache_computed(draft_model, context_size, "f16", draft_info.architecture)
        if on_cpu:
            check_draft_memory(draft_kv, request.weights, context_size)
        return draft_kv

    return DraftModel(
        draft_info.path,
        n_ctx=context_size,
        n_threads=n_threads,
        n_gpu_layers=n_gpu_layers,
        extra_buffers=extra_buffers,
        target_vocab=target_vocab,
        name=gguf.name or gguf.path.name,
        check_kv=check_kv,
    )
