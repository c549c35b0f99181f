"""The context policy on the real starter model with a small context (issue 45): ``trim``
leaves out the oldest messages but never the system prompt or a pinned one, and names them;
``stop`` refuses in one line before anything is evaluated; ``compact`` summarises first, or,
the starter writing nothing useful, says so and trims. And the KV cache after a compaction: the
new branch's prefix is evaluated once and kept as a snapshot, and the original branch, reopened,
restores its own. A real SQLite file for the history."""

from __future__ import annotations

import pytest

from conftest import loaded_starter
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.compaction import Compaction, CompactionNotice
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.chat.session import ChatSession
from vibechat.engine.errors import ContextOverflowError
from vibechat.engine.llama import kv_snapshots
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage

pytestmark = pytest.mark.model

GREEDY = SamplingParams(temperature=0.0, max_tokens=16, seed=3)
FACT = "The lighthouse keeper is called Ada and the ferry leaves at nine from pier four. "


@pytest.fixture(scope="module")
def small(starter_path):
    """The starter with a 512-token context."""
    with loaded_starter(starter_path, context_size=512) as backend:
        yield backend


def long_turns(n: int) -> list[ChatMessage]:
    turns: list[ChatMessage] = []
    for i in range(n):
        turns += [
            ChatMessage("user", f"Note {i}: {FACT * 4}"),
            ChatMessage("assistant", f"Noted {i}. {FACT}"),
        ]
    return turns


def test_trim_never_leaves_out_the_system_prompt_or_a_pinned_message(small):
    system = ChatMessage("system", "You are terse.")
    turns = long_turns(8)
    turns[0] = ChatMessage("user", "Remember: the code word is heron.", pinned=True)
    messages = [system, *turns, ChatMessage("user", "What is the code word?")]
    assert small.count_tokens(messages) > 512
    tokens, left_out = small._prompt.fit(messages, GREEDY)
    assert left_out and 0 not in left_out and 1 not in left_out  # system, pinned
    kept = [m for i, m in enumerate(messages) if i not in left_out]
    assert len(tokens) == small.count_tokens(kept) and len(tokens) + 16 <= 512
    assert kept[:2] == [system, turns[0]] and kept[-1].content == "What is the code word?"
    # Whole turns, oldest first: the pinned prompt's reply goes, the turns after it.
    assert list(left_out) == list(range(2, 2 + len(left_out)))


def session_on(backend, history: History, policy: str) -> ChatSession:
    backend.reset()
    session = ChatSession(backend, ChatLog(Conversation(params=GREEDY), history))
    session.load()
    session.context_policy = policy
    chat = session.chat
    for message in long_turns(6):
        if message.role == "user":
            chat.add_user(message.content)
        else:
            from vibechat.engine.turns.backend import GenerationDone

            chat.finish_reply(chat.start_reply(), GenerationDone(message.content))
    chat.add_user("Who keeps the lighthouse?")
    assert backend.count_tokens(session.conversation.messages()) > 512 - 16
    return session


def test_stop_refuses_before_anything_is_evaluated(small, history):
    session = session_on(small, history, "stop")
    with pytest.raises(ContextOverflowError) as caught:
        session.answer()
    assert "\n" not in str(caught.value) and "context_policy" in str(caught.value)
    stored = history.get(session.chat.conversation_id).messages
    assert stored[-1].status == "error" and stored[-2].content == "Who keeps the lighthouse?"


def test_trim_names_the_left_out_turns(small, history):
    session = session_on(small, history, "trim")
    answer = session.answer()
    left_out = session.left_out_messages()
    assert left_out and len(left_out) == answer.done.stats.dropped_messages
    assert [item["index"] for item in left_out] == list(range(len(left_out)))
    assert all(item["id"] is not None for item in left_out)


def test_compact_summarises_or_says_why_not_and_answers(small, history):
    session = session_on(small, history, "compact")
    original = [m.id for m in history.get(session.chat.conversation_id).messages]
    notices: list[CompactionNotice] = []
    answer = session.answer(on_compact=notices.append)
    assert len(notices) == 1 and answer.done.stats.finish_reason != "cancelled"
    stored = history.get(session.chat.conversation_id)
    if notices[0].problem:
        # The starter wrote nothing useful: one line, nothing replaced, the prompt trimmed.
        assert "\n" not in notices[0].problem and not any(m.is_summary for m in stored.tree)
        assert answer.done.stats.dropped_messages > 0
    else:
        summary = stored.messages[0]
        assert summary.is_summary and summary.content == notices[0].summary
        assert [m.content for m in stored.messages[1:2]] == ["Who keeps the lighthouse?"]
        assert len(summary.content) < sum(len(m.content) for m in stored.tree[:12])
    # The original branch is untouched.
    assert [m.id for m in stored.tree[: len(original)]] == original


STORY = (
    "Here are my notes on the history of Rome, from its founding by Romulus to the fall of the "
    "western empire, with the kings, the republic, the Punic wars against Carthage, Caesar, "
    "Augustus and the emperors after him. "
) * 4


def test_after_a_compaction_each_branch_restores_its_own_snapshot(
    starter_path, history, monkeypatch
):
    monkeypatch.setattr(kv_snapshots, "MIN_TOKENS", 32)
    with loaded_starter(starter_path, context_size=2048) as backend:
        session = ChatSession(backend, ChatLog(Conversation(params=GREEDY), history))
        session.load()
        session.chat.add_user(STORY + "Who founded Rome?")
        session.answer()
        session.chat.add_user("And who defeated Hannibal?")
        session.answer()
        cid = session.chat.conversation_id
        original = history.get(cid).messages
        summary = "Notes on Rome: Romulus founded it; Scipio defeated Hannibal. " * 3
        replaced = sum(len(t.content) for t in session.conversation.turns)
        session.accept_compaction(Compaction(summary, len(session.conversation.turns), replaced))
        # Reopened on the new branch: its prefix is evaluated once and kept.
        assert session.rebuild_cache(session.generation) > 0
        backend.reset()
        session.chat.add_user("Who founded Rome?")
        on_new = session.answer().done.stats
        assert on_new.restored_tokens > 0
        assert on_new.prompt_tokens_evaluated < on_new.prompt_tokens
        # Back on the original branch: its own snapshot, not the new branch's prefix.
        session.open(ChatLog.from_stored(history.get(cid, leaf=original[-1].id), history))
        session.chat.add_user("And Carthage?")
        on_original = session.answer().done.stats
        assert on_original.restored_tokens > on_new.prompt_tokens
        assert on_original.prompt_tokens_evaluated < on_original.prompt_tokens // 4
