"""Saved conversations: one SQLite database under the data dir.

``History`` reads and writes the conversations and their messages; the room's other
modules hold the rest:

- database.py: the file, its opening (migrated and repaired, or read-only when it cannot
  be written), its short write transactions and its one-line errors; built to survive
  crashes and a second vibechat process (WAL, ``busy_timeout``, ``BEGIN IMMEDIATE``);
- schema.py: the numbered migrations, each recorded in ``schema_migrations``;
- records.py: the conversations, messages and search hits as values, and the Markdown a
  conversation exports as; export.py writes an export whole or not at all;
- reply_writer.py (``ReplyWriter``): a reply saved while it streams (status ``streaming``) and
  settled as ``complete`` / ``cut`` (a limit ended it: ``max_tokens`` or the context) /
  ``stopped`` / ``error``; rows a crash left ``streaming`` are marked ``interrupted`` when the
  database is next opened;
- convlock.py: the writer lock, so one vibechat at a time adds to a conversation;
- message_rows.py: a message as a row (read back, copied as saved, its attachments inserted);
- picks.py (``PickBook``, ``History``'s base): the picks of comparisons and their tally.

Each conversation records where it came from (``source``: ``chat``, ``run`` or ``batch``,
i.e. ``--prompts-file``), so the chat can list its own first. Full-text search covers
every message with SQLite FTS5 (what was said: a reply's thinking, kept in its own
column, is not searched). Listing conversations never reads their messages: the sidebar
of an app with thousands of conversations opens as fast as an empty one.

Each name is imported from the module that defines it (the records from records.py, the
errors from database.py, ...): this module is ``History`` only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from ..attach.store import AttachmentStore
from ..errors import InvalidParameterError
from ..settings.params import LENS_HISTORY_BYTES, SamplingParams
from ..turns.attachments import Attachment, AttachmentKind
from ..turns.tool_calls import ToolCall
from .convlock import ConversationLock
from .database import ConversationNotFound, default_path
from .message_rows import copy_message, fork_messages, insert_attachments, message_from_row
from .picks import PickBook
from .records import (
    HIT_END,
    HIT_START,
    SOURCES,
    ConversationSummary,
    SearchHit,
    StoredConversation,
    StoredMessage,
    fts_query,
    newest_leaf,
    now,
    params_from,
    path_to,
)


class Latest:
    """``add_message``'s default parent: the last message of the branch on screen."""


LATEST = Latest()


class History(PickBook):
    """The conversation database: its conversations, their messages, the search. Safe to
    share between threads (one connection behind a lock); several processes may use the
    same file at once (database.py).

    A prompt's attachments are rows of their own (what each was, its digest); their kept copies
    are in ``attachment_store`` (``AttachmentStore.default()``, where the chat and ``run`` keep
    them), read back when a conversation is read."""

    _attachment_store: AttachmentStore | None = None
    # A reply's token-lens candidates kept with it, in bytes of JSON at most (the
    # ``lens_history_bytes`` setting: whoever opens the history from the config sets it).
    lens_bytes: int = LENS_HISTORY_BYTES

    @property
    def attachment_store(self) -> AttachmentStore:
        if self._attachment_store is None:
            self._attachment_store = AttachmentStore.default()
        return self._attachment_store

    @attachment_store.setter
    def attachment_store(self, store: AttachmentStore) -> None:
        self._attachment_store = store

    # ----------------------------------------------------------- conversations
    def create(
        self,
        *,
        title: str,
        model: str | None = None,
        model_path: str | None = None,
        system: str | None = None,
        params: SamplingParams | None = None,
        source: str = "chat",
    ) -> int:
        """A new conversation; ``source``: where it comes from (one of ``SOURCES``)."""
        if source not in SOURCES:
            raise InvalidParameterError(
                f"unknown conversation source {source!r}: use {', '.join(SOURCES)}."
            )
        stamp = now()
        with self._write() as c:
            cur = c.execute(
                "INSERT INTO conversations"
                "(title, model, model_path, system, params, created, updated, source) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    title,
                    model,
                    model_path,
                    system,
                    json.dumps((params or SamplingParams()).to_dict()),
                    stamp,
                    stamp,
                    source,
                ),
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

    def conversations(
        self, limit: int | None = None, offset: int = 0, source: str | None = None
    ) -> list[ConversationSummary]:
        """Newest first (by their last message: a rename is no activity); only those from
        ``source`` (one of ``SOURCES``; None: all); reads no messages. Fetched as one JSON
        row: Python's sqlite3 gives up the GIL for every row it steps, and each time waits to
        get it back from a busy UI thread, which made a thousand rows take a noticeable
        while in a worker."""
        rows = self._read(
            "SELECT json_group_array(json_array(id, title, model, created, updated, source)) "
            "AS rows FROM "
            "(SELECT id, title, model, created, updated, source FROM conversations "
            " WHERE ?1 IS NULL OR source = ?1 ORDER BY updated DESC, id DESC LIMIT ?2 OFFSET ?3)",
            (source, -1 if limit is None else limit, offset),
        )
        return [ConversationSummary(*row) for row in json.loads(rows[0]["rows"] or "[]")]

    def count(self) -> int:
        return self._read("SELECT COUNT(*) AS n FROM conversations")[0]["n"]

    def latest(self) -> ConversationSummary | None:
        found = self.conversations(limit=1)
        return found[0] if found else None

    def get(
        self, conversation_id: int, *, leaf: int | None = None, through: int | None = None
    ) -> StoredConversation:
        """The conversation with every message (``tree``) and one branch (``messages``): the
        one ending at ``leaf``, else the newest branch through ``through`` (a search hit's
        message, a sibling switched to), else the one last on screen."""
        rows = self._read("SELECT * FROM conversations WHERE id = ?", (conversation_id,))
        if not rows:
            raise ConversationNotFound(
                f"no conversation {conversation_id}: 'vibechat history list' shows the saved ones."
            )
        r = rows[0]
        summary = ConversationSummary(
            r["id"], r["title"], r["model"], r["created"], r["updated"], r["source"]
        )
        attachments = self._attachments("m.conversation_id = ?", (conversation_id,))
        tree = [
            message_from_row(m, attachments)
            for m in self._read(
                "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
            )
        ]
        if leaf is None:
            known = {m.id for m in tree}
            leaf = newest_leaf(tree, through) if through in known else r["leaf_id"]
        return StoredConversation(
            summary,
            r["model_path"],
            r["system"],
            params_from(r["params"]),
            path_to(tree, leaf),
            tree,
            self.picks_of(conversation_id),
        )

    def messages_after(self, conversation_id: int, message_id: int) -> list[StoredMessage]:
        """The conversation's messages saved after ``message_id`` (another process's turns,
        added since this one last read or wrote it), oldest first, on every branch. Empty
        when there are none, or the conversation is gone."""
        attachments = self._attachments(
            "m.conversation_id = ? AND m.id > ?", (conversation_id, message_id)
        )
        return [
            message_from_row(m, attachments)
            for m in self._read(
                "SELECT * FROM messages WHERE conversation_id = ? AND id > ? ORDER BY id",
                (conversation_id, message_id),
            )
        ]

    def _attachments(self, where: str, args: Sequence[Any]) -> dict[int, tuple[Attachment, ...]]:
        """The attachments of the messages ``where`` selects (``m``: messages), by message id, in
        order, each with its kept copy found again (or said missing)."""
        rows = self._read(
            "SELECT a.* FROM attachments a JOIN messages m ON m.id = a.message_id "
            f"WHERE {where} ORDER BY a.message_id, a.position",
            args,
        )
        found: dict[int, list[Attachment]] = {}
        store = self.attachment_store
        for r in rows:
            kind: AttachmentKind = "image" if r["kind"] == "image" else "file"
            found.setdefault(r["message_id"], []).append(
                store.reopen(
                    kind,
                    r["name"],
                    r["digest"],
                    r["mime"],
                    r["size"],
                    r["width"],
                    r["height"],
                    r["note"],
                )
            )
        return {message_id: tuple(items) for message_id, items in found.items()}

    def message(self, message_id: int) -> StoredMessage | None:
        """One saved message (its attachments left out), or None when there is none."""
        rows = self._read("SELECT * FROM messages WHERE id = ?", (message_id,))
        return message_from_row(rows[0]) if rows else None

    def siblings(self, message_id: int) -> list[int]:
        """The messages with the same parent as ``message_id`` (it included; the other
        replies to its prompt, the other versions of its prompt), oldest first."""
        rows = self._read(
            "SELECT s.id FROM messages m JOIN messages s ON s.conversation_id = m.conversation_id "
            "AND s.parent_id IS m.parent_id WHERE m.id = ? ORDER BY s.id",
            (message_id,),
        )
        return [r["id"] for r in rows]

    def branch(self, message_id: int) -> tuple[int, int]:
        """Where ``message_id`` stands among its siblings: (1-based position, how many)."""
        siblings = self.siblings(message_id)
        return (siblings.index(message_id) + 1, len(siblings)) if message_id in siblings else (1, 1)

    def set_leaf(self, conversation_id: int, message_id: int) -> None:
        """The branch on screen ends at ``message_id`` (a sibling switched to, a search hit
        opened): the conversation opens on it and continues from it. Not activity."""
        self._update_conversation(conversation_id, "leaf_id = ?", (message_id,), touch=False)

    def fork(self, conversation_id: int, leaf: int) -> int:
        """A new conversation holding a copy of the branch that ends at ``leaf`` (one
        branch: the other ones stay in the original, but a compaction summary on it keeps what
        it replaces, see :func:`fork_messages`), with the original's settings and each message
        as saved (its thinking, tool calls, attachments, token-lens candidates and pin)."""
        stored = self.get(conversation_id, leaf=leaf)
        stamp = now()
        with self._write() as c:
            cur = c.execute(
                "INSERT INTO conversations"
                "(title, model, model_path, system, params, created, updated, source) "
                "SELECT ?, model, model_path, system, params, ?, ?, 'chat' "
                "FROM conversations WHERE id = ?",
                (f"{stored.title} (fork)", stamp, stamp, conversation_id),
            )
            new_id = cur.lastrowid
            assert new_id is not None
            copied = fork_messages(stored.tree, stored.messages)
            copies: dict[int, int] = {}
            for m in copied:
                parent = copies.get(m.parent_id) if m.parent_id is not None else None
                copies[m.id] = copy_message(c, new_id, parent, m, stamp)
            # Each copied summary names the copy of what it replaces.
            c.executemany(
                "UPDATE messages SET summary_of = ? WHERE id = ?",
                [
                    (copies[point], copies[m.id])
                    for m in copied
                    if (point := m.summary_of) is not None and point in copies
                ],
            )
            new_leaf = copies[stored.messages[-1].id] if stored.messages else None
            c.execute("UPDATE conversations SET leaf_id = ? WHERE id = ?", (new_leaf, new_id))
            return new_id

    def compact(
        self, conversation_id: int, point: int, summary: str, leaf: int, then: int | None = None
    ) -> list[int]:
        """A new branch that starts with ``summary`` (a sibling of the conversation's first
        message, marked as the summary of the branch up to ``point``), followed by a copy of each
        message after ``point`` on the branch that ends at ``leaf``, as saved; the branch on
        screen is the new one. The original branch stays as it was (nothing is deleted; search
        finds both). ``then``: a reply still being written after ``leaf``, moved to follow the
        new branch's last message (the ``compact`` policy compacts once its row is saved).
        Returns the new branch's ids, the summary's first."""
        stored = self.get(conversation_id, leaf=leaf)
        ids = [m.id for m in stored.messages]
        if point not in ids:
            raise InvalidParameterError(f"message {point} is not on the branch being compacted.")
        stamp = now()
        with self._write() as c:
            parent = c.execute(
                "INSERT INTO messages(conversation_id, parent_id, role, content, status, "
                "created, updated, summary_of) VALUES (?, NULL, 'user', ?, 'complete', ?, ?, ?)",
                (conversation_id, summary, stamp, stamp, point),
            ).lastrowid
            assert parent is not None
            new = [parent]
            for m in stored.messages[ids.index(point) + 1 :]:
                parent = copy_message(c, conversation_id, parent, m, stamp)
                new.append(parent)
            if then is not None:
                c.execute("UPDATE messages SET parent_id = ? WHERE id = ?", (parent, then))
                parent = then
            c.execute(
                "UPDATE conversations SET updated = ?, leaf_id = ? WHERE id = ?",
                (stamp, parent, conversation_id),
            )
            return new

    def set_pinned(self, message_id: int, pinned: bool) -> None:
        """Pin (or unpin) a message: a pinned one is never left out to fit the context."""
        with self._write() as c:
            c.execute("UPDATE messages SET pinned = ? WHERE id = ?", (int(pinned), message_id))

    def writer_lock(self, conversation_id: int) -> ConversationLock:
        """The lock whoever adds a turn to the conversation holds, from reading it to saving
        the reply (see engine/chat/convlock.py); a lock file beside this database."""
        return ConversationLock(self.path, conversation_id)

    def rename(self, conversation_id: int, title: str) -> None:
        """The user's own title: kept for good (:meth:`set_title` never replaces it). Not
        activity: the conversation keeps its place in the lists (``updated`` unchanged)."""
        title = " ".join(title.split())
        if not title:
            raise InvalidParameterError("a conversation title cannot be empty.")
        self._update_conversation(
            conversation_id, "title = ?, title_set = 1", (title,), touch=False
        )

    def set_title(self, conversation_id: int, title: str) -> bool:
        """A title written for the conversation (from its first prompt, or by the model):
        saved unless the user renamed it, without moving it in the lists. True when saved."""
        title = " ".join(title.split())
        if not title:
            return False
        with self._write() as c:
            return (
                c.execute(
                    "UPDATE conversations SET title = ? WHERE id = ? AND title_set = 0",
                    (title, conversation_id),
                ).rowcount
                > 0
            )

    def title_is_users(self, conversation_id: int) -> bool:
        rows = self._read("SELECT title_set FROM conversations WHERE id = ?", (conversation_id,))
        return bool(rows and rows[0]["title_set"])

    def set_settings(
        self,
        conversation_id: int,
        *,
        system: str | None,
        params: SamplingParams,
        model: str | None = None,
        model_path: str | None = None,
    ) -> None:
        """The conversation's system prompt, parameters (and model, when given): they come
        back when it is opened again."""
        sets, args = ["system = ?", "params = ?"], [system, json.dumps(params.to_dict())]
        if model is not None:
            sets += ["model = ?", "model_path = ?"]
            args += [model, model_path]
        self._update_conversation(conversation_id, ", ".join(sets), tuple(args), touch=False)

    def _update_conversation(
        self, conversation_id: int, sets: str, args: tuple, touch: bool = True
    ) -> None:
        if touch:
            sets += ", updated = ?"
            args = (*args, now())
        with self._write() as c:
            cur = c.execute(
                f"UPDATE conversations SET {sets} WHERE id = ?", (*args, conversation_id)
            )
            if cur.rowcount == 0:
                raise ConversationNotFound(
                    f"no conversation {conversation_id}: 'vibechat history list' shows the "
                    "saved ones."
                )

    def delete(self, conversation_id: int) -> None:
        """The conversation and its messages go; so do the kept copies of attachments no message
        names any more (those of this history's own store, past the store's grace: see
        ``AttachmentStore.prune``)."""
        with self._write() as c:
            cur = c.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            if cur.rowcount == 0:
                raise ConversationNotFound(
                    f"no conversation {conversation_id}: 'vibechat history list' shows the "
                    "saved ones."
                )
        self.prune_attachments()

    def prune_attachments(self) -> int:
        """Remove the kept copies no message names (past the store's grace); how many went. Only
        for the history at the default path, whose store is the default one: a history elsewhere
        (a test's, a copy) does not know every digest the store's other users name."""
        if self.path != default_path() and self._attachment_store is None:
            return 0
        keep = {r["digest"] for r in self._read("SELECT DISTINCT digest FROM attachments")}
        return self.attachment_store.prune(keep)

    # ---------------------------------------------------------------- messages
    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        status: str = "complete",
        *,
        params: SamplingParams | None = None,
        parent_id: int | None | Latest = LATEST,
        tool_call_id: str | None = None,
        tool_name: str | None = None,
        attachments: tuple[Attachment, ...] = (),
    ) -> int:
        """A message after ``parent_id`` (None: a first message; by default the branch on
        screen's last): the branch on screen now ends with it. A tool's result (role
        ``tool``) names the call it answers and the tool. A prompt's ``attachments`` (kept
        already: engine/attach) are saved with it, in the same transaction."""
        stamp = now()
        with self._write() as c:
            if isinstance(parent_id, Latest):
                row = c.execute(
                    "SELECT COALESCE(leaf_id, "
                    "(SELECT MAX(id) FROM messages WHERE conversation_id = ?1)) "
                    "FROM conversations WHERE id = ?1",
                    (conversation_id,),
                ).fetchone()
                parent_id = row[0] if row else None
            cur = c.execute(
                "INSERT INTO messages(conversation_id, parent_id, role, content, status, "
                "writer_pid, params, created, updated, tool_call_id, tool_name) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    parent_id,
                    role,
                    content,
                    status,
                    os.getpid() if status == "streaming" else None,
                    json.dumps(params.to_dict()) if params else None,
                    stamp,
                    stamp,
                    tool_call_id,
                    tool_name,
                ),
            )
            assert cur.lastrowid is not None
            insert_attachments(c, cur.lastrowid, attachments)
            c.execute(
                "UPDATE conversations SET updated = ?, leaf_id = ? WHERE id = ?",
                (stamp, cur.lastrowid, conversation_id),
            )
            return cur.lastrowid

    def update_message(
        self,
        message_id: int,
        content: str,
        status: str | None = None,
        *,
        error: str | None = None,
        params: SamplingParams | None = None,
        stats: dict[str, Any] | None = None,
        thinking: str | None = None,
        tool_calls: tuple[ToolCall, ...] | None = None,
        logprobs: dict[str, Any] | None = None,
    ) -> None:
        sets, args = ["content = ?", "updated = ?"], [content, now()]
        if logprobs is not None:
            sets.append("logprobs = ?")
            args.append(json.dumps(logprobs))
        if tool_calls:
            sets.append("tool_calls = ?")
            args.append(json.dumps([call.to_dict() for call in tool_calls]))
        if thinking is not None:
            sets.append("thinking = ?")
            args.append(thinking)
        if status is not None:
            sets.append("status = ?")
            args.append(status)
        if error is not None:
            sets.append("error = ?")
            args.append(error)
        if params is not None:
            sets.append("params = ?")
            args.append(json.dumps(params.to_dict()))
        if stats is not None:
            sets.append("stats = ?")
            args.append(json.dumps(stats))
        with self._write() as c:
            c.execute(f"UPDATE messages SET {', '.join(sets)} WHERE id = ?", (*args, message_id))
            c.execute(
                "UPDATE conversations SET updated = ? WHERE id = "
                "(SELECT conversation_id FROM messages WHERE id = ?)",
                (args[1], message_id),
            )

    # ----------------------------------------------------------------- search
    def search(self, text: str, limit: int = 50) -> list[SearchHit]:
        """Messages matching every word of ``text`` (FTS5), best matches first. Only what
        was said is searched: a reply's thinking is not (it is scratch work, often long,
        and would bury the answers)."""
        query = fts_query(text)
        if query is None:
            return []
        rows = self._read(
            "SELECT m.id AS message_id, m.conversation_id, m.role, c.title, c.updated, "
            f"snippet(messages_fts, 0, '{HIT_START}', '{HIT_END}', '…', 12) AS snippet "
            "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
            "JOIN conversations c ON c.id = m.conversation_id "
            "WHERE messages_fts MATCH ? ORDER BY rank LIMIT ?",
            (query, limit),
        )
        return [
            SearchHit(
                r["conversation_id"],
                r["message_id"],
                r["title"],
                r["role"],
                " ".join(r["snippet"].split()),
                r["updated"],
            )
            for r in rows
        ]
