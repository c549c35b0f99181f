"""Tool calls in a server's streamed reply (``choices[0].delta.tool_calls``), put together.

Servers stream a call in pieces, each piece naming the call by its ``index``:

* llama-server (``--jinja``): the first piece carries ``id``, ``type`` and ``function.name``
  (and maybe the first ``arguments``), the next ones only ``function.arguments`` fragments;
  when it settles on another id for a call, the id and the name come again;
* vLLM: the same shape (the name whole in the first piece, the arguments in fragments);
* Ollama: a whole call in one piece, arguments included; some servers send the arguments
  as a JSON object instead of JSON text (serialised here), or leave ``index`` out (a piece
  with a new ``id``, or another name, is then a new call).

Everything in a call is the server's (the model's) text: kept as data, never markup (the
front ends sanitise it to show it), lone surrogates replaced, and bounded: at most
``MAX_TOOL_CALLS`` calls in one reply, a name ``MAX_NAME_CHARS`` characters, an id
``MAX_ID_CHARS``, the arguments ``MAX_ARGUMENTS_CHARS``. Past a bound, ``ToolCallBound``
(the backend turns it into a one-line error): a server that sends that much has gone wrong,
and an endless call must not hold the reply open. A call without an id gets one made up
here (the ``tool`` message that answers it must name it).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from ..json_bounds import value_depth
from ..turns.tool_calls import MAX_ARGUMENTS_CHARS, ToolCall
from .client import MAX_REPLY_DEPTH

# Calls in one reply (the chat runs at most 16 of them: engine/chat/tool_turns.py).
MAX_TOOL_CALLS = 64
MAX_NAME_CHARS = 256  # a tool's name (OpenAI's own limit is 64)
MAX_ID_CHARS = 256  # a call's id (servers' are a few dozen characters)


class ToolCallBound(ValueError):
    """A server's tool calls went past a bound; the message says which, in a few words."""


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    # Characters in arguments.
    size: int = 0


def _clean(text: str) -> str:
    """Lone surrogates (a JSON ``\\ud800`` escape) become U+FFFD: they cannot be saved or shown."""
    if text.isascii():
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class ToolCallStream:
    """The calls of one streamed reply so far; ``feed`` each chunk's ``delta.tool_calls``,
    ``calls()`` at the end."""

    def __init__(self) -> None:
        self._calls: dict[int, _Call] = {}
        # The key of the call fed last (for pieces without an index).
        self._last: int | None = None

    def __bool__(self) -> bool:
        return bool(self._calls)

    def feed(self, pieces: Any) -> bool:
        """Read one chunk's ``delta.tool_calls`` (anything else is ignored); whether it held any
        call's piece. Raises ``ToolCallBound`` past a bound."""
        if not isinstance(pieces, list):
            return False
        fed = False
        # Bounded by the event's size (sse.MAX_EVENT).
        for piece in pieces:
            if isinstance(piece, dict):
                self._piece(piece)
                fed = True
        return fed

    def _key(self, piece: dict[str, Any], call_id: str, name: str) -> int:
        index = piece.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            return index
        last = self._calls.get(self._last) if self._last is not None else None
        new = (
            last is None
            or (call_id and call_id != last.id)
            or (not call_id and name and last.name and name != last.name)
        )
        if not new and self._last is not None:
            return self._last
        return max(self._calls, default=-1) + 1

    def _piece(self, piece: dict[str, Any]) -> None:
        function = piece.get("function")
        if not isinstance(function, dict):
            function = {}
        raw_id, raw_name = piece.get("id"), function.get("name")
        call_id = raw_id if isinstance(raw_id, str) else ""
        name = raw_name if isinstance(raw_name, str) else ""
        key = self._key(piece, call_id, name)
        call = self._calls.get(key)
        if call is None:
            if len(self._calls) >= MAX_TOOL_CALLS:
                raise ToolCallBound(f"more than {MAX_TOOL_CALLS} tool calls in one reply")
            call = self._calls[key] = _Call()
        self._last = key
        # llama-server may settle on another id for a call: the last one holds.
        if call_id:
            if len(call_id) > MAX_ID_CHARS:
                raise ToolCallBound(f"a tool call id longer than {MAX_ID_CHARS} characters")
            call.id = call_id
        # A name sent again whole (with a new id) is not appended.
        if name and name != call.name:
            if len(call.name) + len(name) > MAX_NAME_CHARS:
                raise ToolCallBound(f"a tool name longer than {MAX_NAME_CHARS} characters")
            call.name = name if not call.name else call.name + name
        arguments = function.get("arguments")
        # An object, not JSON text: made JSON text.
        if isinstance(arguments, (dict, list)):
            # The event's own bound keeps it shallower already.
            if value_depth(arguments) > MAX_REPLY_DEPTH:
                raise ToolCallBound(
                    f"a tool call's arguments nested more than {MAX_REPLY_DEPTH} levels deep"
                )
            arguments = json.dumps(arguments, ensure_ascii=False)
        if isinstance(arguments, str) and arguments:
            call.size += len(arguments)
            if call.size > MAX_ARGUMENTS_CHARS:
                raise ToolCallBound(
                    f"a tool call's arguments longer than {MAX_ARGUMENTS_CHARS:,} characters"
                )
            call.arguments.append(arguments)

    def calls(self) -> tuple[ToolCall, ...]:
        """The calls in the order they began; a made-up id where the server sent none."""
        return tuple(
            ToolCall(
                _clean(call.id) or f"call_{secrets.token_hex(8)}",
                _clean(call.name),
                _clean("".join(call.arguments)) or "{}",
            )
            for call in self._calls.values()
        )
