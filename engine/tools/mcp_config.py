"""``mcp.json``: the MCP servers the user configured, in the ``mcpServers`` shape Claude
Desktop, LM Studio and oterm read, so a file written for them works here unchanged::

    {"mcpServers": {
        "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "Europe/Paris"}},
        "docs": {"url": "https://example.org/mcp", "headers": {"Authorization": "Bearer ..."}},
        "old":  {"command": "old-server", "disabled": true}}}

An entry with ``command`` is a stdio server (``args``, ``env``, ``cwd`` optional), one with
``url`` a streamable HTTP server (``headers`` optional); ``"disabled": true`` skips one. Keys
other apps add (``type``, ``autoApprove``, ``timeout``...) are ignored.

The file is the user's, but it may be anything: it is read bounded (size, servers, arguments)
and a FIFO or a device is refused (engine/files.py). A file that cannot be used at all raises
``McpConfigError`` (one line: the file, what is wrong, the fix); a bad entry is left out and
its one line kept (``McpConfig.problems``): the other servers still work.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import VibechatError
from ..files import FileTooLarge, NotARegularFile, human_limit, read_file
from ..json_bounds import JsonTooDeep, bounded_loads
from ..paths import config_dir
from ..sanitize import sanitize

MCP_CONFIG_NAME = "mcp.json"
# The bounds on outside data, each at most: the file's bytes; ...
MAX_CONFIG_BYTES = 1 << 20
# ... servers in one file (more: the file is refused); a stdio server's arguments; variables or
# headers of one server ...
MAX_SERVERS = 32
MAX_ARGS = 256
MAX_ENV = 256
# ... and the characters of one argument, variable, header or URL, and of a server's name.
MAX_VALUE_CHARS = 8192
MAX_NAME_CHARS = 40
# A server's name prefixes tool names and ``--allow-tool SERVER/*``.
SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class McpConfigError(VibechatError):
    """An ``mcp.json`` that cannot be used at all: the message names the file and the fix."""


@dataclass(frozen=True)
class StdioServer:
    """A server vibechat starts: ``command`` with ``args``, given only ``env`` (and what a
    process needs to start: the SDK's ``get_default_environment()``), in ``cwd`` if set."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None

    @property
    def transport(self) -> str:
        return "stdio"

    @property
    def where(self) -> str:
        """The command line in words (for ``vibechat tools``): arguments are not shown, they
        may hold a key."""
        return self.command


@dataclass(frozen=True)
class HttpServer:
    """A server already running, spoken to over streamable HTTP at ``url``."""

    name: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def transport(self) -> str:
        return "http"

    @property
    def where(self) -> str:
        # A query may carry a key.
        return self.url.split("?", 1)[0]


ServerConfig = StdioServer | HttpServer


@dataclass(frozen=True)
class McpConfig:
    """The servers of one file (``path``: None when there is none), in the file's order;
    ``disabled``: the names of the entries turned off; ``problems``: ``(name, line)`` for each
    entry left out."""

    path: Path | None = None
    servers: tuple[ServerConfig, ...] = ()
    disabled: tuple[str, ...] = ()
    problems: tuple[tuple[str, str], ...] = ()


def default_mcp_config_path() -> Path:
    """``mcp.json`` in vibechat's config folder."""
    return config_dir() / MCP_CONFIG_NAME


def load_mcp_config(path: str | Path | None = None) -> McpConfig:
    """The servers of ``path`` (``--mcp-config FILE``), else of ``mcp.json`` in the config
    folder; no such default file is no servers, a missing ``path`` is an error. Raises
    ``McpConfigError`` for a file that cannot be used at all."""
    given = path is not None
    file = Path(path).expanduser() if path is not None else default_mcp_config_path()
    shown = sanitize(str(file))
    try:
        data = read_file(file, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        if given:
            raise McpConfigError(
                f"{shown}: no such file; give the path of an existing mcp.json"
            ) from None
        return McpConfig()
    except (NotARegularFile, FileTooLarge) as exc:
        fix = (
            f"keep it under {human_limit(MAX_CONFIG_BYTES)}"
            if isinstance(exc, FileTooLarge)
            else "give a regular JSON file"
        )
        raise McpConfigError(f"{shown} {exc.reason}; {fix}") from None
    except OSError as exc:
        raise McpConfigError(
            f"{shown}: cannot be read ({exc.strerror or exc}); check its permissions"
        ) from None
    try:
        document = bounded_loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise McpConfigError(f"{shown} is not UTF-8 text; save it as UTF-8 JSON") from None
    except JsonTooDeep as exc:
        raise McpConfigError(f"{shown}: {exc}; an mcp.json is a few levels deep") from None
    except json.JSONDecodeError as exc:
        raise McpConfigError(
            f"{shown}: not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}); "
            "fix the JSON (a trailing comma?)"
        ) from None
    return parse_mcp_config(document, file)


def parse_mcp_config(document: Any, file: Path) -> McpConfig:
    """A parsed ``mcp.json`` checked (``file`` names it in messages)."""
    shown = sanitize(str(file))
    if not isinstance(document, Mapping) or not isinstance(document.get("mcpServers", {}), Mapping):
        raise McpConfigError(
            f'{shown}: expected {{"mcpServers": {{"NAME": {{"command": ...}}}}}}; '
            "put the servers in an mcpServers object"
        )
    entries = document.get("mcpServers", {})
    if len(entries) > MAX_SERVERS:
        raise McpConfigError(
            f"{shown}: {len(entries)} servers; at most {MAX_SERVERS} are read, "
            "remove or disable some"
        )
    servers: list[ServerConfig] = []
    disabled: list[str] = []
    problems: list[tuple[str, str]] = []
    for name, entry in entries.items():
        label = sanitize(str(name))[: MAX_NAME_CHARS * 2]
        try:
            if isinstance(entry, Mapping) and entry.get("disabled") is True:
                disabled.append(_check_name(name))
                continue
            servers.append(_server(name, entry))
        except _EntryError as exc:
            problems.append((label, f"{shown}: server '{label}': {exc}"))
    return McpConfig(file, tuple(servers), tuple(disabled), tuple(problems))


class _EntryError(Exception):
    """One entry's problem and its fix (the caller adds the file and the entry)."""


def _check_name(name: str) -> str:
    if not SERVER_NAME.fullmatch(name) or len(name) > MAX_NAME_CHARS:
        raise _EntryError(
            f"a server's name is letters, digits, '_' and '-', at most {MAX_NAME_CHARS} "
            "characters (it prefixes its tools' names); rename it"
        )
    return name


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _EntryError(f"{what} must be a non-empty string")
    if len(value) > MAX_VALUE_CHARS or "\x00" in value:
        raise _EntryError(
            f"{what} is longer than {MAX_VALUE_CHARS:,} characters or holds a NUL; shorten it"
        )
    return value


def _pairs(value: Any, what: str, key: re.Pattern[str] | None) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise _EntryError(f'"{what}" must be an object of strings ({{"NAME": "value"}})')
    if len(value) > MAX_ENV:
        raise _EntryError(f'"{what}" has {len(value)} entries; at most {MAX_ENV} are read')
    out: list[tuple[str, str]] = []
    for k, v in value.items():
        if key is not None and not key.fullmatch(k):
            raise _EntryError(
                f'"{what}" has a bad name {sanitize(k)[:60]!r}; use letters, digits and _'
            )
        if key is None and (not k or any(c in k for c in "\r\n:\x00") or len(k) > 256):
            raise _EntryError(f'"{what}" has a bad header name {sanitize(k)[:60]!r}')
        if not isinstance(v, str):
            raise _EntryError(f'"{what}" entry {sanitize(k)[:60]!r} must be a string (quote it)')
        if len(v) > MAX_VALUE_CHARS or "\x00" in v or (key is None and any(c in v for c in "\r\n")):
            raise _EntryError(
                f'"{what}" entry {sanitize(k)[:60]!r} is too long or holds a control character'
            )
        out.append((k, v))
    return tuple(out)


def _server(name: str, entry: Any) -> ServerConfig:
    _check_name(name)
    if not isinstance(entry, Mapping):
        raise _EntryError('must be an object: {"command": ..., "args": [...]} or {"url": ...}')
    kind = entry.get("type", entry.get("transport"))
    if kind in ("sse",):
        raise _EntryError(
            "the SSE transport is not supported; use the server's streamable HTTP URL "
            '("url") or run it over stdio ("command")'
        )
    if "command" in entry and "url" in entry:
        raise _EntryError('has both "command" and "url"; keep one (command: stdio, url: HTTP)')
    if "url" in entry:
        url = _text(entry["url"], '"url"').strip()
        if not re.match(r"https?://[^/\s]", url, re.IGNORECASE) or any(c.isspace() for c in url):
            raise _EntryError('"url" must be an http:// or https:// address')
        return HttpServer(name, url, _pairs(entry.get("headers"), "headers", None))
    if "command" not in entry:
        raise _EntryError('needs "command" (a stdio server) or "url" (a streamable HTTP server)')
    command = _text(entry["command"], '"command"')
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise _EntryError('"args" must be a list of strings')
    if len(args) > MAX_ARGS:
        raise _EntryError(f'"args" has {len(args)} items; at most {MAX_ARGS} are read')
    for arg in args:
        if len(arg) > MAX_VALUE_CHARS or "\x00" in arg:
            raise _EntryError(
                f"an argument is longer than {MAX_VALUE_CHARS:,} characters or holds a NUL"
            )
    cwd = entry.get("cwd")
    if cwd is not None:
        cwd = str(Path(_text(cwd, '"cwd"')).expanduser())
    return StdioServer(
        name, command, tuple(args), _pairs(entry.get("env"), "env", VARIABLE_NAME), cwd
    )
