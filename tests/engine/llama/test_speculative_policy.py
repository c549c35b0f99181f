"""The adaptive draft-length policy (engine/llama/speculative.py), driven with simulated costs: it
drafts long when verifying is cheap and drafts are accepted, turns drafting off when it does
not pay, probes again with a bounded, backing-off overhead."""

from __future__ import annotations

import random

import pytest

from vibechat.engine.llama.speculative import (
    BASE_INTERVAL,
    MAX_INTERVAL,
    PROBE_LOOKUPS,
    PROBE_VERIFIES,
    WARMUP_TOKENS,
    AdaptiveDraft,
    FixedDraft,
    make_policy,
)
from vibechat.engine.settings.choices import check_speculative


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate(
    policy: AdaptiveDraft | FixedDraft,
    tokens: int,
    *,
    c1: float,
    m: float,
    accept: float,
    hit: float = 1.0,
    lookup: float = 0.0001,
    seed: int = 1,
    first: float | None = None,
    table: dict[int, float] | None = None,
) -> dict[str, float]:
    """Decode ``tokens`` tokens as the loop in engine/llama/drafting.py would, on a machine where a
    single-token step costs ``c1`` s, each drafted position ``m`` s more, a lookup finds a draft
    with probability ``hit`` and each draft is accepted with probability ``accept``. Time runs
    on the policy's fake clock; returns the simulated seconds and counts. ``first``: what
    the first drafted position costs, if not ``m`` (a CPU's batch kernels: the first extra
    position is the dearest); ``table``: what a verification of n drafts costs, by n, instead."""
    rng = random.Random(seed)
    clock = policy.clock
    assert isinstance(clock, FakeClock)
    start = clock.now
    done = verifies = lookups = drafted = 0
    ks: list[int] = []
    while done < tokens:
        k = policy.draft_length()
        assert 0 <= k <= policy.max_k
        ks.append(k)
        found = 0
        if k:
            lookups += 1
            found = k if rng.random() < hit else 0
            # a draft model: a decode a draft
            spent = lookup * k if getattr(policy, "per_draft_lookup", False) else lookup
            clock.now += spent
            policy.looked_up(spent, found, k)
        if not found:
            clock.now += c1
            policy.single(c1)
            done += 1
            continue
        cost = table[found] if table else c1 + (m if first is None else first) + m * (found - 1)
        clock.now += cost
        accepted = 0
        while accepted < found and rng.random() < accept:
            accepted += 1
        rejected = accepted < found
        policy.verified(cost, found, accepted, rejected)
        verifies += 1
        drafted += found
        done += accepted + 1
    return {
        "seconds": clock.now - start,
        "verifies": verifies,
        "lookups": lookups,
        "drafted": drafted,
        "ks": ks,
    }  # type: ignore[dict-item]


def adaptive(max_k: int = 10) -> AdaptiveDraft:
    return AdaptiveDraft(max_k, clock=FakeClock())


def test_cheap_verification_and_high_acceptance_raise_k():
    policy = adaptive(10)
    run = simulate(policy, 400, c1=0.010, m=0.0005, accept=0.95)
    assert policy.k >= 6 and not policy.turned_off
    assert run["seconds"] < 400 * 0.010 / 2  # more than twice as fast as plain decoding


def test_k_climbs_past_an_expensive_first_position_when_more_positions_are_cheap():
    # as the starter on a 2-core AMD EPYC: a 2-token batch costs 2 steps, 11 tokens 3.6 steps
    policy = adaptive(10)
    run = simulate(policy, 600, c1=0.010, first=0.010, m=0.0017, accept=0.9)
    assert policy.k >= 8 and not policy.turned_off
    assert run["seconds"] < 600 * 0.010 / 1.5


def test_a_probe_whose_drafts_are_kept_measures_the_longest_draft_next():
    policy = adaptive(10)
    policy.single(0.01)
    policy.single(0.01)
    assert policy.draft_length() == 4 and policy.probing
    policy.looked_up(0.0001, 4, 4)
    policy.verified(
        0.05, 4, 3, True
    )  # 5 tokens cost 5 steps: not hopeless before the longest is measured
    assert policy.probing and policy.draft_length() == 10 and not policy.hopeless()
    policy.looked_up(0.0001, 10, 10)
    policy.verified(0.06, 10, 10, False)
    assert not policy.probing and set(policy.costs) == {4, 10}
    # sizes never measured: optimistic, at the cheapest measured cost of a drafted position
    assert policy.m == pytest.approx(0.005)
    assert policy.cost(7) == pytest.approx(0.01 + 7 * 0.005)
    assert policy.k > 0 and not policy.turned_off


# The starter on a 2-core AMD EPYC (docs/PERFORMANCE.md): a verifying decode of 1 + n tokens, in
# seconds. Far from smooth: 8 tokens cost less than 5 (the kernels work in tiles of 4 and 8 rows).
EPYC = {
    0: 0.0096,
    1: 0.021,
    2: 0.0265,
    3: 0.031,
    4: 0.045,
    5: 0.048,
    6: 0.054,
    7: 0.037,
    8: 0.052,
    9: 0.055,
    10: 0.062,
}


def test_an_irregular_cost_curve_is_explored_and_the_cheapest_size_found():
    policy = adaptive(10)
    plain = 600 * EPYC[0]
    fixed = simulate(
        FixedDraft(10, clock=FakeClock()), 600, c1=EPYC[0], m=0, accept=0.97, table=EPYC
    )
    run = simulate(policy, 600, c1=EPYC[0], m=0, accept=0.97, table=EPYC)
    assert policy.k == 7 and not policy.turned_off
    assert set(policy.costs) < set(range(1, 11))  # each size tried at most when it looked better
    fixed_gain = plain / fixed["seconds"] - 1
    assert plain / run["seconds"] - 1 >= 0.9 * fixed_gain  # keeps at least 90 % of the fixed gain


def test_where_no_acceptance_could_pay_two_verifications_are_all_it_costs():
    # as the starter on 1 thread of a loaded CPU: 5 tokens in one batch cost 8 single steps;
    # the probe's drafts are kept, so the longest draft is measured before the verdict
    policy = adaptive(10)
    run = simulate(policy, 200, c1=0.040, first=0.200, m=0.025, accept=1.0)
    assert run["verifies"] == 2 and policy.turned_off and policy.hopeless()
    # the next replies: no probe before MAX_INTERVAL plain tokens, counted across replies
    left = MAX_INTERVAL - (200 - 1 - 5 - 11)  # 2 of warm-up, verifications of 4 and 10 drafts
    policy.new_reply()
    run = simulate(policy, left - 10, c1=0.040, first=0.200, m=0.025, accept=1.0)
    assert run["verifies"] == 0 and run["lookups"] == 0 and policy.turned_off
    policy.new_reply()
    run = simulate(policy, 50, c1=0.040, first=0.200, m=0.025, accept=1.0)
    assert run["verifies"] == 1  # the probe came back, within the wait plus the warm-up


def test_expensive_verification_turns_drafting_off_and_stays_near_plain_speed():
    policy = adaptive(10)
    run = simulate(policy, 1000, c1=0.010, m=0.010, accept=0.5)
    assert policy.k == 0 and policy.turned_off
    assert run["seconds"] < 1000 * 0.010 * 1.03  # at most 3 % slower than plain decoding


def test_low_acceptance_turns_drafting_off_even_when_verifying_is_cheap():
    policy = adaptive(10)
    simulate(policy, 500, c1=0.010, m=0.001, accept=0.02)
    assert policy.k == 0 and policy.turned_off


def test_drafts_that_are_never_found_turn_drafting_off():
    policy = adaptive(10)
    run = simulate(policy, 1000, c1=0.010, m=0.0005, accept=0.9, hit=0.0, lookup=0.0005)
    assert policy.k == 0 and policy.turned_off
    assert run["verifies"] == 0
    assert run["seconds"] < 1000 * 0.010 * 1.03


def test_probes_come_back_with_exponential_back_off_and_bounded_overhead():
    policy = adaptive(10)
    run = simulate(policy, 5000, c1=0.010, m=0.006, accept=0.0)  # drafts could pay, but all fail
    ks = run["ks"]
    assert isinstance(ks, list)
    assert ks[:WARMUP_TOKENS] == [0] * WARMUP_TOKENS
    # each probe is short: at most PROBE_VERIFIES verifications of one draft
    assert run["verifies"] <= policy.probes * PROBE_VERIFIES
    assert run["lookups"] <= policy.probes * PROBE_LOOKUPS
    # probes kept coming (not drafting off for good), but ever further apart
    assert policy.probes >= 4
    assert policy.interval == MAX_INTERVAL
    assert policy.probes <= 4 + 5000 // BASE_INTERVAL // 4
    starts = [i for i in range(1, len(ks)) if ks[i] and not ks[i - 1]]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0]


def test_a_probe_finds_drafting_paying_again_when_the_text_changes():
    policy = adaptive(10)
    simulate(policy, 300, c1=0.010, m=0.001, accept=0.0)
    assert policy.k == 0
    simulate(policy, 2000, c1=0.010, m=0.001, accept=0.95, seed=2)
    assert policy.k >= 3 and not policy.turned_off


def test_k_stays_within_bounds_and_a_new_reply_starts_with_measured_costs():
    policy = adaptive(3)
    simulate(policy, 300, c1=0.010, m=0.0001, accept=0.99)
    assert policy.k == 3
    c1 = policy.c1
    policy.new_reply()
    assert policy.c1 == c1 and policy.k == 0 and not policy.turned_off
    assert policy.draft_length() == 0  # warm-up: plain steps first


def test_expected_tokens_and_rates():
    policy = adaptive(4)
    policy.succ, policy.trials = 1.0, 2.0
    assert policy.expected_tokens(1) == pytest.approx(1.5)
    assert policy.expected_tokens(3) == pytest.approx(1.875)
    policy.c1, policy.lookup, policy.hit = 0.01, 0.0, 1.0
    assert policy.cost(2) == pytest.approx(
        0.03
    )  # nothing measured: each position as dear as a step
    policy.costs = {2: 0.01}  # flat: drafts cost nothing (measured)
    assert policy.cost(1) == pytest.approx(0.01) and policy.cost(4) == pytest.approx(0.01)
    assert policy.rate(0) == pytest.approx(100.0)
    assert policy.rate(3) == pytest.approx(187.5)
    assert policy.best_k() == 4
    policy.costs = {1: 0.02, 3: 0.04}  # k + 1 positions for 1 + alpha + ... tokens: never pays
    assert policy.cost(2) == pytest.approx(0.03) and policy.cost(4) == pytest.approx(0.05)
    assert policy.best_k() == 0


def test_fixed_policy_always_drafts_the_most_and_the_mode_names():
    fixed = make_policy("prompt-lookup", 7)
    assert isinstance(fixed, FixedDraft) and fixed.draft_length() == 7
    fixed.verified(1.0, 7, 0, True)
    assert fixed.draft_length() == 7 and not fixed.turned_off
    assert isinstance(make_policy("auto", 7), AdaptiveDraft)
    assert check_speculative("AUTO") == "auto"
    with pytest.raises(ValueError):
        AdaptiveDraft(0)


def test_drafting_that_stops_paying_is_checked_again_soon():
    from vibechat.engine.llama.speculative import RECHECK_INTERVAL

    policy = adaptive(10)
    simulate(policy, 300, c1=0.010, m=0.003, accept=0.95)
    assert policy.k > 0
    ks = simulate(policy, 300, c1=0.010, m=0.003, accept=0.0, seed=3)["ks"]
    assert isinstance(ks, list)
    off = ks.index(0)  # turned off in the bad patch ...
    back = next(i for i in range(off, len(ks)) if ks[i])
    assert back - off <= RECHECK_INTERVAL  # ... and probed again soon, not after BASE_INTERVAL


def test_a_draft_model_as_dear_as_the_model_is_hopeless_whatever_it_drafts():
    policy = AdaptiveDraft(10, clock=FakeClock(), per_draft_lookup=True)
    # verification is cheap, every draft is kept, but each drafted token costs a full step
    simulate(policy, 200, c1=0.010, m=0.0005, accept=1.0, lookup=0.010)
    assert policy.lookup == pytest.approx(0.010) and policy.hopeless() and policy.k == 0


def test_the_back_off_of_a_reply_whose_drafts_failed_goes_on_in_the_next_reply():
    policy = adaptive(10)
    simulate(policy, 400, c1=0.010, m=0.006, accept=0.0)  # drafts could pay, but all fail
    assert policy.turned_off and policy.interval > 2 * BASE_INTERVAL
    waited = policy.interval
    policy.new_reply()
    ks = simulate(policy, 400, c1=0.010, m=0.006, accept=0.0, seed=4)["ks"]
    assert isinstance(ks, list)
    starts = [i for i in range(1, len(ks)) if ks[i] and not ks[i - 1]]
    assert starts[0] == WARMUP_TOKENS  # each reply probes early: its text may be one to copy
    assert (
        len(starts) == 1 or starts[1] - starts[0] >= waited
    )  # ... then no sooner than the last wait
    # a reply where drafting paid starts the next one from the base interval again
    simulate(policy, 300, c1=0.010, m=0.001, accept=0.95, seed=5)
    policy.new_reply()
    assert not policy.turned_off and policy.interval == BASE_INTERVAL


def test_one_preempted_step_does_not_turn_drafting_off():
    policy = adaptive(10)
    simulate(policy, 300, c1=0.010, m=0.002, accept=0.95)
    k, cost = policy.k, policy.costs[policy.k]
    assert k > 0
    policy.looked_up(0.0001, k, k)
    policy.verified(1.0, k, k, False)  # the OS took the CPU for a second
    assert policy.costs[k] <= cost * 1.25 + 1e-9 and policy.k > 0 and not policy.turned_off
