"""The token lens and stop strings (unit tests on a token table instead of a model): the tokens
held back for a stop string that then matched are no part of the reply, and their lens steps say
so (``after_stop``), so the lens shows what the reply is; a token whose text the reply shows in
part is the reply's. Kept when saved and read back."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from fakes import lens_step
from vibechat.engine.llama import decoding
from vibechat.engine.llama.decoding import Emitter
from vibechat.engine.llama.lens import LensSampler, lens_events
from vibechat.engine.turns.backend import TextDelta, TokenCandidates
from vibechat.engine.turns.lens_steps import path_prefix, saved_steps

END = 0
TABLE = {1: b"Paris", 2: b".", 3: b"\n", 4: b"User", 5: b":", 6: b".\n", 7: b"\nUser"}


@pytest.fixture(autouse=True)
def table_vocab(monkeypatch):
    monkeypatch.setattr(decoding.ll, "llama_vocab_is_eog", lambda _vocab, token: token == END)


def scripted_lens() -> LensSampler:
    """A lens with no sampler of its own: its steps are appended as the script draws."""
    lens = LensSampler.__new__(LensSampler)
    lens.steps, lens.start, lens._taken = [], 0, 0
    return lens


def reply(draws: list[int]) -> tuple[str, list[TokenCandidates]]:
    """The reply's text and the lens's steps, the decode loop's way (llamacpp.py): a step per
    draw, the steps handed out before the text they add and once more at the end."""
    out = Emitter(TABLE.__getitem__, None, frozenset(), threading.Event(), 100, ("\nUser:",))
    lens = scripted_lens()

    def events():
        for index, token in enumerate(draws):
            if token != END:
                lens.steps.append(lens_step(index, TABLE[token]))
            for _thinking, text in out.emit(token):
                yield TextDelta(text)
            if out.done:
                return

    seen = [*lens_events(events(), lens, out), *lens.take(out.generated, out.after_stop)]
    seen += [TextDelta(text) for _thinking, text in out.tail()]
    text = "".join(e.text for e in seen if isinstance(e, TextDelta))
    return text, [e for e in seen if isinstance(e, TokenCandidates)]


@pytest.mark.parametrize(
    ("draws", "text", "cut"),
    [
        # "\n", "User", ":" were held back for "\nUser:" and never shown.
        ([1, 2, 3, 4, 5], "Paris.", [False, False, True, True, True]),
        # ".\n" shows its "." : the reply's token; "User" and ":" are not.
        ([1, 6, 4, 5], "Paris.", [False, False, True, True]),
        # "\nUser" is held back whole, then the match ends it.
        ([1, 2, 7, 5], "Paris.", [False, False, True, True]),
        # Held back, then shown after all (no match): the reply's.
        ([1, 3, 1, END], "Paris\nParis", [False, False, False]),
    ],
)
def test_steps_held_back_for_a_stop_string_are_marked(draws, text, cut):
    shown, steps = reply(draws)
    assert shown == text
    assert [step.after_stop for step in steps] == cut
    # Saved and read back (the history's, run --json's "logprobs"), the mark stays.
    saved = saved_steps({"content": [step.to_openai() for step in steps]})
    assert [step.after_stop for step in saved] == cut


def test_another_path_from_a_cut_token_makes_it_the_new_versions_own():
    """Taking another path at a token held back for the stop string: the tokens before it and
    the one picked are the new version's start, no longer cut."""
    _text, steps = reply([1, 2, 3, 4, 5])
    with_ids = [
        TokenCandidates(
            s.index,
            replace(s.chosen, token_id=10 + s.index),
            tuple(replace(c, token_id=10 * (i + 2) + s.index) for i, c in enumerate(s.top)),
            after_stop=s.after_stop,
        )
        for s in steps
    ]
    saved = {"content": [s.to_openai() for s in with_ids]}
    picked = with_ids[3].top[1].token_id
    prefix = path_prefix(saved, 3, picked)
    assert prefix.token_ids == (10, 11, 12, picked)
    assert [s.after_stop for s in prefix.steps] == [False] * 4
    assert prefix.steps[-1].forced
