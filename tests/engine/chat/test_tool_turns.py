"""A reply that calls tools (engine/chat/tool_turns.py): each call allowed or denied, its
result saved after the reply that asked, the model answering again with the results, the
rounds bounded; the tree keeps it all and a reopened conversation sends it again. A real
SQLite file; the recording backend scripts the calls (a unit test: the real MCP server, the
stub server's streamed calls and the local model are tested where they live)."""

from __future__ import annotations

import threading

from fakes import RecordingBackend
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.chat.conversation import Conversation
from vibechat.engine.chat.history import History
from vibechat.engine.chat.session import ChatSession
from vibechat.engine.chat.tool_turns import DENIED, answer_with_tools
from vibechat.engine.tools.results import ToolResult
from vibechat.engine.turns.tool_calls import ToolCall, ToolSpec

CLOCK = ToolSpec("clock", "The time", server="time", tool="now")
ECHO = ToolSpec(
    "echo",
    "Echo text",
    {"type": "object", "properties": {"text": {"type": "string"}}},
    server="util",
    tool="echo",
)


class Box:
    def __init__(self) -> None:
        self.ran: list[ToolCall] = []

    def specs(self):
        return [CLOCK, ECHO]

    def run(self, call: ToolCall, spec: ToolSpec, cancel: threading.Event) -> ToolResult:
        self.ran.append(call)
        return ToolResult(f"{spec.qualified} says {call.parsed_arguments()}")


def session_with(history: History, backend: RecordingBackend) -> ChatSession:
    session = ChatSession(backend, ChatLog(Conversation(), history))
    session.chat.add_user("what time is it?")
    return session


def test_allowed_calls_run_denied_ones_are_told_and_everything_is_saved_in_order(history: History):
    backend = RecordingBackend(reply="It is noon.")
    backend.tool_script = [
        [
            ToolCall("c1", "clock", "{}"),
            ToolCall("c2", "echo", '{"text": "hi"}'),
            ToolCall("c3", "nope", "{}"),
            ToolCall("c4", "echo", "not json"),
        ]
    ]
    session, box = session_with(history, backend), Box()
    calls: list[tuple[str, bool]] = []
    answer = answer_with_tools(
        session,
        box,
        lambda call, spec: spec.name != "echo" or call.id == "c4",
        rounds=4,
        on_call=lambda call, spec, allowed, outcome: calls.append((call.id, allowed)),
    )
    assert answer.text == "It is noon."
    assert [c.id for c in box.ran] == ["c1"]  # c2 denied, c3 unknown, c4's arguments do not parse
    assert calls == [("c1", True), ("c2", False), ("c3", False), ("c4", True)]
    sent = backend.requests[-1][0]  # the second round sees the call and every result
    assert [m.role for m in sent] == ["user", "assistant", "tool", "tool", "tool", "tool"]
    assert [m.tool_call_id for m in sent[2:]] == ["c1", "c2", "c3", "c4"]
    assert [m.name for m in sent[2:]] == [
        "clock",
        "echo",
        "nope",
        "echo",
    ]  # as the model called them
    assert (
        sent[3].content == DENIED
        and "no tool named" in sent[4].content
        and "not valid JSON" in sent[5].content
    )
    assert backend.offered[0][0] == (CLOCK, ECHO)

    stored = history.get(session.chat.conversation_id)
    assert [m.role for m in stored.messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "tool",
        "assistant",
    ]
    assert [c.id for c in stored.messages[1].tool_calls] == ["c1", "c2", "c3", "c4"]
    assert stored.messages[2].tool_name == "time/now" and stored.messages[2].tool_call_id == "c1"
    assert "tool_calls" in stored.to_dict()["messages"][1]
    assert (
        "Tool result: time/now" in stored.to_markdown() and "Called `clock`" in stored.to_markdown()
    )
    # Reopened: the model is sent the calls and results again.
    again = ChatLog.open(history, session.chat.conversation_id)
    assert again.conversation.turns == list(sent) + [again.conversation.turns[-1]]
    assert history.search("noon")
    assert [h.role for h in history.search("says")] == ["tool"]  # a tool's result is searched too


def test_the_rounds_are_bounded_and_the_last_round_may_call_none(history: History):
    backend = RecordingBackend(reply="Done.")
    backend.tool_script = [[ToolCall(f"c{i}", "clock", "{}")] for i in range(10)]
    session, box = session_with(history, backend), Box()
    answer = answer_with_tools(
        session, box, lambda call, spec: True, rounds=2, tool_choice="required"
    )
    assert answer.text == "Done." and len(box.ran) == 2
    assert [choice for _tools, choice in backend.offered] == ["required", "auto", "none"]
    assert [len(tools) for tools, _choice in backend.offered] == [2, 2, 2]


def test_tool_choice_none_offers_nothing(history: History):
    backend = RecordingBackend(reply="No tools.")
    backend.tool_script = [[ToolCall("c1", "clock", "{}")]]
    session = session_with(history, backend)
    answer = answer_with_tools(
        session, Box(), lambda call, spec: True, rounds=3, tool_choice="none"
    )
    assert answer.text == "No tools." and backend.offered == [((), "auto")]


def test_a_stop_while_a_call_runs_cancels_it_and_every_call_is_still_answered(history: History):
    backend = RecordingBackend(reply="never")
    backend.tool_script = [[ToolCall("c1", "echo", "{}"), ToolCall("c2", "clock", "{}")]]
    stop = threading.Event()

    class Slow(Box):
        def run(self, call, spec, cancel):
            stop.set()  # Ctrl-C arrives while the call runs
            assert cancel.wait(30), "the call was not cancelled"
            return ToolResult("cancelled", True)

    session = session_with(history, backend)
    answer_with_tools(
        session, Slow(), lambda call, spec: True, rounds=3, stop_requested=stop.is_set
    )
    stored = history.get(session.chat.conversation_id)
    assert [m.content for m in stored.messages[2:]] == [
        "cancelled",
        "Not run: the user stopped the reply.",
    ]
    assert len(backend.requests) == 1  # no reply after a stop
