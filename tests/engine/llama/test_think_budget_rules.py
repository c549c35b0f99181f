"""The thinking budget's rules in the decode loop (engine/llama/think_budget.py with decoding.py's
``Emitter``), on a token table instead of a model (unit tests: the real starter is
test_think_budget.py): at the budget the closing tokens replace the next draws and the answer
begins; never inside a half-written UTF-8 character; never inside a harmony message to a tool."""

from __future__ import annotations

import threading

import pytest

from vibechat.engine.llama import decoding
from vibechat.engine.llama.decoding import Emitter
from vibechat.engine.llama.think_budget import BudgetSampler

END = 0  # the table's end of the reply
CLOSING = [100, 101, 102]
TABLE = {
    1: b"ab",
    2: b"\xc3",  # the first byte of "é"
    3: b"\xa9",  # its second
    5: b"Yes",
    100: b"\n\nEnough.\n",
    101: b"</think>",
    102: b"\n\n",
    # harmony
    10: b"<|channel|>analysis<|message|>",
    11: b"<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
    12: b'{"a":',
    13: b"1}",
}


class Scripted:
    """The model's draws, in order (no chain: nothing to accept into)."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = list(tokens)
        self.drawn = 0

    def sample(self, ctx, idx) -> int:
        self.drawn += 1
        return self.tokens.pop(0) if self.tokens else END

    def free(self) -> None:
        pass


@pytest.fixture(autouse=True)
def table_vocab(monkeypatch):
    monkeypatch.setattr(decoding.ll, "llama_vocab_is_eog", lambda _vocab, token: token == END)


def decode(draws: list[int], budget: int, inside: bool = True, harmony: bool = False):
    """The reply the loop makes of ``draws`` under ``budget``: (thinking, answer, emitter,
    the tokens emitted)."""
    out = Emitter(
        TABLE.__getitem__,
        None,
        frozenset(),
        threading.Event(),
        1000,
        (),
        inside,
        harmony,
        budget=budget,
    )
    sampler = BudgetSampler(Scripted(draws), out, CLOSING)
    thinking, answer, emitted = [], [], []
    while out.may_continue():
        token = sampler.sample(None, -1)
        emitted.append(token)
        for is_thinking, text in out.emit(token):
            (thinking if is_thinking else answer).append(text)
        if out.done:
            break
    for is_thinking, text in out.tail():
        (thinking if is_thinking else answer).append(text)
    return "".join(thinking), "".join(answer), out, emitted


def test_at_the_budget_the_closing_tokens_come_and_the_answer_begins():
    thinking, answer, out, emitted = decode([1, 1, 1, 1, 5], budget=2)
    assert emitted == [1, 1, *CLOSING, 1, 1, 5, END]
    assert thinking == "abab\n\nEnough.\n" and answer == "ababYes"
    assert out.budget_reached and out.thinking_tokens == 2 + 2  # the phrase and </think>


def test_no_character_is_cut_in_half():
    thinking, _answer, out, emitted = decode([1, 2, 3, 5], budget=2)
    # The budget was due after "\xc3": the closing waits for the character's second byte.
    assert emitted == [1, 2, 3, *CLOSING, 5, END]
    assert thinking == "abé\n\nEnough.\n" and "\ufffd" not in thinking
    assert out.thinking_tokens == 3 + 2


def test_never_inside_a_harmony_message_to_a_tool():
    # In the analysis channel the budget closes the thinking (the table's closing stands in).
    _t, _a, out, emitted = decode([10, 1, 1, 1], budget=2, inside=False, harmony=True)
    assert out.budget_reached and emitted[:4] == [10, 1, 100, 101]
    # In a call's arguments it waits: the call streams whole, and ends the reply here.
    _t, _a, out, emitted = decode([11, 12, 13], budget=1, inside=False, harmony=True)
    assert emitted == [11, 12, 13, END] and not out.budget_reached


def test_without_a_budget_or_outside_the_thinking_nothing_is_put_in():
    _t, answer, out, emitted = decode([5, 1, 1, 1], budget=1, inside=False)
    assert emitted == [5, 1, 1, 1, END] and answer == "Yesababab" and not out.budget_reached
