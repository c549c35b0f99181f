"""The configured MCP servers, for synchronous callers (the chat's worker threads, ``vibechat
run``): ``McpServers`` runs one asyncio loop on a background thread, where each server's
connection lives in a task of its own (the SDK's transports must be entered and left by one
task). A server starts when first needed (``start()``, ``tools()``, or a call), its tools are
listed once, and it stays up until ``close()``.

What a server sends is outside text and is read bounded (mcp_reading.py: its tool list,
each call's result). A server that fails to start, hangs on start, or dies is one line on its
status (``statuses()``), and the others go on. A call past its timeout or cancelled (the
``cancel`` event) is an error result; the connection stays for the next call.

Servers get only the environment their config names plus what a process needs to start (the
SDK's ``get_default_environment()``: HOME, LOGNAME, PATH, SHELL, TERM, USER); their stderr
goes to a temporary file (never the terminal: the chat owns it), whose last line says why one
failed. On POSIX each stdio server runs under mcp_launcher.py, a subreaper that ends the
server's whole process tree (its group, and what left it) when the server exits or vibechat
dies, however it dies: no orphans. ``mcp`` is imported only here, when a server starts.

Imports inside functions are deliberate: the MCP SDK (heavy: anyio, httpx, pydantic) loads only
when an MCP server starts (start-up time); fcntl is POSIX only.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO, cast

from ..sanitize import sanitize
from ..turns.tool_calls import ToolSpec
from . import mcp_logs
from .mcp_config import HttpServer, McpConfig, ServerConfig
from .mcp_reading import list_tools, result_of
from .names import model_names
from .results import DEFAULT_RESULT_LIMIT, ToolResult, error

# A server's start and tool listing, at most.
START_TIMEOUT_S = 20.0
# close(): every server stopped, at most (the SDK kills what lingers).
CLOSE_TIMEOUT_S = 10.0
MAX_REASON_CHARS = 300  # a status line's reason
# A server's stderr file, at most (then cut to its last lines).
MAX_STDERR_BYTES = 1 << 20
# How often a started server's stderr file is measured.
STDERR_CHECK_S = 30.0
LAUNCHER = Path(__file__).resolve().with_name("mcp_launcher.py")

NOT_STARTED, STARTING, STARTED, FAILED, STOPPED, DISABLED = (
    "not started",
    "starting",
    "started",
    "failed",
    "stopped",
    "disabled",
)


@dataclass(frozen=True)
class ServerStatus:
    """One server as ``vibechat tools`` shows it: its ``state`` (not started, starting,
    started, failed, stopped, disabled), the one-line ``reason`` when it is not up (or a note,
    such as tools left out), and its tools (model-facing names)."""

    name: str
    transport: str
    where: str
    state: str
    reason: str = ""
    tools: tuple[ToolSpec, ...] = ()


class _Server:
    """A server's live state (the manager's lock guards it)."""

    def __init__(self, config: ServerConfig, report: Callable[[str], bool] | None = None) -> None:
        self.config = config
        # Its misbehaviour, in one line (mcp_logs.py).
        self.noted = mcp_logs.Noted(config.name, report)
        self.state = NOT_STARTED
        self.reason = ""
        # Started, but some tools were left out.
        self.note = ""
        # (name there, description, schema)
        self.tools: tuple[tuple[str, str, dict[str, Any]], ...] = ()
        self.client: Any = None
        self.stop: asyncio.Event | None = None
        # The concurrent Future of its task.
        self.task: Any = None
        self.ready = threading.Event()
        self.errlog: IO[str] | None = None

    def stderr_tail(self) -> str:
        """The last line the server wrote to stderr (sanitised, bounded), or ''."""
        if self.errlog is None:
            return ""
        try:
            fd = self.errlog.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, 4096, max(0, size - 4096)).decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        lines = [line.strip() for line in sanitize(data).splitlines() if line.strip()]
        return lines[-1][:MAX_REASON_CHARS] if lines else ""

    def trim_stderr(self) -> None:
        """Cut the stderr file to its last 4 KiB once it is over ``MAX_STDERR_BYTES``: a chatty
        server running for days does not fill the disk. (Opened to append, the server's writes
        follow the cut.)"""
        # Elsewhere not opened to append: never cut.
        if self.errlog is None or os.name != "posix":
            return
        try:
            fd = self.errlog.fileno()
            size = os.fstat(fd).st_size
            if size > MAX_STDERR_BYTES:
                tail = os.pread(fd, 4096, size - 4096)
                os.ftruncate(fd, 0)
                os.write(fd, tail)
        except (OSError, ValueError):
            pass


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (anyio wraps failures in exception groups)."""
    for _ in range(16):
        # An exception group (3.11+).
        inner = getattr(exc, "exceptions", None)
        if not inner or not isinstance(inner[0], BaseException):
            break
        exc = inner[0]
    return exc


def _reason(exc: BaseException) -> str:
    exc = _leaf(exc)
    text = sanitize(str(exc)).replace("\n", " ").strip() or type(exc).__name__
    return text[:MAX_REASON_CHARS]


class McpServers:
    """The servers of an ``McpConfig``, started when first needed; ``close()`` (or leaving a
    ``with`` block, or vibechat's exit) stops them all. Every method may be called from any
    thread; each blocks (``start_timeout`` bounds a start, a call's ``timeout`` a call)."""

    def __init__(
        self,
        config: McpConfig,
        *,
        start_timeout: float = START_TIMEOUT_S,
        result_limit: int = DEFAULT_RESULT_LIMIT,
    ) -> None:
        self.config = config
        self.start_timeout = start_timeout
        self.result_limit = result_limit
        # Hears each server's misbehaviour, once.
        self.on_problem: Callable[[str], object] | None = None
        self._servers = {server.name: _Server(server, self._problem) for server in config.servers}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def __enter__(self) -> McpServers:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _problem(self, line: str) -> bool:
        """Tell ``on_problem`` (from the servers' thread); whether anyone heard it."""
        hear = self.on_problem
        if hear is None:
            return False
        hear(line)
        return True

    def misbehaviour(self) -> tuple[str, ...]:
        """One line for each server that misbehaved while it ran and that ``on_problem`` did
        not hear (mcp_logs.py)."""
        return tuple(
            f"MCP server {s.config.name} {s.noted.line}"
            for s in self._servers.values()
            if s.noted.line and not s.noted.told
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._servers)

    # ------------------------------------------------------------------ start
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError("the MCP servers are closed")
            if self._loop is None:
                mcp_logs.install()
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="vibechat-mcp", daemon=True
                )
                self._thread.start()
                atexit.register(self.close)
            return self._loop

    def start(self, names: Iterable[str] | None = None) -> None:
        """Start the servers (all, or ``names``) not started yet, side by side, and wait until
        each is up or has failed (at most ``start_timeout``; one that hangs fails)."""
        wanted = [
            self._servers[n]
            for n in (self._servers if names is None else names)
            if n in self._servers
        ]
        fresh: list[_Server] = []
        with self._lock:
            if self._closed:
                return
            for server in wanted:
                if server.state == NOT_STARTED:
                    server.state = STARTING
                    fresh.append(server)
        if fresh:
            loop = self._ensure_loop()
            for server in fresh:
                server.task = asyncio.run_coroutine_threadsafe(self._serve(server), loop)
        deadline = time.monotonic() + self.start_timeout
        for server in wanted:
            if not server.ready.wait(max(0.0, deadline - time.monotonic())):
                self._failed(
                    server,
                    f"did not answer within {self.start_timeout:g} s of starting "
                    "(it hangs, or waits for input)",
                )
                if server.task is not None:
                    server.task.cancel()

    def _failed(self, server: _Server, reason: str) -> None:
        with self._lock:
            if server.state in (STARTING, STARTED):
                server.state, server.reason = FAILED, reason[:MAX_REASON_CHARS]
            server.client = None
        server.ready.set()

    async def _serve(self, server: _Server) -> None:
        """The task that owns one server's connection: connect, list, wait for ``close``."""

        # The SDK's tasks for this server inherit it.
        mcp_logs.SERVING.set(server.noted)
        try:
            async with AsyncExitStack() as stack:
                client = await self._connect(stack, server)
                tools, note = await list_tools(client)
                stop = asyncio.Event()
                with self._lock:
                    if server.state != STARTING:
                        # Timed out meanwhile.
                        return
                    server.client, server.stop, server.tools, server.note = (
                        client,
                        stop,
                        tools,
                        note,
                    )
                    server.state = STARTED
                server.ready.set()
                while True:
                    try:
                        await asyncio.wait_for(stop.wait(), STDERR_CHECK_S)
                        break
                    except asyncio.TimeoutError:
                        server.trim_stderr()
        except asyncio.CancelledError:
            self._failed(server, "stopped while starting")
            raise
        except Exception as exc:  # noqa: BLE001
            # A server that fails to start is reported, never a crash.
            tail = server.stderr_tail()
            reason = _reason(exc)
            if tail and ("closed" in reason.lower() or isinstance(_leaf(exc), (EOFError, OSError))):
                # The server's own last words say more than "connection closed".
                reason = tail
            self._failed(
                server, f"did not start: {reason}" if not server.ready.is_set() else reason
            )
        finally:
            with self._lock:
                server.client = None
                if server.state == STARTED:
                    server.state = STOPPED

    async def _connect(self, stack: Any, server: _Server) -> Any:
        from mcp import Client
        from mcp.types import Implementation

        config = server.config
        if isinstance(config, HttpServer):
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = await stack.enter_async_context(
                create_mcp_http_client(headers=dict(config.headers))
            )
            transport: Any = streamable_http_client(config.url, http_client=http)
        else:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            command, args = config.command, list(config.args)
            # The launcher ends the server's process tree with it, or with vibechat.
            if os.name == "posix":
                command, args = (
                    sys.executable,
                    ["-I", "-S", str(LAUNCHER), str(os.getpid()), command, *args],
                )
            # Kept past the connection (closed with the manager): its last line says why one failed.
            server.errlog = _append_only(
                tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            )
            params = StdioServerParameters(
                command=command, args=args, env=dict(config.env), cwd=config.cwd
            )
            transport = stdio_client(params, errlog=cast(TextIO, server.errlog))
        client = Client(
            transport, client_info=Implementation(name="vibechat", version="1"), cache=None
        )
        return await stack.enter_async_context(client)

    # ------------------------------------------------------------------ tools
    def tools(self) -> tuple[ToolSpec, ...]:
        """Every started server's tools (starting those not tried yet), named for the model:
        unique, safe for templates (names.py)."""
        self.start()
        return self._specs()

    def _specs(self, only: str | None = None) -> tuple[ToolSpec, ...]:
        with self._lock:
            rows = [
                (s.config.name, tool)
                for s in self._servers.values()
                if s.state == STARTED
                for tool in s.tools
            ]
        names = model_names([(server, tool[0]) for server, tool in rows])
        return tuple(
            ToolSpec(name, description, schema, server, tool)
            for name, (server, (tool, description, schema)) in zip(names, rows, strict=True)
            if only is None or server == only
        )

    def statuses(self) -> tuple[ServerStatus, ...]:
        """Each configured server (those disabled and those the file got wrong too), as it
        is now: starts nothing."""
        out: list[ServerStatus] = []
        for server in self._servers.values():
            with self._lock:
                state, reason = server.state, server.reason or server.note or server.noted.line
            out.append(
                ServerStatus(
                    server.config.name,
                    server.config.transport,
                    sanitize(server.config.where),
                    state,
                    reason,
                    self._specs(server.config.name),
                )
            )
        out += [ServerStatus(name, "", "", DISABLED) for name in self.config.disabled]
        prefix = f"{sanitize(str(self.config.path))}: "
        out += [
            ServerStatus(
                name,
                "",
                "",
                FAILED,
                "not usable: " + line.removeprefix(prefix).removeprefix(f"server '{name}': "),
            )
            for name, line in self.config.problems
        ]
        return tuple(out)

    # ------------------------------------------------------------------ calls
    def call(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        *,
        timeout: float,
        cancel: threading.Event | None = None,
    ) -> ToolResult:
        """Run ``spec`` (one of ``tools()``) with ``arguments``: its result, or an error result
        the model can read (the server is down, the call took over ``timeout`` seconds or was
        cancelled, the server died during it). Blocks."""
        server = self._servers.get(spec.server)
        if server is None:
            return error(f"There is no MCP server named {spec.server[:60]!r}.")
        self.start([spec.server])
        with self._lock:
            client, state, reason = server.client, server.state, server.reason
        if state != STARTED or client is None or self._loop is None:
            return error(f"The tool server '{spec.server}' is not running ({reason or state}).")
        future = asyncio.run_coroutine_threadsafe(
            self._call(server, client, spec.tool, dict(arguments)), self._loop
        )
        finished = threading.Event()
        future.add_done_callback(lambda _f: finished.set())
        deadline = time.monotonic() + max(0.0, timeout)
        while not finished.is_set():
            left = deadline - time.monotonic()
            if cancel is not None and cancel.is_set():
                future.cancel()
                return error("The call was cancelled by the user.")
            if left <= 0:
                future.cancel()
                return error(f"The call took longer than {timeout:g} s and was stopped.")
            finished.wait(min(left, 0.05) if cancel is not None else left)
        try:
            return future.result()
        except BaseException as exc:  # noqa: BLE001
            # The task was cancelled as it finished, or the SDK failed.
            return error(f"The call failed: {_reason(exc)}.")

    async def _call(
        self, server: _Server, client: Any, tool: str, arguments: dict[str, Any]
    ) -> ToolResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        try:
            result = await client.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                return error(
                    f"The tool server '{server.config.name}' refused the call: {_reason(exc)}."
                )
            # Let its last words reach the stderr file.
            await asyncio.sleep(0.2)
            tail = server.stderr_tail()
            self._failed(server, "stopped during a call" + (f": {tail}" if tail else ""))
            if server.stop is not None:
                server.stop.set()
            return error(
                f"The tool server '{server.config.name}' stopped during the call"
                + (f" ({tail})." if tail else ".")
            )
        except Exception as exc:  # noqa: BLE001 - a tool's failure is its result, never a crash
            return error(f"The call failed: {_reason(exc)}.")
        return result_of(result, self.result_limit)

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Stop every server (each gets its stdin closed, then SIGTERM, then SIGKILL: the SDK's
        shutdown) and the loop's thread; bounded by ``CLOSE_TIMEOUT_S``. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        atexit.unregister(self.close)
        if loop is None or thread is None:
            return
        tasks = []
        for server in self._servers.values():
            if server.task is None:
                continue
            tasks.append(server.task)
            if server.stop is not None:
                loop.call_soon_threadsafe(server.stop.set)
            else:
                server.task.cancel()
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for task in tasks:
            try:
                task.result(timeout=max(0.0, deadline - time.monotonic()))
            except BaseException:  # noqa: BLE001
                # Failed or cancelled: its transport's shutdown has run.
                pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=2.0)
        if not thread.is_alive():
            loop.close()
        for server in self._servers.values():
            if server.errlog is not None:
                server.errlog.close()


def _append_only(file: IO[str]) -> IO[str]:
    """``file`` with O_APPEND set on its descriptor (the server's stderr shares it): every
    write goes to the end, so a cut (``trim_stderr``) leaves no hole."""
    try:
        import fcntl

        flags = fcntl.fcntl(file.fileno(), fcntl.F_GETFL)
        fcntl.fcntl(file.fileno(), fcntl.F_SETFL, flags | os.O_APPEND)
    except (ImportError, OSError):
        # Not POSIX: the file is never cut.
        pass
    return file
