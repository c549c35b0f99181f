"""The names the model calls tools by: letters, digits, ``_`` and ``-``, at most 64
characters (what every chat template and OpenAI-compatible server accepts), and unique across
everything a reply is offered: a tool keeps its own name unless another server (or a built-in
tool) has one the same, and then it is prefixed with its server's (``time_now``)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

MAX_TOOL_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def safe_name(text: str) -> str:
    """``text`` as a tool name: other characters become ``_``, cut to 64."""
    return _UNSAFE.sub("_", text)[:MAX_TOOL_NAME] or "tool"


def model_names(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The model-facing name of each ``(server, tool)`` (server "" for a built-in), in order,
    all different: a name two of them share is prefixed with the server's (a built-in keeps
    its own); what still clashes gets ``_2``, ``_3``..."""
    base = [safe_name(tool) for _, tool in pairs]
    counts = Counter(base)
    used: set[str] = set()
    out: list[str] = []
    for (server, tool), name in zip(pairs, base, strict=True):
        if counts[name] > 1 and server:
            name = safe_name(f"{server}_{tool}")
        unique, n = name, 2
        # At most len(pairs) turns.
        while unique in used:
            suffix = f"_{n}"
            unique, n = name[: MAX_TOOL_NAME - len(suffix)] + suffix, n + 1
        used.add(unique)
        out.append(unique)
    return out
