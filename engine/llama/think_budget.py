"""The thinking budget on the local engine (issue 45): a reply's thinking ends at
``SamplingParams.think_budget`` tokens, as llama.cpp's ``--reasoning-budget`` ends it.

The reply's ``Emitter`` (decoding.py) counts the tokens generated inside the thinking and says
when the budget is due (``Emitter.budget_due``): the count has reached the budget, the reply
is inside its thinking, not inside a tool call (harmony's messages to a tool), and no UTF-8
character is half written. The reply's sampler is then ``BudgetSampler``: in place of the
next draws it hands the decode loop the closing tokens (``closing_tokens``): the closing
phrase (``think_budget_message``, tokenized as text: it cannot open a turn) and the model's
own end of thinking (``</think>``, or harmony's switch to the ``final`` channel). The loop
emits and evaluates each as it would a sampled token, so the KV cache, the splitter, the
counts and the token lens see them as part of the reply; the answer is then sampled as
usual. The decode loops (plain and drafting) need no change: a drafted token that equals a
closing token is kept, one that differs is rejected, as for any sampled token.

A budget the context cannot hold is refused before the prompt is evaluated
(engine/settings/think_switch.py ``check_budget``). The closing tokens are accepted into the
reply's chain (the repeat penalty sees them), never into a grammar: under an output format the
budget is not applied (the grammar shapes every token), and a tool call's lazy grammar waits
for its trigger, which the closing never holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp as ll

from ..settings.params import SamplingParams
from ..turns.harmony import CHANNEL, END, MESSAGE, START
from ..turns.thinking import CLOSE_TAG
from .decoding import Emitter
from .grammar_sampling import Sampler

# What ends the thinking: after </think> the answer starts on its own line, as Qwen3 and
# DeepSeek write it; harmony ends the analysis message and opens the final one.
THINK_CLOSE = CLOSE_TAG + "\n\n"
HARMONY_CLOSE = f"{END}{START}assistant{CHANNEL}final{MESSAGE}"


def applies(params: SamplingParams) -> int | None:
    """The budget a reply's thinking ends at (None: none): under an output format the grammar
    shapes every token, and nothing is put in."""
    return params.think_budget if params.output_format is None else None


def closing_tokens(
    tokenize: Callable[[str, bool, bool], list[int]], message: str, harmony: bool
) -> list[int]:
    """The tokens put into the reply at the budget: ``message`` as text on a line of its own
    (special tokens not parsed), then the end of thinking with its special tokens.
    ``tokenize(text, add_special, parse_special)``."""
    close = HARMONY_CLOSE if harmony else THINK_CLOSE
    phrase = tokenize(f"\n\n{message}\n", False, False) if message else []
    return [*phrase, *tokenize(close, False, True)]


class BudgetSampler:
    """The reply's sampler, with the budget: once ``out`` says the budget is due it hands out
    ``closing`` a token a call (accepted into the chain), then draws as ``inner`` again. The
    same face as ``inner`` (``chain`` included, which the token lens reads); frees it."""

    def __init__(self, inner: Sampler, out: Emitter, closing: Sequence[int]) -> None:
        self.inner = inner
        self.chain: Any = getattr(inner, "chain", None)
        self._out = out
        self._closing = tuple(closing)
        # The closing tokens still to hand out, last first.
        self._queue: list[int] = []

    def sample(self, ctx: Any, idx: int) -> int:
        if not self._queue and self._out.budget_due():
            self._out.budget_reached = True
            self._queue = list(reversed(self._closing))
        if self._queue:
            token = self._queue.pop()
            if self.chain:
                ll.llama_sampler_accept(self.chain, token)
            return token
        return self.inner.sample(ctx, idx)

    def free(self) -> None:
        self.inner.free()


def budgeted(sampler: Sampler, out: Emitter, closing: Callable[[], list[int]]) -> Sampler:
    """``sampler`` with the reply's budget (itself when it has none); ``closing``: the closing
    tokens, made only when there is a budget."""
    if out.budget is None:
        return sampler
    return BudgetSampler(sampler, out, closing())
