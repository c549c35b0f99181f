"""What the chat history holds, as Python values: a conversation's summary (what a list
shows), its messages, a search hit; the Markdown a conversation exports as; the text a
search box becomes for FTS5; the rows' timestamps.

A row's JSON columns (parameters, stats) are read leniently: one written by a newer or
older vibechat, or damaged, reads as nothing (or the default parameters) rather than a crash.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from ..errors import InvalidParameterError
from ..json_bounds import bounded_loads
from ..settings.params import PARAM_SPECS, SamplingParams
from ..turns.attachments import Attachment
from ..turns.backend import ChatMessage
from ..turns.tool_calls import ToolCall
from .compared import Compared, PickMark, compared_replies, differing_settings

Status = Literal["streaming", "complete", "cut", "stopped", "error", "interrupted"]
STATUSES: tuple[str, ...] = ("streaming", "complete", "cut", "stopped", "error", "interrupted")
# Where a conversation came from: the chat, `vibechat run`, a line of `run --prompts-file`.
SOURCES: tuple[str, ...] = ("chat", "run", "batch")

_last_stamp = ""
_stamp_lock = threading.Lock()


def now() -> str:
    """UTC timestamps as ISO-8601 text: they sort as text and read well in JSON. Within
    a process each one is later than the one before, so "newest first" never ties."""
    global _last_stamp
    with _stamp_lock:
        moment = datetime.now(timezone.utc)
        stamp = moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
        while stamp <= _last_stamp:
            moment += timedelta(microseconds=1)
            stamp = moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
        _last_stamp = stamp
        return stamp


def export_line(params: SamplingParams) -> str:
    """The Markdown export's parameters, each one its declaration exports (``ParamSpec.exported``)
    under its label: ``temperature 0.8, top-k 40, ..., repeat penalty auto``."""
    return ", ".join(
        f"{spec.label.lower()} {spec.show(getattr(params, name))}"
        for name, spec in PARAM_SPECS.items()
        if spec.exported
    )


@dataclass(frozen=True)
class ConversationSummary:
    """What a list of conversations shows; no messages."""

    id: int
    title: str
    model: str | None
    created: str
    updated: str
    # One of SOURCES.
    source: str = "chat"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "model": self.model,
            "source": self.source,
            "created": self.created,
            "updated": self.updated,
        }


@dataclass(frozen=True)
class StoredMessage:
    id: int
    role: str
    content: str
    status: str
    created: str
    error: str | None = None
    params: dict[str, Any] | None = None
    stats: dict[str, Any] | None = None
    # A reasoning model's thinking (never sent back to the model).
    thinking: str = ""
    # The message it follows (None: the conversation's first).
    parent_id: int | None = None
    # A reply's: the tool calls it asked for.
    tool_calls: tuple[ToolCall, ...] = ()
    # A tool result's: the call it answers.
    tool_call_id: str | None = None
    # A tool result's: the tool, as SERVER/NAME.
    tool_name: str | None = None
    # A prompt's images and files, in order (engine/attach/store.py's ``reopen``: a copy gone
    # missing has path "" and says so in its note).
    attachments: tuple[Attachment, ...] = ()
    # A reply's token-lens candidates, as saved (``LensLog.to_json``; None: the lens was off).
    logprobs: dict[str, Any] | None = None
    # A summary's (engine/chat/compaction.py): the last message of the original branch it
    # replaces (None: not a summary).
    summary_of: int | None = None
    # Pinned by the user: never left out to fit the context.
    pinned: bool = False

    @property
    def is_summary(self) -> bool:
        """Whether this message is a summary of the conversation before it (a compaction)."""
        return self.summary_of is not None

    @property
    def in_context(self) -> bool:
        """Whether the model sees this message when the conversation continues: failed
        replies are shown, not sent; a stopped or interrupted reply is kept as written; a
        reply that asked for tools, and the tools' results, are sent."""
        return self.role in ("user", "tool") or (
            self.status != "error" and bool(self.content or self.tool_calls)
        )

    def chat_message(self, call_names: dict[str, str] | None = None) -> ChatMessage:
        """The message as the model is sent it; a tool's result is named as the model called
        the tool (``call_names``: call id → name, from the reply that asked), else as its
        server does."""
        if self.role == "tool":
            name = (call_names or {}).get(self.tool_call_id or "") or (self.tool_name or "").rsplit(
                "/", 1
            )[-1]
            return ChatMessage(
                "tool", self.content, tool_call_id=self.tool_call_id or "", name=name or None
            )
        # An image whose kept copy is gone cannot be sent again: it stays on screen (and in the
        # export) with its note; a missing file is still inlined, empty, with that note.
        sent = tuple(a for a in self.attachments if a.path or not a.is_image)
        return ChatMessage(
            self.role,  # type: ignore[arg-type]
            self.content,
            tool_calls=self.tool_calls,  # type: ignore[arg-type]
            attachments=sent,
            pinned=self.pinned,
        )

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "parent_id": self.parent_id,
            "role": self.role,
            "content": self.content,
            "status": self.status,
            "created": self.created,
        }
        if self.error:
            data["error"] = self.error
        if self.role == "assistant":
            data["thinking"] = self.thinking
        if self.params:
            data["params"] = self.params
        if self.stats:
            data["stats"] = self.stats
        if self.tool_calls:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.attachments:
            data["attachments"] = [attachment_dict(a) for a in self.attachments]
        if self.logprobs is not None:
            data["logprobs"] = self.logprobs
        if self.summary_of is not None:
            data["summary_of"] = self.summary_of
        if self.pinned:
            data["pinned"] = True
        if self.role == "tool":
            data["tool_call_id"] = self.tool_call_id
            data["tool_name"] = self.tool_name
        return data


@dataclass(frozen=True)
class StoredConversation:
    """A saved conversation: ``messages`` is the branch on screen (its first message to
    ``leaf_id``: what the model is sent, what continues, what Markdown exports), ``tree``
    every message on every branch, oldest first (empty: ``messages`` is all there is)."""

    summary: ConversationSummary
    model_path: str | None
    system: str | None
    params: SamplingParams
    messages: list[StoredMessage] = field(default_factory=list)
    tree: list[StoredMessage] = field(default_factory=list)
    # The picks kept of its comparisons (picks.py), which the export marks.
    picks: tuple[PickMark, ...] = ()

    @property
    def id(self) -> int:
        return self.summary.id

    @property
    def title(self) -> str:
        return self.summary.title

    @property
    def leaf_id(self) -> int | None:
        return self.messages[-1].id if self.messages else None

    def branch(self, message_id: int) -> tuple[int, int]:
        """Where the message stands among its siblings (the messages with the same parent:
        a regenerated reply, an edited prompt): (1-based position, how many), oldest first."""
        message = next((m for m in self.tree if m.id == message_id), None)
        if message is None:
            return (1, 1)
        siblings = [m.id for m in self.tree if m.parent_id == message.parent_id]
        return (siblings.index(message_id) + 1, len(siblings))

    def to_dict(self) -> dict[str, Any]:
        """The branch on screen as ``messages`` (as before the tree), every message of every
        branch as ``tree`` with its ``parent_id``, and the picks of its comparisons."""
        return {
            **self.summary.to_dict(),
            "model_path": self.model_path,
            "system": self.system,
            "params": self.params.to_dict(),
            "leaf_id": self.leaf_id,
            "messages": [m.to_dict() for m in self.messages],
            "tree": [m.to_dict() for m in (self.tree or self.messages)],
            # The picks of its comparisons (both replies' ids, the side chosen), oldest first.
            "picks": [
                {"a_message_id": p.a_message_id, "b_message_id": p.b_message_id, "winner": p.winner}
                for p in self.picks
            ],
        }

    def replaced_by(self, summary: StoredMessage) -> str:
        """What a summary replaces, in words: ``messages 1–6 of the original branch (up to
        message #12)``."""
        replaced = path_to(self.tree or self.messages, summary.summary_of)
        point = summary.summary_of
        return f"messages 1–{len(replaced)} of the original branch (up to message #{point})"

    def to_markdown(self) -> str:
        s = self.summary
        lines = [
            f"# {s.title}",
            "",
            f"- Model: {s.model or 'unknown'}",
            f"- Source: {s.source}",
            f"- Started: {s.created}",
            f"- Updated: {s.updated}",
        ]
        lines.append(f"- Parameters: {export_line(self.params)}")
        if self.system:
            lines += ["", "## System", "", self.system]
        compared = compared_replies(self.tree or self.messages, s.source, self.picks)
        for m in self.messages:
            place = compared.get(m.id)
            if place is not None:
                # Both sides of the comparison, A first, each headed by its side.
                lines += self._compared(m, place)
                continue
            heading = {"user": "User", "tool": f"Tool result: {m.tool_name or 'a tool'}"}.get(
                m.role, "Assistant"
            ) + _status_words(m)
            if m.is_summary:
                heading = f"Summary (compacted: it replaces {self.replaced_by(m)})"
            if m.pinned:
                heading += " · pinned"
            index, count = self.branch(m.id)
            # The others are in the JSON export (``tree``).
            if count > 1 and not m.is_summary:
                heading += f" · version {index} of {count}"
            lines += _section(m, heading)
        return "\n".join(lines).rstrip() + "\n"

    def _compared(self, shown: StoredMessage, place: Compared) -> list[str]:
        """The two replies of a comparison, ``shown`` the one on the branch: each headed by its
        side and the settings it was run with where the other's differ, the branch's and the
        pick's marked."""
        by_id = {m.id: m for m in self.tree or self.messages}
        other = by_id.get(place.other)
        sides = {place.side: shown}
        if other is not None:
            sides["B" if place.side == "A" else "A"] = other
        lines: list[str] = []
        for side in sorted(sides):
            m = sides[side]
            heading = f"Assistant · side {side}" + _status_words(m)
            rival = sides.get("B" if side == "A" else "A")
            differs = differing_settings(m.params, rival.params if rival is not None else None)
            heading += f" ({differs})" if differs else " (the same settings)"
            if m is shown:
                heading += " · on the branch"
            if place.winner == side:
                heading += " · picked"
            lines += _section(m, heading)
        return lines


def _status_words(m: StoredMessage) -> str:
    """How a message ended, when not complete, for its heading."""
    if m.status == "cut":
        return " (cut: it reached the token limit or the end of the context)"
    if m.status != "complete":
        return f" ({m.status}{': ' + m.error if m.error else ''})"
    return ""


def _section(m: StoredMessage, heading: str) -> list[str]:
    """A message's section of the Markdown export under ``heading``: its attachments, its
    thinking, its text (a tool result's folded) and the tool calls it asked for."""
    lines = ["", f"## {heading}", ""]
    if m.attachments:
        lines += [*(attached_line(a) for a in m.attachments), ""]
    if m.thinking:
        lines += [*_details("Thinking", m.thinking), ""]
    if m.role == "tool":
        return [*lines, *_details("Result", m.content)]
    lines.append(m.content)
    for call in m.tool_calls:
        lines += ["", f"Called `{call.name}` with:", "", "```json", call.arguments, "```"]
    return lines


@dataclass(frozen=True)
class SearchHit:
    conversation_id: int
    message_id: int
    title: str
    role: str
    # The match in context; the matched words between HIT_START and HIT_END.
    snippet: str
    updated: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "message_id": self.message_id,
            "title": self.title,
            "role": self.role,
            "snippet": self.snippet,
            "updated": self.updated,
        }


def attachment_dict(a: Attachment) -> dict[str, Any]:
    """An attachment in a JSON export: what it was and its content address, never its bytes
    (nor a file's text: that is in the kept copy the digest names)."""
    data: dict[str, Any] = {
        "kind": a.kind,
        "name": a.name,
        "digest": a.digest,
        "mime": a.mime,
        "size": a.size,
        "width": a.width,
        "height": a.height,
    }
    if a.note:
        data["note"] = a.note
    return data


def attached_line(a: Attachment) -> str:
    """An attachment in a Markdown export: ``Attached: photo.png · 640×480 · 212 KB`` (and its
    note), one line whatever the saved name holds."""
    line = f"Attached: {a.label()}" + (f" ({a.note})" if a.note else "")
    return " ".join(line.split())


def path_to(tree: list[StoredMessage], leaf_id: int | None) -> list[StoredMessage]:
    """The branch ending at ``leaf_id``: its first message to it, following the parents
    (None or an id not in ``tree``: the branch of the newest message). Bounded by the
    tree's size, whatever the rows say."""
    by_id = {m.id: m for m in tree}
    leaf = by_id.get(leaf_id) if leaf_id is not None else None
    if leaf is None:
        if not tree:
            return []
        leaf = max(tree, key=lambda m: m.id)
    path, on_path = [leaf], {leaf.id}
    while path[-1].parent_id is not None:
        parent = by_id.get(path[-1].parent_id)
        # A damaged row: the branch starts here.
        if parent is None or parent.id in on_path:
            break
        path.append(parent)
        on_path.add(parent.id)
    return path[::-1]


def newest_leaf(tree: list[StoredMessage], message_id: int) -> int:
    """The end of the branch through ``message_id`` that continues, at every fork, with the
    newest child: where switching to a message, or opening at one, lands."""
    children: dict[int, int] = {}
    # Oldest first: the newest child of each wins.
    for m in tree:
        if m.parent_id is not None:
            children[m.parent_id] = m.id
    current, steps = message_id, 0
    while current in children and steps <= len(tree):
        current, steps = children[current], steps + 1
    return current


# Markers the UI turns into highlighting (never in saved text).
HIT_START, HIT_END = "\x02", "\x03"


def fts_query(text: str) -> str | None:
    """The user's words as a safe FTS5 query: every word must appear, the last one may be
    a prefix (search-as-you-type). Quotes and operators in the input are plain text."""
    words = re.findall(r"\w+", text, flags=re.UNICODE)
    if not words:
        return None
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    quoted[-1] += "*"
    return " ".join(quoted)


def tool_calls_from(text: str | None) -> tuple[ToolCall, ...]:
    """A reply's saved tool calls (a JSON list); damaged or absent: none."""
    if not text:
        return ()
    try:
        value = bounded_loads(text)
    except ValueError:
        # Damaged, or nested too deeply (JsonTooDeep).
        return ()
    if not isinstance(value, list):
        return ()
    return tuple(ToolCall.from_dict(item) for item in value[:64] if isinstance(item, dict))


def json_object(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = bounded_loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def params_from(text: str | None) -> SamplingParams:
    data = json_object(text) or {}
    try:
        return SamplingParams.from_dict(data)
    except (InvalidParameterError, TypeError):
        # Saved by a newer/older vibechat: defaults rather than a crash.
        return SamplingParams()


def _details(summary: str, text: str) -> list[str]:
    """A collapsed Markdown block (GitHub's ``<details>``); the text's HTML-significant
    characters escaped, so a ``</details>`` in it cannot end the block early."""
    body = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return [f"<details><summary>{summary}</summary>", "", body.strip("\n"), "", "</details>"]
