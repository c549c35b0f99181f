"""Small pieces the command modules share: error guarding (``guard``: a VibechatError is one
line on stderr and exit code 1), and the one way every command prints text that may hold
outside data (model names, metadata, Hub names, server errors, saved conversations):
``echo`` for lines, ``table`` for tables, ``safe_json`` for JSON. Terminal control
sequences are stripped, and nothing is ever parsed as Rich markup.

Imports inside functions are deliberate: Rich's console and tables, typer and the engine's error
and sanitising modules load when a command first prints, not when the CLI starts."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import typer

T = TypeVar("T")


def fail(message: str, code: int = 1) -> typer.Exit:
    """The exception that ends a command with ``message`` on stderr and exit code ``code``."""
    import typer

    # Messages quote outside text: sanitised, one line.
    echo(f"vibechat: error: {message}", err=True)
    return typer.Exit(code)


def guard(
    fn: Callable[[], T], on_failure: Callable[[BaseException, int], object] | None = None
) -> T:
    """Run ``fn`` the way every command does: a VibechatError becomes a one-line message and
    exit code 1 (or the error's own ``exit_status``: 2 for a command-line error found late, such
    as ``run`` with no prompt), Ctrl-C exit code 130. ``on_failure(exc, exit_status)`` is told
    first (``run --json``: its object on stdout)."""
    import typer

    from vibechat.engine.errors import VibechatError

    try:
        return fn()
    except VibechatError as exc:
        status = getattr(exc, "exit_status", 1)
        if on_failure is not None:
            on_failure(exc, status)
        raise fail(str(exc), status) from None
    except KeyboardInterrupt as exc:
        if on_failure is not None:
            on_failure(exc, 130)
        typer.echo("", err=True)
        raise typer.Exit(130) from None


def usage_message(exc: Any) -> str:
    """Click's usage error ``exc`` as one line in vibechat's words: a value of the wrong type
    or out of an option's range (which Typer words as pydantic does, "Input should be a
    valid integer, unable to parse string as an integer") names the option and what it
    takes, ``--ctx must be a whole number (got 'abc')``; any other keeps click's message
    (typer's "Did you mean" suggestions included), in lower case."""
    try:
        own = _own_words(exc)
    except Exception:  # noqa: BLE001 - the wording must never cost the user a traceback
        own = None
    message = own if own is not None else " ".join(exc.format_message().split()).rstrip(".")
    if message[:1].isupper() and not message[1:2].isupper():
        message = message[0].lower() + message[1:]
    return message


# pydantic's error types (what Typer checks a typed option's value with) in our words
_WHOLE = ("int_parsing", "int_type", "int_from_float", "int_parsing_size")
_NUMBER = ("float_parsing", "float_type")
_BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "greater_than": ("gt", "more than"),
    "less_than_equal": ("le", "at most"),
    "less_than": ("lt", "less than"),
}


def _own_words(exc: Any) -> str | None:
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    param = getattr(exc, "param", None)
    if type(cause).__name__ != "ValidationError" or not callable(errors) or param is None:
        return None
    try:
        error = errors()[0]
    except Exception:  # noqa: BLE001 - not pydantic's shape after all: click's words then
        return None
    opts = [opt for opt in getattr(param, "opts", ()) if opt.startswith("--")]
    name = (
        max(opts, key=len)
        if opts
        else str(getattr(param, "metavar", None) or param.name or "the value").upper()
    )
    got = str(error.get("input"))
    got = plain(got if len(got) <= 40 else got[:39] + "…")
    kind = error.get("type")
    if kind in _WHOLE:
        return f"{name} must be a whole number (got {got!r})"
    if kind in _NUMBER:
        return f"{name} must be a number (got {got!r})"
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        bound = (error.get("ctx") or {}).get(key)
        if bound is not None:
            return f"{name} must be {words} {bound} (got {got})"
    return None


def usage_json(exc: Any, message: str, argv: list[str]) -> None:
    """``vibechat run --json`` (or ``--prompts-file``) promises one JSON object on stdout,
    even when its command line is malformed: the object with ``error`` (kind ``usage``,
    exit status 2). Other commands print nothing on stdout for a usage error."""
    ctx = getattr(exc, "ctx", None)
    if ctx is None or ctx.info_name != "run" or ctx.parent is None or ctx.parent.parent is not None:
        return
    args = argv[: argv.index("--")] if "--" in argv else argv
    if "--json" in args or any(
        a == "--prompts-file" or a.startswith("--prompts-file=") for a in args
    ):
        from ..report import RunResult, error_object

        try:
            sys.stdout.write(
                safe_json(RunResult(error=error_object(message, "usage", 2)).to_json()) + "\n"
            )
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            quiet_stdout()


def plain(text: object) -> str:
    """``text`` as it may reach a terminal: control sequences and characters stripped, lone
    surrogates replaced (engine/sanitize.py does both)."""
    from vibechat.engine.sanitize import sanitize

    return sanitize(str(text))


def echo(text: object = "", *, err: bool = False, nl: bool = True) -> None:
    """``typer.echo`` for text that may hold outside data."""
    import typer

    typer.echo(plain(text), err=err, nl=nl)


def echo_lines(lines: list[str]) -> None:
    """``echo`` each of ``lines``."""
    for line in lines:
        echo(line)


def terminal_width() -> int | None:
    """The columns a line printed on stdout has, when stdout is a terminal (``COLUMNS`` if
    set); None when it is piped or redirected: a line is then never broken (``| grep``)."""
    import shutil

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


# A table's last column keeps this many columns on a terminal before others wrap.
LAST_COLUMN_MIN = 16


def table(
    columns: list[str], rows: list[list[str]], right: frozenset[int] | set[int] = frozenset()
) -> None:
    """Print a borderless table. Cells are plain text (never Rich markup) with terminal
    control sequences stripped, each on one line (a line break or tab in a title is a
    space). On a terminal, long cells fold to fit its width; piped or redirected, a row is
    always one line whatever its length, so ``| grep`` finds a row with its id."""
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from vibechat.engine.sanitize import sanitize

    cells = [[" ".join(sanitize(cell).split()) for cell in row] for row in rows]
    terminal = sys.stdout.isatty()
    grid = Table(box=None, pad_edge=False, header_style="bold")
    for i, column in enumerate(columns):
        grid.add_column(
            column, justify="right" if i in right else "left", overflow="fold", no_wrap=not terminal
        )
    for row in cells:
        grid.add_row(*(Text(cell) for cell in row))
    # The widest cell of each column (and a two-space gap between columns).
    widths = [
        max([cell_len(column), *(cell_len(row[i]) for row in cells if i < len(row))])
        for i, column in enumerate(columns)
    ]
    if terminal:
        console = Console(soft_wrap=False)
        if sum(widths[:-1]) + 2 * (len(widths) - 1) + LAST_COLUMN_MIN <= console.width:
            # Every column but the last as wide as its widest cell; the last (a title) wraps
            # between words in the rest: no name or date is broken inside.
            for fixed, width in zip(grid.columns[:-1], widths, strict=False):
                fixed.width = width
        console.print(grid)
        return
    # As wide as the widest row: no wrapping.
    console = Console(soft_wrap=False, width=max(80, sum(widths) + 2 * len(widths)))
    with console.capture() as captured:
        console.print(grid)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    sys.stdout.flush()


def safe_json(data: object, indent: int | None = None) -> str:
    """JSON for a terminal or a file: text stays readable (not ASCII-escaped), but DEL and C1
    control characters, which JSON would leave raw and some terminals obey, and lone
    surrogates, which cannot be written as UTF-8, are escaped (C0 ones are by JSON)."""

    text = json.dumps(data, ensure_ascii=False, indent=indent)
    return re.sub("[\x7f-\x9f\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)


def quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so interpreter exit stays silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
