"""TOML syntax errors in plain words, with the line and column where the user should look.

tomlkit's errors are a parser's ("Control characters (codes less than 0x1f and 0x7f) are
not allowed in strings, use \\u000a instead" for a string left open; "Unexpected
character: '\\x00' at line 1 col 0" for a list left open at the end of the file). The user
needs what is wrong in their file and where it starts: ``plain_syntax_error()`` reads the
error's kind and position, looks at the text there, and says it the way a person would
("a string is not closed: a \\" is missing", pointing at the opening quote).

Headless, no side effects at import time. The scans are bounded by the text (a config file
is at most 1 MiB: config.py refuses larger ones before parsing).

Imports inside functions are deliberate: tomlkit loads only when a TOML value is written
(start-up time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A bare value token: up to a space, a separator or a comment.
_BARE = re.compile(r"[^\s,\]}#]+")


@dataclass(frozen=True)
class SyntaxProblem:
    """``line`` and ``column`` are 1-based (None: not known); ``message`` is plain words."""

    line: int | None
    column: int | None
    message: str


@dataclass(frozen=True)
class _Open:
    # "string", "literal string", "multi-line string", "multi-line literal string", "list",
    # "inline table", "header"
    kind: str
    line: int
    column: int  # 1-based
    closer: str


def _offset(text: str, line: int, col: int) -> int:
    """The offset of tomlkit's (1-based line, 0-based column) in ``text``."""
    lines = text.splitlines(keepends=True)
    return min(len(text), sum(len(s) for s in lines[: max(0, line - 1)]) + max(0, col))


def _scan(text: str, end: int) -> tuple[_Open | None, list[_Open]]:
    """Read ``text[:end]`` as TOML's lexer would, roughly: the first single-line string or
    table header a line end cut (``None`` when there is none), and what is still open at
    ``end`` (lists, inline tables, a multi-line string), outermost first."""
    stack: list[_Open] = []
    line, line_start, i = 1, 0, 0
    at_line_start = True
    while i < end:
        ch = text[i]
        col = i - line_start + 1
        top = stack[-1] if stack else None
        if top is not None and top.kind.startswith("multi-line"):
            if text.startswith(top.closer, i):
                stack.pop()
                i += 3
                continue
            if ch == "\\" and top.kind == "multi-line string":
                i += 2
                continue
        elif ch == "#":
            while i < end and text[i] != "\n":
                i += 1
            continue
        elif text.startswith('"""', i) or text.startswith("'''", i):
            kind = "multi-line string" if ch == '"' else "multi-line literal string"
            stack.append(_Open(kind, line, col, ch * 3))
            i += 3
            continue
        elif ch in "\"'":
            j, kind = i + 1, "string" if ch == '"' else "literal string"
            while j < end and text[j] not in (ch, "\n"):
                j += 2 if ch == '"' and text[j] == "\\" else 1
            if j >= end or text[j] == "\n":
                return _Open(kind, line, col, ch), stack
            i = j + 1
            at_line_start = False
            continue
        elif ch == "[" and at_line_start and not stack:
            j = text.find("\n", i, end)
            j = end if j < 0 else j
            if "]" not in text[i:j].split("#", 1)[0]:
                return _Open("header", line, col, "]"), stack
        elif ch == "[":
            stack.append(_Open("list", line, col, "]"))
        elif ch == "{":
            stack.append(_Open("inline table", line, col, "}"))
        elif ch in "]}" and stack and stack[-1].closer == ch:
            stack.pop()
        if ch == "\n":
            line, line_start, at_line_start = line + 1, i + 1, True
        elif not ch.isspace():
            at_line_start = False
        i += 1
    return None, stack


_WHAT = {
    "string": 'a string is not closed: a " is missing at the end',
    "literal string": "a string is not closed: a ' is missing at the end",
    "multi-line string": 'a multi-line string is not closed: the closing """ is missing',
    "multi-line literal string": "a multi-line string is not closed: the closing ''' is missing",
    "list": "a list is not closed: a ] is missing",
    "inline table": "an inline table is not closed: a } is missing (an inline table is one line)",
    "header": "a table header is not closed: a ] is missing, as in [params]",
}


def _char(c: str) -> str:
    """A character for a message: quoted, or named where it is not printable."""
    names = {
        "\n": "a line break",
        "\r": "a carriage return",
        "\t": "a tab",
        "\x00": "the end of the file",
    }
    if c in names:
        return names[c]
    return f"'{c}'" if c.isprintable() and len(c) == 1 else f"U+{ord(c[:1] or ' '):04X}"


def _unclosed(opened: _Open) -> SyntaxProblem:
    return SyntaxProblem(opened.line, opened.column, _WHAT[opened.kind])


def _line_text(text: str, line: int) -> str:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _token(text: str, line: int, col: int) -> tuple[int, str]:
    """The 1-based column and text of the bare value ``col`` (0-based) is part of."""
    row = _line_text(text, line)
    start = min(col, len(row))
    while start > 0 and not row[start - 1].isspace() and row[start - 1] not in "=[,{":
        start -= 1
    match = _BARE.match(row, start)
    return start + 1, (match.group(0) if match else "")[:40]


def _unexpected(text: str, line: int, col: int, char: str) -> SyntaxProblem:
    """tomlkit's "Unexpected character" at (line, 0-based col), by what the line holds there."""
    row = _line_text(text, line)
    before = row[:col]
    # The end of the file inside something.
    if char == "\x00":
        _, still_open = _scan(text, len(text))
        if still_open:
            return _unclosed(still_open[0])
        return SyntaxProblem(
            line, None, "the file ends in the middle of a line: finish it or delete it"
        )
    if before.lstrip().startswith("["):
        return SyntaxProblem(
            line, 1, "a table header is not closed: a ] is missing, as in [params]"
        )
    if "=" not in before:
        key = before.strip() or row.strip()
        if char in "\n\r":
            return SyntaxProblem(
                line,
                1,
                f"'{key[:40]}' has no value: a line is key = value, or a comment starting with #",
            )
        if char in "\"'":
            return SyntaxProblem(
                line,
                col + 1,
                f"a key cannot contain {_char(char)}: a quoted key needs a quote at "
                'both ends ("my key" = 1)',
            )
        return SyntaxProblem(
            line,
            col + 1,
            f'a key cannot contain {_char(char)}: quote it ("my key" = 1) or '
            "use letters, digits, _ and -",
        )
    after_eq = before.split("=", 1)[1]
    if not after_eq.strip():
        if char in "\n\r#":
            return SyntaxProblem(
                line, col + 1, 'no value after = (text needs quotes: key = "text")'
            )
        column, word = _token(text, line, col)
        if word.lower() in ("true", "false"):
            return SyntaxProblem(
                line, column, f"{word} is not a TOML value: true and false are lower case"
            )
        if word.lower() in ("none", "null", "nil"):
            return SyntaxProblem(
                line,
                column,
                f"{word} is not a TOML value: TOML has no null; delete the line "
                "(or comment it out with #) to leave the setting unset",
            )
        if char == "=":
            return SyntaxProblem(line, col + 1, "one = too many: a line is key = value")
        if not word:
            return SyntaxProblem(
                line,
                col + 1,
                f'a value cannot start with {_char(char)} (text needs quotes: key = "text")',
            )
        return SyntaxProblem(
            line, column, f'{word} is not a valid value: text needs quotes ("{word}")'
        )
    return SyntaxProblem(
        line,
        col + 1,
        f"unexpected {_char(char)} after the value: one key = value a line "
        "(a comment starts with #)",
    )


def plain_syntax_error(text: str, exc: Exception) -> SyntaxProblem:
    """What tomlkit's parse error ``exc`` means, in plain words, at the place to look."""
    from tomlkit import exceptions as tk

    line = getattr(exc, "line", None)
    col = getattr(exc, "col", None)
    reason = re.sub(r" at line \d+ col \d+$", "", str(exc)).rstrip(".")
    if isinstance(exc, tk.ParseError) and line is not None and col is not None:
        cut, still_open = _scan(text, _offset(text, line, col))
        if text.startswith("\ufeff"):
            return SyntaxProblem(
                1, 1, "the file starts with a byte order mark (BOM): save it as UTF-8 without one"
            )
        if isinstance(exc, tk.InvalidControlChar):
            here = text[_offset(text, line, col) :][:1]
            where = "comments" if "in comments" in reason else "strings"
            if here in ("\n", "\r") and cut is not None:
                return _unclosed(cut)
            code = f"U+{ord(here):04X}" if here else "a control character"
            if where == "comments":
                return SyntaxProblem(
                    line, col + 1, f"a comment holds a control character ({code}): delete it"
                )
            return SyntaxProblem(
                line,
                col + 1,
                f"a string holds a control character ({code}): write it as "
                f"\\u{ord(here) if here else 0:04x}",
            )
        if isinstance(exc, tk.UnexpectedEofError):
            _, still_open = _scan(text, len(text))
            if still_open:
                return _unclosed(still_open[0])
            return SyntaxProblem(
                line, None, "the file ends in the middle of a line: finish it or delete it"
            )
        if isinstance(exc, tk.UnexpectedCharError):
            char = reason.removeprefix("Unexpected character: ")
            char = char[1:-1] if len(char) >= 2 and char[0] in "\"'" else char
            char = char.encode().decode("unicode_escape") if char.startswith("\\") else char
            if cut is not None:
                return _unclosed(cut)
            if still_open and still_open[0].line < line:
                return _unclosed(still_open[0])
            return _unexpected(text, line, col, char)
        if isinstance(exc, tk.InvalidCharInStringError):
            bad = reason.removeprefix("Invalid character ").split(" in string")[0].strip("'\"")
            return SyntaxProblem(
                line,
                col,
                f"a string has an unknown escape \\{bad}: write \\\\ for a "
                "backslash, or use single quotes ('C:\\path')",
            )
        if isinstance(exc, tk.InvalidUnicodeValueError):
            return SyntaxProblem(
                line, col, "a \\u escape needs 4 hex digits (\\U: 8), as in \\u00e9"
            )
        if isinstance(exc, (tk.InvalidNumberError, tk.InvalidNumberOrDateError)):
            column, word = _token(text, line, col)
            return SyntaxProblem(
                line,
                column,
                f'{word or "this"} is not a valid number (text needs quotes: "{word}")',
            )
        if isinstance(exc, (tk.InvalidDateError, tk.InvalidTimeError, tk.InvalidDateTimeError)):
            column, word = _token(text, line, col)
            return SyntaxProblem(
                line,
                column,
                f'{word or "this"} is not a valid date or time (text needs quotes: "{word}")',
            )
        if isinstance(exc, tk.EmptyKeyError):
            row = _line_text(text, line)
            first = row[col : col + 1]
            if first == "=":
                return SyntaxProblem(
                    line, col + 1, "a line starts with = and no key: a line is key = value"
                )
            return SyntaxProblem(
                line,
                col + 1,
                f"a line cannot start with {_char(first or chr(0))}: a line is "
                "key = value, a [table] or a # comment",
            )
        if isinstance(exc, tk.EmptyTableNameError):
            return SyntaxProblem(line, col, "[] names no table: write [params] or [keys]")
        invalid_key = re.match(r'Invalid key "(.*)"$', reason)
        if invalid_key:
            return SyntaxProblem(
                line,
                1,
                f"'{invalid_key.group(1)}' is not a valid key: a key with spaces needs quotes",
            )
        if reason.startswith("Redefinition of an existing table"):
            return SyntaxProblem(
                line,
                1,
                "this table is defined twice (once by a [header], once by dotted keys): keep one",
            )
    return SyntaxProblem(line, (col + 1) if col is not None else None, f"not valid TOML ({reason})")
