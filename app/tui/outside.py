"""Outside text in the TUI: the one way to show text that vibechat did not write.

Outside text is anything vibechat did not write itself: model names (a GGUF's
``general.name``, a server's ``/v1/models`` ids), server and engine error messages, Hub
repo and file names, other tools' folder names (LM Studio, Ollama), conversation titles
(from the user's or the model's words), GGUF metadata, chat-template errors, paths.

Two things go wrong when such text reaches the screen as it is:

* the terminal obeys escape sequences in it: OSC 52 writes the clipboard, OSC 8 makes
  links, CSI clears the screen (Rich and Textual pass them through in plain text);
* Textual parses a ``str`` given to a widget as markup: ``[link=...]`` becomes a live
  link, ``[@click=...]`` an action, ``[bold]`` a style, and a stray ``[/x]`` raises
  ``MarkupError``, which ends the app.

So in the TUI outside text is always shown through these helpers: they sanitise it
(``engine.sanitize``: whole escape sequences and control characters removed, line breaks
and tabs kept) and return ``Content`` (``line``, ``block``) or a Rich ``Text`` (``cell``,
for a ``DataTable``, which parses a ``str`` cell as markup), never markup; ``plain`` and
``one_line`` give a ``str`` for the APIs that take plain text (an ``Input``'s value, a
notification: the app's ``notify`` reads no markup unless asked to). Where a line is
expected, the text is bounded (``LINE`` characters, cut with "…"): a 10 kB "model name"
does not fill the screen.

vibechat's own words around outside text are joined with ``Content.assemble``, whose
plain ``str`` parts are not markup either:
``Content.assemble("Models on ", outside.line(server))``.
"""

from __future__ import annotations

from rich.text import Text
from textual.content import Content

from vibechat.engine.sanitize import sanitize

# Characters at most in a one-line label (a model name, a title, a file name)...
LINE = 200
# ... and in a multi-line text (a server's error message, a confirmation).
BLOCK = 2000
ELLIPSIS = "…"


def plain(text: str, limit: int | None = BLOCK) -> str:
    """``text`` sanitised and cut to ``limit`` characters (the last one "…"); ``None``: not
    cut. Line breaks and tabs stay."""
    return _cut(sanitize(text), limit)


def one_line(text: str, limit: int | None = LINE) -> str:
    """``plain``, on one line: each run of whitespace (line breaks included) is one space."""
    return _cut(" ".join(sanitize(text).split()), limit)


def _cut(text: str, limit: int | None) -> str:
    if limit is not None and len(text) > limit:
        return text[: max(limit - 1, 0)] + ELLIPSIS
    return text


def markup_literal(text: str) -> str:
    """``text`` for an API that reads markup and takes no ``Content`` (the command palette's
    help lines): every ``[`` escaped, so no tag can form, not even half of one that a cut
    (``one_line``) left unclosed, which ``textual.markup.escape`` lets through and the markup
    parser then rejects with an exception."""
    return text.replace("[", "\\[")


def line(text: str, style: str = "", limit: int | None = LINE) -> Content:
    """One line of outside text as ``Content`` (never markup), styled ``style``."""
    return Content(one_line(text, limit)).stylize(style)


def block(text: str, style: str = "", limit: int | None = BLOCK) -> Content:
    """Outside text that may take several lines (an error message, a message body) as
    ``Content`` (never markup), styled ``style``; ``limit=None``: not cut."""
    return Content(plain(text, limit)).stylize(style)


def cell(text: str, style: str = "", limit: int | None = LINE) -> Text:
    """A ``DataTable`` cell (or any Rich renderable): one line of outside text as a Rich
    ``Text``. (A ``DataTable`` parses a ``str`` cell as Rich markup.)"""
    return Text(one_line(text, limit), style=style, end="")
