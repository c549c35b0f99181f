"""The log file: where warnings and errors of vibechat and of the libraries it uses go, so that
no library prints on the user's terminal (issue 40, point 6).

Libraries log on their own: the MCP SDK writes a 22-line traceback ("Failed to parse JSONRPC
message from server") when a server prints something other than JSON-RPC on its stdout;
huggingface_hub attaches a stderr handler of its own; asyncio reports a task's exception that
no one read. Python hands a record that finds no handler to ``logging.lastResort``, which
prints it on stderr, over the chat's screen. Here the root logger gets one handler, a file
under the state folder (``vibechat.log``, opened at the first record, private, rotated once at
``MAX_LOG_BYTES``), and the known libraries' loggers lose any stderr handler of their own and
propagate to it. What the user needs to know is said by vibechat itself, in one line (an MCP
server that misbehaves: engine/tools/mcp_servers.py). ``--verbose`` still shows vibechat's own
log on stderr, as before.
"""

from __future__ import annotations

import io
import logging
import os
from logging.handlers import RotatingFileHandler
from pathlib import Path

from vibechat.engine.paths import state_dir
from vibechat.engine.sanitize import sanitize

LOG_NAME = "vibechat.log"
# Then it is rotated once (vibechat.log.1): at most 2 MiB on disk.
MAX_LOG_BYTES = 1 << 20
THIRD_PARTY = (
    "mcp",
    "httpx",
    "httpx2",
    "httpcore",
    "huggingface_hub",
    "asyncio",
    "anyio",
    "urllib3",
    "filelock",
    "markdown_it",
    "PIL",
    "jinja2",
    "sse_starlette",
    "uvicorn",
)


def log_path() -> Path:
    """The log file (under the state folder: ``VIBECHAT_STATE_DIR`` moves it)."""

    return state_dir() / LOG_NAME


class _Plain(logging.Formatter):
    """Records as text with no terminal escapes (a server's words end up in them)."""

    def format(self, record: logging.LogRecord) -> str:
        return sanitize(super().format(record))


class LogFile(RotatingFileHandler):
    """The log file's handler: opened at the first record (a run that logs nothing writes
    nothing), its folder made then, the file private (0600) and never opened through a link.
    A file that cannot be written loses the record quietly: never a word on the terminal."""

    # Kept on huggingface_hub's logger when it is imported (engine/models/hub.py).
    vibechat = True

    def __init__(self, path: Path) -> None:
        super().__init__(path, maxBytes=MAX_LOG_BYTES, backupCount=1, encoding="utf-8", delay=True)
        self.setLevel(logging.WARNING)
        self.setFormatter(_Plain("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def _open(self) -> io.TextIOWrapper:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        flags = (
            os.O_WRONLY
            | os.O_CREAT
            | os.O_APPEND
            | getattr(os, "O_NOFOLLOW", 0)
            | getattr(os, "O_CLOEXEC", 0)
        )
        fd = os.open(self.baseFilename, flags, 0o600)
        return io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(fd, "a")), encoding="utf-8", errors="replace"
        )

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def route_logs_to_file() -> LogFile:
    """Send every record that propagates to the root logger, the libraries' included, to the log
    file instead of stderr; take the libraries' own terminal handlers away. Returns the
    handler (vibechat's own logger gets it too)."""
    handler = LogFile(log_path())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, LogFile)]:
        root.removeHandler(old)
    root.addHandler(handler)
    for name in THIRD_PARTY:
        logger = logging.getLogger(name)
        logger.handlers = [
            h
            for h in logger.handlers
            if getattr(h, "vibechat", False) and not isinstance(h, LogFile)
        ]
        logger.propagate = True
    # Its import stops it propagating: the file is its own.
    hub = logging.getLogger("huggingface_hub")
    hub.propagate = False
    hub.addHandler(handler)
    return handler
