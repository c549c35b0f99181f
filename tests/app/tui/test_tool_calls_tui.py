"""Tool calls in the chat: each call shows its tool and arguments and waits for the user's yes
(Ctrl+Y once, Ctrl+E for this conversation, Ctrl+A always, or deny with Esc; keys that ordinary
typing never produces, taken only once the question was seen); a running call is cancelled with Esc;
results are folded blocks, saved, and sent to the model, which then answers again. A real Textual
app (Pilot) on a real SQLite file; the recording backend scripts the calls and a small in-test tool
box stands in for engine/tools (the MCP path is tested with a real server in tests/engine/tools and
through `vibechat run`)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from fakes import RecordingBackend, send, settle
from helpers import answer, wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.tool_block import ToolCallBlock
from vibechat.app.tui.screens.tool_approval import ToolApprovalScreen
from vibechat.engine.chat.history import History
from vibechat.engine.chat.tool_turns import DENIED
from vibechat.engine.tools.approval import ToolApproval
from vibechat.engine.tools.results import ToolResult
from vibechat.engine.turns.tool_calls import ToolCall, ToolSpec

SIZE = (110, 36)
CLOCK = ToolSpec("clock", "What time it is [bold]now[/bold]", server="time", tool="now")
SLOW = ToolSpec("slow", "Takes a while", server="util", tool="slow")


class Box:
    def __init__(self) -> None:
        self.ran: list[str] = []
        self.release = threading.Event()

    def specs(self):
        return [CLOCK, SLOW]

    def run(self, call, spec, cancel):
        self.ran.append(call.id)
        if spec is SLOW:
            cancel.wait(30)
            return ToolResult("The user cancelled the call.", True)
        return ToolResult("\x1b]52;c;aGk=\x07It is [red]noon[/red].")


def Policy(always=()) -> ToolApproval:
    return ToolApproval(always=always)


def make(tmp_path: Path, backend: RecordingBackend, box: Box, policy: Policy):
    return create_app(
        backend,
        blink=False,
        history=History(tmp_path / "history.db"),
        tools=box,
        tool_policy=policy,
    )


async def test_a_call_waits_for_a_yes_then_runs_and_the_model_answers_with_its_result(
    tmp_path: Path,
):
    backend, box, policy = RecordingBackend(reply="It is noon."), Box(), Policy()
    backend.tool_script = [
        [ToolCall("c1", "clock", '{"zone": "UTC"}')],
        [ToolCall("c2", "clock", "{}")],
        [ToolCall("c3", "clock", "{}")],
    ]
    app = make(tmp_path, backend, box, policy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "what time is it?", wait=False)
        await wait_for(pilot, lambda: isinstance(app.screen, ToolApprovalScreen), "the question")
        assert box.ran == []  # nothing runs without a yes
        shown = " ".join(str(w.render()) for w in app.screen.query("Static"))
        assert (
            "time/now" in shown and '"zone": "UTC"' in shown and "[bold]now[/bold]" in shown
        )  # never markup
        first = app.screen
        await answer(pilot, "ctrl+y")
        # c2 came next (the model asked again): asked again, allowed for this conversation. (The
        # reply waits on that question: a settle() here would wait out its bound.)
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, ToolApprovalScreen) and app.screen is not first,
            "the second question",
        )
        assert box.ran == ["c1"]
        await answer(pilot, "ctrl+e")
        await settle(pilot)
        assert box.ran == ["c1", "c2", "c3"]  # c3: allowed in this conversation, not asked
        blocks = list(app.query(ToolCallBlock))
        assert (
            len(blocks) == 3
            and "\x1b" not in blocks[0].text
            and "[red]noon[/red]" in blocks[0].text
        )
        assert app.chat.messages()[-1].text == "It is noon."
        sent = backend.requests[-1][0]
        assert [m.role for m in sent] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
        ]
        stored = app.history.get(app.session.chat.conversation_id)
        assert [m.role for m in stored.messages][-2:] == ["tool", "assistant"]
    # Reopened: the calls and their results are there, folded, and sent to the model again.
    again = make(tmp_path, RecordingBackend(reply="ok"), Box(), Policy())
    async with again.run_test(size=SIZE) as pilot:
        await settle(pilot)
        again.chats.open_conversation(stored.id)
        await wait_for(pilot, lambda: len(again.query(ToolCallBlock)) == 3, "the reopened calls")
        await wait_for(pilot, lambda: again.sidebar.current == stored.id, "the conversation opened")
        await settle(pilot)
        reopened = list(again.query(ToolCallBlock))
        assert reopened[0].tool == "time/now" and '"zone": "UTC"' in reopened[0].call.arguments
        assert [t.role for t in again.session.conversation.turns][:3] == [
            "user",
            "assistant",
            "tool",
        ]


async def test_esc_denies_and_the_model_is_told_and_always_allow_is_kept(tmp_path: Path):
    backend, box, policy = RecordingBackend(reply="Alright."), Box(), Policy()
    backend.tool_script = [[ToolCall("c1", "clock", "{}")]]
    app = make(tmp_path, backend, box, policy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "time?", wait=False)
        await wait_for(pilot, lambda: isinstance(app.screen, ToolApprovalScreen), "the question")
        await answer(pilot, "escape")
        await settle(pilot)
        assert box.ran == [] and backend.requests[-1][0][-1].content == DENIED
        backend.tool_script = [[ToolCall("c2", "clock", "{}")]]
        await send(pilot, "time, really?", wait=False)
        await wait_for(pilot, lambda: isinstance(app.screen, ToolApprovalScreen), "the question")
        await answer(pilot, "ctrl+a")
        await settle(pilot)
        assert box.ran == ["c2"] and policy.always == ("time/now",)
        assert 'allowed_tools = ["time/now"]' in app.config.path.read_text()  # saved for good


async def test_esc_cancels_a_running_call_and_no_reply_follows(tmp_path: Path):
    backend, box, policy = RecordingBackend(reply="never"), Box(), Policy(always=["util/slow"])
    backend.tool_script = [[ToolCall("c1", "slow", "{}"), ToolCall("c2", "clock", "{}")]]
    app = make(tmp_path, backend, box, policy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "go slow", wait=False)
        await wait_for(
            pilot, lambda: box.ran == ["c1"] and app.tool_rounds.active, "the slow call running"
        )
        app.prompt_input.focus()
        await pilot.press("escape")
        await settle(pilot)
        assert not app.tool_rounds.active and not app.generating
        assert len(backend.requests) == 1  # no reply after a stop
        blocks = list(app.query(ToolCallBlock))
        assert "cancelled" in blocks[0].text and blocks[1].text.startswith("Not run")
        stored = app.history.get(app.session.chat.conversation_id)
        assert [m.role for m in stored.messages] == [
            "user",
            "assistant",
            "tool",
            "tool",
        ]  # every call answered


async def test_regenerating_the_answer_after_tool_results_keeps_the_results_and_runs_nothing_again(
    tmp_path: Path,
):
    backend, box, policy = RecordingBackend(reply="It is noon."), Box(), Policy(always=["time/now"])
    backend.tool_script = [[ToolCall("c1", "clock", "{}")]]
    app = make(tmp_path, backend, box, policy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "time?")
        await settle(pilot)
        backend.reply = "Noon, exactly."
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert box.ran == ["c1"] and app.chat.messages()[-1].text == "Noon, exactly."
        assert [m.role for m in backend.requests[-1][0]] == ["user", "assistant", "tool"]
        assert app.chat.messages()[-1].branch == (2, 2)


async def test_a_model_whose_template_has_no_tools_is_said_once_and_one_that_has_them_is_not(
    tmp_path: Path,
):
    from dataclasses import replace

    from fakes import INFO
    from helpers import notices

    for info, said in (
        (replace(INFO, tool_calls=""), True),
        (replace(INFO, tool_calls="hermes"), False),
    ):
        app = make(tmp_path, RecordingBackend(info=info), Box(), Policy())
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await wait_for(
                pilot,
                lambda app=app: app.tool_rounds.specs and app.state.model_ready,
                "tools and model",
            )
            await settle(pilot)
            told = [n for n in notices(app) if "no tool support" in n]
            assert len(told) == (1 if said else 0), notices(app)


async def test_a_new_chat_while_a_call_waits_answers_every_call_of_the_conversation_it_leaves(
    tmp_path: Path,
):
    backend, box, policy = RecordingBackend(reply="never"), Box(), Policy()
    backend.tool_script = [[ToolCall("c1", "clock", "{}"), ToolCall("c2", "clock", "{}")]]
    app = make(tmp_path, backend, box, policy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "time?", wait=False)
        await wait_for(pilot, lambda: isinstance(app.screen, ToolApprovalScreen), "the question")
        left = app.session.chat.conversation_id
        app.pop_screen()  # the question goes unanswered: the user starts a new chat
        await app.action_new_conversation()
        await settle(pilot)
        stored = app.history.get(left)
        assert [m.role for m in stored.messages] == ["user", "assistant", "tool", "tool"]
        assert all(m.content.startswith("Not run") for m in stored.messages[2:]) and box.ran == []


async def test_a_result_is_folded_to_its_first_line_and_enter_opens_it(tmp_path: Path):
    class Lines(Box):
        def run(self, call, spec, cancel):
            return ToolResult("first line\nsecond line\nthird line")

    backend, policy = RecordingBackend(reply="ok"), Policy(always=["time/now"])
    backend.tool_script = [[ToolCall("c1", "clock", "{}")]]
    app = make(tmp_path, backend, Lines(), policy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "time?")
        await settle(pilot)
        block = app.query_one(ToolCallBlock)
        shown = lambda: str(block.query_one(".tool--result").render())  # noqa: E731
        assert "first line" in shown() and "second line" not in shown() and "3 lines" in shown()
        block.focus()
        await pilot.press("enter")
        assert "second line" in shown() and "third line" in shown()


async def test_quitting_while_a_call_runs_cancels_it(tmp_path: Path):
    """The exit waits for the worker threads: a running call is cancelled at quit, so the chat
    never waits out the tool's timeout (a server's call could take up to tool_timeout, 60 s)."""
    cancelled: list[bool] = []

    class Slow(Box):
        def run(self, call, spec, cancel):
            self.ran.append(call.id)
            cancelled.append(cancel.wait(30))
            return ToolResult("The user cancelled the call.", True)

    backend, box = RecordingBackend(reply="never"), Slow()
    backend.tool_script = [[ToolCall("c1", "slow", "{}")]]
    app = make(tmp_path, backend, box, Policy(always=["util/slow"]))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "go slow", wait=False)
        await wait_for(
            pilot, lambda: box.ran == ["c1"] and app.tool_rounds.active, "the slow call running"
        )
        await pilot.press("ctrl+q")
    # The tool's thread wakes on its own time: run_test returns without waiting for thread
    # workers (the chat's process does, at its exit). Waiting here for its answer, well under
    # the 30 s it would wait uncancelled, keeps the proof and loses the race.
    deadline = time.monotonic() + 10
    while not cancelled and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    # cancelled at quit, not left to time out
    assert cancelled == [True]


async def test_too_deep_arguments_are_one_result_the_chat_stays_up_and_the_conversation_reopens(
    stub, tmp_path: Path
):
    from openai_stub import fragments

    deep = '{"a":' + "[" * 20_000 + "]" * 20_000 + "}"  # 40 KB: under the length bound
    stub.reply = "Sorry."
    stub.tool_deltas = fragments(0, "call_1", "clock", deep, size=4000)
    box = Box()
    app = make(tmp_path, stub.backend(), box, Policy())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "what time is it?", wait=False)
        await wait_for(
            pilot,
            lambda: not app.generating and app.chat.messages()[-1].text == "Sorry.",
            "the answer",
        )
        assert box.ran == [] and not isinstance(app.screen, ToolApprovalScreen)
        [block] = app.query(ToolCallBlock)
        assert "too deeply nested" in block.text
        assert "too deeply nested" in stub.last_body["messages"][-1]["content"]  # the model is told
        conversation = app.session.chat.conversation_id
    # Reopened, the conversation shows the call and goes on.
    stub.tool_deltas = []
    stub.reply = "Still here."
    again = make(tmp_path, stub.backend(), Box(), Policy())
    async with again.run_test(size=SIZE) as pilot:
        await settle(pilot)
        again.chats.open_conversation(conversation)
        await wait_for(pilot, lambda: len(again.query(ToolCallBlock)) == 1, "the reopened call")
        await wait_for(
            pilot, lambda: again.sidebar.current == conversation, "the conversation opened"
        )
        await settle(pilot)
        await send(pilot, "And now?")
        await wait_for(
            pilot, lambda: again.chat.messages()[-1].text == "Still here.", "the next answer"
        )
        roles = [m["role"] for m in stub.last_body["messages"] if m["role"] != "system"]
        assert roles[-3:] == ["tool", "assistant", "user"]


async def test_a_right_to_left_override_in_a_result_is_not_shown(tmp_path: Path):
    class Reversed(Box):
        def run(self, call, spec, cancel):
            return ToolResult("invoice_\u202efdp.exe is ready")

    backend, policy = RecordingBackend(reply="ok"), Policy(always=["time/now"])
    backend.tool_script = [[ToolCall("c1", "clock", "{}")]]
    app = make(tmp_path, backend, Reversed(), policy)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "time?")
        await settle(pilot)
        block = app.query_one(ToolCallBlock)
        shown = str(block.query_one(".tool--result").render())
        assert "invoice_fdp.exe is ready" in shown and "\u202e" not in shown
