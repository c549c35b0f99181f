"""What a reply's Markdown holds, read as text: its fenced code blocks (Ctrl+K copies them)
and its link targets (Enter on a reply offers to open them). Plain string work, no widgets."""

from __future__ import annotations

import re


def code_blocks(markdown: str) -> list[str]:
    """Fenced code blocks in ``markdown``, in order (an unclosed last one included)."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in markdown.splitlines(keepends=True):
        if line.lstrip().startswith(("```", "~~~")):
            if current is None:
                current = []
            else:
                blocks.append("".join(current))
                current = None
        elif current is not None:
            current.append(line)
    if current is not None:
        blocks.append("".join(current))
    return blocks


_LINK = re.compile(r"\]\((\S+?)\)|<(https?://[^>\s]+)>|(https?://[^\s)\]>\"']+)")


def http_links(markdown: str) -> list[str]:
    """Every link target in ``markdown`` (Markdown links and bare URLs), in order, once."""
    seen: list[str] = []
    for match in _LINK.finditer(markdown):
        href = next(g for g in match.groups() if g).rstrip(".,;:!?")
        if href not in seen:
            seen.append(href)
    return seen
