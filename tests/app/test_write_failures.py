"""Write failures (issue 25, point 3): a full disk, a file-size limit, a closed or full
stdout. Each is one line, the right exit status, and nothing saved before is lost.

A full disk is made with ``RLIMIT_FSIZE`` (``ulimit -f``) in a child process, SIGXFSZ
ignored there so that a write past the limit fails with EFBIG as it would with ENOSPC:
no small filesystem to mount, and it works as root (which ignores permissions and
reserved blocks). The limit is set once the database exists, to the size its files have
then: the next write that grows a file fails."""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN, read_only_dir
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.database import HistoryError, default_path
from vibechat.engine.chat.history import History
from vibechat.engine.turns.backend import GenerationDone

TESTS = Path(__file__).resolve().parents[1]


def file_size_limit(size: int):
    """``preexec_fn`` for a child whose files cannot grow past ``size`` bytes."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(
            resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1])
        )

    return limit


def vibechat(*args: str, limit: int | None = None, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
        preexec_fn=None if limit is None else file_size_limit(limit),
        **kwargs,
    )


def python(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TESTS,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
    )


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vibechat: error: "), out.stderr
    return lines[0]


def seed(db: Path, *exchanges: tuple[str, str]) -> int:
    with History(db) as history:
        chat = ChatLog(Conversation(), history, source="run")
        for prompt, reply in exchanges:
            chat.add_user(prompt)
            chat.finish_reply(chat.start_reply(), GenerationDone(reply))
        assert chat.conversation_id is not None
        return chat.conversation_id


# ------------------------------------------------------------------ history
def test_a_failed_commit_is_one_history_error_and_the_database_stays_readable(tmp_path: Path):
    """A commit the disk cannot take: SQLite has already rolled back, and a second
    rollback used to raise "cannot rollback - no transaction is active" over the reason."""
    out = python(f"""
        import json, resource, signal
        from pathlib import Path
        from vibechat.engine.chat.database import HistoryError
        from vibechat.engine.chat.history import History
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        folder = Path({str(tmp_path)!r})
        history = History(folder / "history.db").open()
        cid = history.create(title="kept")
        history.add_message(cid, "user", "saved before")
        size = max(p.stat().st_size for p in folder.iterdir())
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
        try:
            history.add_message(cid, "assistant", "x" * 1_000_000)
            error = None
        except HistoryError as exc:
            error = str(exc)
        messages = [m.content for m in history.get(cid).messages]
        state = {{"error": error, "messages": messages}}
        state["in_transaction"] = history.conn.in_transaction
        print(json.dumps(state))
    """)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["error"] and "file-size limit" in result["error"] and "\n" not in result["error"]
    assert result["messages"] == ["saved before"] and not result["in_transaction"]


def test_a_save_that_fails_while_the_reply_streams_stops_saving_and_says_so(
    tmp_path: Path, monkeypatch
):
    """The streaming saves' failure used to be only logged: the reply's end then saved
    nothing and said nothing."""
    history = History(tmp_path / "history.db")
    chat = ChatLog(Conversation(), history)
    chat.add_user("hello")
    reply = chat.start_reply()
    assert reply.writer is not None
    reply.writer.interval = 0

    def full(*_args, **_kwargs):
        raise HistoryError(
            "cannot write the chat history at X: the disk is full (database or disk is full)"
        )

    monkeypatch.setattr(history, "update_message", full)
    reply.append("partial ")
    chat.finish_reply(reply, GenerationDone("partial answer"))
    assert chat.problem is not None and chat.problem.startswith(
        "saving stopped (save the reply failed): "
    )
    assert "the disk is full" in chat.problem
    assert not chat.saving
    assert [t.content for t in chat.conversation.turns] == [
        "hello",
        "partial answer",
    ]  # kept in memory
    monkeypatch.undo()
    history.close()
    with History(tmp_path / "history.db") as again:
        assert [m.content for m in again.get(chat.conversation_id).messages] == ["hello", ""]


# ---------------------------------------------------------------------- run
def test_run_on_a_full_disk_prints_the_reply_and_fails_in_one_line(stub):
    first = vibechat("run", "--base-url", stub.url, "--model", "stub-small", "-p", "Hi")
    assert first.returncode == 0, first.stderr
    folder = default_path().parent
    size = max(p.stat().st_size for p in folder.iterdir())
    # Room for SQLite's 32 KiB shared-memory file, not for the new conversation's writes.
    out = vibechat(
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "--continue",
        "-p",
        "Again",
        limit=max(size, 32768),
    )
    line = one_error_line(out)
    assert line.startswith("vibechat: error: saving stopped (") and "file-size limit" in line
    assert out.stdout == stub.reply + "\n"
    listed = vibechat("history", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    saved = json.loads(listed.stdout)
    assert len(saved) == 1
    shown = json.loads(vibechat("history", "show", str(saved[0]["id"]), "--json").stdout)
    # What was saved before stays; what the limit let through of this run may be there too.
    assert [m["content"] for m in shown["messages"]][:2] == ["Hi", stub.reply]
    # --json: the object has the reply and the error (kind history), as exit status 1 says.
    out = vibechat(
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "--continue",
        "-p",
        "Once more",
        "--json",
        limit=max(size, 32768),
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    obj = json.loads(out.stdout)
    assert (
        obj["text"] == stub.reply
        and obj["error"]["kind"] == "history"
        and obj["error"]["exit_status"] == 1
    )
    assert obj["error"]["message"].startswith("saving stopped (")


def test_run_into_dev_full_fails_in_one_line(stub):
    with open("/dev/full", "w") as full:
        out = vibechat(
            "run", "--base-url", stub.url, "--model", "stub-small", "-p", "Hi", stdout=full
        )
    line = one_error_line(out)
    assert "cannot write the reply to standard output" in line and "No space left" in line


def test_run_with_stdout_closed_fails_in_one_line(stub):
    out = subprocess.run(
        f"exec {VIBECHAT_BIN} run --base-url {stub.url} --model stub-small -p Hi >&-",
        shell=True,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    line = one_error_line(out)
    assert "standard output is closed" in line


# ------------------------------------------------------------------- export
def test_export_on_a_full_disk_keeps_the_old_file_and_leaves_no_partial_one(tmp_path: Path):
    cid = seed(default_path(), ("Tell me a long story", "once upon a time " * 20_000))  # ~340 KB
    old = tmp_path / "story.md"
    old.write_text("the old export\n")
    out = vibechat("history", "export", str(cid), "-o", str(old), "--force", limit=64 * 1024)
    line = one_error_line(out)
    assert str(old) in line and "File too large" in line
    assert old.read_text() == "the old export\n"
    new = tmp_path / "new.md"
    out = vibechat("history", "export", str(cid), "-o", str(new), limit=64 * 1024)
    one_error_line(out)
    assert not new.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "user") == [
        "story.md"
    ]  # no temporary left
    done = vibechat("history", "export", str(cid), "-o", str(old), "--force")
    assert done.returncode == 0, done.stderr
    assert "once upon a time" in old.read_text()


def test_export_into_a_read_only_folder_is_one_line(tmp_path: Path):
    cid = seed(default_path(), ("hi", "hello"))
    with read_only_dir(tmp_path / "ro") as folder:  # for root too (chattr +i), else skipped
        out = vibechat("history", "export", str(cid), "-o", str(folder / "x.md"))
        line = one_error_line(out)
        assert str(folder / "x.md") in line and (
            "Permission denied" in line or "not permitted" in line
        )
        assert list(folder.iterdir()) == []


def test_a_database_locked_past_the_busy_timeout_is_one_line_naming_the_other_process(
    tmp_path: Path, monkeypatch
):
    db = tmp_path / "history.db"
    cid = seed(db, ("hi", "hello"))
    monkeypatch.setattr("vibechat.engine.chat.database.BUSY_TIMEOUT_MS", 100)
    other = sqlite3.connect(db, isolation_level=None)
    with History(db) as history:
        other.execute("BEGIN IMMEDIATE")  # another vibechat in the middle of a long write
        try:
            with pytest.raises(HistoryError) as caught:
                history.add_message(cid, "user", "more")
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert "another process held it" in str(caught.value) and "\n" not in str(caught.value)
        assert [m.content for m in history.get(cid).messages] == ["hi", "hello"]
        history.add_message(cid, "user", "more")  # and it writes again once the other is done


# --------------------------------------------------------------------- chat
def test_the_chat_on_a_full_disk_keeps_the_reply_on_screen_and_says_saving_stopped(tmp_path: Path):
    """The chat, headless in a child whose files stop growing after the first exchange:
    it used to end with a traceback (the second rollback's error); now the reply stays on
    screen, one notice says saving stopped, and the chat goes on."""
    out = python(f"""
        import asyncio, json, resource, signal
        from pathlib import Path
        from fakes import RecordingBackend, send, settle
        from vibechat.app.tui import create_app
        from vibechat.engine.chat.history import History

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        folder = Path({str(tmp_path)!r})

        async def main():
            backend = RecordingBackend(reply="word " * 3000)
            app = create_app(backend, blink=False, history=History(folder / "history.db"))
            async with app.run_test(size=(110, 36)) as pilot:
                await settle(pilot)
                await send(pilot, "first")
                size = max(p.stat().st_size for p in folder.iterdir())
                resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
                await send(pilot, "second")
                await send(pilot, "third")
                notes = [n.message for n in app._notifications]
                shown = [(w.role, len(w.text)) for w in app.chat.messages()]
                print(json.dumps({{"notes": notes, "shown": shown, "running": app.is_running}}))

        asyncio.run(main())
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    stopped = [n for n in result["notes"] if n.startswith("saving stopped")]
    assert len(stopped) == 1, result["notes"]
    assert (
        stopped[0].endswith("; the conversation stays on screen")
        and "file-size limit" in stopped[0]
    )
    assert [role for role, _ in result["shown"]] == ["user", "assistant"] * 3
    assert all(length > 0 for _, length in result["shown"]) and result["running"]
    with History(tmp_path / "history.db") as history:
        saved = history.get(history.latest().id)
        assert [m.content for m in saved.messages][:2] == ["first", "word " * 3000]


def test_a_crash_in_the_chat_shows_no_local_variables():
    """Textual's crash screen printed every frame's locals (``show_locals=True``): the reply
    text, the conversation, a path. The traceback stays; the values do not."""
    out = python("""
        import asyncio
        from fakes import RecordingBackend, settle
        from vibechat.app.tui import create_app

        async def main():
            app = create_app(RecordingBackend(), blink=False, history=None)

            def boom():
                reply_text = "-".join(["PRIVATE", "REPLY", "TEXT"])
                raise RuntimeError(f"a bug ({len(reply_text)})")

            try:
                async with app.run_test(size=(80, 24)) as pilot:
                    await settle(pilot)
                    app.call_later(boom)
                    await pilot.pause()
                    await pilot.pause()
            except RuntimeError:
                pass

        asyncio.run(main())
    """)
    assert "RuntimeError: a bug (18)" in out.stderr, out.stderr[-2000:]
    assert "PRIVATE-REPLY-TEXT" not in out.stderr


# ------------------------------------------------------------- crash report
def test_a_crash_report_on_a_full_disk_leaves_no_half_file(user_dirs):
    """The engine's crash report when the disk is full: None (the crash line then names no
    report), and no partial file left in crashes/."""
    out = python("""
        import resource, signal
        from vibechat.engine.paths import crash_dir
        from vibechat.engine.llama.crash_report import write_crash_report
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        crash_dir().mkdir(parents=True, exist_ok=True)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
        lines = ["llama.cpp says something long " * 10] * 200
        print(write_crash_report("crashed", "while answering", -11, lines, lines, None, None))
        print(sorted(p.name for p in crash_dir().iterdir()))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["None", "[]"]
    assert "Traceback" not in out.stderr


# ------------------------------------------------------------------- config
def test_a_config_save_on_a_full_disk_is_one_line_and_keeps_the_old_file(tmp_path: Path):
    """Already so before issue 25 (the config is written to a temporary file and renamed):
    kept so."""
    config = tmp_path / "config.toml"
    config.write_text('theme = "nord"\n' + "# a long comment\n" * 400)
    out = python(f"""
        import resource, signal
        from pathlib import Path
        from vibechat.app.appconfig import save_theme
        from vibechat.engine.errors import VibechatError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))
        try:
            save_theme("gruvbox", Path({str(config)!r}))
        except VibechatError as exc:
            print(exc)
    """)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert (
        out.stdout.startswith("could not save the config file")
        and len(out.stdout.splitlines()) == 1
    )
    assert config.read_text().startswith('theme = "nord"\n')
    assert [p.name for p in tmp_path.iterdir() if p.name != "user"] == ["config.toml"]


def test_the_history_opens_for_reading_when_marking_interrupted_replies_cannot_be_written(
    tmp_path: Path, monkeypatch
):
    """Opening marks the replies a crash left 'streaming' as interrupted: a write. When it
    cannot be made (here another process holds the write lock past the busy timeout; a full
    disk does the same), the history used to refuse to open at all, listing included."""
    db = tmp_path / "history.db"
    cid = seed(db, ("hi", "hello"))
    with History(db) as history:
        history.add_message(cid, "assistant", "cut off", "streaming")
    other = sqlite3.connect(db, isolation_level=None)
    other.execute(
        "UPDATE messages SET writer_pid = 2147483646 WHERE status = 'streaming'"
    )  # no such process
    monkeypatch.setattr("vibechat.engine.chat.database.BUSY_TIMEOUT_MS", 100)
    other.execute("BEGIN IMMEDIATE")
    try:
        with History(db) as history:
            assert [s.id for s in history.conversations()] == [cid] and history.repaired == 0
            assert [m.status for m in history.get(cid).messages] == [
                "complete",
                "complete",
                "streaming",
            ]
    finally:
        other.execute("ROLLBACK")
        other.close()
    with History(db) as history:  # the next open that can write marks it
        assert history.repaired == 1
        assert history.get(cid).messages[-1].status == "interrupted"


def test_run_that_cannot_even_open_the_history_says_why(stub):
    """Opening writes too (SQLite's shared-memory file): under a tiny file-size limit it
    said only "disk I/O error"."""
    assert (
        vibechat("run", "--base-url", stub.url, "--model", "stub-small", "-p", "Hi").returncode == 0
    )
    out = vibechat(
        "run",
        "--base-url",
        stub.url,
        "--model",
        "stub-small",
        "--continue",
        "-p",
        "Again",
        limit=1000,
    )
    line = one_error_line(out)
    assert (
        "cannot open the chat history" in line and "file-size limit" in line and "--no-save" in line
    )
