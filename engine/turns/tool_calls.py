"""Tools as a turn carries them: what a model is offered (``ToolSpec``), what it asks for
(``ToolCall``) and what comes back (a ``tool`` message: ``ChatMessage(role="tool")``).

Every backend speaks these: the remote one as OpenAI's ``tools`` / ``tool_calls`` / ``tool``
messages, the local engine through the model's chat template (the ``tools`` variable Hugging
Face templates read) and the call markers its family writes (engine/turns/tool_formats.py).
Where the tools come from (MCP servers, the built-in ones) and who says yes to a call is
engine/tools/'s business; a backend only offers, recognises and reports.

Everything in a call is the model's output, and a tool's description and schema are a
server's: outside text, sanitised before it is shown and bounded before it is kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..json_bounds import JsonTooDeep, bounded_loads

ToolChoice = Literal["auto", "none", "required"]
# A call's arguments as the model wrote them, at most (longer: refused).
MAX_ARGUMENTS_CHARS = 64_000


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: its ``name`` as the model sees it (letters, digits, ``_``,
    ``-``: what every template and server accepts), what it does, and its arguments' JSON
    schema (an object schema). ``server``: the MCP server that runs it ("" for vibechat's
    built-in tools); ``tool``: its name there (the model-facing name may carry a prefix)."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    server: str = ""
    tool: str = ""

    @property
    def qualified(self) -> str:
        """``SERVER/TOOL`` (``builtin/TOOL`` for vibechat's own): how the user names it
        (``--allow-tool``, the always-allowed list, the approval prompt)."""
        return f"{self.server or 'builtin'}/{self.tool or self.name}"

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry (also what Hugging Face chat templates read)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for: an id (the server's, or one made up for a local model),
    the tool's model-facing name and the arguments as JSON text, as written."""

    id: str
    name: str
    arguments: str = "{}"

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a JSON object; ``ValueError`` naming what is wrong otherwise (the
        model is told so, as the call's result)."""
        if len(self.arguments) > MAX_ARGUMENTS_CHARS:
            raise ValueError(
                f"the arguments are {len(self.arguments):,} characters long; at most "
                f"{MAX_ARGUMENTS_CHARS:,} are accepted"
            )
        text = self.arguments.strip() or "{}"
        try:
            value = bounded_loads(text)
        except JsonTooDeep as exc:
            raise ValueError(
                f"the arguments are too deeply nested (more than {exc.limit} levels of "
                "[ and {); write them flatter"
            ) from None
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"the arguments are not valid JSON ({exc.msg} at character {exc.pos})"
            ) from None
        if not isinstance(value, dict):
            raise ValueError("the arguments must be a JSON object")
        return value

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(
            str(data.get("id", "")), str(data.get("name", "")), str(data.get("arguments", "{}"))
        )
