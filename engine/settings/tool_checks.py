"""The tool settings' checks (table.py declares the settings): the built-in tools' names, the
folders they may read, and the always-allowed tools' patterns. A list comes from the config
file as a TOML list, or from a variable as text (names and patterns separated by commas,
folders by the path separator, as in PATH)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError

BUILTIN_TOOL_NAMES: tuple[str, ...] = ("current_time", "read_file", "list_folder")
# Whether a reply may (must) call tools.
TOOL_CHOICES: tuple[str, ...] = ("auto", "none", "required")
MAX_LIST_ITEMS = 256
MAX_PATTERN_CHARS = 200
# NAME, SERVER/NAME or SERVER/*: a server's name as mcp.json may give it, a tool's as its server
# does.
TOOL_PATTERN = re.compile(r"(?:[A-Za-z0-9_-]+/)?(?:\*|[^\s/*]+)")


def _items(value: Any, name: str, separator: str) -> list[str]:
    if isinstance(value, str):
        value = [part.strip() for part in value.split(separator) if part.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, (str, Path)) for v in value):
        raise InvalidParameterError(f"{name} must be a list of strings")
    if len(value) > MAX_LIST_ITEMS:
        raise InvalidParameterError(f"{name} has {len(value)} items; at most {MAX_LIST_ITEMS}")
    return [str(v) for v in value]


def check_builtin_tools(value: Any) -> tuple[str, ...]:
    """The built-in tools to offer, by name (each once)."""
    out: list[str] = []
    for item in _items(value, "builtin_tools", ","):
        if item not in BUILTIN_TOOL_NAMES:
            raise InvalidParameterError(
                f"builtin_tools: unknown tool {item[:60]!r}; the built-in tools are "
                f"{', '.join(BUILTIN_TOOL_NAMES)}"
            )
        if item not in out:
            out.append(item)
    return tuple(out)


def check_tool_folders(value: Any) -> tuple[Path, ...]:
    """The folders the built-in file tools may read: absolute (``~`` allowed), each once."""
    out: list[Path] = []
    for item in _items(value, "tool_folders", os.pathsep):
        path = Path(item).expanduser()
        if not path.is_absolute() or "\x00" in item:
            raise InvalidParameterError(
                f"tool_folders: {item[:80]!r} is not an absolute path; give one "
                'such as "~/notes" or "/srv/docs"'
            )
        if path not in out:
            out.append(path)
    return tuple(out)


def check_tool_patterns(value: Any) -> tuple[str, ...]:
    """Tools named as the user names them: ``NAME``, ``SERVER/NAME``, ``SERVER/*``
    (``builtin/NAME`` for a built-in tool)."""
    out: list[str] = []
    for item in _items(value, "allowed_tools", ","):
        if (
            len(item) > MAX_PATTERN_CHARS
            or not item.isprintable()
            or not TOOL_PATTERN.fullmatch(item)
        ):
            raise InvalidParameterError(
                f"allowed_tools: {item[:60]!r} is not a tool; write NAME, SERVER/NAME "
                "or SERVER/* (builtin/NAME for a built-in tool)"
            )
        if item not in out:
            out.append(item)
    return tuple(out)


def check_tool_choice(value: Any) -> str:
    """The ``tool_choice`` setting: auto, none or required (any case)."""
    choice = str(value).strip().lower()
    if choice not in TOOL_CHOICES:
        raise InvalidParameterError(
            f"tool_choice must be one of {', '.join(TOOL_CHOICES)} (got {str(value)[:40]!r})"
        )
    return choice
