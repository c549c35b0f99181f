"""The token lens's saved steps read back (engine/turns/lens_steps.py): what ``to_openai`` wrote
comes back as the same steps; what a file or a server made up is checked and bounded."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from vibechat.engine.turns.backend import (
    MAX_PREFIX_BYTES,
    Candidate,
    TokenCandidates,
    logprobs_object,
)
from vibechat.engine.turns.lens_steps import MAX_STEPS, PathRefused, path_prefix, saved_steps

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


def saved_reply(*steps: TokenCandidates, **extra) -> dict:
    """A reply's lens as the history keeps it (through JSON)."""
    return json.loads(json.dumps({**logprobs_object(list(steps)), **extra}))


def test_a_path_prefix_is_the_chosen_ids_before_the_step_then_the_candidate():
    # Steps 0 and 2 chose id 17, step 1 chose id 5.
    saved = saved_reply(step(0, thinking=True), step(1), step(2))
    prefix = path_prefix(saved, 2, 9, sliders=SLIDERS)
    assert prefix.token_ids == (17, 5, 9) and prefix.data == b""
    assert [s.chosen.token_id for s in prefix.steps] == [17, 5, 9]
    assert [s.forced for s in prefix.steps] == [False, False, True]
    assert prefix.steps[0].thinking and prefix.steps[2].top[2].cut == "top-k"
    assert prefix.steps[2].slider("temperature") == 0.8
    # Typed: the ids before the step, then the text (the backend tokenizes it).
    typed = path_prefix(saved, 1, -1, "ü!".encode())
    assert typed.token_ids == (17,) and typed.data == "ü!".encode()
    assert [s.chosen.token_id for s in typed.steps] == [17]


def server_step(step: TokenCandidates) -> TokenCandidates:
    def anonymous(c: Candidate) -> Candidate:
        return replace(c, token_id=-1)

    return replace(step, chosen=anonymous(step.chosen), top=tuple(map(anonymous, step.top)))


@pytest.mark.parametrize(
    ("saved", "index", "token", "data", "says"),
    [
        (None, 0, 5, b"", "no saved token lens"),
        ({"content": []}, 0, 5, b"", "no saved token lens"),
        ("3 steps", 3, 5, b"", "step 4 is not one of this reply's (it has 3)"),
        ("3 steps", -1, 5, b"", "step 0 is not one of this reply's"),
        ("3 steps cut", 3, 5, b"", "kept only for its first 3 tokens"),
        ("3 steps, then a changed one", 3, 5, b"", "cannot be read past its first 3 tokens"),
        ("3 steps", 1, 4242, b"", "token 4242 is not a candidate of step 2"),
        ("3 steps", 1, 5, b"", "that is the token the reply took there"),
        ("3 steps", 1, -1, b"", "type the text to go on with"),
        ("3 steps", 1, -1, b"\xff\xfe", "not UTF-8 text"),
        ("3 steps", 1, -1, b"x" * (MAX_PREFIX_BYTES + 1), "at most 65,536 can be typed"),
        ("a server's", 1, 5, b"", "no token ids (a server wrote it)"),
    ],
)
def test_a_path_that_cannot_be_taken_is_refused_in_one_line(saved, index, token, data, says):
    steps = (step(0), step(1), step(2))
    if saved == "3 steps":
        saved = saved_reply(*steps)
    elif saved == "3 steps, then a changed one":
        saved = saved_reply(*steps)
        saved["content"].append({"token": "x", "logprob": "high"})
    elif saved == "3 steps cut":
        saved = saved_reply(*steps, truncated=40)
    elif saved == "a server's":
        # A server's candidates have no ids.
        saved = saved_reply(*(server_step(s) for s in steps))
    with pytest.raises(PathRefused) as refused:
        path_prefix(saved, index, token, data)
    assert says in str(refused.value) and "\n" not in str(refused.value)
