"""A large history opens lazily: the sidebar lists every conversation and start-up
reads no message. A real Textual app (Pilot) on a real SQLite file of 300
conversations × 20 messages; no timing assertions (bench/bench_history.py measures)."""

from __future__ import annotations

import random
import re
import sqlite3
from pathlib import Path

from fakes import RecordingBackend, settle
from vibechat.app.tui import create_app
from vibechat.app.tui.widgets.sidebar import ConversationSidebar
from vibechat.engine.chat.history import History

CONVERSATIONS, MESSAGES = 300, 20
TOUCHES_MESSAGES = re.compile(r"\bmessages\b", re.IGNORECASE)  # the table, not messages_fts
WORDS = (
    "the model reply cache token thread query index lighthouse garden error value file list".split()
)


def build(path: Path) -> list[int]:
    """The schema History creates (full-text triggers included), then every row in one
    transaction. Returns the conversation ids, newest first."""
    History(path).open().close()
    rng = random.Random(5)
    conversations, messages = [], []
    for c in range(1, CONVERSATIONS + 1):
        stamps = [f"2026-01-01T00:00:00.{c * MESSAGES + t:06d}Z" for t in range(MESSAGES)]
        conversations.append(
            (
                c,
                f"Chat {c}: " + " ".join(rng.choices(WORDS, k=12)),
                "Fake 1B",
                stamps[0],
                stamps[-1],
            )
        )
        first = (c - 1) * MESSAGES + 1  # each message follows the one before it: one branch
        messages += [
            (
                first + t,
                c,
                first + t - 1 if t else None,
                "user" if t % 2 == 0 else "assistant",
                " ".join(rng.choices(WORDS, k=60)),
                "complete",
                stamps[t],
                stamps[t],
            )
            for t in range(MESSAGES)
        ]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO conversations(id, title, model, created, updated) VALUES (?, ?, ?, ?, ?)",
        conversations,
    )
    conn.executemany(
        "INSERT INTO messages(id, conversation_id, parent_id, role, content, status, "
        "created, updated) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        messages,
    )
    conn.execute("COMMIT")
    conn.close()
    return list(range(CONVERSATIONS, 0, -1))


async def test_start_up_lists_every_conversation_and_reads_no_message(tmp_path, monkeypatch):
    db = tmp_path / "history.db"
    newest_first = build(db)
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(
        sqlite3, "connect", traced
    )  # the app's history connection, opened in its worker
    app = create_app(RecordingBackend(), blink=False, history=History(db))
    async with app.run_test(size=(110, 36)) as pilot:
        await settle(pilot)
        sidebar = app.query_one(ConversationSidebar)
        assert [
            s.id for s in sidebar.summaries
        ] == newest_first  # its list is filled when first shown
        startup = list(statements)
        assert any("FROM conversations" in s for s in startup)

        # Lazy: the only start-up statement on the messages table is the crash-repair
        # probe, a search of the partial index that holds only replies left 'streaming'.
        reads = [s for s in startup if TOUCHES_MESSAGES.search(s)]
        assert len(reads) <= 1
        check = connect(f"file:{db}?mode=ro", uri=True)
        for sql in reads:
            plan = " ".join(row[3] for row in check.execute("EXPLAIN QUERY PLAN " + sql))
            assert "USING INDEX messages_streaming" in plan, (sql, plan)
            assert check.execute(sql).fetchall() == []
        check.close()

        # Shown, the list is complete; a conversation's messages are read when it is opened.
        await pilot.press("ctrl+b")
        await settle(pilot)
        assert sidebar.display and sidebar.options.highlighted_option.id == str(newest_first[0])
        assert sidebar.options.option_count == CONVERSATIONS
        await pilot.press("enter")
        await settle(pilot)
        assert len(app.chat.messages()) == MESSAGES
        assert any(
            TOUCHES_MESSAGES.search(s) and "conversation_id" in s
            for s in statements[len(startup) :]
        )
