"""Who says yes to a tool call: the policy, pure logic (the chat asks the user in a dialog;
``vibechat run`` never asks).

A call runs when its tool is always allowed (the config's ``allowed_tools``, which the chat's
"Always allow" adds to), allowed for this conversation (the chat's "Allow for this
conversation"), or, in ``vibechat run``, named by an ``--allow-tool`` pattern. A pattern is
``NAME`` (a tool of that name, whatever its server), ``SERVER/NAME`` or ``SERVER/*`` (all of
one server's tools); vibechat's own tools are ``builtin/NAME``. Anything else is asked (chat)
or denied (run).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..errors import InvalidParameterError
from ..settings.config import load_config
from ..settings.config_save import update_config
from ..settings.table import SCHEMA, Schema
from ..settings.tool_checks import check_tool_patterns
from ..turns.tool_calls import ToolSpec


def matches(pattern: str, spec: ToolSpec) -> bool:
    """Whether ``pattern`` (NAME, SERVER/NAME, SERVER/*) names ``spec``."""
    server = spec.server or "builtin"
    tool = spec.tool or spec.name
    if "/" in pattern:
        owner, _, name = pattern.partition("/")
        return owner == server and (name == "*" or name == tool)
    return pattern in (tool, spec.name)


class ToolApproval:
    """The approval state of one conversation (the chat) or one run: ``always`` (the config's
    ``allowed_tools``), ``allow`` (``--allow-tool`` patterns) and what this conversation
    allowed. Not thread-safe: the caller asks from one place."""

    def __init__(self, always: Iterable[str] = (), allow: Iterable[str] = ()) -> None:
        self.always = tuple(always)
        try:
            self.allow = check_tool_patterns(list(allow))
        except InvalidParameterError as exc:
            # In the words of the flag that gave it.
            raise InvalidParameterError(
                "--allow-tool" + str(exc).removeprefix("allowed_tools:")
            ) from None
        self._conversation: set[str] = set()

    def allowed(self, spec: ToolSpec) -> bool:
        """Whether a call to ``spec`` runs without asking."""
        return (
            spec.qualified in self._conversation
            or any(matches(p, spec) for p in self.always)
            or any(matches(p, spec) for p in self.allow)
        )

    def why(self, spec: ToolSpec) -> str:
        """Why a call runs without asking, in words ('' when it would be asked)."""
        if spec.qualified in self._conversation:
            return "allowed for this conversation"
        if any(matches(p, spec) for p in self.always):
            return "always allowed (allowed_tools)"
        if any(matches(p, spec) for p in self.allow):
            return "allowed by --allow-tool"
        return ""

    def allow_for_conversation(self, spec: ToolSpec) -> None:
        """ "Allow this tool for this conversation": its calls run without asking until
        ``new_conversation()``."""
        self._conversation.add(spec.qualified)

    def new_conversation(self) -> None:
        """Forget what the last conversation allowed (the always-allowed list stays)."""
        self._conversation.clear()

    def always_allow(
        self, spec: ToolSpec, path: Path | None = None, *, schema: Schema = SCHEMA
    ) -> Path:
        """ "Always allow this tool": ``SERVER/NAME`` joins the config file's ``allowed_tools``
        (``path``, else the config file; ``schema``: the app's, whose settings the file holds)
        and this policy. The file's other lines stay as written; a file that does not load
        cleanly is not touched (``ConfigError``, one line). Returns the file written."""
        saved = tuple(load_config(path, environ={}, schema=schema).config.allowed_tools)
        if spec.qualified not in saved:
            saved = (*saved, spec.qualified)
        # Unchanged: not rewritten.
        written = update_config({"allowed_tools": saved}, path, schema=schema)
        if spec.qualified not in self.always:
            self.always = (*self.always, spec.qualified)
        return written
