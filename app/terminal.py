"""The chat's one precondition: a terminal on both ends.

``vibechat < /dev/null > out`` used to start the chat anyway: Textual wrote its escape codes
into ``out`` and then waited for keys that could never come. A script wants ``vibechat run``;
the chat refuses to start, in one line, before it loads a model or writes a byte to stdout."""

from __future__ import annotations

import sys

from vibechat.engine.errors import VibechatError

NO_TERMINAL = "the chat needs a terminal (stdin and stdout); for scripts use 'vibechat run'"


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):  # closed (`>&-`) or no stream at all
        return False


def require_terminal() -> None:
    """Raise VibechatError (one line, exit status 1) unless stdin and stdout are terminals."""
    if not (_is_terminal(sys.stdin) and _is_terminal(sys.stdout)):
        raise VibechatError(f"{NO_TERMINAL}.")
