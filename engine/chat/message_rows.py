"""A message as a row of the history's ``messages`` table: read back into a ``StoredMessage``,
copied as saved (``History.fork``, ``History.compact``), and a prompt's attachments inserted as
rows of their own. history.py's ``History`` uses them; the SQL's columns are schema.py's."""

from __future__ import annotations

import json
from typing import Any

from ..turns.attachments import Attachment
from .records import StoredMessage, json_object, path_to, tool_calls_from


def message_from_row(
    m: Any, attachments: dict[int, tuple[Attachment, ...]] | None = None
) -> StoredMessage:
    """A ``messages`` row as the message it saves (``attachments``: by message id)."""
    return StoredMessage(
        m["id"],
        m["role"],
        m["content"],
        m["status"],
        m["created"],
        m["error"],
        json_object(m["params"]),
        json_object(m["stats"]),
        m["thinking"] or "",
        m["parent_id"],
        tool_calls_from(m["tool_calls"]),
        m["tool_call_id"],
        m["tool_name"],
        (attachments or {}).get(m["id"], ()),
        json_object(m["logprobs"]),
        m["summary_of"],
        bool(m["pinned"]),
    )


def copy_message(
    c: Any, conversation_id: int, parent: int | None, m: StoredMessage, stamp: str
) -> int:
    """A copy of ``m`` as saved (its thinking, tool calls, attachments, token-lens candidates,
    pin, what it summarises) in ``conversation_id`` after ``parent``; a reply still streaming
    is copied as interrupted. Returns the copy's id."""
    row = c.execute(
        "INSERT INTO messages(conversation_id, parent_id, role, content, status, error, params, "
        "stats, thinking, created, updated, tool_calls, tool_call_id, tool_name, logprobs, "
        "pinned, summary_of) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            conversation_id,
            parent,
            m.role,
            m.content,
            "interrupted" if m.status == "streaming" else m.status,
            m.error,
            json.dumps(m.params) if m.params else None,
            json.dumps(m.stats) if m.stats else None,
            m.thinking,
            m.created,
            stamp,
            json.dumps([t.to_dict() for t in m.tool_calls]) if m.tool_calls else None,
            m.tool_call_id,
            m.tool_name,
            # The token lens's candidates, kept as the text is.
            json.dumps(m.logprobs) if m.logprobs is not None else None,
            int(m.pinned),
            # A summary's original, as saved: History.fork names the original's copy.
            m.summary_of,
        ),
    ).lastrowid
    assert row is not None
    # The rows as saved (a copy found missing keeps its own note here).
    c.execute(
        "INSERT INTO attachments"
        "(message_id, position, kind, name, digest, mime, size, width, height, note) "
        "SELECT ?, position, kind, name, digest, mime, size, width, height, note "
        "FROM attachments WHERE message_id = ?",
        (row, m.id),
    )
    return row


def fork_messages(tree: list[StoredMessage], branch: list[StoredMessage]) -> list[StoredMessage]:
    """What a fork of ``branch`` copies, each message after its parent: the branch, and for
    each compaction summary among them the original branch it replaces (so the copy still
    says what it summarises), and so on for a summary of a summary. Bounded by ``tree``."""
    chosen = {m.id: m for m in branch}
    todo = [m for m in branch if m.summary_of is not None]
    while todo:
        summary = todo.pop()
        replaced = path_to(tree, summary.summary_of)
        # A summary whose original is gone (a damaged row) is copied as it is.
        if not replaced or replaced[-1].id != summary.summary_of:
            continue
        for m in replaced:
            if m.id not in chosen:
                chosen[m.id] = m
                if m.summary_of is not None:
                    todo.append(m)
    return parents_first(list(chosen.values()))


def parents_first(messages: list[StoredMessage]) -> list[StoredMessage]:
    """``messages`` ordered so that each follows its parent when its parent is among them
    (a reply moved after a compaction can be older than its new parent)."""
    ids = {m.id for m in messages}
    done: set[int] = set()
    ordered: list[StoredMessage] = []
    waiting = sorted(messages, key=lambda m: m.id)
    while waiting:
        later = []
        for m in waiting:
            if m.parent_id not in ids or m.parent_id in done:
                ordered.append(m)
                done.add(m.id)
            else:
                later.append(m)
        if len(later) == len(waiting):
            # A cycle in damaged rows: the rest as they come.
            return ordered + later
        waiting = later
    return ordered


def insert_attachments(c: Any, message_id: int, attachments: tuple[Attachment, ...]) -> None:
    """A prompt's ``attachments`` saved as rows of ``message_id``, in order."""
    c.executemany(
        "INSERT INTO attachments"
        "(message_id, position, kind, name, digest, mime, size, width, height, note) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (message_id, i, a.kind, a.name, a.digest, a.mime, a.size, a.width, a.height, a.note)
            for i, a in enumerate(attachments)
        ],
    )
