"""What a tool call comes to (``ToolResult``): the text the model is given and whether it is
an error. Every result is outside text (a server's, a file's): ``bounded`` cuts it to a
limit with a note the model can read, and strips what a terminal would obey (it is shown
too), so whoever shows or saves it gets text that is safe and never too long."""

from __future__ import annotations

from dataclasses import dataclass

from ..sanitize import sanitize

# Characters of a result the model is given (the config's tool_result_limit).
DEFAULT_RESULT_LIMIT = 32_000


@dataclass(frozen=True)
class ToolResult:
    """A call's result: ``text`` (sanitised, bounded) and ``is_error`` (the tool failed, was
    refused, timed out or was cancelled: the model is told in ``text``)."""

    text: str
    is_error: bool = False


def bounded(text: str, is_error: bool = False, limit: int = DEFAULT_RESULT_LIMIT) -> ToolResult:
    """``text`` made a result: cut to ``limit`` characters with a note saying so, and
    sanitised for terminals (escape sequences and control characters removed; markup is left
    as text: whoever shows it never parses it)."""
    limit = max(1, limit)
    if len(text) > limit:
        # Sanitise only what is kept (a server may send megabytes), then say what was cut.
        kept = sanitize(text[:limit])
        return ToolResult(
            f"{kept}\n[cut: the result was {len(text):,} characters; the first {limit:,} "
            "are shown]",
            is_error,
        )
    return ToolResult(sanitize(text), is_error)


def error(text: str) -> ToolResult:
    """An error result (our own words, possibly with outside text in them: sanitised)."""
    return ToolResult(sanitize(text), True)
