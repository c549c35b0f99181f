"""A comparison's tool calls (issue 44 point 5): both sides are offered the conversation's tools
(comparisons.py), and a side that ends asking for tool calls has its round run once both sides
ended, through the chat's own ``ToolRounds`` (nothing runs without the user's yes; the question
says which side asks: "Side A asks to run …", "Reply 1" in blind mode). The rule is simple: the
sides' rounds run one after the other, A first, so there is one question at a time. A side's
round runs on its own branch (the session is put on it: side B's reply is A's sibling), its
blocks go into its column, and after the results the side continues alone in its column as a
normal reply of the session, saved on that branch (it may call tools again, for the chat's
rounds). Once every round is over the session is back on A's branch, and the view waits for a
pick (the pick's branch holds the side's continuation). Esc stops the round and the rounds to
come. A chat not saved (--no-save) keeps no side B to go on from: B's calls are not run there,
and it says so.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from vibechat.engine.chat import pairs
from vibechat.engine.chat.chatlog import ChatLog
from vibechat.engine.errors import VibechatError
from vibechat.engine.system import available_cores
from vibechat.engine.turns.backend import GenerationDone, Side

from ..conversation.assistant_message import AssistantMessage
from ..conversation.compare_view import CompareColumn
from ..conversation.pacing import RenderPacer, ui_budget
from ..conversation.reply_stream import ReplyStream
from .compare_work import CompareHost, PairWork, Running, stats_line


class Comparing(Protocol):
    """What the rounds use of comparisons.py's ``Comparisons``: the app, the comparison running,
    its thread work, and its end."""

    host: CompareHost
    running: Running | None
    work: PairWork

    def at_rest(self, run: Running) -> None: ...


class SideTools:
    """The sides' tool rounds and continuations (see the module docstring)."""

    def __init__(self, comparisons: Comparing) -> None:
        self.comparisons = comparisons
        self.host = comparisons.host
        # The session was put on a side's branch other than A's.
        self._moved = False

    def begin(self, run: Running) -> bool:
        """Both sides ended: the rounds of those asking for tool calls begin (A first). False
        when there is none to run."""
        asking = [side for side in ("A", "B") if side in run.dones and run.dones[side].tool_calls]
        if not asking or run.stopped:
            return False
        if "B" in asking and "B" not in run.rows:
            asking.remove("B")
            self.host.notify(
                "Side B's tool calls are not run: this chat is not saved (--no-save), so side "
                "B has no branch to go on from.",
                timeout=6,
            )
        if not asking:
            return False
        run.rounds = list(asking)
        self.host.call_later(self._next, run)
        return True

    def _column(self, run: Running, side: Side) -> CompareColumn:
        return run.view.columns[run.order.index(side)]

    def _asker(self, run: Running, side: Side) -> str:
        """Who asks, as the question says it: the side, or its column in blind mode."""
        if run.armed.blind:
            return f"Reply {run.order.index(side) + 1}"
        return f"Side {side}"

    async def _next(self, run: Running) -> None:
        """The next side's round, or the comparison's end once there is none."""
        if self.comparisons.running is not run:
            return
        if run.stopped or not run.rounds:
            run.rounds = []
            await self._ended(run)
            return
        side = run.rounds.pop(0)
        if not await self._on_branch(run, side) or run.stopped:
            # Not on its branch (said), or stopped while its branch was read.
            await self._next(run)
            return
        rounds = self.host.tool_rounds
        # Each side has the chat's rounds for its own.
        rounds.new_prompt()
        column = self._column(run, side)
        taken = rounds.take_over(
            run.dones[side],
            asker=self._asker(run, side),
            into=column.add,
            then=lambda stopped: self._continue(run, side, stopped),
        )
        if not taken:
            await self._next(run)

    async def _on_branch(self, run: Running, side: Side) -> bool:
        """The session on side ``side``'s branch (the newest one through its reply, read from
        the history in a thread, off the event loop); False (said) when it cannot be."""
        history, session = self.host.history, self.host.session
        row = run.rows.get(side)
        if row is None and side == "A":
            # A chat not saved: the session holds side A's branch only.
            return True
        if row is not None and session.chat.leaf == row:
            return True
        conversation_id = session.chat.conversation_id
        if history is None or conversation_id is None or row is None:
            return False
        try:
            stored = await asyncio.to_thread(history.get, conversation_id, through=row)
        except VibechatError as exc:
            self.host.notify(
                f"Side {side}'s branch could not be read (its tool calls are not run): {exc}",
                severity="error",
            )
            return False
        if self.comparisons.running is not run:
            # Left while it was read (a new chat, another conversation): the session is theirs.
            return False
        session.open(ChatLog.from_stored(stored, history))
        self._moved = side != "A"
        return True

    async def _continue(self, run: Running, side: Side, stopped: bool) -> None:
        """After its round's results, side ``side`` answers again, alone, in its column (none
        after Esc: the rounds to come are not run either)."""
        run.stopped |= stopped
        if self.comparisons.running is not run or run.stopped:
            await self._ended(run)
            return
        host, session = self.host, self.host.session
        tools, choice = host.tool_rounds.offer()
        chosen = run.armed.a if side == "A" else run.armed.b
        turn = session.begin_reply(chosen.params, tools=tools, tool_choice=choice)
        turn.messages[:] = pairs.with_system(turn.messages, session.conversation, chosen.system)
        label = str(run.order.index(side) + 1) if run.armed.blind else side
        widget = AssistantMessage(label=label, live=True)
        await self._column(run, side).add(widget)
        model = session.info
        pacer = RenderPacer(ui_budget(model.n_threads if model else None, available_cores()))
        run.streams[side] = ReplyStream(widget, turn.generation, pacer)
        run.turn, run.generation, run.continuing = turn, turn.generation, side
        state = host.state
        state.generating, state.status = True, "comparing…"
        host.run_worker(
            lambda: self.comparisons.work.side_a(run, side),
            thread=True,
            group="compare",
            exit_on_error=False,
        )

    async def continued(self, run: Running, side: Side, done: GenerationDone) -> None:
        """Side ``side``'s continuation ended: saved on its branch; its own calls are answered
        (another round), else the next side's round."""
        stream = run.streams[side]
        await stream.settle_thinking(done)
        await stream.finish(done.text)
        stream.widget.set_status(stats_line(done))
        run.continuing = None
        if self.host.session.finish_reply(run.turn, done):
            self.host.chats.changed()
        column = self._column(run, side)
        if not run.stopped and self.host.tool_rounds.take_over(
            done,
            asker=self._asker(run, side),
            into=column.add,
            then=lambda stopped: self._continue(run, side, stopped),
        ):
            return
        await self._next(run)

    async def continuation_failed(self, run: Running, side: Side, error: str) -> None:
        """Side ``side``'s continuation failed: one line in its column, then the next round."""
        run.continuing = None
        await run.streams[side].fail(error)
        if self.host.session.fail_reply(run.turn, error):
            self.host.chats.changed()
        await self._next(run)

    async def _ended(self, run: Running) -> None:
        """Every round is over: the session back on A's branch, the chat at rest."""
        if self.comparisons.running is not run:
            return
        if self._moved:
            await self._on_branch(run, "A")
        if self.comparisons.running is run:
            self.comparisons.at_rest(run)
