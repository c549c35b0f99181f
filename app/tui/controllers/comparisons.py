"""The chat's ``/compare`` (issue 44): one prompt answered twice, side by side, and the user picks.

``/compare SPEC`` arms the next prompt (side A: the conversation's settings; side B: those with
SPEC on top, as ``run --compare`` reads a side: app/compare_plan.py); ``/compare A_SPEC vs
B_SPEC`` sets both; ``/compare again [SPEC]`` answers the last prompt again, twice, as new
siblings; ``/compare blind ...`` hides which side is which until the pick; ``/compare off``
disarms. A SPEC that does not parse is one line, and nothing is armed.

The pair runs off the UI thread (compare_work.py): with the chat's own local model on both
sides, one worker asks the engine for both at once (``PairedReplies``: engine/chat/pairs.py's
``stream_pair``, under the engine lock); otherwise side A runs as a plain reply of the session
and side B on a backend of its own (another model, loaded in its own engine process only when
memory allows; or a server) in a second worker. A side that fails says so in one line in its
column; the other goes on.

Side A is the session's reply (saved as it streams; the conversation goes on from it unless the
user picks B); side B is saved as its sibling when it ends, with its parameters. A pick (1 / 2 on
the focused view, or the palette) is recorded (``History.record_pick``) and the conversation
reopens on the chosen reply, the other one ‹ 1/2 › away. Esc stops both; [ / ] on the view (or
the palette) stops one side alone.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from vibechat.engine.chat import pairs
from vibechat.engine.errors import VibechatError
from vibechat.engine.system import available_cores
from vibechat.engine.turns.backend import (
    SIDES,
    GenerationDone,
    PairedReplies,
    PromptProgress,
    Side,
    SideRequest,
)

from ...compare_plan import chat_side
from ...report import reading_line
from ..chat_state import LiveReply, context_after
from ..conversation.assistant_message import AssistantMessage
from ..conversation.compare_view import CompareView
from ..conversation.pacing import RenderPacer, ui_budget
from ..conversation.reply_stream import ReplyStream
from .compare_tools import SideTools
from .compare_work import Armed, CompareHost, PairWork, Running, stats_line
from .events import CompareEvent, CompareFailed, CompareText

if TYPE_CHECKING:
    from .host import Handlers

USAGE = (
    "/compare SPEC (e.g. temperature=1.2, preset:precise, system=..., model:NAME), "
    "/compare A_SPEC vs B_SPEC, /compare again [SPEC], /compare blind SPEC, /compare off"
)


class Comparisons:
    """The chat's ``/compare`` (see the module docstring)."""

    def __init__(self, host: CompareHost) -> None:
        self.host = host
        # What runs in the workers (compare_work.py).
        self.work = PairWork(host)
        # The sides' tool rounds and continuations (compare_tools.py).
        self.side_tools = SideTools(self)
        # Armed for the next prompt (``arm`` sets it, and the status bar's words).
        self.armed: Armed | None = None
        # The last sides asked for (``/compare again`` alone runs them).
        self.last: Armed | None = None
        # The comparison streaming, then waiting for a pick.
        self.running: Running | None = None
        self.pending: Running | None = None

    def handlers(self) -> Handlers:
        return {
            CompareText: self.on_text,
            CompareEvent: self.on_event,
            CompareFailed: self.on_failed,
            CompareView.Picked: self.on_picked,
            CompareView.StopAsked: self.on_stop_asked,
        }

    # ---------------------------------------------------------------- /compare
    async def command(self, arg: str) -> None:
        """``/compare ...`` (see the module docstring)."""
        words = arg.split()
        again = blind = False
        while words and words[0].lower() in ("again", "blind"):
            again |= words[0].lower() == "again"
            blind |= words[0].lower() == "blind"
            words.pop(0)
        rest = " ".join(words)
        if not arg.strip():
            self._say_armed()
            return
        if rest.lower() == "off" and not again:
            self.arm(None)
            self.host.notify("/compare off: the next prompt is answered once.", timeout=3)
            return
        if again and not rest:
            if self.last is None:
                self.host.notify(f"Nothing to compare again yet: {USAGE}.", severity="warning")
                return
            rest, blind = self.last.text, blind or self.last.blind
        armed = self._parse(rest, blind)
        if armed is None:
            return
        if again:
            await self.again(armed)
            return
        self.arm(armed)
        self.host.notify(
            f"Compare armed: the next prompt is answered twice, {armed.describe()}. "
            "/compare off disarms.",
            timeout=6,
        )

    def arm(self, armed: Armed | None) -> None:
        """The next prompt is compared (``armed``) or answered once (None); the status bar says
        which."""
        self.armed = armed
        self.host.state.compare = armed.status() if armed is not None else ""

    def _say_armed(self) -> None:
        armed = self.armed
        self.host.notify(
            f"Compare armed: {armed.describe()} (/compare off disarms)."
            if armed is not None
            else f"Nothing armed: {USAGE}.",
            timeout=6,
        )

    def _parse(self, text: str, blind: bool) -> Armed | None:
        """The two sides ``text`` names (``B`` or ``A vs B``), or None (said in one line)."""
        if not text:
            self.host.notify(f"/compare: give side B's settings: {USAGE}.", severity="warning")
            return None
        a_text, sep, b_text = text.partition(" vs ")
        if not sep:
            a_text, b_text = "", text
        conversation = self.host.session.conversation
        params, system, path = conversation.params, conversation.system, self.host.config.path
        try:
            a = chat_side(a_text, params, system, path)
        except VibechatError as exc:
            self.host.notify(f"/compare: side A: {exc}", severity="error", timeout=8)
            return None
        try:
            b = chat_side(b_text, params, system, path)
        except VibechatError as exc:
            self.host.notify(f"/compare: side B: {exc}", severity="error", timeout=8)
            return None
        if not a.own_engine:
            self.host.notify(
                "/compare: side A runs on this chat's model: name another model or server on "
                "side B.",
                severity="error",
                timeout=8,
            )
            return None
        return Armed(a, b, blind, text)

    async def again(self, armed: Armed) -> None:
        """The last prompt answered again, twice, as new siblings of its reply."""
        host, session = self.host, self.host.session
        if host.state.generating:
            host.notify("Still answering: press Esc first, then /compare again.", timeout=4)
            return
        if not session.chat.conversation.turns:
            host.notify("Nothing to compare yet: send a message first.", timeout=4)
            return
        if not await host.replies.catch_up():
            return
        self.leave()
        session.chat.drop_last_reply()
        widgets = host.chat.messages()
        if widgets and widgets[-1].role == "assistant":
            await widgets[-1].remove()
        if session.chat.conversation.last_role != "user":
            session.stop_writing()
            host.notify("The last message is not a prompt: nothing to compare.", timeout=4)
            return
        await self.start(armed)

    async def start_if_armed(self) -> bool:
        """After a prompt was saved: the comparison armed for it starts (True), else False."""
        armed = self.armed
        if armed is None:
            return False
        self.arm(None)
        # Side A is the conversation's settings as they are now (a slider may have moved).
        now = self._parse(armed.text, armed.blind)
        if now is None:
            return False
        await self.start(now)
        return True

    # ---------------------------------------------------------------- running
    async def start(self, armed: Armed) -> None:
        """Both replies to the conversation's last prompt, side by side."""
        host, session = self.host, self.host.session
        # Both sides are offered the tools: a reply begun before they are listed waits.
        if host.tool_rounds.when_listed(lambda: self.start(armed)):
            return
        self.last = armed
        prompt_row = session.chat.leaf
        host.tool_rounds.new_prompt()
        tools, choice = host.tool_rounds.offer()
        turn = session.begin_reply(armed.a.params, tools=tools, tool_choice=choice)
        conversation = session.conversation
        b_messages = pairs.with_system(turn.messages, conversation, armed.b.system)
        turn.messages[:] = pairs.with_system(turn.messages, conversation, armed.a.system)
        b_request = SideRequest(tuple(b_messages), armed.b.params.with_seed(), tools, choice)
        order: tuple[Side, Side] = ("A", "B")
        if armed.blind and random.random() < 0.5:
            order = ("B", "A")
        heads = tuple(
            f"{column + 1} · settings hidden until the pick" if armed.blind else armed.head(side)
            for column, side in enumerate(order)
        )
        labels = [str(column + 1) if armed.blind else side for column, side in enumerate(order)]
        widgets = (
            AssistantMessage(label=labels[0], live=True),
            AssistantMessage(label=labels[1], live=True),
        )
        view = CompareView((heads[0], heads[1]), widgets)
        await host.chat.add(view)
        model = session.info
        # One pacer for both columns: the two take the UI's budget of one reply.
        pacer = RenderPacer(ui_budget(model.n_threads if model else None, available_cores()))
        streams = {
            side: ReplyStream(widgets[order.index(side)], turn.generation, pacer) for side in SIDES
        }
        paired = armed.b.own_engine and isinstance(session.backend, PairedReplies)
        run = Running(
            turn.generation, armed, turn, b_request, view, streams, order, prompt_row, paired
        )
        self.running, self.pending = run, None
        state = host.state
        state.generating = True
        state.status = "comparing…"
        state.stats, state.live = None, LiveReply()
        if paired:
            host.run_worker(
                lambda: self.work.pair(run), thread=True, group="compare", exit_on_error=False
            )
            return
        host.run_worker(
            lambda: self.work.side_a(run), thread=True, group="compare", exit_on_error=False
        )
        host.run_worker(
            lambda: self.work.side_b(run), thread=True, group="compare-b", exit_on_error=False
        )

    # ------------------------------------------------------------- on screen
    def _current(self, generation: int) -> Running | None:
        run = self.running
        return run if run is not None and run.generation == generation else None

    async def on_text(self, message: CompareText) -> None:
        run = self._current(message.generation)
        if run is None or message.side not in SIDES:
            return
        side: Side = "A" if message.side == "A" else "B"
        stream = run.streams[side]
        wait = stream.wait()
        if wait > 0:
            self.host.set_timer(
                wait, lambda: self.host.post_message(CompareText(message.generation, side))
            )
            return
        if stream.thoughts.pending:
            await stream.render_thinking()
        more = await stream.render()
        self._show_live(run)
        if more:
            self.host.call_after_refresh(
                self.host.post_message, CompareText(message.generation, side)
            )
            return
        done = stream.take_done()
        if done is not None:
            await self._end_side(run, side, done)

    def _show_live(self, run: Running) -> None:
        """Each live side's figures in its column's status line (one line repainted)."""
        for side, stream in run.streams.items():
            if side in run.dones or side in run.errors or not stream.started:
                continue
            live = stream.count.live()
            rate = f" · {live.tokens_per_s:.1f} tok/s" if live.tokens_per_s else ""
            stream.widget.set_status(f"{live.tokens} tokens{rate}")

    async def on_event(self, message: CompareEvent) -> None:
        run = self._current(message.generation)
        if run is None or message.side not in SIDES:
            return
        side: Side = "A" if message.side == "A" else "B"
        stream, event = run.streams[side], message.event
        if isinstance(event, PromptProgress) and not stream.started:
            stream.widget.set_progress(reading_line(event))
        elif isinstance(event, GenerationDone) and not stream.hold(event):
            await self._end_side(run, side, event)

    async def _end_side(self, run: Running, side: Side, done: GenerationDone) -> None:
        """Side ``side`` ended: its text settles, its stats show in its column, and it is saved
        (A as the session's reply, B as its sibling)."""
        if run.continuing == side:
            await self.side_tools.continued(run, side, done)
            return
        if side in run.dones or side in run.errors:
            return
        stream = run.streams[side]
        await stream.settle_thinking(done)
        await stream.finish(done.text)
        run.dones[side] = done
        stream.widget.set_status(stats_line(done))
        if side == "A":
            if self.host.session.finish_reply(run.turn, done):
                self.host.chats.changed()
            writer = run.turn.record.writer
            if writer is not None:
                run.rows["A"] = writer.message_id
        else:
            self._save_b(run, done)
        if run.ended:
            self._all_ended(run)

    def _save_b(self, run: Running, done: GenerationDone) -> None:
        """Side B saved as A's sibling under the prompt (a chat not saved keeps nothing)."""
        chat, history = self.host.session.chat, self.host.history
        if history is None or not chat.saving or chat.conversation_id is None:
            return
        try:
            run.rows["B"] = pairs.save_sibling(history, chat.conversation_id, run.prompt_row, done)
        except VibechatError as exc:
            self.host.notify(f"Side B's reply could not be saved: {exc}", severity="error")

    async def on_failed(self, message: CompareFailed) -> None:
        run = self._current(message.generation)
        if run is None or message.side not in SIDES:
            return
        side: Side = "A" if message.side == "A" else "B"
        if run.continuing == side:
            await self.side_tools.continuation_failed(run, side, message.error)
            return
        if side in run.dones or side in run.errors:
            return
        run.errors[side] = message.error
        stream = run.streams[side]
        await stream.fail(message.error)
        if side == "A" and self.host.session.fail_reply(run.turn, message.error):
            self.host.chats.changed()
        if run.ended:
            self._all_ended(run)

    def _all_ended(self, run: Running) -> None:
        """Both sides ended: the tool calls they ask for are answered first, side by side
        (compare_tools.py), then the chat is at rest."""
        if not self.side_tools.begin(run):
            self.at_rest(run)

    def at_rest(self, run: Running) -> None:
        """The comparison is over: the chat is at rest, and the view waits for a pick."""
        state = self.host.state
        self.running = None
        state.generating = False
        state.live = None
        state.status = state.at_rest
        done = run.dones.get("A")
        if done is not None:
            state.last, state.stats = done, done.stats
            # The conversation goes on from A until a pick: the meter counts A's reply.
            state.context_used = context_after(done.stats)
        if len(run.dones) == 2 and "A" in run.rows and "B" in run.rows:
            self.pending = run
            self.host.notify(
                "Both replies ended: Tab to them and press 1 or 2 to pick the better one "
                "(else the conversation goes on from A).",
                timeout=6,
            )
        self.host.prompt_input.unqueue()

    # ---------------------------------------------------------------- picks
    def on_picked(self, message: CompareView.Picked) -> None:
        run = self.running or self.pending
        if run is not None and message.view is run.view:
            self.pick_column(message.column)

    def pick_column(self, column: int) -> None:
        """The reply of column ``column`` (0: the first) is the better one."""
        if self.running is not None:
            self.host.notify(
                "Still answering: wait for both replies (or press Esc), then pick.", timeout=4
            )
            return
        run = self.pending
        if run is None:
            saved = self.host.history is not None
            self.host.notify(
                "No comparison to pick from."
                if saved
                else "This chat is not saved (--no-save): a pick is kept in the history, so "
                "there is none to make; the conversation goes on from A.",
                timeout=5,
            )
            return
        side = run.order[column]
        self.pending = None
        history, chat = self.host.history, self.host.session.chat
        assert history is not None and chat.conversation_id is not None
        armed = run.armed
        try:
            history.record_pick(
                conversation_id=chat.conversation_id,
                a_message_id=run.rows["A"],
                b_message_id=run.rows["B"],
                winner=side,
                differs=armed.differs,
                a_model=armed.a.model or self._model_name(),
                b_model=armed.b.model or self._model_name(),
                a_preset=armed.a.preset,
                b_preset=armed.b.preset,
                blind=armed.blind,
            )
        except VibechatError as exc:
            self.host.notify(f"The pick could not be saved: {exc}", severity="error")
        reveal = ""
        if armed.blind:
            reveal = " " + "; ".join(
                f"{c + 1} was {armed.head(s)}" for c, s in enumerate(run.order)
            )
            run.view.set_heads((armed.head(run.order[0]), armed.head(run.order[1])))
        self.host.notify(f"Picked {side}: the conversation goes on from it.{reveal}", timeout=8)
        self.host.chats.open_conversation(chat.conversation_id, jump_to=run.rows[side])

    def flip(self) -> None:
        """The other reply of the comparison on screen (below 100 columns, one shows at a time)."""
        run = self.running or self.pending
        if run is None:
            self.host.notify("No comparison on screen.", timeout=3)
            return
        run.view.flip()

    def _model_name(self) -> str | None:
        info = self.host.session.info
        return info.name if info is not None else None

    def leave(self) -> None:
        """The next prompt (or another comparison) comes: a comparison not picked goes on from A
        (said once)."""
        if self.pending is not None:
            self.pending = None
            self.host.notify("No pick: the conversation goes on from A.", timeout=4)

    # ---------------------------------------------------------------- stops
    def stop_column(self, column: int) -> None:
        """Stop the side of column ``column`` alone; the other goes on."""
        run = self.running
        if run is None:
            self.host.notify("No comparison is running.", timeout=3)
            return
        side = run.order[column]
        if side in run.dones or side in run.errors:
            return
        backend = self.host.session.backend
        if run.paired and isinstance(backend, PairedReplies):
            backend.cancel_side(side)
        elif side == "A":
            self.host.session.cancel()
        elif run.b_backend is not None:
            run.b_backend.cancel()

    def on_stop_asked(self, message: CompareView.StopAsked) -> None:
        run = self.running
        if run is not None and message.view is run.view:
            self.stop_column(message.column)

    def stop(self) -> None:
        """Esc: both sides stop (the session's cancel stops A, or the pair)."""
        run = self.running
        if run is not None:
            # No side's tool round follows.
            run.stopped = True
        if run is not None and run.b_backend is not None:
            run.b_backend.cancel()

    def abandon(self) -> None:
        """The chat leaves the comparison (a new chat, quitting): both stop; B's text so far is
        saved as stopped (A's is the session's reply, saved by its abandon)."""
        run, self.running, self.pending = self.running, None, None
        if run is None:
            return
        self.host.session.cancel()
        if run.b_backend is not None:
            run.b_backend.cancel()
        if "B" not in run.dones and "B" not in run.errors:
            self._save_b(run, pairs.stopped_side("".join(run.b_parts), run.b_request))
        for stream in run.streams.values():
            stream.widget.end_live()
        state = self.host.state
        state.generating, state.live, state.status = False, None, state.at_rest

    @property
    def active(self) -> bool:
        """A comparison is running."""
        return self.running is not None
