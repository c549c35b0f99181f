"""Compaction (issue 45): the model writes a summary of a conversation's start, and the
conversation goes on from a new branch that starts with it (``History.compact``: the original
branch stays as it was, one switch away; search finds both).

``/compact``, ``run --continue --compact`` and the ``compact`` context policy all come here:
``compaction_point`` says what is summarised (whole turns: the kept part starts with a prompt),
``ask_summary`` asks the model (with the engine lock held by the caller), ``checked_summary``
refuses a summary that is empty or not shorter than what it replaces (a base model, the starter,
usually writes nothing useful), in one line, before anything is replaced.

The summary reaches the model folded into the system prompt (``summary_system``): every chat
template takes a system message first, while a user message before a prompt would break the
templates that insist on turns alternating.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..errors import VibechatError
from ..sanitize import sanitize
from ..settings.params import SamplingParams
from ..turns.backend import Backend, ChatMessage, GenerationDone, TextDelta

log = logging.getLogger("vibechat.session")

# What the model is asked for a summary; the user's instructions follow it.
SUMMARY_REQUEST = (
    "Summarise the conversation so far for your own later use: keep every fact, name, number, "
    "document content, decision and open question a later answer may need; leave out "
    "pleasantries. Write only the summary."
)
# What the model is told the summary is (before it, in the system prompt).
SUMMARY_INTRO = "A summary of the earlier conversation (its messages were compacted into it):"
# The most tokens a summary may take; less on a small context.
SUMMARY_TOKENS = 1024
# Characters of a summary kept at most (the check refuses one not shorter than what it replaces).
SUMMARY_CHARS = 64_000
# The user's instructions, at most.
INSTRUCTION_CHARS = 2_000


class CompactionError(VibechatError):
    """A compaction that cannot be done (nothing to compact, a summary that is empty or not
    shorter than what it replaces): one line; nothing is replaced."""


@dataclass(frozen=True)
class Compaction:
    """A summary to replace the turns before ``kept`` (an index into the conversation's turns:
    ``kept`` turns on are kept): ``replaced_chars`` is the size of what it replaces."""

    summary: str
    kept: int
    replaced_chars: int


@dataclass(frozen=True)
class CompactionNotice:
    """What a front end shows of an automatic compaction (the ``compact`` policy): the summary
    that now stands for ``replaced`` messages, or, when ``problem`` is set, why nothing was
    replaced (the prompt then goes on trimmed)."""

    summary: str = ""
    replaced: int = 0
    problem: str = ""


def compaction_point(turns: Sequence[ChatMessage], upto: int | None = None) -> int:
    """Where the kept part starts: the index of the first turn not summarised. ``upto``: the
    index of the last turn to summarise (a focused message; None: all of them). Whole turns are
    summarised: the kept part starts at a prompt (a user message), so the summary is never the
    middle of an exchange. 0: nothing to summarise."""
    end = len(turns) if upto is None else min(upto + 1, len(turns))
    while end < len(turns) and turns[end].role != "user":
        end += 1
    return end


def replaced_size(turns: Sequence[ChatMessage]) -> int:
    """The characters the summary must be shorter than: the replaced turns' texts."""
    return sum(len(turn.content) for turn in turns)


def summary_messages(
    system: str | None, turns: Sequence[ChatMessage], instructions: str = ""
) -> list[ChatMessage]:
    """What the model is sent to summarise ``turns``: the system prompt, the turns, and the
    request (with the user's ``instructions``, bounded)."""
    request = SUMMARY_REQUEST
    extra = " ".join(sanitize(instructions[:INSTRUCTION_CHARS]).split())
    if extra:
        request += f" {extra}"
    head = [ChatMessage("system", system)] if system else []
    return [*head, *turns, ChatMessage("user", request)]


def summary_params(params: SamplingParams, context_size: int | None) -> SamplingParams:
    """The conversation's parameters for the summary: no output format, no stop strings, and a
    token limit a summary can keep to (a quarter of the context at most)."""
    limit = SUMMARY_TOKENS if not context_size else min(SUMMARY_TOKENS, context_size // 4)
    return replace(params, max_tokens=limit, output_format=None, stop=(), logprobs=0)


def ask_summary(
    backend: Backend,
    messages: list[ChatMessage],
    params: SamplingParams,
    stop_requested: Callable[[], bool] = lambda: False,
    on_text: Callable[[str], object] | None = None,
) -> str:
    """The summary ``backend``'s model writes when sent ``messages`` (``summary_messages``);
    blocks, with the engine lock held by the caller. Raises ``CompactionError`` when stopped,
    a failure's own error otherwise."""
    parts: list[str] = []
    size = 0
    events = backend.stream_chat(messages, params)
    try:
        for event in events:
            if stop_requested():
                backend.cancel()
                raise CompactionError("compaction stopped: nothing was replaced.")
            if isinstance(event, TextDelta) and size < SUMMARY_CHARS:
                parts.append(event.text)
                size += len(event.text)
                if on_text is not None:
                    on_text(event.text)
            elif isinstance(event, GenerationDone) and event.finish_reason == "cancelled":
                raise CompactionError("compaction stopped: nothing was replaced.")
    finally:
        events.close()
    return "".join(parts)


def checked_summary(summary: str, replaced_chars: int) -> str:
    """``summary`` as it replaces ``replaced_chars`` characters (trimmed), or
    ``CompactionError`` in one line when it is empty or not shorter: a model that cannot
    summarise (a base model, the starter) writes nothing useful, and nothing is replaced."""
    text = summary.strip()
    if not text:
        raise CompactionError(
            "the model wrote an empty summary, so nothing was replaced: try /compact again, "
            "with instructions, or with a chat model."
        )
    if len(text) >= replaced_chars:
        raise CompactionError(
            f"the summary ({len(text):,} characters) is not shorter than what it would replace "
            f"({replaced_chars:,}), so nothing was replaced: the model cannot summarise this; "
            "try a chat model."
        )
    return text


# A word a summary is expected to share with what it summarises: four letters or more, or a
# number of two digits or more (names, numbers, dates are what summaries keep).
_WORD = re.compile(r"[^\W\d_]{4,}|\d{2,}")


def grounded_summary(summary: str, replaced: Sequence[ChatMessage]) -> str:
    """``summary`` (checked: ``checked_summary``) when it shares a word with the turns it
    replaces, else ``CompactionError`` in one line: a model that cannot summarise (a base model,
    the starter) tends to write a short line of its own ("Hi!") that is shorter, not a summary.
    The user's own edit of a summary is theirs and is not checked so."""
    words = {w.casefold() for w in _WORD.findall(summary)}
    for turn in replaced:
        if words & {w.casefold() for w in _WORD.findall(turn.content)}:
            return summary
    raise CompactionError(
        "the summary shares no word with the conversation it would replace, so nothing was "
        "replaced: the model cannot summarise this; try /compact with instructions, or a chat "
        "model."
    )


def summary_system(system: str | None, summary: str | None) -> str | None:
    """The system prompt the model is sent when the conversation starts with a summary: the
    system prompt, then the summary under ``SUMMARY_INTRO``."""
    if not summary:
        return system
    block = f"{SUMMARY_INTRO}\n\n{summary}"
    return f"{system}\n\n{block}" if system else block
