"""Saved conversations: one SQLite database under the data dir.

Built to survive crashes and a second vibechat process:

- WAL journal, ``busy_timeout`` and short ``BEGIN IMMEDIATE`` write transactions,
  so two processes writing at once wait for each other instead of failing with
  "database is locked";
- numbered schema migrations, each recorded in ``schema_migrations``;
- a reply is saved while it streams (status ``streaming``) and settled as
  ``complete`` / ``cut`` (a limit ended it: ``max_tokens`` or the context) /
  ``stopped`` / ``error``; rows a crash left ``streaming`` are marked
  ``interrupted`` when the database is next opened;
- each conversation records where it came from (``source``: ``chat``, ``run`` or
  ``batch``, i.e. ``--prompts-file``), so the chat can list its own first;
- full-text search over every message with SQLite FTS5 (what was said: a reply's
  thinking, kept in its own column, is not searched);

Listing conversations never reads their messages: the sidebar of an app with
thousands of conversations opens as fast as an empty one.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

from .convlock import ConversationLock
from ..errors import InvalidParameterError, VibechatError
from ..files import NotARegularFile, check_regular
from ..settings.params import PARAM_SPECS, SamplingParams
from ..paths import data_dir
from .titles import TITLE_LENGTH, title_from, title_from_exchange, title_from_model  # noqa: F401 - their home was here

Status = Literal["streaming", "complete", "cut", "stopped", "error", "interrupted"]
STATUSES: tuple[str, ...] = ("streaming", "complete", "cut", "stopped", "error", "interrupted")
# Where a conversation came from: the chat, `vibechat run`, a line of `run --prompts-file`.
SOURCES: tuple[str, ...] = ("chat", "run", "batch")
BUSY_TIMEOUT_MS = 10_000


class HistoryError(VibechatError):
    """The history database cannot be opened or written."""


class ConversationNotFound(HistoryError):
    pass


def default_path() -> Path:
    return data_dir() / "history.db"


def make_private(path: Path) -> None:
    """Chats are private: the database (and SQLite's -wal and -shm files beside it, which
    take the database's mode) readable by its owner only, created so and tightened when an
    older vibechat left it readable by all; vibechat's own data folder likewise (a folder
    chosen with VIBECHAT_DATA_DIR is left as it is). No-op where modes do not apply."""
    if os.name != "posix":
        return
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder == data_dir() and folder.name == "vibechat":
        _tighten(folder, 0o700)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        return  # a read-only place: sqlite says what is wrong
    for item in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        _tighten(item, 0o600)


def _tighten(path: Path, mode: int) -> None:
    try:
        if path.stat().st_mode & 0o777 & ~mode:
            path.chmod(mode)
    except OSError:
        pass


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


# --------------------------------------------------------------------- schema
# Each migration runs once, in order, inside one transaction, and is recorded.
MIGRATIONS: list[str] = [
    # 1: conversations and their ordered messages, with full-text search.
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
    # 2: a reasoning model's thinking, kept apart from the reply's text (not searched:
    # messages_fts indexes content only).
    """
    ALTER TABLE messages ADD COLUMN thinking TEXT NOT NULL DEFAULT '';
    """,
    # 3: where a conversation came from (a database older than this cannot tell: its
    # conversations count as the chat's, so none of them leaves the chat's list); whether its
    # title is the user's (a rename: never replaced by a written title); and a reply cut by a
    # limit ('cut': the replies saved 'complete' whose stats say a limit ended them become
    # 'cut' too). SQLite cannot change a CHECK constraint, so messages is copied into a new
    # table with the same ids (the full-text index, keyed by id, stays valid) and its
    # indexes and triggers are made again.
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
]


# ---------------------------------------------------------------------- records
@dataclass(frozen=True)
class ConversationSummary:
    """What a list of conversations shows; no messages."""

    id: int
    title: str
    model: str | None
    created: str
    updated: str
    source: str = "chat"  # one of SOURCES

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "model": self.model, "source": self.source,
                "created": self.created, "updated": self.updated}


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
    thinking: str = ""  # a reasoning model's thinking (never sent back to the model)

    @property
    def in_context(self) -> bool:
        """Whether the model sees this message when the conversation continues: failed
        replies are shown, not sent; a stopped or interrupted reply is kept as written."""
        return self.role == "user" or (self.status != "error" and bool(self.content))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "role": self.role, "content": self.content,
                                "status": self.status, "created": self.created}
        if self.error:
            data["error"] = self.error
        if self.role == "assistant":
            data["thinking"] = self.thinking
        if self.params:
            data["params"] = self.params
        if self.stats:
            data["stats"] = self.stats
        return data


@dataclass(frozen=True)
class StoredConversation:
    summary: ConversationSummary
    model_path: str | None
    system: str | None
    params: SamplingParams
    messages: list[StoredMessage] = field(default_factory=list)

    @property
    def id(self) -> int:
        return self.summary.id

    @property
    def title(self) -> str:
        return self.summary.title

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary.to_dict(), "model_path": self.model_path, "system": self.system,
                "params": self.params.to_dict(), "messages": [m.to_dict() for m in self.messages]}

    def to_markdown(self) -> str:
        s = self.summary
        lines = [f"# {s.title}", "", f"- Model: {s.model or 'unknown'}", f"- Source: {s.source}",
                 f"- Started: {s.created}", f"- Updated: {s.updated}"]
        p = self.params
        lines.append(f"- Parameters: temperature {p.temperature:g}, top-k {p.top_k}, top-p {p.top_p:g}, "
                     f"min-p {p.min_p:g}, repeat penalty {PARAM_SPECS['repeat_penalty'].show(p.repeat_penalty)}")
        if self.system:
            lines += ["", "## System", "", self.system]
        for m in self.messages:
            heading = "User" if m.role == "user" else "Assistant"
            if m.status == "cut":
                heading += " (cut: it reached the token limit or the end of the context)"
            elif m.status != "complete":
                heading += f" ({m.status}{': ' + m.error if m.error else ''})"
            lines += ["", f"## {heading}", ""]
            if m.thinking:
                lines += [*_details("Thinking", m.thinking), ""]
            lines.append(m.content)
        return "\n".join(lines).rstrip() + "\n"


@dataclass(frozen=True)
class SearchHit:
    conversation_id: int
    message_id: int
    title: str
    role: str
    snippet: str  # the match in context; the matched words between HIT_START and HIT_END
    updated: str

    def to_dict(self) -> dict[str, Any]:
        return {"conversation_id": self.conversation_id, "message_id": self.message_id, "title": self.title,
                "role": self.role, "snippet": self.snippet, "updated": self.updated}


HIT_START, HIT_END = "\x02", "\x03"  # markers the UI turns into highlighting (never in saved text)


def fts_query(text: str) -> str | None:
    """The user's words as a safe FTS5 query: every word must appear, the last one may be
    a prefix (search-as-you-type). Quotes and operators in the input are plain text."""
    words = re.findall(r"\w+", text, flags=re.UNICODE)
    if not words:
        return None
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    quoted[-1] += "*"
    return " ".join(quoted)


def _loads(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _params(text: str | None) -> SamplingParams:
    data = _loads(text) or {}
    try:
        return SamplingParams.from_dict(data)
    except (InvalidParameterError, TypeError):
        return SamplingParams()  # saved by a newer/older vibechat: defaults rather than a crash


# ---------------------------------------------------------------------- store
class History:
    """The conversation database. Safe to share between threads (one connection behind
    a lock); several processes may use the same file at once."""

    def __init__(self, path: Path | None = None, *, read_only_ok: bool = False) -> None:
        self.path = Path(path) if path is not None else default_path()
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self.repaired = 0  # replies found 'streaming' (left by a crash) when opened
        # Readers (`history list/show/search/export`, the chat's sidebar) may open a history
        # they cannot write: a read-only data dir, a full disk. ``read_only`` is then why
        # (the open's one-line error, with its fix), and every write fails with it.
        self.read_only_ok = read_only_ok
        self.read_only: str | None = None

    # ------------------------------------------------------------ lifecycle
    def open(self) -> "History":
        with self._lock:  # another thread wanting the connection waits for the migrations
            return self._open()

    def _open(self) -> "History":
        if self._conn is not None:
            return self
        try:
            return self._open_for_writing()
        except HistoryError as exc:
            # SQLite's WAL needs to create its -shm file beside the database even to read,
            # and the open migrates and repairs: a read-only folder or a full disk fails
            # here. A reader that accepts it gets the file as it is, read-only. A database
            # another process held past the busy timeout is not read behind its back.
            if not self.read_only_ok or "another process held it" in str(exc) or not self._open_read_only():
                raise
            self.read_only = str(exc).replace("cannot open the chat history", "cannot write the chat history", 1)
            return self

    def _open_read_only(self) -> bool:
        """Open the file read-only, with no migration and no repair: first through SQLite's
        WAL index (an -shm file that exists, so a write another process is making is seen),
        then as immutable (no -shm at all: what the file holds now). False when neither
        reads it at the schema this vibechat writes."""
        try:
            check_regular(self.path)
            if not self.path.is_file():
                return False
            uri = self.path.resolve().as_uri()
        except (OSError, ValueError, NotARegularFile):
            return False
        for query in ("?mode=ro", "?mode=ro&immutable=1"):
            conn = None
            try:
                conn = sqlite3.connect(uri + query, uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                       isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA query_only = ON")
                version = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] or 0
            except sqlite3.Error:
                if conn is not None:
                    conn.close()
                continue
            if version != len(MIGRATIONS):  # older needs a migration (a write); newer is not ours to read
                conn.close()
                return False
            self._conn = conn
            self.repaired = 0
            return True
        return False

    def _open_for_writing(self) -> "History":
        try:
            for item in (self.path, self.path.with_name(self.path.name + "-wal"),
                         self.path.with_name(self.path.name + "-shm")):
                check_regular(item)  # a FIFO here would block the open below forever
            make_private(self.path)
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
        except NotARegularFile as exc:
            raise HistoryError(f"cannot open the chat history: {exc}; move it aside (vibechat creates a "
                               "new one) or point VIBECHAT_DATA_DIR elsewhere.") from None
        except (OSError, sqlite3.Error) as exc:
            raise self._error("open", exc) from None
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                _use_wal(conn)
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("PRAGMA foreign_keys = ON")
                self._conn = conn
                self._migrate()
                try:
                    self.repaired = self._repair()
                except HistoryError:
                    # A full disk, a file-size limit, a database held by another process:
                    # reading must still work (`history list`, the sidebar); the replies a
                    # crash cut off are marked at the next open that can write.
                    self.repaired = 0
                return self
            except sqlite3.Error as exc:
                self._conn = None
                if _locked(exc) and time.monotonic() < deadline:
                    # Another process is creating or migrating the same new file, and some of
                    # these steps answer "locked" without waiting: wait, then go again.
                    time.sleep(0.05)
                    continue
                conn.close()
                raise self._error("open", exc) from None
            except HistoryError as exc:
                self._conn = None
                if "locked" in str(exc) and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                conn.close()
                raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self.read_only = None  # the next open tries to write again

    def __enter__(self) -> "History":
        return self.open()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _error(self, doing: str, exc: BaseException) -> HistoryError:
        text = str(exc)
        where = self.path.parent
        if "readonly" in text.replace(" ", "").lower() or isinstance(exc, PermissionError) \
                or "unable to open" in text:
            return HistoryError(f"cannot {doing} the chat history at {self.path} ({text}): make {where} "
                                "writable, point VIBECHAT_DATA_DIR at a writable directory, or pass --no-save.")
        if "not a database" in text or "malformed" in text:
            return HistoryError(f"the chat history at {self.path} is damaged ({text}): move it aside to start "
                                "a new one (vibechat recreates it).")
        why = _write_trouble(exc, where) if doing in ("write", "open") else None
        if why is not None:
            return HistoryError(f"cannot {doing} the chat history at {self.path}: {why}.")
        return HistoryError(f"cannot {doing} the chat history at {self.path}: {text}.")

    @property
    def conn(self) -> sqlite3.Connection:
        with self._lock:
            if self._conn is None:
                self.open()
            assert self._conn is not None
            return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction. BEGIN IMMEDIATE takes the write lock up front, so
        a busy database waits (busy_timeout) instead of failing halfway."""
        with self._lock:
            conn = self.conn
            if self.read_only is not None:  # opened read-only: the open's reason, with its fix
                raise HistoryError(self.read_only)
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._error("write", exc) from None
            try:
                yield conn
            except BaseException as exc:
                _rollback(conn)
                if isinstance(exc, sqlite3.Error):
                    raise self._error("write", exc) from None
                raise
            else:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    _rollback(conn)
                    raise self._error("write", exc) from None

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                cur = self.conn.execute(sql, args)
                cur.row_factory = sqlite3.Row
                return cur.fetchall()
            except sqlite3.Error as exc:
                raise self._error("read", exc) from None

    def _migrate(self) -> None:
        conn = self.conn
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                     "(version INTEGER PRIMARY KEY, applied TEXT NOT NULL)")
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        for version, sql in enumerate(MIGRATIONS, start=1):
            if version in done:  # no write lock to take: a history that cannot be written still reads
                continue
            with self._write() as c:
                # Checked inside the write lock: a second process migrating at the same
                # moment waits, then finds the work done.
                if c.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (version,)).fetchone():
                    continue
                for statement in _statements(sql):
                    c.execute(statement)
                c.execute("INSERT INTO schema_migrations(version, applied) VALUES (?, ?)", (version, now()))
        newest = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] or 0
        if newest > len(MIGRATIONS):
            raise sqlite3.DatabaseError(
                f"schema version {newest} is newer than this vibechat knows ({len(MIGRATIONS)}); upgrade vibechat")

    @property
    def schema_version(self) -> int:
        return self._read("SELECT MAX(version) AS v FROM schema_migrations")[0]["v"] or 0

    def _repair(self) -> int:
        """Replies still 'streaming' whose writing process is gone were cut off by a crash:
        mark them 'interrupted'. A reply another live vibechat is streaming is left alone."""
        rows = self._read("SELECT id, writer_pid FROM messages WHERE status = 'streaming'")
        dead = [r["id"] for r in rows if not _process_alive(r["writer_pid"])]
        if not dead:
            return 0
        with self._write() as c:
            c.executemany("UPDATE messages SET status = 'interrupted' WHERE id = ? AND status = 'streaming'",
                          [(i,) for i in dead])
        return len(dead)

    # ----------------------------------------------------------- conversations
    def create(self, *, title: str, model: str | None = None, model_path: str | None = None,
               system: str | None = None, params: SamplingParams | None = None, source: str = "chat") -> int:
        """A new conversation; ``source``: where it comes from (one of ``SOURCES``)."""
        if source not in SOURCES:
            raise InvalidParameterError(f"unknown conversation source {source!r}: use {', '.join(SOURCES)}.")
        stamp = now()
        with self._write() as c:
            cur = c.execute(
                "INSERT INTO conversations(title, model, model_path, system, params, created, updated, source) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (title, model, model_path, system, json.dumps((params or SamplingParams()).to_dict()),
                 stamp, stamp, source))
            assert cur.lastrowid is not None
            return cur.lastrowid

    def conversations(self, limit: int | None = None, offset: int = 0,
                      source: str | None = None) -> list[ConversationSummary]:
        """Newest first (by their last message: a rename is no activity); only those from
        ``source`` (one of ``SOURCES``; None: all); reads no messages. Fetched as one JSON
        row: Python's sqlite3 gives up the GIL for every row it steps, and each time waits to
        get it back from a busy UI thread, which made a thousand rows take a noticeable
        while in a worker."""
        rows = self._read(
            "SELECT json_group_array(json_array(id, title, model, created, updated, source)) AS rows FROM "
            "(SELECT id, title, model, created, updated, source FROM conversations "
            " WHERE ?1 IS NULL OR source = ?1 ORDER BY updated DESC, id DESC LIMIT ?2 OFFSET ?3)",
            (source, -1 if limit is None else limit, offset))
        return [ConversationSummary(*row) for row in json.loads(rows[0]["rows"] or "[]")]

    def count(self) -> int:
        return self._read("SELECT COUNT(*) AS n FROM conversations")[0]["n"]

    def latest(self) -> ConversationSummary | None:
        found = self.conversations(limit=1)
        return found[0] if found else None

    def get(self, conversation_id: int) -> StoredConversation:
        rows = self._read("SELECT * FROM conversations WHERE id = ?", (conversation_id,))
        if not rows:
            raise ConversationNotFound(
                f"no conversation {conversation_id}: 'vibechat history list' shows the saved ones.")
        r = rows[0]
        summary = ConversationSummary(r["id"], r["title"], r["model"], r["created"], r["updated"], r["source"])
        messages = [
            StoredMessage(m["id"], m["role"], m["content"], m["status"], m["created"], m["error"],
                          _loads(m["params"]), _loads(m["stats"]), m["thinking"] or "")
            for m in self._read("SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,))
        ]
        return StoredConversation(summary, r["model_path"], r["system"], _params(r["params"]), messages)

    def messages_after(self, conversation_id: int, message_id: int) -> list[StoredMessage]:
        """The conversation's messages saved after ``message_id`` (another process's turns,
        added since this one last read or wrote it), oldest first. Empty when there are
        none, or the conversation is gone."""
        return [
            StoredMessage(m["id"], m["role"], m["content"], m["status"], m["created"], m["error"],
                          _loads(m["params"]), _loads(m["stats"]), m["thinking"] or "")
            for m in self._read("SELECT * FROM messages WHERE conversation_id = ? AND id > ? ORDER BY id",
                                (conversation_id, message_id))
        ]

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
        self._update_conversation(conversation_id, "title = ?, title_set = 1", (title,), touch=False)

    def set_title(self, conversation_id: int, title: str) -> bool:
        """A title written for the conversation (from its first exchange, or by the model):
        saved unless the user renamed it, without moving it in the lists. True when saved."""
        title = " ".join(title.split())
        if not title:
            return False
        with self._write() as c:
            return c.execute("UPDATE conversations SET title = ? WHERE id = ? AND title_set = 0",
                             (title, conversation_id)).rowcount > 0

    def title_is_users(self, conversation_id: int) -> bool:
        rows = self._read("SELECT title_set FROM conversations WHERE id = ?", (conversation_id,))
        return bool(rows and rows[0]["title_set"])

    def set_settings(self, conversation_id: int, *, system: str | None, params: SamplingParams,
                     model: str | None = None, model_path: str | None = None) -> None:
        """The conversation's system prompt, parameters (and model, when given): they come
        back when it is opened again."""
        sets, args = ["system = ?", "params = ?"], [system, json.dumps(params.to_dict())]
        if model is not None:
            sets += ["model = ?", "model_path = ?"]
            args += [model, model_path]
        self._update_conversation(conversation_id, ", ".join(sets), tuple(args), touch=False)

    def _update_conversation(self, conversation_id: int, sets: str, args: tuple, touch: bool = True) -> None:
        if touch:
            sets += ", updated = ?"
            args = (*args, now())
        with self._write() as c:
            cur = c.execute(f"UPDATE conversations SET {sets} WHERE id = ?", (*args, conversation_id))
            if cur.rowcount == 0:
                raise ConversationNotFound(
                    f"no conversation {conversation_id}: 'vibechat history list' shows the saved ones.")

    def delete(self, conversation_id: int) -> None:
        with self._write() as c:
            cur = c.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            if cur.rowcount == 0:
                raise ConversationNotFound(
                    f"no conversation {conversation_id}: 'vibechat history list' shows the saved ones.")

    # ---------------------------------------------------------------- messages
    def add_message(self, conversation_id: int, role: str, content: str, status: str = "complete", *,
                    params: SamplingParams | None = None) -> int:
        stamp = now()
        with self._write() as c:
            cur = c.execute(
                "INSERT INTO messages(conversation_id, role, content, status, writer_pid, params, created, updated) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, role, content, status, os.getpid() if status == "streaming" else None,
                 json.dumps(params.to_dict()) if params else None, stamp, stamp))
            c.execute("UPDATE conversations SET updated = ? WHERE id = ?", (stamp, conversation_id))
            assert cur.lastrowid is not None
            return cur.lastrowid

    def update_message(self, message_id: int, content: str, status: str | None = None, *,
                       error: str | None = None, params: SamplingParams | None = None,
                       stats: dict[str, Any] | None = None, thinking: str | None = None) -> None:
        sets, args = ["content = ?", "updated = ?"], [content, now()]
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
            c.execute("UPDATE conversations SET updated = ? WHERE id = "
                      "(SELECT conversation_id FROM messages WHERE id = ?)", (args[1], message_id))

    def truncate_after(self, conversation_id: int, message_id: int | None) -> int:
        """Delete the conversation's messages after ``message_id`` (all of them for None):
        what regenerating or editing the last prompt throws away."""
        with self._write() as c:
            return c.execute("DELETE FROM messages WHERE conversation_id = ? AND id > ?",
                             (conversation_id, message_id or 0)).rowcount

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
            "WHERE messages_fts MATCH ? ORDER BY rank LIMIT ?", (query, limit))
        return [SearchHit(r["conversation_id"], r["message_id"], r["title"], r["role"],
                          " ".join(r["snippet"].split()), r["updated"]) for r in rows]


def write_export(path: Path, text: str, *, overwrite: bool = False) -> None:
    """Write an exported conversation to ``path`` whole or not at all: into a temporary
    file beside it, flushed to disk, then renamed over it, so a full disk or a file-size
    limit leaves the old file as it was (or no file), never a partial one. Without
    ``overwrite`` an existing file is kept (FileExistsError), checked at the rename itself
    (a hard link), so a file that appears meanwhile is not replaced either. OSError on
    failure, the temporary file removed."""
    folder = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:  # a replaced file keeps its mode; a new one is private, like the history it comes from
            os.chmod(tmp, path.stat().st_mode & 0o777)
        except OSError:
            pass
        if overwrite:
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError:  # a filesystem without hard links: the check, then the rename
            if path.exists() or path.is_symlink():
                raise FileExistsError(errno.EEXIST, "File exists", str(path)) from None
            os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _details(summary: str, text: str) -> list[str]:
    """A collapsed Markdown block (GitHub's ``<details>``); the text's HTML-significant
    characters escaped, so a ``</details>`` in it cannot end the block early."""
    body = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return [f"<details><summary>{summary}</summary>", "", body.strip("\n"), "", "</details>"]


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL (once: the mode is stored in the file). The switch needs the
    database to itself and answers "locked" at once, without the busy timeout, while
    another process is creating the same new database: wait for it here."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if not _locked(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _write_trouble(exc: BaseException, where: Path) -> str | None:
    """Why a write failed, in words and with the fix, for the failures a user can act on:
    a full disk, a file-size limit (``ulimit -f``), a database another process holds past
    the busy timeout. SQLite reports a short write as a bare "disk I/O error" (or
    "database or disk is full"), so the disk's free space and the process's limit are
    looked at to tell which. None: nothing more to say than SQLite's own text."""
    text = str(exc)
    name = getattr(exc, "sqlite_errorname", "") or ""
    if _locked(exc):
        return (f"another process held it for over {BUSY_TIMEOUT_MS / 1000:g} s ({text}): close the other "
                "vibechat (or its `run`), then try again")
    if not (name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) or "disk is full" in text or "I/O error" in text):
        return None
    try:
        import resource  # POSIX only

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY:
            return (f"the file-size limit (ulimit -f: {limit} bytes) was reached ({text}): raise the limit, "
                    "or pass --no-save")
    except (ImportError, OSError, ValueError):
        pass
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        free = None
    if free is not None and free < 1024 * 1024:
        return f"the disk is full ({text}): free some space on it, or pass --no-save"
    return f"the disk could not be written ({text}): check that it has space and works, or pass --no-save"


def _rollback(conn: sqlite3.Connection) -> None:
    """Undo a failed write transaction, if one is still open: after a failed COMMIT (a full
    disk, a file-size limit) SQLite has often rolled back already, and a second ROLLBACK
    would raise "no transaction is active" over the real reason. A rollback that fails in
    turn (the disk went away) leaves the connection as SQLite left it: the caller reports
    the first error, which says what happened."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _locked(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _process_alive(pid: int | None) -> bool:
    if not pid:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's), or the platform cannot tell: leave it
    return True


def _statements(script: str) -> list[str]:
    """Split a migration into statements (sqlite3.complete_statement knows about triggers)."""
    statements, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current.strip())
    return statements


# ------------------------------------------------------------------ recording
class ReplyWriter:
    """Saves one assistant reply while it streams: the row exists (status 'streaming')
    before the first token, and its text is written at most every ``interval`` seconds,
    so a crash loses at most that much; ``finish`` settles it."""

    def __init__(self, history: History, message_id: int, interval: float = 0.5) -> None:
        self.history = history
        self.message_id = message_id
        self.interval = interval
        self._parts: list[str] = []
        self._thinking: list[str] = []
        self._saved_len = 0
        self._saved_thinking = 0
        self._last_save = time.monotonic()

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def thinking(self) -> str:
        return "".join(self._thinking)

    def append(self, text: str) -> None:
        self._parts.append(text)
        if time.monotonic() - self._last_save >= self.interval:
            self.flush()

    def append_thinking(self, text: str) -> None:
        """A piece of the reply's thinking: saved apart (the ``thinking`` column), as often."""
        self._thinking.append(text)
        if time.monotonic() - self._last_save >= self.interval:
            self.flush()

    def flush(self) -> None:
        text = self.text
        thinking_len = sum(map(len, self._thinking))
        if len(text) != self._saved_len or thinking_len != self._saved_thinking:
            self.history.update_message(self.message_id, text,
                                        thinking=self.thinking if thinking_len != self._saved_thinking else None)
            self._saved_len, self._saved_thinking = len(text), thinking_len
        self._last_save = time.monotonic()

    def finish(self, status: str, text: str | None = None, *, error: str | None = None,
               params: SamplingParams | None = None, stats: dict[str, Any] | None = None,
               thinking: str | None = None) -> None:
        self.history.update_message(self.message_id, self.text if text is None else text, status,
                                    error=error, params=params, stats=stats,
                                    thinking=self.thinking if thinking is None else thinking)
