"""The message tree: regenerating a reply or editing a prompt adds a sibling instead of
deleting anything; the branch on screen is what the model sees, what continues and what
exports as Markdown; every branch is searched, kept in JSON, and can be forked. Every
test uses a real SQLite file under tmp_path."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.chat.schema import MIGRATIONS, statements
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import (
    Candidate,
    GenerationDone,
    GenerationStats,
    TokenCandidates,
)


def done(text: str, reason: str = "stop") -> GenerationDone:
    return GenerationDone(text, GenerationStats(finish_reason=reason), SamplingParams(seed=7))


def exchange(chat: ChatLog, prompt: str, answer: str) -> None:
    chat.add_user(prompt)
    chat.finish_reply(chat.start_reply(), done(answer))


def contents(history: History, cid: int, **kw) -> list[str]:
    return [m.content for m in history.get(cid, **kw).messages]


def test_regenerating_keeps_the_earlier_reply_as_a_sibling_that_search_still_finds(
    history: History,
):
    chat = ChatLog(Conversation(), history)
    exchange(chat, "first", "answer to first")
    exchange(chat, "second", "the ocean is deep")
    old_reply = chat.leaf
    chat.drop_last_reply()
    assert [t.content for t in chat.conversation.turns] == ["first", "answer to first", "second"]
    chat.finish_reply(chat.start_reply(), done("a better answer"))
    cid = chat.conversation_id
    stored = history.get(cid)
    assert [m.content for m in stored.messages] == [
        "first",
        "answer to first",
        "second",
        "a better answer",
    ]
    assert len(stored.tree) == 5  # nothing deleted
    assert stored.branch(stored.messages[-1].id) == (2, 2) and stored.branch(old_reply) == (1, 2)
    hits = history.search("ocean")
    assert [h.message_id for h in hits] == [old_reply]
    # Opened at the hit: on its branch.
    assert contents(history, cid, through=old_reply) == [
        "first",
        "answer to first",
        "second",
        "the ocean is deep",
    ]
    # Reopened as it was left: on the new reply's branch, which the model is sent.
    reopened = ChatLog.open(history, cid)
    assert [t.content for t in reopened.conversation.turns][-1] == "a better answer"


def test_editing_an_earlier_prompt_starts_a_sibling_branch_and_keeps_the_old_one(history: History):
    chat = ChatLog(Conversation(), history)
    exchange(chat, "one", "reply one")
    exchange(chat, "two", "reply two")
    exchange(chat, "three", "reply three")
    cid = chat.conversation_id
    two = history.get(cid).messages[2].id
    assert chat.take_user(two) == "two"
    assert [t.content for t in chat.conversation.turns] == ["one", "reply one"]
    exchange(chat, "two, better", "reply two, better")
    stored = history.get(cid)
    assert [m.content for m in stored.messages] == [
        "one",
        "reply one",
        "two, better",
        "reply two, better",
    ]
    assert stored.branch(stored.messages[2].id) == (2, 2)
    assert len(stored.tree) == 8
    # The old branch, whole, one switch away (its newest end).
    assert contents(history, cid, through=two) == [
        "one",
        "reply one",
        "two",
        "reply two",
        "three",
        "reply three",
    ]
    # Markdown exports the branch on screen; JSON carries every branch with its parents.
    assert "reply three" not in stored.to_markdown() and "reply two, better" in stored.to_markdown()
    data = json.loads(json.dumps(stored.to_dict()))
    assert len(data["tree"]) == 8 and data["leaf_id"] == stored.messages[-1].id
    parents = {m["id"]: m["parent_id"] for m in data["tree"]}
    assert parents[stored.messages[2].id] == parents[two] == stored.messages[1].id


def test_switching_branches_is_remembered_and_continuing_follows_the_branch_on_screen(
    history: History,
):
    chat = ChatLog(Conversation(), history)
    exchange(chat, "q", "a1")
    first = chat.leaf
    chat.drop_last_reply()
    chat.finish_reply(chat.start_reply(), done("a2"))
    cid = chat.conversation_id
    history.set_leaf(cid, first)
    again = ChatLog.open(history, cid)
    assert [t.content for t in again.conversation.turns] == ["q", "a1"]
    exchange(again, "follow-up", "on the first branch")
    assert contents(history, cid) == ["q", "a1", "follow-up", "on the first branch"]
    assert contents(history, cid, through=first) == ["q", "a1", "follow-up", "on the first branch"]


def test_a_failed_reply_stays_as_a_sibling_of_its_retry(history: History):
    chat = ChatLog(Conversation(), history)
    chat.add_user("hi")
    chat.fail_reply(chat.start_reply(), "boom")
    chat.drop_last_reply()  # regenerate
    chat.finish_reply(chat.start_reply(), done("hello"))
    stored = history.get(chat.conversation_id)
    assert [(m.role, m.status) for m in stored.messages] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ]
    assert sorted(m.status for m in stored.tree) == ["complete", "complete", "error"]
    assert stored.branch(stored.messages[-1].id) == (2, 2)


def test_a_fork_copies_one_branch_into_a_new_conversation(history: History):
    chat = ChatLog(Conversation(system="terse"), history)
    exchange(chat, "q", "a1")
    chat.drop_last_reply()
    chat.finish_reply(chat.start_reply(), done("a2"))
    cid = chat.conversation_id
    new = history.fork(cid, chat.leaf)
    forked = history.get(new)
    assert [m.content for m in forked.messages] == ["q", "a2"] and len(forked.tree) == 2
    assert forked.system == "terse" and forked.title.endswith("(fork)")
    assert len(history.get(cid).tree) == 3  # the original keeps every branch


def test_a_fork_keeps_a_replys_token_lens_candidates(history: History):
    """Issue 43 point 4: the candidates saved with a reply (the lens was on) are copied with
    it, as its text is; a reply without them stays without."""
    chat = ChatLog(Conversation(), history)
    exchange(chat, "q", "plain")
    chat.add_user("again")
    turn = chat.start_reply()
    hi = Candidate(5, b"Hi", "Hi", -0.1, 0.9)
    yo = Candidate(6, b"Yo", "Yo", -2.3, 0.0, cut="top-k")
    turn.append_candidates(TokenCandidates(0, hi, (hi, yo)))
    chat.finish_reply(turn, done("Hi"))
    cid = chat.conversation_id
    saved = history.get(cid).messages[-1].logprobs
    assert saved is not None and saved["content"][0]["top_logprobs"][1]["cut"] == "top-k"
    forked = history.get(history.fork(cid, chat.leaf))
    assert [m.content for m in forked.messages] == ["q", "plain", "again", "Hi"]
    assert [m.logprobs for m in forked.messages] == [None, None, None, saved]


def test_another_writers_turn_on_another_branch_is_not_taken_in(history: History):
    chat = ChatLog(Conversation(), history)
    exchange(chat, "q", "a")
    cid = chat.conversation_id
    q = history.get(cid).messages[0].id
    other = ChatLog.open(history, cid)
    other.take_user(q)
    exchange(other, "q edited", "a edited")
    assert chat.take_in(history.messages_after(cid, chat.seen)) == []
    assert [t.content for t in chat.conversation.turns] == ["q", "a"]
    other2 = ChatLog.open(history, cid)  # the stored branch is the edited one now
    exchange(other2, "more", "more answer")
    taken = chat.take_in(history.messages_after(cid, chat.seen))
    assert taken == []  # still another branch than this chat's


def _old_database(path: Path) -> None:
    """A history written by the schema before the tree (migrations 1-3), with stopped,
    error, interrupted and cut replies and an error followed by a new prompt."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied TEXT NOT NULL)"
    )
    for version, script in enumerate(MIGRATIONS[:3], start=1):
        for statement in statements(script):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (?, 'then')", (version,))
    t = "2026-01-01T00:00:00Z"
    for cid in (1, 2):
        conn.execute(
            "INSERT INTO conversations(id, title, params, created, updated) VALUES (?, ?, "
            "'{}', ?, ?)",
            (cid, f"chat {cid}", t, t),
        )
    rows = [
        (1, "user", "hello", "complete", None),
        (1, "assistant", "hi th", "stopped", None),
        (2, "user", "other chat", "complete", None),
        (1, "user", "and the ocean?", "complete", None),
        (1, "assistant", "", "error", "boom"),
        (1, "user", "again", "complete", None),
        (1, "assistant", "part", "interrupted", "dropped"),
        (2, "assistant", "cut reply", "cut", None),
    ]
    for cid, role, content, status, error in rows:
        conn.execute(
            "INSERT INTO messages(conversation_id, role, content, status, error, created, updated) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (cid, role, content, status, error, t, t),
        )
    conn.commit()
    conn.close()


def test_the_migration_keeps_every_message_of_an_older_database_as_one_branch(tmp_path: Path):
    path = tmp_path / "history.db"
    _old_database(path)
    with History(path) as history:
        one, two = history.get(1), history.get(2)
        assert [(m.content, m.status, m.error) for m in one.messages] == [
            ("hello", "complete", None),
            ("hi th", "stopped", None),
            ("and the ocean?", "complete", None),
            ("", "error", "boom"),
            ("again", "complete", None),
            ("part", "interrupted", "dropped"),
        ]
        assert [m.content for m in two.messages] == ["other chat", "cut reply"]
        assert len(one.tree) == 6 and len(two.tree) == 2
        assert all(one.branch(m.id) == (1, 1) for m in one.messages)
        assert [m.parent_id for m in one.messages] == [None] + [m.id for m in one.messages[:-1]]
        assert [h.conversation_id for h in history.search("ocean")] == [1]
        # What the model is sent when it continues: as before the migration.
        chat = ChatLog.open(history, 1)
        assert [t.content for t in chat.conversation.turns] == [
            "hello",
            "hi th",
            "and the ocean?",
            "again",
            "part",
        ]
        exchange(chat, "next", "answer")
        assert [m.content for m in history.get(1).messages][-3:] == ["part", "next", "answer"]
