"""What the MCP SDK logs about a server, turned into one line about that server (issue 40,
point 6).

The SDK logs a server's misbehaviour on its ``mcp`` loggers: a line on the server's stdout
that is not JSON-RPC is ``logger.exception("Failed to parse JSONRPC message from server")``, a
22-line traceback. The app sends those records to its log file (app/logfile.py), never to the
terminal; this handler, on the ``mcp`` logger, notes for the server they are about one line
saying what it did, once. Which server: each server's connection lives in a task of its own
(mcp_servers.py), and the SDK's reader tasks are started from it, so they carry the context
variable :data:`SERVING` that task set. The line goes to the server's ``report`` callback,
which says whether someone heard it (then it is not said again when the servers are listed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextvars import ContextVar

from ..sanitize import sanitize

# Of the SDK's message quoted in a server's line.
MAX_LINE_CHARS = 160


class Noted:
    """A server's side of it: the one line (empty until it misbehaves), whom to tell, and
    whether it was heard."""

    def __init__(self, name: str, report: Callable[[str], bool] | None = None) -> None:
        self.name = name
        self.report = report
        self.line = ""
        self.told = False


SERVING: ContextVar[Noted | None] = ContextVar("vibechat_mcp_serving", default=None)

_lock = threading.Lock()


def line_for(record: logging.LogRecord) -> str:
    """What a record says the server did, in words for the user."""
    if "JSONRPC" in str(record.msg):
        return (
            "wrote something other than JSON-RPC on its stdout "
            "(ignored; the log file has the details)"
        )
    said = " ".join(sanitize(record.getMessage()).split())[:MAX_LINE_CHARS]
    return f"misbehaved: {said} (the log file has the details)"


class _Misbehaviour(logging.Handler):
    """On the ``mcp`` logger: the first warning or error about a server becomes its line."""

    # vibechat's own: kept when the app takes the libraries' handlers away (app/logfile.py).
    vibechat = True

    def emit(self, record: logging.LogRecord) -> None:
        noted = SERVING.get()
        if noted is None or noted.line:
            return
        noted.line = line_for(record)
        if noted.report is not None:
            try:
                noted.told = noted.report(f"MCP server {noted.name} {noted.line}")
            except Exception:  # noqa: BLE001
                # A closed stderr: logging would print its own traceback.
                pass


def install() -> None:
    """Put the handler on the ``mcp`` logger, unless one is there already (whoever set the
    loggers up since may have replaced their handlers)."""
    logger = logging.getLogger("mcp")
    with _lock:
        if not any(isinstance(h, _Misbehaviour) for h in logger.handlers):
            logger.addHandler(_Misbehaviour(logging.WARNING))
