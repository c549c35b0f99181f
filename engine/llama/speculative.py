"""How many tokens to draft: the policy of speculative decoding, apart from the decode loop
(engine/llama/drafting.py) so that it can be tested with a fake clock.

Whether drafting pays depends on the machine and the model as much as on the text: on a CPU
where the output layer is most of a step (Gemma 3 270M, a 262k vocabulary), verifying k drafts
costs nearly k + 1 single steps, and only long, mostly accepted drafts win; on a GPU, or with a
bigger model whose step is reading the weights, k + 1 positions cost about one. So
``AdaptiveDraft`` measures, while the reply is decoded:

* ``c1``, the wall time of one single-token ``llama_decode`` (smoothed);
* ``cost(n)``, the wall time of a verifying ``llama_decode`` of one token and n drafts,
  smoothed per n as measured. A size not measured yet is estimated optimistically, at the
  cheapest measured cost of a drafted position: on a CPU the cost is far from smooth in the
  size (the matrix kernels work in tiles of 4 and 8 rows: on a 2-core AMD EPYC the starter
  verifies 8 tokens in 38 ms and 5 in 46), so no curve through a few sizes predicts the
  others; a size that looks better than the best measured one is tried, then judged by what
  it cost, and while drafts are accepted a try costs next to nothing;
* ``lookup``, the time of one draft lookup, and ``hit``, how often a lookup finds a draft;
* ``alpha``, the chance that a drafted token is accepted given that the ones before it were
  (decayed counts, so that it follows the text).

A verification of k drafts yields ``E(k) = 1 + alpha + ... + alpha^k`` tokens (the accepted
drafts, and the token sampled where the first draft failed, or after the last). Drafting with
k then gives ``(hit E(k) + 1 - hit) / (lookup + hit cost(k) + (1 - hit) c1)`` tokens a second
against ``1 / c1`` without; the policy takes the best k in 1..``max_k`` after every
verification and drafts only if it beats plain decoding by ``MARGIN``. When it does not,
drafting stops (no lookups either) and comes back as a short probe after ``interval`` plain
tokens: at most ``PROBE_LOOKUPS`` lookups and ``PROBE_VERIFIES`` verifications of the draft
length that would pay best were every draft kept (``PROBE_K`` before any was measured),
ending at the first verification that accepts nothing or shows that no draft can pay; a
probe whose drafts are kept while the longest draft was never measured measures it next.
Every probe that does not pay doubles the interval (up to ``MAX_INTERVAL``); one that pays
resets it. Where, with the longest draft measured, no length could pay even if every draft
were kept (a loaded CPU, a model whose output layer is most of a step), the interval is
``MAX_INTERVAL`` at once, and later replies start without a probe. So a reply whose drafts
always fail pays, per probe, at most a few lookups and one verification, ever more rarely
(docs/PERFORMANCE.md).
Measured costs are kept from reply to reply (the machine's and the model's); acceptance
starts again at each reply (the text's), with a probe after ``WARMUP_TOKENS`` plain tokens.

``FixedDraft`` always drafts ``max_k`` tokens (``speculative = "prompt-lookup"``, kept for
benchmarks and for machines where it is known to pay).

Pure Python, no llama_cpp: the decode loop reports what it measured, the policy answers with
the next draft length (0: decode one token, no lookup).
"""

from __future__ import annotations

import time
from collections.abc import Callable

WARMUP_TOKENS = 2  # single-token steps measured before the first probe of a reply
MARGIN = 1.02  # drafting must beat plain decoding by this factor
BASE_INTERVAL = 64  # plain tokens before the next probe ...
RECHECK_INTERVAL = 16  # ... or these, when drafting that paid stops paying (a bad patch?)
MAX_INTERVAL = 512  # ... doubling after each probe that did not pay, up to this
PROBE_LOOKUPS = 8  # a probe ends after this many lookups ...
PROBE_VERIFIES = 2  # ... or this many verifications (or one that accepted nothing)
PROBE_K = 4  # drafts per verification in a probe (at least)
SMOOTHING = 0.25  # weight of a new timing in the moving averages
OUTLIER = 2.0  # a new timing counts as at most this many times the average so far
DECAY = 0.9  # weight of the acceptance counts so far at each new verification
HIT_DECAY = 0.9  # ... and of the lookup hit rate at each lookup


class FixedDraft:
    """Always ``max_k`` drafts (the speculative mode ``prompt-lookup``)."""

    adaptive = False

    def __init__(self, max_k: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self.max_k = max_k
        self.clock = clock
        self.turned_off = False
        self.k = max_k

    def new_reply(self) -> None:
        pass

    def draft_length(self) -> int:
        return self.max_k

    def looked_up(self, seconds: float, found: int, asked: int = 1) -> None:
        pass

    def single(self, seconds: float) -> None:
        pass

    def verified(self, seconds: float, drafted: int, accepted: int, rejected: bool) -> None:
        pass


class AdaptiveDraft:
    """Chooses the draft length from measured costs and acceptance (module docstring).

    The decode loop calls ``draft_length()`` before each step, then reports the step:
    ``looked_up`` (a lookup's time and how many drafts it found), ``single`` (a one-token
    decode's time) or ``verified`` (a verifying decode's time, drafts sent and accepted).
    ``clock`` is what the loop times with (injectable for tests)."""

    adaptive = True

    def __init__(
        self,
        max_k: int,
        clock: Callable[[], float] = time.perf_counter,
        per_draft_lookup: bool = False,
    ) -> None:
        if max_k < 1:
            raise ValueError("max_k must be at least 1")
        self.max_k = max_k
        self.clock = clock
        # A draft model's lookup costs a decode per draft; prompt lookup's is one search.
        self.per_draft_lookup = per_draft_lookup
        # Costs, in seconds, kept from reply to reply (they are the machine's and the model's).
        self.c1: float | None = None
        # Drafts n -> a verifying decode of 1 + n tokens.
        self.costs: dict[int, float] = {}
        self.lookup = 0.0
        # Plain tokens before the next probe.
        self._plain_left = 0
        self.turned_off = False
        self.interval = BASE_INTERVAL
        # Probes started, over the backend's life.
        self.probes = 0
        self.new_reply()

    def new_reply(self) -> None:
        """Acceptance is the text's: start each reply from a neutral prior and probe early.
        Where the last reply ended with drafting off, the back-off of its probes goes on
        (after this reply's first probe): a chat's replies tend to be alike."""
        backing_off = self.turned_off
        self.succ, self.trials = 1.0, 2.0  # alpha = 0.5
        self.hit = 0.5
        # The draft length (0: not drafting).
        self.k = 0
        # Drafting judged not to pay, last time it was judged.
        self.turned_off = False
        if not backing_off:
            self.interval = BASE_INTERVAL
        self._warmup = WARMUP_TOKENS
        # Lookups left in the running probe (0: no probe).
        self._probe_lookups = 0
        self._probe_verifies = 0
        if self.hopeless():
            # Measured in earlier replies: no text can make drafting pay here. The wait for the
            # next probe goes on counting across replies (the machine's load may change).
            self.turned_off = True
            self.interval = MAX_INTERVAL
        else:
            self._plain_left = 0

    # ------------------------------------------------------------------ estimates
    @property
    def alpha(self) -> float:
        return self.succ / self.trials

    def expected_tokens(self, k: int) -> float:
        """Tokens one verification of ``k`` drafts yields: 1 + alpha + ... + alpha^k."""
        a = min(self.alpha, 0.999)
        return (1 - a ** (k + 1)) / (1 - a)

    def cost(self, n: int) -> float:
        """Estimated seconds of a decode of one token and ``n`` drafts: as measured, else the
        optimistic estimate ``c1 + n * (the cheapest measured cost of a drafted position)``
        (each extra position as dear as a whole step while no verification was measured).

        Optimistic on purpose: on a CPU the cost of a batch is far from smooth in its size
        (the starter on a 2-core AMD EPYC: 8 tokens verify in 38 ms, 5 tokens in 46 ms: the
        matrix kernels work in tiles of 4 and 8 rows), so no curve through a few sizes predicts
        the others. A size that looks better than the best measured one is tried once and then
        judged by what it cost; while drafts are being accepted, such a try costs next to
        nothing (its tokens are kept)."""
        c1 = self.c1 or 1.0
        if n <= 0:
            return c1
        if n in self.costs:
            return self.costs[n]
        m = self.m
        return c1 + n * m if m is not None else c1 * (n + 1)

    @property
    def m(self) -> float | None:
        """The cheapest measured cost of a drafted position (what a verification of n drafts
        adds to a single step, over n), or None while none was measured."""
        if not self.costs or self.c1 is None:
            return None
        return max(0.0, min((cost - self.c1) / n for n, cost in self.costs.items()))

    def rate(self, k: int) -> float:
        """Estimated tokens a second drafting up to ``k`` tokens (0: plain decoding)."""
        if k == 0:
            return 1.0 / self.cost(0)
        tokens = self.hit * self.expected_tokens(k) + (1 - self.hit)
        seconds = self._lookup_cost(k) + self.hit * self.cost(k) + (1 - self.hit) * self.cost(0)
        return tokens / seconds

    def hopeless(self) -> bool:
        """Whether drafting cannot pay even if every draft were kept: drafting k tokens and
        verifying them costs at least as much as the single steps their tokens would take.
        Until the longest draft was measured (the batch that spreads its fixed costs the
        most), a size not measured is taken to cost no more than one step: then only a
        draft model as dear as the model is hopeless."""
        if self.c1 is None or not self.costs:
            return False
        plain = self.rate(0) * MARGIN
        known = self.max_k in self.costs

        def floor(k: int) -> float:
            return self.cost(k) if known or k in self.costs else self.cost(0)

        return all(
            (k + 1) / (floor(k) + self._lookup_cost(k)) <= plain for k in range(1, self.max_k + 1)
        )

    def _lookup_cost(self, k: int) -> float:
        return self.lookup * k if self.per_draft_lookup else self.lookup

    def best_k(self) -> int:
        """The draft length that pays best, or 0 if none beats plain decoding by MARGIN."""
        plain = self.rate(0) * MARGIN
        best, best_rate = 0, plain
        for k in range(1, self.max_k + 1):
            r = self.rate(k)
            if r > best_rate:
                best, best_rate = k, r
        return best

    # ------------------------------------------------------------------ decisions
    @property
    def probing(self) -> bool:
        return self._probe_lookups > 0

    def draft_length(self) -> int:
        """How many tokens to draft at the next step (0: one plain token, no lookup)."""
        if self._warmup > 0:
            return 0
        if self.k == 0 and not self.probing:
            if self._plain_left > 0:
                return 0
            self._start_probe()
        return self.k

    def _start_probe(self) -> None:
        """A probe drafts the length that would pay best were every draft kept (the machine's
        best batch, measured), or PROBE_K before any was measured: long enough to measure a
        verification that may pay (a batch's first extra position is the dearest on a CPU),
        short enough that a failing one costs little."""
        self.probes += 1
        self._probe_lookups = PROBE_LOOKUPS
        self._probe_verifies = PROBE_VERIFIES
        self.k = self.best_batch()

    def best_batch(self) -> int:
        """The measured draft length with the most tokens a second if every draft were kept
        (what the machine and the model offer, whatever the text), or PROBE_K."""
        if not self.costs:
            return min(self.max_k, PROBE_K)
        return max(self.costs, key=lambda n: (n + 1) / (self.cost(n) + self._lookup_cost(n)))

    def _end_probe(self) -> None:
        self._probe_lookups = self._probe_verifies = 0
        self._decide(after_probe=True)

    def _decide(self, after_probe: bool = False) -> None:
        k = self.best_k()
        if k:
            if self.turned_off or self.k == 0:
                self.interval = BASE_INTERVAL
            self.k, self.turned_off = k, False
            return
        was_drafting = self.k > 0 and not after_probe
        self.k, self.turned_off = 0, True
        if self.hopeless():
            self.interval = MAX_INTERVAL
        elif was_drafting:
            # It paid until now: look again soon, without doubling the wait.
            self._plain_left = RECHECK_INTERVAL
            return
        self._plain_left = self.interval
        self.interval = min(self.interval * 2, MAX_INTERVAL)

    # ------------------------------------------------------------------ measurements
    def looked_up(self, seconds: float, found: int, asked: int = 1) -> None:
        """A lookup for ``asked`` drafts took ``seconds`` and found ``found``."""
        if self.per_draft_lookup:
            # A draft model: one decode a draft.
            seconds /= max(1, asked)
        self.lookup = seconds if self.lookup == 0.0 else _smooth(self.lookup, seconds)
        self.hit = self.hit * HIT_DECAY + (1.0 if found else 0.0) * (1 - HIT_DECAY)
        if self.probing:
            self._probe_lookups -= 1
            if self._probe_lookups <= 0:
                self._end_probe()
        elif self.k and not found:
            # Lookups that find nothing cost time too.
            self._decide()

    def single(self, seconds: float) -> None:
        """A one-token decode took ``seconds`` (after a lookup found nothing, or plain)."""
        self.c1 = seconds if self.c1 is None else _smooth(self.c1, seconds)
        if self._warmup > 0:
            self._warmup -= 1
        elif self.k == 0 and not self.probing and self._plain_left > 0:
            self._plain_left -= 1

    def verified(self, seconds: float, drafted: int, accepted: int, rejected: bool) -> None:
        """A decode of one token and ``drafted`` drafts took ``seconds``; the first
        ``accepted`` drafts were kept, and the next one was ``rejected`` (False: all kept, or
        the reply ended before the rest were checked)."""
        if drafted <= 0:
            return
        old = self.costs.get(drafted)
        self.costs[drafted] = seconds if old is None else _smooth(old, seconds)
        self.succ = self.succ * DECAY + accepted
        self.trials = self.trials * DECAY + accepted + (1.0 if rejected else 0.0)
        if self.probing:
            self._probe_verifies -= 1
            if accepted == 0 or self.hopeless():
                # A probe whose first draft failed ends at once: that is the case that costs.
                self._end_probe()
            elif self.max_k not in self.costs:
                # Drafts were kept: measure the longest draft too, before judging. On a CPU the
                # longest batch spreads its fixed costs the most, so a verification of PROBE_K
                # drafts alone can make drafting look hopeless where it pays (docs/PERFORMANCE.md).
                self._probe_verifies = max(self._probe_verifies, 1)
                self.k = self.max_k
            elif self._probe_verifies <= 0:
                self._end_probe()
        elif self.k:
            # (With k == 0, the probe ended at this step's lookup, and has been judged.)
            self._decide()


def _smooth(old: float, new: float) -> float:
    """A moving average that one outlier (a step the OS preempted) cannot double."""
    return old + SMOOTHING * (min(new, OUTLIER * old) - old)


def make_policy(
    mode: str, max_k: int, clock: Callable[[], float] = time.perf_counter, draft_model: bool = False
) -> FixedDraft | AdaptiveDraft:
    """The policy of a speculative mode: ``auto`` adapts, ``prompt-lookup`` is fixed;
    ``draft_model``: drafts come from a draft model (a lookup costs a decode per draft)."""
    return AdaptiveDraft(max_k, clock, draft_model) if mode == "auto" else FixedDraft(max_k, clock)
