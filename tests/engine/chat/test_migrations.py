"""The history's migrations: named functions, each with its docstring, run in order; a real
SQLite file at each older version upgrades to the newest schema, its rows kept."""

from __future__ import annotations

import inspect
import sqlite3
from pathlib import Path

import pytest

from vibechat.engine.chat import schema
from vibechat.engine.chat.history import History
from vibechat.engine.chat.schema import MIGRATIONS, statements


def schema_of(path: Path) -> set[tuple[str, str, str]]:
    """Every table, index and trigger of the database at ``path``, with its SQL on one line."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchall()
    finally:
        conn.close()
    return {(kind, name, " ".join((sql or "").split())) for kind, name, sql in rows}


def write_database_at(path: Path, version: int) -> None:
    """A database as the first ``version`` migrations made it (version 0: an empty file), with a
    conversation of two messages once there is a schema to hold them (the reply the prompt's
    child once messages have parents, from version 4)."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied TEXT NOT NULL)"
    )
    for number, migration in enumerate(MIGRATIONS[:version], start=1):
        migration(conn)
        conn.execute("INSERT INTO schema_migrations VALUES (?, '2026-01-01')", (number,))
    if version:
        conn.execute(
            "INSERT INTO conversations(id, title, created, updated) "
            "VALUES (1, 'old', '2026-01-01', '2026-01-01')"
        )
        for row in (
            (1, "user", "where is zanzibar"),
            (2, "assistant", "off the coast of Tanzania"),
        ):
            conn.execute(
                "INSERT INTO messages(id, conversation_id, role, content, status, "
                "created, updated) "
                "VALUES (?, 1, ?, ?, 'complete', '2026-01-01', '2026-01-01')",
                row,
            )
        if version >= 4:
            conn.execute("UPDATE messages SET parent_id = 1 WHERE id = 2")
    conn.commit()
    conn.close()


def test_each_migration_is_a_named_function_with_a_docstring():
    names = [migration.__name__ for migration in MIGRATIONS]
    assert names == [
        "conversations_and_messages",
        "thinking_apart",
        "sources_titles_and_cut_replies",
        "message_tree",
        "tool_calls",
        "attachments",
        "token_lens",
        "summaries_and_pins",
        "compare_picks",
    ]
    for migration in MIGRATIONS:
        assert inspect.isfunction(migration) and getattr(schema, migration.__name__) is migration
        assert len(inspect.getdoc(migration) or "") > 40, migration.__name__  # says what and why
        assert statements(migration), migration.__name__  # and runs SQL


@pytest.mark.parametrize("version", range(len(MIGRATIONS)))
def test_a_database_at_each_older_version_upgrades_to_the_newest_schema(
    tmp_path: Path, version: int
):
    fresh = tmp_path / "fresh.db"
    with History(fresh) as db:
        assert db.schema_version == len(MIGRATIONS)
    old = tmp_path / f"v{version}.db"
    write_database_at(old, version)
    with History(old) as db:
        assert db.schema_version == len(MIGRATIONS)
        applied = [
            r[0] for r in db.conn.execute("SELECT version FROM schema_migrations ORDER BY version")
        ]
        assert applied == list(range(1, len(MIGRATIONS) + 1))
        if version:  # its rows kept, found by the search, the newest columns at their defaults
            conversation = db.get(1)
            assert [(m.id, m.role, m.content) for m in conversation.messages] == [
                (1, "user", "where is zanzibar"),
                (2, "assistant", "off the coast of Tanzania"),
            ]
            assert [h.message_id for h in db.search("zanzibar")] == [1]
            assert (
                conversation.messages[1].parent_id == 1 and conversation.messages[1].thinking == ""
            )
        assert db.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert schema_of(old) == schema_of(
        fresh
    )  # the same tables, indexes and triggers, word for word
