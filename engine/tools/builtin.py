"""vibechat's own tools, each off until the config names it (``builtin_tools``) and asking
like any other: ``current_time`` (the date and time, with the local time zone),
``read_file`` (a text file) and ``list_folder`` (a folder's entries), both confined to the
folders the user names (``tool_folders``).

The model chooses the path: it is outside text. A path with a ``..`` part is refused, the
rest is resolved (symlinks followed) and must still lie inside a named folder (a link out of
one is refused); a FIFO, a device or a binary file is a one-line result, never a read that
hangs or floods; a read and a listing are bounded. Results are sanitised (results.py).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..files import FileTooLarge, NotARegularFile, human_limit, kind_of, read_file
from ..sanitize import sanitize
from ..settings.tool_checks import BUILTIN_TOOL_NAMES
from ..turns.tool_calls import ToolSpec
from .results import DEFAULT_RESULT_LIMIT, ToolResult, bounded, error

# At most: the bytes of a file read_file reads; the entries list_folder shows, and those it looks
# at (a huge folder is not read whole).
MAX_READ_BYTES = 256 * 1024
MAX_ENTRIES = 500
MAX_SCANNED = 10_000
MAX_PATH_CHARS = 4096

_PATH = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "description": "The path: absolute, or relative to the first allowed folder.",
        }
    },
    "required": ["path"],
}

BUILTIN_SPECS: dict[str, ToolSpec] = {
    "current_time": ToolSpec(
        "current_time",
        "The current date and time, with the local time zone.",
        {"type": "object", "properties": {}},
        "",
        "current_time",
    ),
    "read_file": ToolSpec(
        "read_file",
        "Read a text file (UTF-8) from the folders the user allowed.",
        _PATH,
        "",
        "read_file",
    ),
    "list_folder": ToolSpec(
        "list_folder",
        "List a folder's files and subfolders, in the folders the user allowed; an empty path "
        "lists the allowed folders.",
        {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The folder; empty for the allowed folders.",
                }
            },
        },
        "",
        "list_folder",
    ),
}
assert tuple(BUILTIN_SPECS) == BUILTIN_TOOL_NAMES


def builtin_specs(enabled: Sequence[str]) -> tuple[ToolSpec, ...]:
    """The built-in tools ``enabled`` names (the config's ``builtin_tools``), in a fixed order."""
    return tuple(spec for name, spec in BUILTIN_SPECS.items() if name in enabled)


def run_builtin(
    name: str,
    arguments: Mapping[str, Any],
    folders: Sequence[Path],
    limit: int = DEFAULT_RESULT_LIMIT,
) -> ToolResult:
    """Run the built-in tool ``name`` (its server's tool name) with ``arguments``; every
    failure is a result the model can read."""
    if name == "current_time":
        now = datetime.now().astimezone()
        zone = now.tzname() or "local time"
        return ToolResult(
            f"{now.strftime('%A %Y-%m-%d %H:%M:%S')} {zone} (UTC{now.strftime('%z')[:3]}:"
            f"{now.strftime('%z')[3:]}); ISO 8601: {now.isoformat(timespec='seconds')}"
        )
    if name not in ("read_file", "list_folder"):
        return error(f"There is no built-in tool named {name[:60]!r}.")
    path = arguments.get("path", "")
    if not isinstance(path, str):
        return error("The argument 'path' must be a string.")
    roots = _roots(folders)
    if not roots:
        return error("No folder is allowed: the user has not set tool_folders in the config.")
    if name == "list_folder" and not path.strip():
        return ToolResult(
            "The allowed folders:\n" + "\n".join(f"{sanitize(str(r))}/" for r in roots)
        )
    try:
        target = confined(path, roots)
    except PermissionError as exc:
        return error(str(exc))
    return _read(target, limit) if name == "read_file" else _list(target, limit)


def _roots(folders: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for folder in folders:
        try:
            root = Path(folder).expanduser().resolve(strict=True)
        except (OSError, RuntimeError):
            # A folder that is not there reads nothing.
            continue
        if root.is_dir() and root not in out:
            out.append(root)
    return out


def confined(path: str, roots: Sequence[Path]) -> Path:
    """``path`` resolved (symlinks followed) inside one of ``roots`` (resolved folders);
    ``PermissionError`` with a line for the model otherwise. A relative path is relative to
    the first folder; ``..`` is refused before anything is looked up."""
    shown = sanitize(path)[:200]
    if not path.strip() or len(path) > MAX_PATH_CHARS or "\x00" in path:
        raise PermissionError(
            "Give a path (an absolute one, or relative to the first allowed folder)."
        )
    given = Path(path).expanduser()
    if ".." in given.parts:
        raise PermissionError(f"The path {shown!r} has a '..' part: give the path without one.")
    candidate = given if given.is_absolute() else roots[0] / given
    try:
        resolved = candidate.resolve(strict=True)
    except FileNotFoundError:
        raise PermissionError(f"There is no file or folder {shown!r}.") from None
    except (OSError, RuntimeError) as exc:
        raise PermissionError(
            f"The path {shown!r} cannot be followed ({sanitize(str(exc))[:100]})."
        ) from None
    if not any(resolved == root or resolved.is_relative_to(root) for root in roots):
        raise PermissionError(
            f"The path {shown!r} is outside the folders the user allowed "
            f"({', '.join(sanitize(str(r)) for r in roots)})."
        )
    return resolved


def _read(path: Path, limit: int) -> ToolResult:
    shown = sanitize(str(path))
    try:
        data = read_file(path, MAX_READ_BYTES)
    except NotARegularFile as exc:
        return error(f"{shown} {exc.reason}: only text files are read.")
    except FileTooLarge:
        return error(f"{shown} is larger than {human_limit(MAX_READ_BYTES)}: too large to read.")
    except OSError as exc:
        return error(f"{shown} cannot be read ({sanitize(exc.strerror or str(exc))}).")
    if b"\x00" in data:
        return error(f"{shown} is a binary file, not text.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return error(f"{shown} is not UTF-8 text (a binary file?).")
    return bounded(text, False, limit)


def _list(path: Path, limit: int) -> ToolResult:
    shown = sanitize(str(path))
    if not path.is_dir():
        return error(f"{shown} is not a folder.")
    rows: list[str] = []
    scanned = 0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                scanned += 1
                if scanned > MAX_SCANNED:
                    break
                rows.append(_row(entry))
    except OSError as exc:
        return error(f"{shown} cannot be listed ({sanitize(exc.strerror or str(exc))}).")
    rows.sort(key=str.lower)
    more = len(rows) - MAX_ENTRIES
    text = f"{shown}/ ({len(rows)}{'+' if scanned > MAX_SCANNED else ''} entries)\n" + "\n".join(
        rows[:MAX_ENTRIES]
    )
    if more > 0 or scanned > MAX_SCANNED:
        text += f"\n[{max(more, 0)}{'+' if scanned > MAX_SCANNED else ''} more not shown]"
    return bounded(text, False, limit)


def _row(entry: os.DirEntry[str]) -> str:
    name = sanitize(entry.name).replace("\n", " ")
    try:
        if entry.is_symlink():
            return f"{name} (a link)"
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return f"{name} (unreadable)"
    if stat.S_ISDIR(info.st_mode):
        return f"{name}/"
    kind = kind_of(info.st_mode)
    return f"{name} ({kind})" if kind else f"{name} ({info.st_size:,} bytes)"
