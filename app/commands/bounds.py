"""The stderr line for a reply a bound cut short: which bound, and what to change.

A reply that ends as ``length`` with its text is plain to see; two cuts were silent before
(issue 25): a server's reply cut at vibechat's own size bound (``GenerationDone.bound``),
and a reply that a limit cut while the model was still thinking, so no answer came at all
(a ``<think>`` that never closed): ``run`` printed nothing and exited 0. Both now say so
in one line; the exit status stays 0 (the limit did what it was set to do; the JSON says
``finish_reason: "length"``)."""

from __future__ import annotations

from typing import Literal

from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import GenerationDone, GenerationStats, ModelInfo


def limit_that_cut(
    params: SamplingParams, stats: GenerationStats, info: ModelInfo
) -> Literal["max_tokens", "context", "other"]:
    """Which limit ended a reply cut as ``length``: the reply's token limit (as used), the
    local context filling up, or another (a server's, one the engine set)."""
    # As used (None: no limit; 0 asks for none too).
    limit = params.max_tokens
    if limit and stats.completion_tokens >= limit:
        return "max_tokens"
    if (
        not info.server
        and info.context_size
        and stats.prompt_tokens + stats.completion_tokens >= info.context_size - 1
    ):
        return "context"
    return "other"


def bound_line(
    done: GenerationDone,
    info: ModelInfo,
    params: SamplingParams,
    text: str,
    fix_tokens: str = "--max-tokens",
) -> str | None:
    """The line for ``done`` when a bound cut it silently, else None. ``text``: the answer
    (without the thinking); ``fix_tokens``: the option to raise (``--prompts-file`` adds
    its line's ``max_tokens``)."""
    if done.stats.finish_reason != "length":
        return None
    no_answer = not text.strip() and bool(done.thinking.strip())
    thinking = " while the model was still thinking: no answer came" if no_answer else ""
    if done.bound:
        return (
            f"the reply was cut at {done.bound}{thinking}; ask for a shorter reply: "
            f"lower {fix_tokens}."
        )
    if not no_answer:
        # A visible cut at max_tokens or the context: the JSON's finish_reason says it.
        return None
    which = limit_that_cut(params, done.stats, info)
    if which == "max_tokens":
        cut, fix = f"the {params.max_tokens}-token limit ({fix_tokens})", f"raise {fix_tokens}"
    elif which == "context":
        cut, fix = f"the {info.context_size}-token context (--ctx)", "raise --ctx"
    else:
        cut, fix = "its token limit", f"raise {fix_tokens}"
    budget = "" if params.think_budget else ", give its thinking a budget (--think-budget N)"
    return f"the reply hit {cut}{thinking}; {fix}{budget}, or turn thinking off (--thinking off)."
