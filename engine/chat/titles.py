"""Conversation titles worth reading in a list: from the user's first prompt, or as a chat
model wrote one when it was asked (``ChatSession.write_title``). Never from a reply: a base
model's continuation ("How can I help you?" after "Hello") is no title of the user's.
Titles come from outside (the user's and the model's words): sanitised (no terminal
controls), one line, bounded; only the start of a long text is read."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator

from ..errors import VibechatError
from ..sanitize import sanitize
from ..settings.params import SamplingParams
from ..turns.backend import Backend, ChatMessage, GenerationDone, TextDelta

log = logging.getLogger("vibechat.session")

TITLE_LENGTH = 60
# What an instruct model is asked for a conversation's title (ask_title): short, greedy.
TITLE_REQUEST = (
    "Write a title for the conversation so far: at most six words, in its language, no quotes. "
    "Answer with the title only."
)
TITLE_PARAMS = SamplingParams(temperature=0.0, max_tokens=16, thinking="off", seed=0)


def title_from(prompt: str) -> str:
    """A conversation title from its first prompt: its first substantive line (a question, a
    request: "Hi" then "Why is the sky blue?" is titled by its question), else its first non-empty
    line (a bare "hi" stays "hi"); sanitised (no terminal controls: a title is shown in lists and
    dialogs), shortened. Only the first 64 KiB and 50 lines are looked at."""
    lines = list(_title_lines(prompt))
    return _short(
        next(
            (line for line in lines if _substantive(line)),
            lines[0] if lines else "New conversation",
        )
    )


def title_from_model(text: str) -> str | None:
    """The title a model wrote (:meth:`ChatSession.write_title`) made fit for a list: its
    first line, without a "Title:" label, quotes, Markdown marks or a full stop; sanitised,
    shortened. None when nothing is left."""
    line = next(_title_lines(text[:2000], markdown=True), "")
    line = re.sub(r"^title\s*:\s*", "", line, flags=re.IGNORECASE).strip(" \"'“”‘’«».")
    return _short(line) if re.search(r"\w", line) else None


def ask_title(
    backend: Backend, messages: list[ChatMessage], stop_requested: Callable[[], bool]
) -> str | None:
    """The title ``backend``'s model writes for the conversation ``messages`` (its first
    exchange) when asked (``TITLE_REQUEST``, ``TITLE_PARAMS``), made fit for a list
    (``title_from_model``); blocks, with the engine lock held by the caller. None when
    ``stop_requested()`` turned true (the engine is told to stop), the request was cancelled,
    or it failed (too long for the context, a server error)."""
    parts: list[str] = []
    events = backend.stream_chat([*messages, ChatMessage("user", TITLE_REQUEST)], TITLE_PARAMS)
    try:
        for event in events:
            if stop_requested():
                backend.cancel()
                return None
            if isinstance(event, TextDelta) and len(parts) < 64:
                parts.append(event.text)
            elif isinstance(event, GenerationDone) and event.finish_reason == "cancelled":
                return None
    except VibechatError as exc:
        # Too long for the context, a server error: no title.
        log.info("no title from the model: %s", exc)
        return None
    finally:
        events.close()
    return title_from_model("".join(parts))


def _substantive(line: str) -> bool:
    """Enough words to tell one conversation from another: three words, or long ones."""
    words = re.findall(r"\w+", line)
    return len(words) >= 3 or sum(map(len, words)) >= 16


def _short(line: str) -> str:
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


def _title_lines(text: str, *, markdown: bool = False) -> Iterator[str]:
    """``text``'s non-empty lines, sanitised, spaces collapsed; with ``markdown``, without
    quote, heading, list and emphasis marks. At most 64 KiB and 50 lines are read."""

    for count, line in enumerate(sanitize(text[: 1 << 16]).splitlines()):
        if count >= 50:
            return
        if markdown:
            line = re.sub(r"[*`]+|(?<!\w)_+|_+(?!\w)", "", re.sub(r"^[\s>#*+\-|]+", "", line))
        line = " ".join(line.split())
        if line:
            yield line
