"""The chat history's schema: migrations as named functions (``MIGRATIONS``, in order: a
database at version N has run the first N), each run once, inside one write transaction, and
recorded in ``schema_migrations``. A migration says what it changes and why in its docstring;
a new one is a function appended to ``MIGRATIONS``, never an edit of one that has shipped.

A migration is checked again inside the write lock, so a second process migrating the
same new file at the same moment waits, then finds the work done. A database whose
schema is newer than this vibechat knows is refused (upgrade vibechat) rather than
written in a shape it does not understand.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from .records import now


class Executes(Protocol):
    """What a migration runs its SQL on: a connection inside the write transaction (or the
    recorder ``statements`` uses to list what a migration would run)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...


Migration = Callable[[Executes], None]


def run_script(c: Executes, script: str) -> None:
    """Run each statement of ``script`` on ``c``, in order."""
    for statement in statements(script):
        c.execute(statement)


def conversations_and_messages(c: Executes) -> None:
    """Conversations and their ordered messages, with full-text search."""
    run_script(
        c,
        """
    CREATE TABLE conversations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        title TEXT NOT NULL,
        model TEXT,
        model_path TEXT,
        system TEXT,
        params TEXT NOT NULL DEFAULT '{}',
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE INDEX conversations_by_updated ON conversations(updated DESC, id DESC);
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('streaming', 'complete', 'stopped', 'error', 'interrupted')),
        error TEXT,
        writer_pid INTEGER,
        params TEXT,
        stats TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    CREATE INDEX messages_streaming ON messages(status) WHERE status = 'streaming';
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        content, content='messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END;
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    END;
    CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END;
    """,
    )


def thinking_apart(c: Executes) -> None:
    """A reasoning model's thinking, kept apart from the reply's text (not searched: messages_fts
    indexes content only)."""
    run_script(
        c,
        """
    ALTER TABLE messages ADD COLUMN thinking TEXT NOT NULL DEFAULT '';
    """,
    )


def sources_titles_and_cut_replies(c: Executes) -> None:
    """Where a conversation came from (a database older than this cannot tell: its conversations
    count as the chat's, so none of them leaves the chat's list); whether its title is the
    user's (a rename: never replaced by a written title); and a reply cut by a limit ('cut': the
    replies saved 'complete' whose stats say a limit ended them become 'cut' too). SQLite cannot
    change a CHECK constraint, so messages is copied into a new table with the same ids (the
    full-text index, keyed by id, stays valid) and its indexes and triggers are made again."""
    run_script(
        c,
        """
    ALTER TABLE conversations ADD COLUMN source TEXT NOT NULL DEFAULT 'chat';
    ALTER TABLE conversations ADD COLUMN title_set INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX conversations_by_source ON conversations(source, updated DESC, id DESC);
    CREATE TABLE messages_v3 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('streaming', 'complete', 'cut', 'stopped', 'error', 'interrupted')),
        error TEXT,
        writer_pid INTEGER,
        params TEXT,
        stats TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        thinking TEXT NOT NULL DEFAULT ''
    );
    INSERT INTO messages_v3(id, conversation_id, role, content, status, error, writer_pid, params, stats,
                            created, updated, thinking)
        SELECT id, conversation_id, role, content,
               CASE WHEN status = 'complete' AND role = 'assistant'
                     AND CASE WHEN json_valid(stats) THEN json_extract(stats, '$.finish_reason') END = 'length'
                    THEN 'cut' ELSE status END,
               error, writer_pid, params, stats, created, updated, thinking FROM messages;
    DELETE FROM sqlite_sequence WHERE name = 'messages_v3';
    INSERT INTO sqlite_sequence(name, seq) SELECT 'messages_v3', seq FROM sqlite_sequence WHERE name = 'messages';
    DROP TABLE messages;
    ALTER TABLE messages_v3 RENAME TO messages;
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    CREATE INDEX messages_streaming ON messages(status) WHERE status = 'streaming';
    CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END;
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    END;
    CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END;
    """,
    )


def message_tree(c: Executes) -> None:
    """A message tree. Every message has a parent (the message it follows; NULL for a
    conversation's first), so a regenerated reply or an edited prompt is a sibling of the one it
    replaces instead of deleting it; a conversation remembers the last message of the branch on
    screen (``leaf_id``; NULL: its newest message). Every existing message gets the one before
    it as its parent: each conversation stays the same single branch."""
    run_script(
        c,
        """
    ALTER TABLE messages ADD COLUMN parent_id INTEGER;
    ALTER TABLE conversations ADD COLUMN leaf_id INTEGER;
    UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p
                                     WHERE p.conversation_id = messages.conversation_id AND p.id < messages.id);
    CREATE INDEX messages_by_parent ON messages(conversation_id, parent_id, id);
    """,
    )


def tool_calls(c: Executes) -> None:
    """Tool calls. A reply may ask for tool calls (``tool_calls``: a JSON list of {id, name,
    arguments}), and a call's result is a message of its own, role 'tool' (``tool_call_id``: the
    call it answers; ``tool_name``: the tool, as SERVER/NAME). The role's CHECK changes, so
    messages is copied into a new table with the same ids, as in migration 3."""
    run_script(
        c,
        """
    CREATE TABLE messages_v5 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
        content TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('streaming', 'complete', 'cut', 'stopped', 'error', 'interrupted')),
        error TEXT,
        writer_pid INTEGER,
        params TEXT,
        stats TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        thinking TEXT NOT NULL DEFAULT '',
        parent_id INTEGER,
        tool_calls TEXT,
        tool_call_id TEXT,
        tool_name TEXT
    );
    INSERT INTO messages_v5(id, conversation_id, role, content, status, error, writer_pid, params, stats,
                            created, updated, thinking, parent_id)
        SELECT id, conversation_id, role, content, status, error, writer_pid, params, stats, created, updated,
               thinking, parent_id FROM messages;
    DELETE FROM sqlite_sequence WHERE name = 'messages_v5';
    INSERT INTO sqlite_sequence(name, seq) SELECT 'messages_v5', seq FROM sqlite_sequence WHERE name = 'messages';
    DROP TABLE messages;
    ALTER TABLE messages_v5 RENAME TO messages;
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    CREATE INDEX messages_streaming ON messages(status) WHERE status = 'streaming';
    CREATE INDEX messages_by_parent ON messages(conversation_id, parent_id, id);
    CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END;
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    END;
    CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END;
    """,
    )


def attachments(c: Executes) -> None:
    """Attachments. A prompt's images and text files, in the order given: what reading knew of each
    (its name, kept size, pixels, the note it was given) and its content address, the digest
    naming its kept copy under data_dir/attachments (engine/attach/store.py: the bytes are never
    in the database). Written in the same transaction as the prompt; gone with it (ON DELETE
    CASCADE: a later migration that copies messages, as 3 and 5 do, must copy this table too, or
    dropping the old messages table takes the attachments with it)."""
    run_script(
        c,
        """
    CREATE TABLE attachments (
        message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('image', 'file')),
        name TEXT NOT NULL,
        digest TEXT NOT NULL,
        mime TEXT NOT NULL,
        size INTEGER NOT NULL,
        width INTEGER NOT NULL DEFAULT 0,
        height INTEGER NOT NULL DEFAULT 0,
        note TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (message_id, position)
    );
    CREATE INDEX attachments_by_digest ON attachments(digest);
    """,
    )


def token_lens(c: Executes) -> None:
    """The token lens (issue 43). A reply generated with the lens on keeps its candidates
    (``logprobs``: OpenAI's ``{"content": [...]}``, engine/turns/backend.py ``logprobs_object``,
    at most the ``lens_history_bytes`` setting's bytes, with ``"truncated": N`` when steps were
    left out); NULL: the lens was off."""
    c.execute("ALTER TABLE messages ADD COLUMN logprobs TEXT")


def summaries_and_pins(c: Executes) -> None:
    """Compaction and pins (issue 45). A summary the model wrote of a conversation's start
    (``/compact``, ``run --compact``, the ``compact`` context policy) is the first message of a
    new branch, a sibling of the conversation's first message; ``summary_of`` names the last
    message of the original branch it replaces (that branch stays as it was); NULL: an ordinary
    message. ``pinned``: 1 for a message the user pinned, never left out to fit the context."""
    run_script(
        c,
        """
    ALTER TABLE messages ADD COLUMN summary_of INTEGER;
    ALTER TABLE messages ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
    """,
    )


def compare_picks(c: Executes) -> None:
    """The picks of a comparison (issue 44): two replies to one prompt, side A and side B, and
    which one the user chose (``winner``), with what they were run with: each side's model and
    preset, and the settings that differed (``differs``: JSON, ``{"temperature": {"a": 0.2,
    "b": 1.2}}``), and whether the sides were hidden until the pick (``blind``). The tally
    (``vibechat history compare-stats``) reads them; a deleted conversation keeps its picks in
    the tally (``conversation_id`` turns NULL), so its replies' ids are kept as plain numbers."""
    run_script(
        c,
        """
    CREATE TABLE picks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER REFERENCES conversations(id) ON DELETE SET NULL,
        a_message_id INTEGER,
        b_message_id INTEGER,
        winner TEXT NOT NULL CHECK (winner IN ('A', 'B')),
        a_model TEXT,
        b_model TEXT,
        a_preset TEXT,
        b_preset TEXT,
        differs TEXT NOT NULL DEFAULT '{}',
        blind INTEGER NOT NULL DEFAULT 0,
        created TEXT NOT NULL
    );
    """,
    )


# The migrations, in the order they run: a database at version N has run the first N.
MIGRATIONS: list[Migration] = [
    conversations_and_messages,
    thinking_apart,
    sources_titles_and_cut_replies,
    message_tree,
    tool_calls,
    attachments,
    token_lens,
    summaries_and_pins,
    compare_picks,
]


def migrate(
    conn: sqlite3.Connection, write: Callable[[], AbstractContextManager[sqlite3.Connection]]
) -> None:
    """Bring the database on ``conn`` to the newest schema; ``write``: one write transaction
    (the history's own, which turns SQLite's errors into one line with the fix)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(version INTEGER PRIMARY KEY, applied TEXT NOT NULL)"
    )
    done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    for version, migration in enumerate(MIGRATIONS, start=1):
        # No write lock to take: a history that cannot be written still reads.
        if version in done:
            continue
        with write() as c:
            # Checked inside the write lock: a second process migrating at the same
            # moment waits, then finds the work done.
            if c.execute(
                "SELECT 1 FROM schema_migrations WHERE version = ?", (version,)
            ).fetchone():
                continue
            migration(c)
            c.execute(
                "INSERT INTO schema_migrations(version, applied) VALUES (?, ?)", (version, now())
            )
    newest = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] or 0
    if newest > len(MIGRATIONS):
        raise sqlite3.DatabaseError(
            f"schema version {newest} is newer than this vibechat knows ({len(MIGRATIONS)}); upgrade vibechat"
        )


class _Recorder:
    """Stands in for a connection and keeps the SQL a migration runs, without running it."""

    def __init__(self) -> None:
        self.executed: list[str] = []

    def execute(self, sql: str, parameters: Any = (), /) -> None:
        self.executed.append(sql)


def statements(script: str | Migration) -> list[str]:
    """The statements of ``script``, in order: SQL text split into statements
    (sqlite3.complete_statement knows about triggers), or what a migration runs."""
    if not isinstance(script, str):
        recorder = _Recorder()
        script(recorder)
        return recorder.executed
    found: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                found.append(current.strip())
            current = ""
    if current.strip():
        found.append(current.strip())
    return found
