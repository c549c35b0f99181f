"""The conversation database: schema, saving as a chat happens, crash repair, search.
Every test uses a real SQLite file under tmp_path."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import read_only_dir
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.database import ConversationNotFound, HistoryError, default_path
from vibechat.engine.chat.history import History
from vibechat.engine.chat.records import HIT_END, HIT_START, fts_query
from vibechat.engine.chat.schema import MIGRATIONS, statements
from vibechat.engine.chat.titles import title_from
from vibechat.engine.errors import InvalidParameterError
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import GenerationDone, GenerationStats


def done(text: str, reason: str = "stop") -> GenerationDone:
    return GenerationDone(
        text,
        GenerationStats(completion_tokens=len(text.split()), finish_reason=reason),
        SamplingParams(seed=7),
    )


def test_the_database_lives_under_the_data_dir(user_dirs):
    assert default_path() == user_dirs["data"] / "vibechat" / "history.db"


def test_wal_busy_timeout_and_numbered_migrations_recorded(history: History):
    conn = sqlite3.connect(history.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert history.conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
    versions = [
        r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")
    ]
    assert versions == list(range(1, len(MIGRATIONS) + 1))
    conn.close()
    history.close()
    history.open()  # opening again applies nothing twice
    assert history.schema_version == len(MIGRATIONS)


def test_a_database_from_a_newer_vibechat_is_refused_with_a_clear_message(tmp_path: Path):
    path = tmp_path / "history.db"
    History(path).open().close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_migrations VALUES (99, 'later')")
    conn.commit()
    conn.close()
    with pytest.raises(HistoryError, match="newer than this vibechat"):
        History(path).open()


def test_a_file_that_is_not_a_database_is_explained(tmp_path: Path):
    path = tmp_path / "history.db"
    path.write_bytes(b"<html>definitely not sqlite</html>" * 200)
    with pytest.raises(HistoryError, match="damaged.*move it aside"):
        History(path).open()
    assert path.read_bytes().startswith(b"<html>")  # left as it was


def test_a_read_only_data_dir_gives_a_clear_error(tmp_path: Path):
    with read_only_dir(tmp_path / "ro") as ro:
        with pytest.raises(HistoryError) as caught:
            History(ro / "history.db").open()
    message = str(caught.value)
    assert str(ro) in message and "writable" in message and "--no-save" in message


def test_titles_come_from_the_first_prompt_line():
    assert title_from("\n\n  Explain   KV caches\nplease") == "Explain KV caches"
    long = title_from("word " * 40)
    assert len(long) <= 60 and long.endswith("…")
    assert title_from("   ") == "New conversation"


def test_a_chat_is_saved_as_it_happens(history: History):
    chat = ChatLog(
        Conversation(system="Be brief.", params=SamplingParams(temperature=0.3)),
        history,
        model="Gemma",
        model_path="/m/gemma.gguf",
    )
    chat.add_user("What is a KV cache?")
    # The prompt is saved before any generation starts.
    stored = history.get(chat.conversation_id)
    assert [(m.role, m.content, m.status) for m in stored.messages] == [
        ("user", "What is a KV cache?", "complete")
    ]
    assert stored.title == "What is a KV cache?" and stored.system == "Be brief."
    assert stored.params.temperature == 0.3 and stored.summary.model == "Gemma"

    reply = chat.start_reply()
    assert history.get(chat.conversation_id).messages[-1].status == "streaming"
    reply.append("It stores ")
    reply.writer.flush()  # a debounced save (every 0.5 s while streaming)
    assert history.get(chat.conversation_id).messages[-1].content == "It stores "
    reply.append("keys and values.")
    chat.finish_reply(reply, done("It stores keys and values."))
    last = history.get(chat.conversation_id).messages[-1]
    assert (last.content, last.status) == ("It stores keys and values.", "complete")
    assert last.params["seed"] == 7 and last.stats["completion_tokens"] == 5


def test_stopped_and_failed_replies_keep_their_status(history: History):
    chat = ChatLog(Conversation(), history)
    chat.add_user("one")
    reply = chat.start_reply()
    reply.append("partial")
    chat.finish_reply(reply, done("partial", "cancelled"))
    chat.add_user("two")
    reply = chat.start_reply()
    reply.append("half a")
    chat.fail_reply(reply, "the prompt takes 9,000 tokens but the context holds 8,192")
    messages = history.get(chat.conversation_id).messages
    assert [m.status for m in messages] == ["complete", "stopped", "complete", "error"]
    assert messages[-1].content == "half a" and "context holds" in messages[-1].error

    # Opened again: the stopped reply is context, the failed one is not (its prompt can be retried).
    reopened = ChatLog.open(history, chat.conversation_id)
    assert [(t.role, t.content) for t in reopened.conversation.turns] == [
        ("user", "one"),
        ("assistant", "partial"),
        ("user", "two"),
    ]


def test_opening_restores_parameters_and_system_prompt(history: History):
    chat = ChatLog(Conversation(system="You are terse."), history)
    chat.add_user("hello")
    chat.set_params(SamplingParams(temperature=1.7, top_k=5, stop=("END",)))
    reopened = ChatLog.open(history, chat.conversation_id)
    assert reopened.conversation.system == "You are terse."
    assert reopened.conversation.params == SamplingParams(temperature=1.7, top_k=5, stop=("END",))
    assert reopened.title == "hello"


def test_an_empty_new_chat_leaves_nothing_behind(history: History):
    chat = ChatLog(Conversation(), history)
    chat.set_params(SamplingParams(temperature=0.1))
    chat.clear()
    assert history.count() == 0


def test_listing_is_newest_first_and_reads_no_messages(history: History):
    ids = []
    for n in range(3):
        cid = history.create(title=f"chat {n}")
        history.add_message(cid, "user", f"message {n}")
        ids.append(cid)
    history.add_message(ids[0], "user", "bumped")  # updated most recently
    assert [c.id for c in history.conversations()] == [ids[0], ids[2], ids[1]]
    assert [c.id for c in history.conversations(limit=1, offset=1)] == [ids[2]]
    assert history.latest().id == ids[0]
    traced: list[str] = []
    history.conn.set_trace_callback(traced.append)
    history.conversations()
    history.conn.set_trace_callback(None)
    assert traced and not any("messages" in sql for sql in traced)


def test_rename_and_delete(history: History):
    cid = history.create(title="old")
    history.add_message(cid, "user", "findable words")
    history.rename(cid, "  new   name ")
    assert history.get(cid).title == "new name"
    with pytest.raises(Exception, match="cannot be empty"):
        history.rename(cid, "   ")
    history.delete(cid)
    with pytest.raises(ConversationNotFound, match="history list"):
        history.get(cid)
    assert history.search("findable") == []  # the search index forgets it too
    assert history.conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0


def test_full_text_search_finds_words_across_conversations(history: History):
    a = history.create(title="Rust")
    history.add_message(a, "user", "How do I write a borrow checker friendly linked list?")
    b = history.create(title="Python")
    history.add_message(b, "assistant", "Use a deque; linked lists are rarely worth it.")
    streaming = history.add_message(b, "assistant", "", "streaming")
    history.update_message(streaming, "The café serves naïve linked data")  # index follows updates

    hits = history.search("linked")
    assert {h.conversation_id for h in hits} == {a, b}
    assert any(f"{HIT_START}linked{HIT_END}" in h.snippet for h in hits)
    assert [h.conversation_id for h in history.search("borrow lin")] == [a]  # last word is a prefix
    assert history.search("cafe naive")[0].message_id == streaming  # diacritics folded
    # Operators and quotes are plain words, never FTS syntax errors.
    assert history.search('linked" OR NEAR(') == []
    assert history.search('"deque"')[0].conversation_id == b
    assert history.search("   ") == [] and fts_query("!!") is None


def test_rows_a_crash_left_streaming_become_interrupted(tmp_path: Path):
    path = tmp_path / "history.db"
    with History(path) as h:
        cid = h.create(title="t")
        h.add_message(cid, "user", "go")
        row = h.add_message(cid, "assistant", "half of it", "streaming")
        # Pretend a process that has exited wrote it.
        dead = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
        ).stdout.strip()
        h.conn.execute("UPDATE messages SET writer_pid = ? WHERE id = ?", (int(dead), row))
        live = h.add_message(cid, "assistant", "still going", "streaming")  # this process: alive
    with History(path) as h:
        statuses = {m.id: m.status for m in h.get(cid).messages}
        assert statuses[row] == "interrupted" and statuses[live] == "streaming"
        assert h.repaired == 1
        reopened = ChatLog.open(h, cid)
        assert reopened.conversation.turns[-1].content == "still going"


def test_a_failed_save_never_stops_the_chat(tmp_path: Path):
    history = History(tmp_path / "history.db").open()
    chat = ChatLog(Conversation(), history)
    chat.add_user("first")
    history.close()
    history.path = tmp_path / "gone" / "deeper" / "history.db"
    (tmp_path / "gone").write_text("a file where a directory should be")
    chat.add_user("second")  # the save fails: reported once, the chat goes on in memory
    assert chat.problem and chat.problem.startswith("saving stopped (")
    assert not chat.saving
    reply = chat.start_reply()
    chat.finish_reply(reply, done("fine"))
    assert [t.content for t in chat.conversation.turns] == ["first", "second", "fine"]


WRITER = textwrap.dedent("""
    import sys
    from vibechat.engine.chat.history import History
    h = History(sys.argv[1]).open()
    cid = h.create(title=sys.argv[2])
    for i in range(int(sys.argv[3])):
        row = h.add_message(cid, "user", f"{sys.argv[2]} {i}")
        h.update_message(row, f"{sys.argv[2]} {i} edited")
    print("ok")
""")


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path):
    path = tmp_path / "history.db"
    History(path).open().close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, "150"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    results = [p.communicate(timeout=300) for p in procs]
    for (out, err), p in zip(results, procs, strict=True):
        assert p.returncode == 0 and out.strip() == "ok", err
        assert "locked" not in err
    with History(path) as h:
        for c in h.conversations():
            contents = [m.content for m in h.get(c.id).messages]
            assert contents == [f"{c.title} {i} edited" for i in range(150)]
        assert h.count() == 2


OPENER = textwrap.dedent("""
    import sys
    from vibechat.engine.chat.history import History
    h = History(sys.argv[1]).open()
    cid = h.create(title=sys.argv[2])
    h.add_message(cid, "user", "hello")
    print("ok")
""")


def test_processes_creating_the_same_new_database_at_once_all_succeed(tmp_path: Path):
    path = tmp_path / "fresh" / "history.db"  # does not exist yet: every process races to create it
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(path), f"p{n}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(6)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.strip() == "ok", err
    with History(path) as h:
        assert h.count() == 6 and h.schema_version == len(MIGRATIONS)


def test_titles_are_sanitised_from_the_prompt():
    from vibechat.engine.chat.titles import title_from

    assert title_from("\x1b]0;T\x07\x1b[2J  Hello \x9b31mworld\nmore") == "Hello world"
    assert title_from("\n\x1b[2J\n") == "New conversation"


# ------------------------------------------------ issue 30: history hygiene
V2_DB_ROWS = [  # a database as vibechat wrote it before conversations had a source (schema 2)
    "INSERT INTO conversations(title, model, params, created, updated) VALUES "
    "('hi', 'Fake 1B', '{\"temperature\": 0.5}', '2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z')",
    "INSERT INTO conversations(title, created, updated) "
    "VALUES ('second', '2026-01-03T00:00:00Z', '2026-01-03T00:00:00Z')",
    "INSERT INTO messages(conversation_id, role, content, status, created, updated) "
    "VALUES (1, 'user', 'tell me about zanzibar', 'complete', 'x', 'x')",
    "INSERT INTO messages(conversation_id, role, content, status, stats, created, "
    "updated, thinking) "
    "VALUES (1, 'assistant', 'an island of spices', 'complete', '{\"finish_reason\": "
    "\"length\"}', 'x', 'x', 'hmm')",
    "INSERT INTO messages(conversation_id, role, content, status, error, stats, created, updated) "
    "VALUES (2, 'assistant', 'half a', 'interrupted', 'server went away', 'not json', 'x', 'x')",
    "INSERT INTO messages(conversation_id, role, content, status, created, updated) "
    "VALUES (2, 'user', 'deleted later', 'complete', 'x', 'x')",
    "DELETE FROM messages WHERE id = 4",  # the newest id is gone: ids are never handed out twice
]


def write_v2_database(path: Path) -> None:
    """The schema exactly as the two first migrations made it (raw SQL), with rows."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied TEXT NOT NULL)"
    )
    for version, script in enumerate(MIGRATIONS[:2], start=1):
        for statement in statements(script):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (?, '2026-01-01')", (version,))
    for statement in V2_DB_ROWS:
        conn.execute(statement)
    conn.commit()
    conn.close()


def test_a_schema_2_database_migrates_whole_and_its_conversations_count_as_the_chats(
    tmp_path: Path,
):
    """Its conversations become the chat's (the database cannot tell), and its replies that
    a limit cut (their stats say so) become 'cut'."""
    path = tmp_path / "history.db"
    write_v2_database(path)
    with History(path) as db:
        assert db.schema_version == len(MIGRATIONS) >= 3
        listed = db.conversations()
        assert [(c.id, c.title, c.source) for c in listed] == [
            (2, "second", "chat"),
            (1, "hi", "chat"),
        ]
        assert [c.id for c in db.conversations(source="chat")] == [2, 1]
        assert db.conversations(source="run") == []
        first = db.get(1)
        assert first.summary.model == "Fake 1B" and first.params.temperature == 0.5
        assert [(m.id, m.role, m.content, m.status) for m in first.messages] == [
            (1, "user", "tell me about zanzibar", "complete"),
            (2, "assistant", "an island of spices", "cut"),
        ]
        assert first.messages[1].thinking == "hmm" and first.messages[1].stats == {
            "finish_reason": "length"
        }
        second = db.get(2).messages
        assert [(m.id, m.status, m.error) for m in second] == [
            (3, "interrupted", "server went away")
        ]
        # Full-text search still finds the old messages, and follows new writes and deletes.
        assert [h.message_id for h in db.search("zanzibar")] == [1]
        new = db.add_message(2, "assistant", "cut short", "cut")
        assert new == 5  # after the deleted 4: the sequence was carried over
        assert [h.message_id for h in db.search("short")] == [5]
        db.update_message(new, "now spices too", "cut")
        assert db.search("short") == [] and {h.message_id for h in db.search("spices")} == {2, 5}
        db.delete(1)
        assert [h.message_id for h in db.search("spices")] == [5]
        names = {r[0] for r in db.conn.execute("SELECT name FROM sqlite_master")}
        assert {
            "messages_fts_insert",
            "messages_fts_delete",
            "messages_fts_update",
            "messages_by_conversation",
            "messages_streaming",
        } <= names and "messages_v3" not in names
        assert db.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.conn.execute("PRAGMA foreign_key_check").fetchall() == []
    with History(path) as db:  # opened again: nothing migrates twice
        assert db.schema_version == len(MIGRATIONS) and db.count() == 1


def test_each_conversation_records_where_it_came_from(history: History):
    for source in ("chat", "run", "batch"):
        chat = ChatLog(Conversation(), history, source=source)
        chat.add_user(f"a question asked from {source}")
    assert [c.source for c in history.conversations()] == ["batch", "run", "chat"]
    assert [c.title for c in history.conversations(source="run")] == ["a question asked from run"]
    assert history.get(history.conversations(source="batch")[0].id).to_dict()["source"] == "batch"
    with pytest.raises(InvalidParameterError, match="unknown conversation source 'web'"):
        history.create(title="x", source="web")


def test_a_reply_cut_by_a_limit_is_saved_exported_and_reopened_as_cut(history: History):
    chat = ChatLog(Conversation(), history)
    chat.add_user("count to a thousand please")
    chat.finish_reply(chat.start_reply(), done("one two three", reason="length"))
    stored = history.get(chat.conversation_id)
    reply = stored.messages[1]
    assert reply.status == "cut" and reply.in_context
    assert stored.to_dict()["messages"][1]["status"] == "cut"
    assert (
        "## Assistant (cut: it reached the token limit or the end of the context)"
        in stored.to_markdown()
    )
    reopened = ChatLog.open(history, chat.conversation_id)
    assert [t.content for t in reopened.conversation.turns] == [
        "count to a thousand please",
        "one two three",
    ]


@pytest.mark.parametrize(
    ("prompt", "title"),
    [
        ("hi", "hi"),
        ("Hi\n\nWhy is the sky blue at noon?", "Why is the sky blue at noon?"),
        ("Explain KV caches", "Explain KV caches"),
        (
            "ok\n\x1b]0;pwned\x07Tell me \x1b[31mabout the tides, please",
            "Tell me about the tides, please",
        ),
        ("", "New conversation"),
    ],
)
def test_titles_come_from_the_first_prompt(prompt: str, title: str):
    assert title_from(prompt) == title


@pytest.mark.parametrize(
    "reply",
    ["How can I help you?", "I like apples.", "Hello! Ask me about tide pools and coral reefs."],
)
def test_a_reply_never_titles_a_conversation_the_first_prompt_does(history: History, reply: str):
    """Issue 46 point 7: a base model's continuation ("Hello" answered "How can I help you?")
    is no title; the first prompt is, also after the first reply, and after the first message
    was edited; a rename is the user's for good."""
    from fakes import RecordingBackend
    from vibechat.engine.chat.session import ChatSession

    session = ChatSession(RecordingBackend(reply=reply), ChatLog(Conversation(), history))
    session.chat.add_user("Hello")
    session.answer()
    assert history.conversations()[0].title == session.chat.title == "Hello"
    session.chat.take_last_user()  # the first message taken back and edited
    session.chat.add_user("hi\nWhat do sea anemones eat?")
    session.answer()
    assert history.conversations()[0].title == session.chat.title == "What do sea anemones eat?"
    # A rename is the user's for good: a later first exchange (after an edit) keeps it.
    session.chat.rename("Reef notes")
    session.chat.take_last_user()
    session.chat.add_user("hello again, tell me more")
    session.answer()
    assert history.conversations()[0].title == session.chat.title == "Reef notes"


def test_renaming_is_not_activity_and_keeps_the_conversation_in_its_place(history: History):
    older = ChatLog(Conversation(), history)
    older.add_user("the older one")
    newer = ChatLog(Conversation(), history)
    newer.add_user("the newer one")
    before = {c.id: c.updated for c in history.conversations()}
    older.rename("Renamed old one")
    listed = history.conversations()
    assert [c.title for c in listed] == ["the newer one", "Renamed old one"]
    assert {c.id: c.updated for c in listed} == before


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ('"Tide Pools and Coral Reefs."', "Tide Pools and Coral Reefs"),
        ("Title: **Rust vs Haskell**\nHere is why…", "Rust vs Haskell"),
        ("\x1b[2J“Spice markets”", "Spice markets"),
        ("word " * 30, ("word " * 12).strip()[:59].rstrip() + "…"),
        ('"..."', None),
        ("", None),
    ],
)
def test_a_title_the_model_wrote_is_cleaned_for_lists(text: str, title: str | None):
    from vibechat.engine.chat.titles import title_from_model

    assert title_from_model(text) == title


@pytest.mark.parametrize(
    ("budget", "said"), [(256, "think budget 256"), (None, "think budget off")]
)
def test_the_markdown_export_names_the_thinking_budget(history: History, budget, said):
    chat = ChatLog(Conversation(params=SamplingParams(think_budget=budget)), history)
    chat.add_user("think about it")
    parameters = next(
        line
        for line in history.get(chat.conversation_id).to_markdown().splitlines()
        if line.startswith("- Parameters: ")
    )
    assert parameters.endswith(f", {said}")
