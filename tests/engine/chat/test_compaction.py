"""Compaction and the context policy (issue 45), driven without Textual: a summary starts a
new branch and the original stays (a real SQLite file), a summary that is empty or not
shorter replaces nothing, pins are saved and never left out, and the ``stop`` and ``compact``
policies. The model's words do not matter here: a recording double writes a fixed summary
(the real starter's runs are in tests/engine/llama/test_context_policy.py)."""

from __future__ import annotations

import dataclasses

import pytest

from fakes import INFO, RecordingBackend
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.compaction import (
    SUMMARY_INTRO,
    CompactionError,
    CompactionNotice,
    compaction_point,
)
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.chat.session import ChatSession
from vibechat.engine.errors import ContextOverflowError
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage

PARAMS = SamplingParams(temperature=0.0, max_tokens=16, seed=1)
LONG = "The document says the launch code is 7-4-1 and the meeting moved to Tuesday. " * 4
# A prompt that takes the conversation past a 230-token context (the double counts words).
LAST = f"And the code? {LONG}"


def chatted(history: History | None, turns: int = 3, reply: str = "Noted.") -> ChatSession:
    """A session whose conversation has ``turns`` exchanges, saved in ``history``."""
    backend = RecordingBackend(reply)
    session = ChatSession(
        backend, ChatLog(Conversation(system="Be brief.", params=PARAMS), history)
    )
    session.load()
    for i in range(turns):
        session.chat.add_user(f"Prompt {i}: {LONG}")
        session.answer()
    return session


def test_compact_starts_a_new_branch_and_keeps_the_original(history):
    session = chatted(history)
    original = history.get(session.chat.conversation_id).messages
    session.backend.reply = "Launch code 7-4-1; meeting Tuesday."
    compaction = session.compact("keep the numbers")
    # The model was asked with the user's instructions after the conversation.
    asked = session.backend.requests[-1][0]
    assert asked[-1].role == "user" and asked[-1].content.endswith("keep the numbers")
    assert [m.content for m in asked[1:-1]] == [t.content for t in session.conversation.turns]
    ids = session.accept_compaction(compaction, "Launch code 7-4-1; meeting Tuesday (edited).")
    stored = history.get(session.chat.conversation_id)
    # The new branch: the summary alone (a sibling of the first message), marked.
    assert [m.id for m in stored.messages] == ids and len(ids) == 1
    summary = stored.messages[0]
    assert summary.is_summary and summary.parent_id is None
    assert summary.summary_of == original[-1].id
    assert summary.content == "Launch code 7-4-1; meeting Tuesday (edited)."
    # The original branch is untouched, one switch away; search finds both.
    assert [m.id for m in stored.tree[: len(original)]] == [m.id for m in original]
    assert history.get(stored.id, leaf=original[-1].id).messages == original
    hits = {hit.message_id for hit in history.search("Tuesday")}
    assert summary.id in hits and original[0].id in hits
    # The model reads the summary after the system prompt; the next prompt follows it.
    session.chat.add_user("What is the code?")
    session.answer()
    sent = session.backend.requests[-1][0]
    assert sent[0].role == "system" and sent[0].content.startswith("Be brief.")
    assert f"{SUMMARY_INTRO}\n\nLaunch code 7-4-1" in sent[0].content
    assert [m.content for m in sent[1:]] == ["What is the code?"]
    # Opened again, it goes on from the summary.
    reopened = ChatLog.open(history, stored.id)
    assert reopened.conversation.summary == summary.content
    # The Markdown export marks the summary and what it replaced.
    markdown = history.get(stored.id).to_markdown()
    replaced = f"messages 1–6 of the original branch (up to message #{original[-1].id})"
    assert f"## Summary (compacted: it replaces {replaced})" in markdown


def test_compact_up_to_a_message_keeps_what_follows(history):
    session = chatted(history)
    turns = session.conversation.turns
    # Up to the second prompt: its reply goes with it (whole turns).
    assert compaction_point(turns, 2) == 4
    session.backend.reply = "Short: the launch code."
    ids = session.accept_compaction(session.compact(upto=2))
    stored = history.get(session.chat.conversation_id)
    assert [m.id for m in stored.messages] == ids and len(ids) == 3
    assert [m.role for m in stored.messages] == ["user", "user", "assistant"]
    assert stored.messages[1].content.startswith("Prompt 2:")
    assert [t.content[:8] for t in session.conversation.turns] == ["Prompt 2", "Noted."]


def test_a_fork_keeps_the_summary_its_pins_and_what_it_replaces(history):
    """Forking a compacted branch: the copy starts with a summary still (not an ordinary
    prompt), names the copy of the original branch it replaces, keeps the pins, and the
    fork goes on from the summary as the original did."""
    session = chatted(history)
    original = history.get(session.chat.conversation_id).messages
    session.backend.reply = "Short: the launch code."
    ids = session.accept_compaction(session.compact(upto=2))
    history.set_pinned(ids[1], True)
    cid = session.chat.conversation_id
    fork = history.get(history.fork(cid, ids[-1]))
    summary = fork.messages[0]
    assert summary.content == "Short: the launch code." and summary.is_summary
    assert [m.pinned for m in fork.messages] == [False, True, False]
    # What it replaces is in the fork too, one switch away, as in the original.
    replaced = history.get(fork.id, leaf=summary.summary_of).messages
    assert [m.content for m in replaced] == [m.content for m in original[:4]]
    assert all(m.id not in {o.id for o in original} for m in replaced)
    assert "it replaces messages 1–4 of the original branch" in fork.to_markdown()
    # Opened, the fork goes on from the summary (the model reads it as one).
    reopened = ChatLog.open(history, fork.id)
    assert reopened.conversation.summary == summary.content
    assert [t.content[:8] for t in reopened.conversation.turns] == ["Prompt 2", "Noted."]


def test_a_fork_of_a_summary_of_a_summary_keeps_both(history):
    session = chatted(history)
    session.backend.reply = "Short: the launch code."
    first = session.accept_compaction(session.compact(upto=2))
    session.chat.add_user(f"Prompt 3: {LONG}")
    session.answer()
    session.backend.reply = "Shorter: the code."
    second = session.accept_compaction(session.compact())
    fork = history.get(history.fork(session.chat.conversation_id, second[-1]))
    assert [m.content for m in fork.messages] == ["Shorter: the code."]
    middle = history.get(fork.id, leaf=fork.messages[0].summary_of).messages
    assert middle[0].content == "Short: the launch code." and middle[0].is_summary
    assert (
        len(middle) == len(history.get(session.chat.conversation_id, leaf=first[-1]).messages) + 2
    )
    oldest = history.get(fork.id, leaf=middle[0].summary_of).messages
    assert [m.content[:8] for m in oldest] == ["Prompt 0", "Noted.", "Prompt 1", "Noted."]


@pytest.mark.parametrize("summary", ["", "   \n", LONG * 10, "Hi!", "Sure, here you go:"])
def test_a_summary_empty_or_not_shorter_replaces_nothing(history, summary):
    """Empty, not shorter, or a line of the model's own that shares no word with the
    conversation (what a base model such as the starter writes): one line, nothing replaced."""
    session = chatted(history)
    before = history.get(session.chat.conversation_id)
    session.backend.reply = summary
    with pytest.raises(CompactionError) as caught:
        session.compact()
    assert "\n" not in str(caught.value) and "nothing was replaced" in str(caught.value)
    after = history.get(session.chat.conversation_id)
    assert after.tree == before.tree and session.conversation.summary is None


def test_an_edited_summary_is_checked_again(history):
    session = chatted(history)
    session.backend.reply = "Short: the launch code."
    compaction = session.compact()
    with pytest.raises(CompactionError):
        session.accept_compaction(compaction, " ")
    assert len(history.get(session.chat.conversation_id).tree) == 6


def test_pins_are_saved_and_sent(history):
    session = chatted(history)
    assert session.chat.set_pinned(0, True)
    reopened = ChatLog.open(history, session.chat.conversation_id)
    assert [t.pinned for t in reopened.conversation.turns] == [
        True,
        False,
        False,
        False,
        False,
        False,
    ]
    stored = history.get(session.chat.conversation_id)
    assert stored.messages[0].pinned and "## User · pinned" in stored.to_markdown()
    session.chat.set_pinned(0, False)
    assert not history.get(session.chat.conversation_id).messages[0].pinned


def small(context_size: int) -> RecordingBackend:
    return RecordingBackend("Noted.", info=dataclasses.replace(INFO, context_size=context_size))


def test_stop_refuses_a_prompt_that_would_overflow(history):
    session = ChatSession(small(150), ChatLog(Conversation(params=PARAMS), history))
    session.load()
    session.context_policy = "stop"
    session.chat.add_user(LONG * 3)
    with pytest.raises(ContextOverflowError) as caught:
        session.answer()
    line = str(caught.value)
    assert "\n" not in line and "/compact" in line and "trim" in line and "compact" in line
    # Refused before the model was asked; the prompt stays saved.
    assert session.backend.requests == []
    assert history.get(session.chat.conversation_id).messages[0].content == LONG * 3


def test_compact_policy_summarises_before_the_reply(history):
    backend = small(230)
    session = ChatSession(backend, ChatLog(Conversation(params=PARAMS), history))
    session.load()
    session.context_policy = "compact"
    for i in range(3):
        session.chat.add_user(f"Prompt {i}: {LONG}")
        session.answer()
    original = history.get(session.chat.conversation_id).messages
    notices: list[CompactionNotice] = []
    session.chat.add_user(LAST)
    answer = session.answer(on_compact=notices.append)
    assert notices and notices[0].summary == "Noted." and notices[0].replaced == 6
    stored = history.get(session.chat.conversation_id)
    # The reply went on in the new branch: summary, the prompt, the reply.
    assert [(m.role, m.content) for m in stored.messages[1:]] == [
        ("user", LAST),
        ("assistant", answer.text),
    ]
    assert stored.messages[0].summary_of == original[-1].id
    assert session.compacted_from == {
        "message_id": original[-1].id,
        "summary_id": stored.messages[0].id,
        "replaced_messages": 6,
    }
    # The original branch keeps its prompt (unanswered there), nothing else changed.
    first = history.get(stored.id, leaf=original[-1].id + 1).messages
    assert [m.id for m in first[:-1]] == [m.id for m in original]
    assert first[-1].content == LAST
    # The reply was asked with the summary in place of the old turns.
    sent = backend.requests[-1][0]
    assert sent[0].role == "system" and [m.content for m in sent[1:]] == [LAST]


def test_compact_policy_that_cannot_summarise_says_so_and_trims(history):
    backend = small(230)
    session = ChatSession(backend, ChatLog(Conversation(params=PARAMS), history))
    session.load()
    for i in range(3):
        session.chat.add_user(f"Prompt {i}: {LONG}")
        session.answer()
    session.context_policy = "compact"
    backend.reply = ""
    notices: list[CompactionNotice] = []
    session.chat.add_user(LAST)
    session.answer(on_compact=notices.append)
    assert len(notices) == 1 and "empty summary" in notices[0].problem
    assert "left out" in notices[0].problem and "\n" not in notices[0].problem
    assert all(not m.is_summary for m in history.get(session.chat.conversation_id).tree)


def test_nothing_to_compact_is_one_line():
    session = ChatSession(RecordingBackend(), ChatLog(Conversation()))
    session.load()
    with pytest.raises(CompactionError, match="nothing to compact"):
        session.compact()


def test_an_unsaved_conversation_compacts_in_memory():
    session = chatted(None)
    session.backend.reply = "Short: the launch code."
    assert session.accept_compaction(session.compact()) == []
    assert (
        session.conversation.summary == "Short: the launch code."
        and session.conversation.turns == []
    )


def test_pinned_message_stays_in_the_turn_it_belongs_to():
    turns = [ChatMessage("user", "a", pinned=True), ChatMessage("assistant", "b")]
    assert compaction_point(turns) == 2
