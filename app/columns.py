"""Text laid out for a width (80 columns and up): a line too long for it breaks between its
`` · `` parts where it can, else between words; only a token longer than the width (a path,
a URL) is cut inside. Label-and-value rows keep their values in one column (a hanging indent),
so a continued line never starts at the left edge. Pure text: the CLI prints it, the chat
shows it (``tui/laid_out.py``)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

# Where a line of parts prefers to break (the separator is dropped at the break).
SEP = " · "
GAP = 2  # columns between a label and its value
# A value's column is never narrower than this, however long the labels.
MIN_VALUE = 12


def fit(text: str, width: int) -> list[str]:
    """``text``'s lines, each broken to at most ``width`` columns."""
    lines: list[str] = []
    for line in text.splitlines() or [""]:
        lines += _fit_line(line, max(1, width))
    return lines


def _fit_line(line: str, width: int) -> list[str]:
    if len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip(" "))]
    out: list[str] = []
    for part in line.strip(" ").split(SEP):
        if out and len(out[-1]) + len(SEP) + len(part) <= width:
            out[-1] += SEP + part
        elif len(indent) + len(part) <= width:
            out.append(indent + part)
        else:
            out += textwrap.wrap(
                part, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
            ) or [indent]
    return out


# Text (its own lines kept), or parts joined by SEP.
Value = str | Sequence[str]
# The columns a value of parts takes at most, however wide the room.
PARTS = 64


def rows(items: Sequence[tuple[str, Value]], width: int | None = None, gap: int = GAP) -> list[str]:
    """``label  value`` lines, the values aligned in one column (a value's own lines too);
    with ``width``, each value is broken to the room its column has (``fit``). A value of
    parts is broken between them, at ``PARTS`` columns at most."""
    label_width = max((len(label) for label, _ in items), default=0)
    indent = " " * (label_width + gap)
    room = None if width is None else max(MIN_VALUE, width - len(indent))
    lines: list[str] = []
    for label, value in items:
        if not isinstance(value, str):
            shown = fit(SEP.join(value), min(room or PARTS, PARTS))
        else:
            shown = value.splitlines() if room is None else fit(value, room)
        first, *rest = shown or [""]
        lines.append(f"{label.ljust(label_width)}{' ' * gap}{first}".rstrip())
        lines += [(indent + more).rstrip() for more in rest]
    return lines


def hanging(first: str, text: str, width: int | None) -> list[str]:
    """``first`` then ``text``, its continued lines aligned under the start of ``text``
    (``width``: None, one line however long)."""
    if width is None:
        return [first + text]
    # No room beside it: below it, a little in.
    if width - len(first) < MIN_VALUE:
        return [first.rstrip()] + ["    " + line for line in fit(text, width - 4)]
    first_line, *rest = fit(text, width - len(first))
    return [first + first_line] + [" " * len(first) + line for line in rest]
