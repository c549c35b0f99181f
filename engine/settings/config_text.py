"""Where things are in a config file's text: the line of each key (tomlkit keeps no
positions), a key defined twice, and where a new top-level key goes.

The config's problems name a line; a saved setting goes where a person would write it.
Both read the text itself, line by line (table headers, ``key =`` lines, dotted and
quoted keys; lines inside multi-line strings are skipped). Headless; the loops are
bounded by the text (config.py refuses a file over 1 MiB before it gets here).

Imports inside functions are deliberate: tomlkit loads only when the config file is edited
(start-up time).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

_KEY_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_KEY_RE = re.compile(rf"\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=")
_HEADER_RE = re.compile(rf"\s*\[\[?\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*\]\]?\s*(?:#.*)?$")
_PART_RE = re.compile(_KEY_PART)


def _parts(dotted: str) -> tuple[str, ...]:
    out = []
    for part in _PART_RE.findall(dotted):
        if part[:1] == '"':
            part = part[1:-1].encode().decode("unicode_escape")
        elif part[:1] == "'":
            part = part[1:-1]
        out.append(part)
    return tuple(out)


def _definitions(text: str) -> Iterator[tuple[tuple[str, ...], int]]:
    """``(key path, line)`` for each table header and ``key =`` line, in order (1-based
    lines; lines inside multi-line strings are skipped)."""
    table: tuple[str, ...] = ()
    quote: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if quote is not None:
            if quote in line:
                quote = None
            continue
        header = _HEADER_RE.match(line)
        if header:
            table = _parts(header.group(1))
            yield table, number
            continue
        match = _KEY_RE.match(line)
        if not match:
            continue
        yield table + _parts(match.group(1)), number
        rest = line[match.end() :].lstrip()
        for q in ('"""', "'''"):
            if rest.startswith(q) and rest.count(q) == 1:
                quote = q


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line (1-based) where each key and table is first defined, by key path (a
    dotted key defines its prefixes too). tomlkit keeps no positions, so this reads
    the text: table headers, ``key =`` lines, dotted keys, not multi-line strings."""
    lines: dict[tuple[str, ...], int] = {}
    for path, number in _definitions(text):
        for i in range(1, len(path) + 1):
            lines.setdefault(path[:i], number)
    return lines


def duplicate_lines(text: str, name: str) -> tuple[int, int] | None:
    """The lines where a key (or table) named ``name`` is first defined and defined again in
    the same table."""
    seen: dict[tuple[str, ...], int] = {}
    for path, number in _definitions(text):
        if path and path[-1] == name:
            if path in seen:
                return seen[path], number
            seen[path] = number
    return None


def line_of(lines: Mapping[tuple[str, ...], int], where: tuple[str, ...]) -> int | None:
    for i in range(len(where), 0, -1):
        if where[:i] in lines:
            return lines[where[:i]]
    return None


def insert_top_level(text: str, key: str, value: Any) -> str:
    """``text`` with ``key = value`` added among the top-level settings, where a person would
    write it: under its commented-out example (``# threads = ...``, as the template has), else
    under the last top-level line, above the first table and the comments and blank lines
    that lead into it (they belong to that table: "# Default sampling parameters ..." over
    ``[params]``); with no table, at the end."""
    import tomlkit

    line = f"{key} = {tomlkit.item(value).as_string()}"
    lines = text.splitlines(keepends=True)
    first_table = next(
        (number - 1 for path, number in _definitions(text) if _HEADER_RE.match(lines[number - 1])),
        None,
    )
    if first_table is None:
        return text + ("" if not text or text.endswith("\n") else "\n") + line + "\n"
    example = re.compile(rf"#\s*{re.escape(key)}\s*=")
    at = next(
        (i + 1 for i in range(first_table - 1, -1, -1) if example.match(lines[i].lstrip())), None
    )
    # Right under the last top-level line, above the table's comments and blank lines.
    if at is None:
        at = first_table
        while at > 0 and lines[at - 1].lstrip().startswith("#"):
            at -= 1
        while at > 0 and not lines[at - 1].strip():
            at -= 1
        if at == 0:
            return line + "\n\n" + text
        if not lines[at - 1].endswith("\n"):
            lines[at - 1] += "\n"
    return "".join([*lines[:at], line + "\n", *lines[at:]])
