"""A history that cannot be written still reads (issue 25): ``history list/show/search/
export`` and the chat's sidebar on a read-only data dir or a full disk. SQLite's WAL needs
to create its ``-shm`` file even to read, and the open migrates and repairs: the readers
fall back to opening the file read-only, repair nothing, say so once, and every write
fails in one line. ``vibechat run`` and ``history rm`` still fail at the open.

The read-only folder is the suite's ``read_only_dir`` (the immutable attribute for root);
the full disk is ``RLIMIT_FSIZE`` below the size of SQLite's ``-shm`` file (32 KiB) in a
child process: the database itself is only read, so the limit bites where a full disk
does, at the -shm file."""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN, read_only_dir
from fakes import RecordingBackend, settle
from vibechat.app.tui import create_app
from vibechat.app.tui.widgets.sidebar import ConversationSidebar
from vibechat.engine.chat.database import HistoryError, default_path
from vibechat.engine.chat.history import History

SIZE = (110, 36)


def seed(db: Path) -> int:
    """One conversation: a whole exchange, then a reply a crash cut off (its writer is gone),
    which a writable open would mark 'interrupted'."""
    with History(db) as history:
        cid = history.create(title="Kept chat")
        history.add_message(cid, "user", "What is a KV cache?")
        history.add_message(cid, "assistant", "A cache of keys and values.")
        history.add_message(cid, "user", "And WAL?")
        reply = history.add_message(cid, "assistant", "half a rep", status="streaming")
    dead = subprocess.Popen(["true"])
    dead.wait()  # reaped: its pid names no process
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE messages SET writer_pid = ? WHERE id = ?", (dead.pid, reply))
    conn.close()
    return cid


def vibechat(*args: str, limit: int | None = None) -> subprocess.CompletedProcess:
    def fsize() -> None:
        signal.signal(
            signal.SIGXFSZ, signal.SIG_IGN
        )  # a write past the limit fails (EFBIG), like ENOSPC
        assert limit is not None
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
        preexec_fn=None if limit is None else fsize,
    )


def read_ok(out: subprocess.CompletedProcess, why: str) -> None:
    """Exit 0 and one note on stderr saying the history is read only, and why."""
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    notes = [
        line for line in lines if line.startswith("vibechat: note: reading the chat history only: ")
    ]
    assert len(notes) == 1 and why in notes[0], out.stderr


def test_history_commands_read_a_read_only_data_dir_and_repair_nothing(tmp_path: Path):
    db = default_path()
    cid = seed(db)
    db.chmod(0o444)
    before = db.read_bytes()
    export = tmp_path / "out.md"
    with read_only_dir(db.parent):
        listed = vibechat("history", "list")
        shown = vibechat("history", "show", str(cid))
        found = vibechat("history", "search", "cache")
        exported = vibechat("history", "export", str(cid), "-o", str(export))
        as_json = vibechat("history", "show", str(cid), "--json")
        removed = vibechat("history", "rm", "-y", str(cid))
        assert sorted(p.name for p in db.parent.iterdir()) == ["history.db"]  # no -wal, no -shm
    for out in (listed, shown, found, exported, as_json):
        read_ok(out, "writable")
    assert "Kept chat" in listed.stdout
    assert "A cache of keys and values." in shown.stdout and "half a rep" in shown.stdout
    assert (
        "## Assistant (streaming)" in shown.stdout
    )  # left as it was: no repair on a read-only open
    assert "Kept chat" in found.stdout
    assert "A cache of keys and values." in export.read_text()
    # A write still fails at the open, in one line.
    assert removed.returncode == 1 and removed.stderr.count("\n") == 1, removed.stderr
    assert removed.stderr.startswith("vibechat: error: ") and "writable" in removed.stderr
    assert db.read_bytes() == before


def test_history_commands_read_on_a_full_disk(tmp_path: Path):
    db = default_path()
    cid = seed(db)
    limit = 4096  # below the -shm file's 32 KiB: creating it fails as on a full disk
    listed = vibechat("history", "list", limit=limit)
    shown = vibechat("history", "show", str(cid), limit=limit)
    for out in (listed, shown):
        read_ok(out, "file-size limit")
    assert "Kept chat" in listed.stdout and "half a rep" in shown.stdout
    # With room again, the next open writes: the cut-off reply is marked then, nothing was lost.
    with History(db) as history:
        assert history.repaired == 1 and history.read_only is None
        assert [m.status for m in history.get(cid).messages] == [
            "complete",
            "complete",
            "complete",
            "interrupted",
        ]


def test_a_read_only_history_reads_and_refuses_every_write_in_one_line(tmp_path: Path):
    db = tmp_path / "data" / "history.db"
    cid = seed(db)
    with read_only_dir(db.parent):
        with pytest.raises(
            HistoryError, match="writable"
        ):  # a writer (`run`) still fails at the open
            History(db).open()
        with History(db, read_only_ok=True) as history:
            assert history.read_only is not None and history.read_only.startswith(
                "cannot write the chat history"
            )
            assert history.repaired == 0
            assert [c.title for c in history.conversations()] == ["Kept chat"]
            assert [h.conversation_id for h in history.search("keys")] == [cid]
            for write in (
                lambda: history.create(title="new"),
                lambda: history.rename(cid, "other"),
                lambda: history.add_message(cid, "user", "more"),
                lambda: history.delete(cid),
            ):
                with pytest.raises(HistoryError) as caught:
                    write()
                assert "\n" not in str(caught.value) and "writable" in str(caught.value)
            assert history.get(cid).title == "Kept chat"
        # Closed, the next open tries to write again (and fails again here).
        history = History(db, read_only_ok=True).open()
        assert history.read_only is not None
        history.close()
        assert history.read_only is None
    with History(db) as history:  # writable again: nothing changed, and the open repairs
        assert history.get(cid).title == "Kept chat" and len(history.get(cid).messages) == 4
        assert history.repaired == 1


async def test_the_chats_sidebar_browses_a_read_only_history(tmp_path: Path):
    db = default_path()
    cid = seed(db)
    with read_only_dir(db.parent):
        app = create_app(RecordingBackend(reply="Still here"), blink=False)  # the default history
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            problems = [n.message for n in app._notifications if "not saved" in n.message]
            assert len(problems) == 1 and "writable" in problems[0]
            sidebar = app.query_one(ConversationSidebar)
            assert [s.id for s in sidebar.summaries] == [cid]
            await pilot.press("ctrl+b")
            assert sidebar.display and sidebar.options.has_focus
            await pilot.press("enter")
            await settle(pilot)
            assert [w.text for w in app.chat.messages()] == [
                "What is a KV cache?",
                "A cache of keys and values.",
                "And WAL?",
                "half a rep",
            ]
