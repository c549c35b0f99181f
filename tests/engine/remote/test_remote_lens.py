"""The token lens on a server (issue 43, points 1 and 6), against the stub server on 127.0.0.1:
``logprobs``/``top_logprobs`` asked for only when the lens is on, each piece's candidates as a
``TokenCandidates`` with the cut marks of the reply's slider values, a token's bytes shown
escaped, and one notice for a server that sends none."""

from __future__ import annotations

import math

import pytest

from vibechat.engine.errors import GenerationError
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import (
    ChatMessage,
    GenerationDone,
    LensNotice,
    ReplyPrefix,
    TokenCandidates,
)
from vibechat.engine.turns.lens_steps import chain_cuts

HI = [ChatMessage("user", "Say hello.")]


def events(stub, params: SamplingParams) -> list:
    backend = stub.backend()
    try:
        return list(backend.stream_chat(HI, params))
    finally:
        backend.close()


def test_the_lens_off_asks_the_server_for_nothing(stub):
    got = events(stub, SamplingParams(seed=1))
    assert "logprobs" not in stub.last_body and "top_logprobs" not in stub.last_body
    assert not [e for e in got if isinstance(e, (TokenCandidates, LensNotice))]


def test_each_piece_comes_with_its_candidates_and_the_sliders_cuts(stub):
    params = SamplingParams(logprobs=5, top_k=3, top_p=1.0, min_p=0.0, temperature=1.0, seed=1)
    got = events(stub, params)
    assert stub.last_body["logprobs"] is True and stub.last_body["top_logprobs"] == 5
    steps = [e for e in got if isinstance(e, TokenCandidates)]
    done = got[-1]
    assert isinstance(done, GenerationDone) and done.text == stub.reply
    assert len(steps) == len(stub.reply.split(" "))
    assert [s.index for s in steps] == list(range(len(steps)))
    first = steps[0]
    assert first.chosen.text == "Hello" and first.chosen.token_id == -1
    assert math.isclose(first.chosen.logprob, math.log(0.6))
    # Escaped, never raw: an escape sequence, and half a character.
    assert [c.text for c in first.top] == ["Hello", " maybe", "\\x1b[2J", "\\xe2\\x82", " so"]
    assert first.top[3].data == b"\xe2\x82"
    assert [c.cut for c in first.top] == [None, None, None, "top-k", "top-k"]
    kept = first.top[:3]
    total = 0.6 + 0.2 + 0.1
    for c, p in zip(kept, (0.6, 0.2, 0.1), strict=True):
        assert math.isclose(c.p_after, p / total, rel_tol=1e-9)
    assert first.chosen is first.top[0] and first.chosen.cut is None
    assert first.slider("top_k") == 3


def test_a_server_without_logprobs_is_one_notice(stub):
    stub.logprobs = False
    got = events(stub, SamplingParams(logprobs=5, seed=1))
    notices = [e for e in got if isinstance(e, LensNotice)]
    assert len(notices) == 1 and "sent no logprobs" in notices[0].reason
    assert "\n" not in notices[0].reason
    assert not [e for e in got if isinstance(e, TokenCandidates)]
    assert isinstance(got[-1], GenerationDone) and got[-1].text == stub.reply


@pytest.mark.parametrize(
    ("changes", "cuts"),
    [
        ({"temperature": 0}, [None, "temperature", "temperature", "temperature"]),
        ({"top_p": 0.7}, [None, None, "top-p", "top-p"]),
        ({"min_p": 0.25}, [None, None, "min-p", "min-p"]),
        ({"top_k": 1}, [None, "top-k", "top-k", "top-k"]),
    ],
)
def test_the_cut_marks_follow_the_slider_values(changes, cuts):
    logprobs = [math.log(p) for p in (0.5, 0.3, 0.1, 0.05)]
    values = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "temperature": 1.0, **changes}
    params = SamplingParams(**values)
    got, after = chain_cuts(logprobs, params)
    assert got == cuts
    assert math.isclose(sum(after), 1.0) and all(
        p == 0 for p, c in zip(after, got, strict=True) if c
    )


@pytest.mark.parametrize(
    "item",
    [
        {"token": "x", "logprob": float("nan")},
        {"token": "x", "logprob": 3.0},
        {"token": 7, "logprob": -1.0},
        {"token": "x", "logprob": True},
        "not an object",
    ],
)
def test_a_malformed_item_is_skipped(item):
    from vibechat.engine.remote.lens import RemoteLens

    lens = RemoteLens(SamplingParams(logprobs=3))
    assert lens.feed({"logprobs": {"content": [item]}}) == []
    assert lens.feed({"logprobs": {"content": "nope"}}) == []


def test_a_path_from_a_token_is_refused_in_one_line_before_anything_is_sent(stub):
    backend = stub.backend()
    try:
        with pytest.raises(GenerationError, match="needs the local engine") as refused:
            list(backend.stream_chat(HI, SamplingParams(logprobs=5), prefix=ReplyPrefix((1, 2))))
    finally:
        backend.close()
    assert "\n" not in str(refused.value)
    assert not [r for r in stub.requests if r["path"].endswith("/chat/completions")]
