"""One conversation, one writer at a time (issue 25): concurrent ``vibechat run --continue``
processes queue on the conversation's writer lock (engine/chat/convlock.py), and the chat takes in
the turns a run added before its next request, so what the history holds is what the model
saw. Real processes, a real SQLite history and the stub server on 127.0.0.1, which records
every request."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import VIBECHAT_BIN, default_sigint
from fakes import send, settle
from openai_stub import StubServer
from vibechat.engine.chat.convlock import ConversationBusy, ConversationLock
from vibechat.engine.chat.history import History

RUNS = 4
WAITING = "waiting for another vibechat writing to conversation"


def vibechat(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VIBECHAT_BIN), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )


def server_flags(stub: StubServer) -> list[str]:
    return ["--backend", "openai", "--base-url", stub.url, "--model", "stub-small"]


def wait_line(proc: subprocess.Popen) -> str:
    """Read ``proc``'s stderr up to the line that says it waits (or its end)."""
    assert proc.stderr is not None
    for _ in range(100):
        line = proc.stderr.readline()
        if not line or WAITING in line:
            return line
    return ""


def sent(body: dict) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in body["messages"] if m["role"] != "system"]


def completions(stub: StubServer) -> list[dict]:
    return [r["body"] for r in stub.requests if r["path"].endswith("/chat/completions")]


class GatedStub(StubServer):
    """The stub, holding each chat request until ``opened`` is set or a second request is in
    (two runs writing at once, as without a lock): so that the runs surely overlap, and a
    run that holds the lock keeps it until the others are seen waiting."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.arrived = 0
        self.opened = False
        super().__init__()

    def open_gate(self) -> None:
        with self.cond:
            self.opened = True
            self.cond.notify_all()

    def _handler(self):
        base, stub = super()._handler(), self

        class Gated(base):  # type: ignore[misc, valid-type]
            def do_POST(self) -> None:
                if self.path.endswith("/chat/completions"):
                    with stub.cond:
                        stub.arrived += 1
                        stub.cond.notify_all()
                        stub.cond.wait_for(lambda: stub.opened or stub.arrived >= 2, timeout=60)
                super().do_POST()

        return Gated


def test_concurrent_runs_queue_and_the_history_is_what_the_model_saw(tmp_path: Path):
    with GatedStub() as stub:
        stub.open_gate()
        first = vibechat("run", *server_flags(stub), "-p", "turn 0")
        assert first.returncode == 0, first.stderr
        cid = History().open().latest().id
        with stub.cond:
            stub.opened, stub.arrived = False, 0
        errs = [tmp_path / f"err{i}" for i in range(1, RUNS + 1)]
        procs = []
        for i, err in enumerate(errs, 1):
            with err.open("w") as f:
                procs.append(
                    subprocess.Popen(
                        [
                            str(VIBECHAT_BIN),
                            "run",
                            *server_flags(stub),
                            "--continue",
                            "-p",
                            f"turn {i}",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=f,
                        stdin=subprocess.DEVNULL,
                        env=dict(os.environ),
                    )
                )
        # One run holds the lock (its request held at the stub); the others say they wait.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(p.poll() is not None for p in procs):
            if sum(WAITING in e.read_text() for e in errs) >= RUNS - 1:
                break
            time.sleep(0.05)
        stub.open_gate()
        codes = [p.wait(timeout=120) for p in procs]
        stderr = [e.read_text() for e in errs]
        assert codes == [0] * RUNS, stderr

    stored = History().open().get(cid).messages
    assert [m.role for m in stored] == ["user", "assistant"] * (RUNS + 1), [
        (m.role, m.content) for m in stored
    ]
    assert all(m.status == "complete" for m in stored)
    assert sorted(m.content for m in stored if m.role == "user") == [
        f"turn {i}" for i in range(RUNS + 1)
    ]
    requests = completions(stub)
    assert len(requests) == RUNS + 1
    for k, body in enumerate(requests):  # each request held exactly the history before its reply
        assert sent(body) == [(m.role, m.content) for m in stored[: 2 * k + 1]]
    # Three of them waited, said once each in one line.
    waited = [e for e in stderr if WAITING in e]
    assert len(waited) == RUNS - 1
    for e in waited:
        assert e.count(WAITING) == 1 and f"conversation {cid}…" in e and "Traceback" not in e


def test_a_run_that_waits_too_long_says_so_in_one_line(stub):
    first = vibechat("run", *server_flags(stub), "-p", "hello")
    assert first.returncode == 0, first.stderr
    history = History().open()
    cid = history.latest().id
    holder = history.writer_lock(cid)
    assert holder.try_acquire()
    try:
        other = history.writer_lock(cid)
        assert not other.try_acquire()  # another descriptor: flock keeps it out, as another process
        with pytest.raises(ConversationBusy, match=f"conversation {cid}"):
            other.acquire(limit=0.2)
        # A run given up on (Ctrl-C while it waits) leaves the conversation as it was.
        proc = subprocess.Popen(
            [str(VIBECHAT_BIN), "run", *server_flags(stub), "--continue", "-p", "more"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ),
            preexec_fn=default_sigint,
        )
        assert WAITING in wait_line(proc)
        proc.send_signal(2)
        assert proc.wait(timeout=60) == 130
        assert "Traceback" not in proc.stderr.read()
    finally:
        holder.release()
    assert len(history.get(cid).messages) == 2
    assert len(completions(stub)) == 1
    lock = ConversationLock(history.path, cid)
    assert lock.try_acquire()  # released: free again
    assert oct(lock.path.stat().st_mode & 0o777) == oct(0o600)
    assert oct(lock.path.parent.stat().st_mode & 0o777) == oct(0o700)
    lock.release()


SIZE = (110, 36)


async def test_the_chat_sends_and_shows_a_turn_that_run_added(stub):
    from vibechat.app.tui import create_app

    first = vibechat("run", *server_flags(stub), "-p", "from the start")
    assert first.returncode == 0, first.stderr
    history = History()
    cid = history.open().latest().id
    app = create_app(stub.backend(), blink=False, history=history)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        app.chats.open_conversation(cid)
        await settle(pilot)
        assert [w.text for w in app.chat.messages()] == ["from the start", stub.reply]

        added = await asyncio.to_thread(
            vibechat, "run", *server_flags(stub), "--continue", "-p", "from the command line"
        )
        assert added.returncode == 0, added.stderr

        await send(pilot, "from the chat")
        expected = [
            ("user", "from the start"),
            ("assistant", stub.reply),
            ("user", "from the command line"),
            ("assistant", stub.reply),
            ("user", "from the chat"),
        ]
        assert sent(stub.last_body) == expected
        assert [w.text for w in app.chat.messages()] == [text for _, text in expected] + [
            stub.reply
        ]
        stored = history.get(cid).messages
        assert [(m.role, m.content) for m in stored] == [*expected, ("assistant", stub.reply)]

        # Another vibechat adding to it just now: the chat says so and keeps the message in the
        # input.
        other = history.writer_lock(cid)
        assert other.try_acquire()
        try:
            await send(pilot, "not now")
            assert app.prompt_input.text == "not now" and len(completions(stub)) == 3
            assert len(history.get(cid).messages) == 6
        finally:
            other.release()
        app.prompt_input.load_text("")

        # The chat holds the lock while it answers: a run meanwhile waits, then sends what the chat
        # saved.
        stub.mode = "stall"
        await send(pilot, "a long one", wait=False)
        for _ in range(500):
            if len(completions(stub)) == 4:
                break
            await pilot.pause(0.02)
        proc = subprocess.Popen(
            [
                str(VIBECHAT_BIN),
                "run",
                *server_flags(stub),
                "--continue",
                "-p",
                "after it",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ),
        )
        assert WAITING in await asyncio.to_thread(wait_line, proc)
        stub.mode = "ok"
        await pilot.press("escape")  # the chat's reply stops: saved as stopped, the lock let go
        await settle(pilot)
        out, _ = await asyncio.to_thread(proc.communicate, timeout=120)
        assert proc.returncode == 0 and json.loads(out)["conversation_id"] == cid
        stub.release.set()
    last = sent(completions(stub)[-1])
    assert last[-3:] == [
        ("user", "a long one"),
        ("assistant", "Hello there, this"),
        ("user", "after it"),
    ]
    stored = history.get(cid).messages
    assert [(m.role, m.content) for m in stored][-4:] == [*last[-3:], ("assistant", stub.reply)]


async def test_regenerating_in_the_chat_keeps_the_turns_a_run_added(stub):
    """Ctrl+R after a run added a turn: the chat takes it in first, so what it regenerates is the
    last reply the history holds, and nothing the run saved is deleted."""
    from vibechat.app.tui import create_app

    assert vibechat("run", *server_flags(stub), "-p", "first").returncode == 0
    history = History()
    cid = history.open().latest().id
    app = create_app(stub.backend(), blink=False, history=history)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        app.chats.open_conversation(cid)
        await settle(pilot)
        added = await asyncio.to_thread(
            vibechat, "run", *server_flags(stub), "--continue", "-p", "second"
        )
        assert added.returncode == 0, added.stderr
        stub.reply = "A new reply."
        await pilot.press("ctrl+r")
        await settle(pilot)
        old = "Hello there, this is the stub speaking."
        assert sent(stub.last_body) == [("user", "first"), ("assistant", old), ("user", "second")]
        assert [w.text for w in app.chat.messages()] == ["first", old, "second", "A new reply."]
    stored = history.get(cid).messages
    assert [(m.role, m.content) for m in stored] == [
        ("user", "first"),
        ("assistant", old),
        ("user", "second"),
        ("assistant", "A new reply."),
    ]
