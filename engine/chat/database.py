"""The chat history's SQLite file: where it is, opening it (migrated and repaired, or
read-only when it cannot be written), its transactions, and its errors in words.

Built to survive crashes and a second vibechat process:

- WAL journal, ``busy_timeout`` and short ``BEGIN IMMEDIATE`` write transactions,
  so two processes writing at once wait for each other instead of failing with
  "database is locked";
- replies a crash left ``streaming`` (their writing process is gone) are marked
  ``interrupted`` when the database is next opened;
- the file is private (owner-only), and a FIFO or device where it should be is refused
  rather than opened (an open that would block forever);
- a reader (``history list``, the chat's sidebar) may open a history it cannot write (a
  read-only data dir, a full disk): every write then fails with the open's one-line reason.

Errors are ``HistoryError``s of one line, naming the file and the fix (a full disk, a
file-size limit, another process holding the database, a damaged file).

Imports inside functions are deliberate: ``resource`` exists on POSIX only; it is imported where
the open-file limit is read.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ..errors import VibechatError
from ..files import NotARegularFile, check_regular
from ..paths import data_dir
from .schema import MIGRATIONS, migrate

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
        # A read-only place: sqlite says what is wrong.
        return
    for item in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        _tighten(item, 0o600)


def _tighten(path: Path, mode: int) -> None:
    try:
        if path.stat().st_mode & 0o777 & ~mode:
            path.chmod(mode)
    except OSError:
        pass


# open() and `with` give back the History itself.
_H = TypeVar("_H", bound="HistoryDatabase")


class HistoryDatabase:
    """The history's connection and transactions; ``History`` adds what is read and
    written. Safe to share between threads (one connection behind a lock); several
    processes may use the same file at once."""

    def __init__(self, path: Path | None = None, *, read_only_ok: bool = False) -> None:
        self.path = Path(path) if path is not None else default_path()
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        # Replies found 'streaming' (left by a crash) when opened.
        self.repaired = 0
        # Readers (`history list/show/search/export`, the chat's sidebar) may open a history
        # they cannot write: a read-only data dir, a full disk. ``read_only`` is then why
        # (the open's one-line error, with its fix), and every write fails with it.
        self.read_only_ok = read_only_ok
        self.read_only: str | None = None

    # ------------------------------------------------------------ lifecycle
    def open(self: _H) -> _H:
        # Another thread wanting the connection waits for the migrations.
        with self._lock:
            return self._open()

    def _open(self: _H) -> _H:
        if self._conn is not None:
            return self
        try:
            return self._open_for_writing()
        except HistoryError as exc:
            # SQLite's WAL needs to create its -shm file beside the database even to read,
            # and the open migrates and repairs: a read-only folder or a full disk fails
            # here. A reader that accepts it gets the file as it is, read-only. A database
            # another process held past the busy timeout is not read behind its back.
            if (
                not self.read_only_ok
                or "another process held it" in str(exc)
                or not self._open_read_only()
            ):
                raise
            self.read_only = str(exc).replace(
                "cannot open the chat history", "cannot write the chat history", 1
            )
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
                conn = sqlite3.connect(
                    uri + query,
                    uri=True,
                    timeout=BUSY_TIMEOUT_MS / 1000,
                    isolation_level=None,
                    check_same_thread=False,
                )
                conn.execute("PRAGMA query_only = ON")
                version = (
                    conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] or 0
                )
            except sqlite3.Error:
                if conn is not None:
                    conn.close()
                continue
            # Older needs a migration (a write); newer is not ours to read.
            if version != len(MIGRATIONS):
                conn.close()
                return False
            self._conn = conn
            self.repaired = 0
            return True
        return False

    def _open_for_writing(self: _H) -> _H:
        try:
            for item in (
                self.path,
                self.path.with_name(self.path.name + "-wal"),
                self.path.with_name(self.path.name + "-shm"),
            ):
                # A FIFO here would block the open below forever.
                check_regular(item)
            make_private(self.path)
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
        except NotARegularFile as exc:
            raise HistoryError(
                f"cannot open the chat history: {exc}; move it aside (vibechat creates a "
                "new one) or point VIBECHAT_DATA_DIR elsewhere."
            ) from None
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
            # The next open tries to write again.
            self.read_only = None

    def __enter__(self: _H) -> _H:
        return self.open()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _error(self, doing: str, exc: BaseException) -> HistoryError:
        text = str(exc)
        where = self.path.parent
        if (
            "readonly" in text.replace(" ", "").lower()
            or isinstance(exc, PermissionError)
            or "unable to open" in text
        ):
            return HistoryError(
                f"cannot {doing} the chat history at {self.path} ({text}): make {where} "
                "writable, point VIBECHAT_DATA_DIR at a writable directory, or pass --no-save."
            )
        if "not a database" in text or "malformed" in text:
            return HistoryError(
                f"the chat history at {self.path} is damaged ({text}): move it aside to start "
                "a new one (vibechat recreates it)."
            )
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
            # Opened read-only: the open's reason, with its fix.
            if self.read_only is not None:
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
        migrate(self.conn, self._write)

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
            c.executemany(
                "UPDATE messages SET status = 'interrupted' WHERE id = ? AND status = 'streaming'",
                [(i,) for i in dead],
            )
        return len(dead)


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
        return (
            f"another process held it for over {BUSY_TIMEOUT_MS / 1000:g} s ({text}): close the "
            "other vibechat (or its `run`), then try again"
        )
    if not (
        name.startswith(("SQLITE_FULL", "SQLITE_IOERR"))
        or "disk is full" in text
        or "I/O error" in text
    ):
        return None
    try:
        import resource  # POSIX only

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY:
            return (
                f"the file-size limit (ulimit -f: {limit} bytes) was reached ({text}): raise the "
                "limit, or pass --no-save"
            )
    except (ImportError, OSError, ValueError):
        pass
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        free = None
    if free is not None and free < 1024 * 1024:
        return f"the disk is full ({text}): free some space on it, or pass --no-save"
    return (
        f"the disk could not be written ({text}): check that it has space and works, "
        "or pass --no-save"
    )


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
        # It exists (another user's), or the platform cannot tell: leave it.
        return True
    return True
