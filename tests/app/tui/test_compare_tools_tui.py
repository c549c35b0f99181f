"""Tool calls in a comparison (issue 44 point 5): both sides are offered the conversation's tools;
a side that ends with a call is saved with it, and its round runs through the chat's approval
(the question names the side; one question at a time: A's round first, then B's); after the
result the side continues alone in its column, saved on its own branch. A real Textual app
(Pilot) on a real SQLite file; ``PairedFake`` scripts the sides' calls and a small in-test tool
box stands in for engine/tools (as in test_tool_calls_tui.py)."""

from __future__ import annotations

import threading
from pathlib import Path

from fakes import PairedFake, send, settle
from helpers import answer, notices, wait_for
from vibechat.app.tui import create_app
from vibechat.app.tui.conversation.assistant_message import AssistantMessage
from vibechat.app.tui.conversation.compare_view import CompareView
from vibechat.app.tui.conversation.tool_block import ToolCallBlock
from vibechat.app.tui.screens.tool_approval import ToolApprovalScreen
from vibechat.engine.chat.history import History
from vibechat.engine.chat.tool_turns import DENIED
from vibechat.engine.tools.approval import ToolApproval
from vibechat.engine.tools.results import ToolResult
from vibechat.engine.turns.tool_calls import ToolCall, ToolSpec

SIZE = (120, 36)
CLOCK = ToolSpec("clock", "What time it is", server="time", tool="now")
# Each side ends asking for the clock.
BOTH_CALL = {"A": (ToolCall("a1", "clock", "{}"),), "B": (ToolCall("b1", "clock", "{}"),)}


class Box:
    """The tools on offer: one clock; what ran is recorded."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def specs(self):
        return [CLOCK]

    def run(self, call, spec, cancel):
        self.ran.append(call.id)
        return ToolResult(f"It is noon ({call.id}).")


def make(tmp_path: Path, backend: PairedFake, box: Box):
    return create_app(
        backend,
        blink=False,
        history=History(tmp_path / "history.db"),
        tools=box,
        tool_policy=ToolApproval(always=()),
    )


def title(app) -> str:
    return " ".join(str(w.render()) for w in app.screen.query(".approval--title"))


def asking(app) -> bool:
    """A tool question is up and drawn (its title composed: the screen is pushed before)."""
    return isinstance(app.screen, ToolApprovalScreen) and bool(title(app))


def column(app, side_index: int):
    view = list(app.chat.query(CompareView))[-1]
    return view.columns[side_index]


async def start(pilot) -> None:
    app = pilot.app
    await settle(pilot)
    await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
    await send(pilot, "/compare temperature=1.2")
    await send(pilot, "what time is it?", wait=False)


def branch(app, row: int) -> list:
    """The saved branch through message ``row``: each message's role and tool calls' ids."""
    history = app.history
    stored = history.get(app.session.chat.conversation_id, through=row)
    return [(m.role, tuple(c.id for c in m.tool_calls)) for m in stored.messages]


async def test_side_a_asks_by_name_and_a_denial_runs_nothing(tmp_path: Path):
    backend, box = PairedFake(), Box()
    backend.side_calls = {"A": (ToolCall("a1", "clock", "{}"),)}
    app = make(tmp_path, backend, box)
    async with app.run_test(size=SIZE) as pilot:
        await start(pilot)
        await wait_for(pilot, lambda: asking(app), "the question")
        # Both sides were offered the tools.
        ((a, b),) = backend.pairs
        assert a.tools == (CLOCK,) and b.tools == (CLOCK,)
        assert "Side A asks to run time/now" in title(app)
        await answer(pilot, "escape")
        await settle(pilot)
        assert box.ran == []
        blocks = list(column(app, 0).query(ToolCallBlock))
        assert len(blocks) == 1 and DENIED in blocks[0].text
        # The denial is the call's result; side A answers again, in its column.
        replies = list(column(app, 0).query(AssistantMessage))
        assert len(replies) == 2 and replies[1].text == "alpha words here"


async def test_an_approved_call_runs_and_its_side_continues_on_its_branch(tmp_path: Path):
    backend, box = PairedFake(), Box()
    backend.side_calls = {"B": (ToolCall("b1", "clock", "{}"),)}
    app = make(tmp_path, backend, box)
    # Where the history's branches are read: never on the event loop's thread.
    readers: list[str] = []
    get = app.history.get

    def recorded_get(*args, **kwargs):
        readers.append(threading.current_thread().name)
        return get(*args, **kwargs)

    app.history.get = recorded_get
    async with app.run_test(size=SIZE) as pilot:
        loop_thread = threading.current_thread().name
        await start(pilot)
        await wait_for(pilot, lambda: asking(app), "the question")
        assert "Side B asks to run time/now" in title(app) and box.ran == []
        await answer(pilot, "ctrl+y")
        await settle(pilot)
        assert box.ran == ["b1"]
        # B's column: its call's block, then its continuation (the call's result in view).
        assert len(list(column(app, 1).query(ToolCallBlock))) == 1
        replies = list(column(app, 1).query(AssistantMessage))
        assert len(replies) == 2 and replies[1].text == "alpha words here"
        sent = [m.role for m in backend.requests[-1][0]]
        assert sent[-3:] == ["user", "assistant", "tool"]
        assert backend.requests[-1][1].temperature == 1.2
        # B's branch was read to run its round, and A's to go back to: off the event loop.
        assert len(readers) >= 2 and loop_thread not in readers, readers
        app.history.get = get
        # Saved: B's reply with its call, the result and the continuation on B's branch; A's
        # branch untouched, and the chat goes on from A.
        run = app.comparisons.pending
        assert run is not None
        assert branch(app, run.rows["B"])[-3:] == [
            ("assistant", ("b1",)),
            ("tool", ()),
            ("assistant", ()),
        ]
        assert branch(app, run.rows["A"])[-1] == ("assistant", ())
        assert app.session.chat.leaf == run.rows["A"]


async def test_both_sides_calling_get_two_questions_one_after_the_other(tmp_path: Path):
    backend, box = PairedFake(), Box()
    backend.side_calls = BOTH_CALL
    app = make(tmp_path, backend, box)
    async with app.run_test(size=SIZE) as pilot:
        await start(pilot)
        await wait_for(pilot, lambda: asking(app), "A's question")
        first = app.screen
        assert "Side A asks" in title(app)
        await answer(pilot, "ctrl+y")
        await wait_for(
            pilot,
            lambda: asking(app) and app.screen is not first,
            "B's question",
        )
        # B asks once A's round and continuation are over.
        assert "Side B asks" in title(app) and box.ran == ["a1"]
        assert len(list(column(app, 0).query(AssistantMessage))) == 2
        await answer(pilot, "ctrl+y")
        await settle(pilot)
        assert box.ran == ["a1", "b1"]
        run = app.comparisons.pending
        assert run is not None
        for side, call in (("A", "a1"), ("B", "b1")):
            assert branch(app, run.rows[side])[-3:] == [
                ("assistant", (call,)),
                ("tool", ()),
                ("assistant", ()),
            ]
        # Back on A's branch: the conversation goes on from A's continuation.
        assert branch(app, app.session.chat.leaf) == branch(app, run.rows["A"])


async def test_stopping_at_a_sides_question_stops_its_round_and_the_rounds_to_come(tmp_path: Path):
    backend, box = PairedFake(), Box()
    backend.side_calls = BOTH_CALL
    app = make(tmp_path, backend, box)
    async with app.run_test(size=SIZE) as pilot:
        await start(pilot)
        await wait_for(pilot, lambda: asking(app), "A's question")
        asked = len(backend.requests)
        # The chat's stop (Esc in the chat, the palette's Stop) while A's question is up: its
        # call is not run even on a yes, and B's round does not follow.
        app.replies.stop()
        await answer(pilot, "ctrl+y")
        await settle(pilot)
        assert box.ran == [] and len(backend.requests) == asked
        assert not isinstance(app.screen, ToolApprovalScreen)
        assert app.comparisons.pending is not None and not app.state.generating


async def test_a_pick_after_a_sides_round_opens_its_branch_with_the_continuation(tmp_path: Path):
    backend, box = PairedFake(), Box()
    backend.side_calls = {"B": (ToolCall("b1", "clock", "{}"),)}
    app = make(tmp_path, backend, box)
    async with app.run_test(size=SIZE) as pilot:
        await start(pilot)
        await wait_for(pilot, lambda: asking(app), "the question")
        await answer(pilot, "ctrl+y")
        await settle(pilot)
        run = app.comparisons.pending
        assert run is not None
        app.comparisons.pick_column(run.order.index("B"))
        await wait_for(pilot, lambda: app.session.chat.leaf != run.rows["A"], "B's branch opened")
        await settle(pilot)
        assert branch(app, app.session.chat.leaf)[-3:] == [
            ("assistant", ("b1",)),
            ("tool", ()),
            ("assistant", ()),
        ]


async def test_a_chat_not_saved_says_side_bs_calls_are_not_run_and_runs_nothing():
    """--no-save keeps no side B branch to go on from: its call is not asked, not run, and a
    notice says why; side A's reply stands."""
    backend, box = PairedFake(), Box()
    backend.side_calls = {"B": (ToolCall("b1", "clock", "{}"),)}
    app = create_app(
        backend, blink=False, save=False, tools=box, tool_policy=ToolApproval(always=())
    )
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await start(pilot)
        await wait_for(
            pilot, lambda: any("not saved (--no-save)" in n for n in notices(app)), "the notice"
        )
        await settle(pilot)
        assert box.ran == [] and not isinstance(app.screen, ToolApprovalScreen)
        assert "Side B's tool calls are not run" in " ".join(notices(app))
        assert not app.state.generating
        assert column(app, 0).query(AssistantMessage).last().text == "alpha words here"


async def test_in_blind_mode_the_question_names_the_column_not_the_side(tmp_path: Path):
    """Blind mode hides which side is which until the pick: a side's tool question names its
    column ("Reply 1" / "Reply 2", as the columns are headed), never "Side A"."""
    backend, box = PairedFake(), Box()
    backend.side_calls = {"A": (ToolCall("a1", "clock", "{}"),)}
    app = make(tmp_path, backend, box)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.tool_rounds.specs, "the tools listed")
        await send(pilot, "/compare blind temperature=1.2")
        await send(pilot, "what time is it?", wait=False)
        await wait_for(pilot, lambda: asking(app), "the question")
        run = app.comparisons.running
        assert run is not None and run.armed.blind
        shown = run.order.index("A") + 1
        assert f"Reply {shown} asks to run time/now" in title(app)
        assert "Side" not in title(app)
        await answer(pilot, "escape")
        await settle(pilot)
        assert box.ran == []
