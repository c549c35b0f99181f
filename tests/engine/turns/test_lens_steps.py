"""The token lens's saved steps read back (engine/turns/lens_steps.py): what ``to_openai`` wrote
comes back as the same steps; what a file or a server made up is checked and bounded."""

from __future__ import annotations

import json

from vibechat.engine.turns.backend import Candidate, TokenCandidates, logprobs_object
from vibechat.engine.turns.lens_steps import MAX_STEPS, saved_steps

SLIDERS = (("temperature", 0.8), ("top_k", 40))


def step(index: int, thinking: bool = False) -> TokenCandidates:
    top = (
        Candidate(17, b" Paris", " Paris", -0.25, 0.9),
        Candidate(5, b"\xe2\x82", "\\xe2\\x82", -1.5, 0.1),
        Candidate(9, b"\x1b[2J", "\\x1b[2J", -4.0, 0.0, cut="top-k"),
    )
    return TokenCandidates(index, top[index % 2], top, SLIDERS, thinking)


def test_what_was_saved_reads_back_the_same():
    steps = [step(0, thinking=True), step(1), step(2)]
    # Through JSON, as the history keeps it.
    saved = json.loads(json.dumps(logprobs_object(steps)))
    got = saved_steps(saved, SLIDERS)
    assert [s.index for s in got] == [0, 1, 2]
    assert [s.thinking for s in got] == [True, False, False]
    assert got[1].chosen.token_id == 5 and got[1].chosen.data == b"\xe2\x82"
    assert got[0].top == steps[0].top and got[2].slider("temperature") == 0.8
    assert got[2].top[2].cut == "top-k"


def test_a_made_up_item_ends_the_reading_and_nothing_is_raw():
    good = step(0).to_openai()
    forged = dict(good, bytes=[27, 93, 50], token="\x1b]2", id=True, cut="<b>", top_logprobs=[])
    bad = dict(good, logprob=float("nan"))
    got = saved_steps({"content": [good, forged, bad, good]})
    assert len(got) == 2
    # The text is made again from the bytes, escaped; a bool is no token id, a bad cut none.
    assert got[1].chosen.text == "\\x1b]2" and got[1].chosen.token_id == -1
    assert got[1].chosen.cut is None
    assert saved_steps({"content": "x"}) == () and saved_steps([1, 2]) == ()
    assert saved_steps({"content": [dict(good, bytes=list(range(256)) * 2)]}) == ()


def test_reading_is_bounded():
    item = step(0).to_openai()
    assert len(saved_steps({"content": [item] * (MAX_STEPS + 5)})) == MAX_STEPS
