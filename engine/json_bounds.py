"""JSON from outside, bounded in depth before anything recurses over it.

``json.loads`` of ``{"a":[[[…]]]}`` nested 20,000 deep raises ``RecursionError`` (40 KB is
enough), and so do ``json.dumps`` of such a value and any recursive walk of it. Every parser of
outside JSON (tool-call arguments, a server's replies and stream events, MCP messages, saved
tool turns read back from SQLite) measures the depth first with :func:`json_depth`, a linear
scan of the brackets outside strings, and refuses text nested deeper than
:data:`MAX_JSON_DEPTH` levels with :class:`JsonTooDeep` (a ``ValueError``) naming the bound.
"""

from __future__ import annotations

import json
from typing import Any

# Levels of [ and {: far more than any tool's arguments or a server's reply need.
MAX_JSON_DEPTH = 64


class JsonTooDeep(ValueError):
    """JSON text (or a value) nested deeper than the bound: refused before it is parsed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested too deeply (more than {limit} levels of [ and {{)")
        self.limit = limit


def json_depth(text: str, stop_after: int = MAX_JSON_DEPTH) -> int:
    """How deep ``[``/``{`` nest in JSON text, strings skipped. Linear in the text, no
    recursion; it stops counting (and returns) once past ``stop_after``."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_after:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def check_json_depth(text: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`JsonTooDeep` when ``text`` nests deeper than ``limit``."""
    if json_depth(text, limit) > limit:
        raise JsonTooDeep(limit)


def bounded_loads(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` of outside text, its depth checked first: :class:`JsonTooDeep` past
    ``limit``, ``ValueError`` (``json.JSONDecodeError``) for text that is not JSON."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    check_json_depth(text, limit)
    return json.loads(text)


def value_depth(value: Any, stop_after: int = MAX_JSON_DEPTH) -> int:
    """How deep lists and dicts nest in a Python value (walked with a stack, not recursion);
    it stops once past ``stop_after``. For values that came parsed by someone else (a
    library, a server's object) before they are dumped or walked."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        if deepest > stop_after:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def check_value_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`JsonTooDeep` when ``value`` nests deeper than ``limit``."""
    if value_depth(value, limit) > limit:
        raise JsonTooDeep(limit)
