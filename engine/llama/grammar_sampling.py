"""Sampling one token per step from llama.cpp's C sampler chain, with or without a grammar.

With a grammar, this does what llama.cpp's own tools do (``common_sampler_sample`` in
common/sampling.cpp) instead of putting the grammar sampler first in the chain, where it
checks every token of the vocabulary (262k for Gemma 3) against the grammar on every step:

1. sample with the chain alone (no grammar);
2. check only the token drawn against the grammar: a one-element ``llama_token_data_array``
   through the grammar sampler; its logit turns to -inf when the grammar forbids it (an
   end-of-generation token included, until the grammar is complete);
3. accepted: accept it into the grammar (the chain has it already); rejected: fill the
   candidates from the row's logits again, apply the grammar, then the chain, and take
   what the chain selects: a token the grammar allows. It is accepted into both.

Without top-k / top-p / min-p, a reply follows the same distribution as with the grammar
first (an allowed token is drawn with its free probability divided by the allowed mass);
with them the two differ a little, as in llama.cpp: the first draw truncates the whole
vocabulary, a resample only the allowed tokens. Greedy picks the same token either way. The
same seed gives the same reply, run after run (the dist sampler's RNG draws once per token,
and once more per rejection), but not the reply grammar-first sampling gave for that seed.

Accepting happens once per emitted token in every sampler that keeps state. The first draw
is ``llama_sampler_sample`` (the vocabulary filled in C), which accepts the token into the
chain even when the grammar then rejects it; that is harmless only when no sampler in the
chain keeps state on accept (greedy, dist, top-k, top-p, min-p, temperature, typical).
With penalties in the chain, the first draw fills the candidates here instead and accepts
only the token kept.

Imports inside functions are deliberate: numpy (0.1 s to import) loads when a grammar first
samples, not on every start of the engine process (tests/app/test_startup.py).
"""

from __future__ import annotations

import ctypes
import logging
import math
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

import llama_cpp as ll

from ..errors import GenerationError

if TYPE_CHECKING:
    # Numpy (0.1 s to import) only when a grammar samples: not on every engine start.
    import numpy as np

log = logging.getLogger(__name__)

# Samplers whose accept changes nothing: llama_sampler_sample may accept a rejected token.
_STATELESS = frozenset({b"greedy", b"dist", b"top-k", b"top-p", b"min-p", b"temp", b"typical"})


@cache
def token_data() -> np.dtype[Any]:
    """llama_token_data as a numpy record."""
    import numpy as np

    dtype = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
    assert dtype.itemsize == ctypes.sizeof(ll.llama_token_data)
    return dtype


class Sampler(Protocol):
    """What the decode loops sample with: one token per call, accepted into every sampler."""

    def sample(self, ctx: Any, idx: int) -> int: ...

    def free(self) -> None: ...


class ChainSampler:
    """The chain alone (no grammar): one ``llama_sampler_sample`` per token."""

    def __init__(self, chain: Any) -> None:
        self.chain = chain

    def sample(self, ctx: Any, idx: int) -> int:
        return int(ll.llama_sampler_sample(self.chain, ctx, idx))

    def free(self) -> None:
        if self.chain:
            ll.llama_sampler_free(self.chain)
            self.chain = None


def accept_is_stateless(chain: Any) -> bool:
    """Whether no sampler in ``chain`` keeps state on accept (so accepting a token that is
    then dropped changes nothing)."""
    names = [
        ll.llama_sampler_name(ll.llama_sampler_chain_get(chain, i))
        for i in range(ll.llama_sampler_chain_n(chain))
    ]
    return all(name in _STATELESS for name in names)


class GrammarSampler:
    """The chain with a grammar, checked lazily (see the module's docstring). Owns both
    samplers: :meth:`free` frees them. ``sampled`` counts the tokens drawn, ``resampled``
    those the grammar rejected at first: each of those costs what every token costs with
    the grammar first in the chain (the whole vocabulary filtered), on top of the first draw.

    Filtering only the row's highest logits on a rejection is not exact: where the grammar
    rejects the model's choice it allows only a handful of tokens of the vocabulary, often
    ranked far down (measured on the starter model: 3 to 11 allowed tokens, the best of
    them below the 4096th logit at times), and top-k / top-p / min-p must see them all."""

    def __init__(self, chain: Any, grammar: Any, n_vocab: int) -> None:
        self.chain, self.grammar = chain, grammar
        self.n_vocab = n_vocab
        self.sampled = self.resampled = 0
        self._fast_first = accept_is_stateless(chain)
        self._one: Any = ll.llama_token_data()
        self._one_array: Any = ll.llama_token_data_array(
            data=ctypes.pointer(self._one), size=1, selected=-1, sorted=False
        )
        # The vocabulary's candidates: allocated once, on first use.
        self._buf: np.ndarray | None = None
        self._ids: np.ndarray | None = None
        self._array: Any = ll.llama_token_data_array()

    # ------------------------------------------------------------ per token
    def sample(self, ctx: Any, idx: int) -> int:
        """The next token from row ``idx`` of ``ctx``'s logits, allowed by the grammar and
        accepted into the grammar and the chain."""
        if not self._fast_first:
            return self.sample_logits(_logits_row(ctx, idx, self.n_vocab))
        self.sampled += 1
        # Accepts into the chain, whose samplers keep no state on accept: when the grammar
        # rejects the token below, there is nothing to undo, and nothing to add after.
        token = int(ll.llama_sampler_sample(self.chain, ctx, idx))
        if not self.allows(token):
            self.resampled += 1
            token = self._resample(_logits_row(ctx, idx, self.n_vocab))
        ll.llama_sampler_accept(self.grammar, token)
        return token

    def sample_logits(self, logits: np.ndarray) -> int:
        """The lazy step over a logits row (float32, ``n_vocab`` of them), the candidates
        filled here: the token, accepted into the grammar and into the chain, once."""
        self.sampled += 1
        token = self._apply(logits, grammar=False)
        if not self.allows(token):
            self.resampled += 1
            token = self._resample(logits)
        ll.llama_sampler_accept(self.grammar, token)
        ll.llama_sampler_accept(self.chain, token)
        return token

    def allows(self, token: int) -> bool:
        """Whether the grammar, in its current state, allows ``token`` next."""
        one = self._one
        one.id, one.logit, one.p = token, 1.0, 0.0
        arr = self._one_array
        arr.data, arr.size, arr.selected, arr.sorted = ctypes.pointer(one), 1, -1, False
        ll.llama_sampler_apply(self.grammar, ctypes.byref(arr))
        logit = arr.data[0].logit
        return not (math.isinf(logit) and logit < 0)

    def _resample(self, logits: np.ndarray) -> int:
        """The grammar, then the chain, over the whole row; the token selected."""
        return self._apply(logits, grammar=True)

    def _apply(self, logits: np.ndarray, *, grammar: bool) -> int:
        """Fill the candidates from ``logits`` (the whole vocabulary), apply the grammar (if
        asked) then the chain, and return the token the chain selects, accepted into neither."""
        import numpy as np

        n = self.n_vocab
        if self._buf is None:
            self._buf = np.empty(n, dtype=token_data())
            self._ids = np.arange(n, dtype=np.int32)
        buf = self._buf
        # Every time: the chain sorts the candidates in place.
        buf["id"] = self._ids
        buf["logit"] = logits[:n]
        buf["p"] = 0.0
        arr = self._array
        arr.data = buf.ctypes.data_as(ctypes.POINTER(ll.llama_token_data))
        arr.size, arr.selected, arr.sorted = n, -1, False
        if grammar:
            ll.llama_sampler_apply(self.grammar, ctypes.byref(arr))
        ll.llama_sampler_apply(self.chain, ctypes.byref(arr))
        if not 0 <= arr.selected < arr.size:
            raise GenerationError(
                "the grammar allows no token here (llama.cpp's sampler selected none); "
                "check the grammar or schema."
            )
        return int(arr.data[arr.selected].id)

    def free(self) -> None:
        if self.sampled:
            log.debug("grammar: %d of %d tokens resampled", self.resampled, self.sampled)
        for sampler in (self.chain, self.grammar):
            if sampler:
                ll.llama_sampler_free(sampler)
        self.chain = self.grammar = None


def _logits_row(ctx: Any, idx: int, n_vocab: int) -> np.ndarray:
    import numpy as np

    ptr = ll.llama_get_logits_ith(ctx, idx)
    if not ptr:
        raise GenerationError(
            f"llama.cpp returned no logits for output {idx}; start a new conversation."
        )
    return np.ctypeslib.as_array(ptr, shape=(n_vocab,))
