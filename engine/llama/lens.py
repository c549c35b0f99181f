"""The token lens on the local engine (issue 43): for each step of a reply, the candidates the
sampler saw, from the logits llama.cpp computed for that step (``llama_get_logits_ith``: no second
evaluation), as ``TokenCandidates`` events (engine/turns/backend.py).

``LensSampler`` wraps the sampler a reply draws with and changes nothing of the draw: before each
token it reads the step's logits row and

1. takes the row's softmax denominator (numpy, float32 over the whole vocabulary, summed in
   float64) and its best ids (those above a threshold read from a sample of the row, then
   ordered: ``_best_ids``), for each candidate's probability before the chain, after
   temperature;
2. applies llama.cpp's own stages of the reply's chain (``llama_sampler_apply`` on each of
   ``llama_sampler_chain_get``: repeat penalty, top-k, top-p, min-p, temperature; never the draw,
   whose random state stays the reply's) to a small candidate array of the row's best
   ``top_k + PENALTY_ROOM`` logits, and notes after each stage who is gone: the stage that cut
   each candidate;
3. gives each survivor its probability in the draw (a softmax over the survivors of their
   logits after the chain, which is what llama.cpp's dist sampler draws from);

then lets the wrapped sampler draw the token as it would without the lens. The small array is
exact when top-k is on (the default): top-p, min-p and temperature see only top-k's survivors,
and the repeat penalty, which only lowers logits, can let at most ``PENALTY_ROOM`` tokens (its
look-back) into the top k. With top-k off the array is the whole vocabulary (slower: each stage
then sorts it). At temperature 0 the chain ends in the greedy pick: the probabilities before it
are the model's own (temperature 1), the pick's after it 1.

Imports inside functions are deliberate: numpy is imported when the lens first samples
(tests/app/test_startup.py: not on every start of the engine process); the lens costs nothing
when it is off, it is then never made.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import llama_cpp as ll

from ..errors import GenerationError
from ..sanitize import escaped_token
from ..settings.params import PARAM_SPECS, PENALTY_LAST_N, SamplingParams
from ..turns.backend import Candidate, ChatEvent, CutStage, TokenCandidates
from .grammar_sampling import Sampler, token_data

if TYPE_CHECKING:
    import numpy as np

    from .decoding import Emitter

# The repeat penalty can push at most its look-back's tokens out of the top k.
PENALTY_ROOM = PENALTY_LAST_N

# llama.cpp's sampler names, in the lens's words; the draw's own are not applied.
STAGE_LABELS: dict[bytes, CutStage] = {
    b"penalties": "repeat penalty",
    b"top-k": "top-k",
    b"top-p": "top-p",
    b"min-p": "min-p",
    b"temp": "temperature",
    b"temp-ext": "temperature",
}
DRAWS = frozenset({b"dist", b"greedy"})


def logits_row(ctx: Any, idx: int, n_vocab: int) -> np.ndarray:
    """Row ``idx`` of the step's logits, as a numpy view of llama.cpp's own (``n_vocab`` floats)."""
    import numpy as np

    ptr = ll.llama_get_logits_ith(ctx, idx)
    if not ptr:
        raise GenerationError(
            f"llama.cpp returned no logits for output {idx}; start a new conversation."
        )
    return np.ctypeslib.as_array(ptr, shape=(n_vocab,))


class LensSampler:
    """``inner``, the sampler the reply draws with, seen through the lens: each ``sample`` notes
    the step (``steps``) and then draws exactly as ``inner`` does. ``chain``: the llama.cpp chain
    ``inner`` draws with (its stages are applied here, its draw never); ``piece_bytes``: a token's
    bytes. Frees ``inner`` with itself."""

    @classmethod
    def over(
        cls,
        sampler: Sampler,
        vocab: Any,
        params: SamplingParams,
        piece_bytes: Callable[[int], bytes],
        start: int = 0,
    ) -> LensSampler:
        """``sampler`` seen through the lens: the stages of the chain it draws with; ``start``:
        the reply's tokens before its first draw (another path's prefix)."""
        chain = getattr(sampler, "chain", None)
        assert chain is not None, "every reply's sampler draws with a chain"
        return cls(sampler, chain, ll.llama_vocab_n_tokens(vocab), params, piece_bytes, start)

    def __init__(
        self,
        inner: Sampler,
        chain: Any,
        n_vocab: int,
        params: SamplingParams,
        piece_bytes: Callable[[int], bytes],
        start: int = 0,
    ) -> None:
        self.inner = inner
        self.n_vocab = n_vocab
        self.n = params.logprobs
        # The reply's tokens before the first one drawn here (a path's prefix: paths.py).
        self.start = start
        self.steps: list[TokenCandidates] = []
        # Handed out already (``take``).
        self._taken = 0
        self._piece_bytes = piece_bytes
        self._pieces: dict[int, tuple[bytes, str]] = {}
        self._greedy = params.temperature <= 0
        # Before the chain: the temperature's distribution (the model's own when greedy).
        self.temperature = 1.0 if self._greedy else params.temperature
        self._stages = _stages(chain)
        penalized = any(label == "repeat penalty" for _, label in self._stages)
        top_k = params.top_k if not self._greedy else 0
        # The candidate array: the row's best ``width`` (None: the whole vocabulary).
        self._width: int | None = (
            max(self.n, top_k) + (PENALTY_ROOM if penalized else 0)
            if top_k > 0 or self._greedy
            else None
        )
        self.sliders = tuple(
            (name, getattr(params, name))
            for name, spec in PARAM_SPECS.items()
            if spec.llama is not None
        )
        self._array: Any = ll.llama_token_data_array()
        self._buf: np.ndarray | None = None
        self._ids: np.ndarray | None = None
        self._exp: np.ndarray | None = None

    # ------------------------------------------------------------ per token
    def sample(self, ctx: Any, idx: int) -> int:
        """Note the step of row ``idx``, then draw its token with the wrapped sampler."""
        logits = logits_row(ctx, idx, self.n_vocab)
        step = self._observe(logits)
        token = self.inner.sample(ctx, idx)
        self.steps.append(step.candidates(token, self.start + len(self.steps), logits))
        return token

    def forced_step(self, token: int, index: int) -> TokenCandidates:
        """The step of a token the user typed at ``index`` (a path's prefix): no candidates,
        no probability of the model's (none was drawn), ``forced``."""
        data, text = self.piece(token)
        chosen = Candidate(token_id=token, data=data, text=text, logprob=0.0, p_after=0.0)
        return TokenCandidates(
            index=index, chosen=chosen, top=(), sliders=self.sliders, forced=True
        )

    def take(self, generated: int, after_stop: int | None = None) -> Iterator[TokenCandidates]:
        """The steps not handed out yet whose token is part of the reply (``generated``: the
        reply's tokens so far, a path's prefix included; the token that ended the turn is never
        one); ``after_stop``: the index of the first token held back for a stop string that
        matched (``Emitter.after_stop``): its step and those after it are marked so."""
        steps = self.steps
        end = min(generated - self.start, len(steps))
        while self._taken < end:
            step = steps[self._taken]
            if after_stop is not None and step.index >= after_stop:
                step = replace(step, after_stop=True)
            yield step
            self._taken += 1

    def free(self) -> None:
        self.inner.free()

    # ------------------------------------------------------------ one step
    def _observe(self, logits: np.ndarray) -> _Step:
        """What the chain does to this row's candidates (the draw aside)."""
        t = self.temperature
        best = float(logits.max())
        log_norm = best / t + math.log(self._weight(logits, best, t))
        width = self._width
        want = min(self.n_vocab, self.n if width is None else max(width, self.n))
        ids = _best_ids(logits, want)
        if width is None:
            arr = self._fill_all(logits)
        else:
            arr = self._fill(ids[:width], logits[ids[:width]])
        top = ids[: self.n]
        cut, penalized, kept, kept_logits = self._apply(arr, top, logits)
        return _Step(self, top, log_norm, cut, penalized, kept, kept_logits)

    def _weight(self, logits: np.ndarray, best: float, t: float) -> float:
        """The softmax's denominator over the whole row, relative to the best logit:
        sum(exp((logit - best) / t)), in float32 (one buffer, reused) summed in float64."""
        import numpy as np

        if self._exp is None:
            self._exp = np.empty(self.n_vocab, dtype=np.float32)
        buf = self._exp
        np.multiply(logits, 1.0 / t, out=buf)
        np.subtract(buf, best / t, out=buf)
        np.exp(buf, out=buf)
        return float(buf.sum(dtype=np.float64))

    def _fill(self, ids: np.ndarray, logits: np.ndarray) -> Any:
        """The candidate array: ``ids`` with their ``logits``."""
        import numpy as np

        buf = np.empty(len(ids), dtype=token_data())
        buf["id"], buf["logit"], buf["p"] = ids, logits, 0.0
        self._buf = buf
        return self._point(buf)

    def _fill_all(self, logits: np.ndarray) -> Any:
        """The candidate array: the whole vocabulary (top-k off)."""
        import numpy as np

        n = self.n_vocab
        if self._ids is None:
            self._ids = np.arange(n, dtype=np.int32)
            self._buf_all = np.empty(n, dtype=token_data())
        buf = self._buf_all
        buf["id"], buf["logit"], buf["p"] = self._ids, logits[:n], 0.0
        self._buf = buf
        return self._point(buf)

    def _point(self, buf: np.ndarray) -> Any:
        arr = self._array
        arr.data = buf.ctypes.data_as(ctypes.POINTER(ll.llama_token_data))
        arr.size, arr.selected, arr.sorted = len(buf), -1, False
        return arr

    def _apply(
        self, arr: Any, top: np.ndarray, logits: np.ndarray
    ) -> tuple[list[CutStage | None], list[bool], np.ndarray, np.ndarray]:
        """Each stage of the chain on ``arr``: who of ``top`` each cut, whom the repeat penalty
        lowered, and the survivors (ids, logits after the chain)."""
        import numpy as np

        cut: list[CutStage | None] = [None] * len(top)
        penalized = [False] * len(top)
        alive = np.ones(len(top), dtype=bool)
        size = arr.size
        for stage, label in self._stages:
            ll.llama_sampler_apply(stage, ctypes.byref(arr))
            view = _view(arr)
            if label == "repeat penalty":
                penalized = _lowered(view, top, logits)
            if arr.size < size:
                still = _among(top, view["id"])
                for j in np.flatnonzero(alive & ~still):
                    cut[j] = label
                alive &= still
            size = arr.size
        view = _view(arr)
        kept, kept_logits = view["id"].copy(), view["logit"].astype(np.float64)
        if self._greedy:
            # The greedy pick keeps one: the best after the penalty.
            first = int(np.argmax(kept_logits))
            for j in np.flatnonzero(alive & (top != kept[first])):
                cut[j] = "temperature"
            kept, kept_logits = kept[first : first + 1], kept_logits[first : first + 1]
        return cut, penalized, kept, kept_logits

    def piece(self, token: int) -> tuple[bytes, str]:
        """A token's bytes and their escaped text (remembered: a reply reuses its tokens)."""
        known = self._pieces.get(token)
        if known is None:
            data = self._piece_bytes(token)
            known = self._pieces[token] = (data, escaped_token(data))
        return known


class _Step:
    """One step seen before its draw: the ``top`` candidates, the normaliser of the
    distribution before the chain (``log_norm``), who was cut or penalised, and the survivors
    (``kept``, with their logits after the chain)."""

    def __init__(
        self,
        lens: LensSampler,
        top: np.ndarray,
        log_norm: float,
        cut: list[CutStage | None],
        penalized: list[bool],
        kept: np.ndarray,
        kept_logits: np.ndarray,
    ) -> None:
        import numpy as np

        self.lens, self.top, self.log_norm = lens, top, log_norm
        self.cut, self.penalized = cut, penalized
        # The draw's distribution over the survivors.
        weights = np.exp(kept_logits - kept_logits.max()) if len(kept) else kept_logits
        total = float(weights.sum()) if len(kept) else 1.0
        self.p_after = dict(zip(kept.tolist(), (weights / total).tolist(), strict=True))

    def candidate(
        self, token: int, logits: np.ndarray, cut: CutStage | None, penalized: bool
    ) -> Candidate:
        data, text = self.lens.piece(token)
        return Candidate(
            token_id=token,
            data=data,
            text=text,
            logprob=float(logits[token]) / self.lens.temperature - self.log_norm,
            p_after=self.p_after.get(token, 0.0),
            cut=cut,
            penalized=penalized,
        )

    def candidates(self, chosen: int, index: int, logits: np.ndarray) -> TokenCandidates:
        """The step's event, once ``chosen`` was drawn."""
        top = tuple(
            self.candidate(int(token), logits, cut, penalized)
            for token, cut, penalized in zip(
                self.top.tolist(), self.cut, self.penalized, strict=True
            )
        )
        picked = next((c for c in top if c.token_id == chosen), None)
        if picked is None:
            # Outside the top N (a high temperature), or forced by a grammar over the chain.
            cut: CutStage | None = None if chosen in self.p_after else "other"
            picked = self.candidate(chosen, logits, cut, False)
        return TokenCandidates(index=index, chosen=picked, top=top, sliders=self.lens.sliders)


def _stages(chain: Any) -> list[tuple[Any, CutStage]]:
    """The chain's stages the lens applies, in order, with their labels: all but the draw."""
    out: list[tuple[Any, CutStage]] = []
    for i in range(ll.llama_sampler_chain_n(chain)):
        stage = ll.llama_sampler_chain_get(chain, i)
        name = ll.llama_sampler_name(stage)
        if name not in DRAWS:
            out.append((stage, STAGE_LABELS.get(name, "other")))
    return out


def _among(ids: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Which of ``ids`` are in ``pool`` (a set's lookups for a small pool: ``np.isin`` sorts)."""
    import numpy as np

    if len(pool) > 4096:
        return np.isin(ids, pool)
    kept = set(pool.tolist())
    return np.fromiter((i in kept for i in ids.tolist()), dtype=bool, count=len(ids))


def _lowered(view: np.ndarray, top: np.ndarray, logits: np.ndarray) -> list[bool]:
    """Which of ``top`` have a lower logit in ``view`` (the array after the repeat penalty,
    which neither reorders nor drops) than in the row."""
    import numpy as np

    now = view["logit"][top] if len(view) == len(logits) else view["logit"][: len(top)]
    return (np.asarray(now) < logits[top]).tolist()


def _view(arr: Any) -> np.ndarray:
    """The candidate array's live part, as numpy records (a stage may move its data)."""
    import numpy as np

    if arr.size == 0:
        return np.empty(0, dtype=token_data())
    raw = ctypes.cast(arr.data, ctypes.POINTER(ctypes.c_byte * (arr.size * token_data().itemsize)))
    return np.frombuffer(raw.contents, dtype=token_data(), count=arr.size)


# A row's best ids are found among those above a threshold read from every SAMPLE_STRIDE-th logit
# (a few thousand values), with room for twice as many as wanted: one comparison over the row
# instead of a partition of it; a threshold that leaves too few falls back to the partition.
SAMPLE_STRIDE = 64


def _best_ids(logits: np.ndarray, want: int) -> np.ndarray:
    """The ids of the row's ``want`` largest logits, largest first (int32)."""
    import numpy as np

    sample = logits[::SAMPLE_STRIDE]
    j = min(len(sample), 2 * want // SAMPLE_STRIDE + 3)
    floor = np.partition(sample, -j)[-j]
    near = np.flatnonzero(logits >= floor)
    if len(near) < want:
        near = np.argpartition(logits, -want)[-want:]
    order = _best(logits[near], want)
    return near[order].astype(np.int32)


def _best(values: np.ndarray, k: int) -> np.ndarray:
    """The positions of the ``k`` largest ``values``, largest first."""
    import numpy as np

    if k <= 0:
        return np.empty(0, dtype=np.int64)
    part = np.argpartition(values, -k)[-k:] if k < len(values) else np.arange(len(values))
    return part[np.argsort(-values[part], kind="stable")]


def lens_events(
    events: Iterator[ChatEvent], lens: LensSampler, out: Emitter
) -> Iterator[ChatEvent]:
    """A reply's ``events`` with the lens's steps before the text they add: each step whose
    token ``out`` counted as the reply's."""
    for event in events:
        yield from lens.take(out.generated, out.after_stop)
        yield event
