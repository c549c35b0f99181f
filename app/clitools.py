"""Small pieces the command modules share: error guarding (``guard``: a VibechatError is one
line on stderr and exit code 1), and the one way every command prints text that may hold
outside data (model names, metadata, Hub names, server errors, saved conversations):
``echo`` for lines, ``table`` for tables, ``safe_json`` for JSON. Terminal control
sequences are stripped, and nothing is ever parsed as Rich markup."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import typer

T = TypeVar("T")


def fail(message: str, code: int = 1) -> "typer.Exit":
    """The exception that ends a command with ``message`` on stderr and exit code ``code``."""
    import typer

    echo(f"vibechat: error: {message}", err=True)  # messages quote outside text: sanitised, one line
    return typer.Exit(code)


def guard(fn: Callable[[], T]) -> T:
    """Run ``fn`` the way every command does: a VibechatError becomes a one-line message and
    exit code 1, Ctrl-C exit code 130."""
    import typer

    from vibechat.engine.errors import VibechatError

    try:
        return fn()
    except VibechatError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        typer.echo("", err=True)
        raise typer.Exit(130) from None


def plain(text: object) -> str:
    """``text`` as it may reach a terminal: control sequences and characters stripped, lone
    surrogates replaced (engine/sanitize.py does both)."""
    from vibechat.engine.sanitize import sanitize

    return sanitize(str(text))


def echo(text: object = "", *, err: bool = False, nl: bool = True) -> None:
    """``typer.echo`` for text that may hold outside data."""
    import typer

    typer.echo(plain(text), err=err, nl=nl)


def table(columns: list[str], rows: list[list[str]], right: frozenset[int] | set[int] = frozenset()) -> None:
    """Print a borderless table. Cells are plain text (never Rich markup) with terminal
    control sequences stripped."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from vibechat.engine.sanitize import sanitize

    grid = Table(box=None, pad_edge=False, header_style="bold")
    for i, column in enumerate(columns):
        grid.add_column(column, justify="right" if i in right else "left", overflow="fold")
    for row in rows:
        grid.add_row(*(Text(sanitize(cell)) for cell in row))
    Console(soft_wrap=False).print(grid)


def safe_json(data: object, indent: int | None = None) -> str:
    """JSON for a terminal or a file: text stays readable (not ASCII-escaped), but DEL and C1
    control characters, which JSON would leave raw and some terminals obey, and lone
    surrogates, which cannot be written as UTF-8, are escaped (C0 ones are by JSON)."""
    import json
    import re

    text = json.dumps(data, ensure_ascii=False, indent=indent)
    return re.sub("[\x7f-\x9f\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)


def quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so interpreter exit stays silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
