"""The chat's replies on screen, on top of the engine's ``ChatSession``.

The session owns the lifecycle (a reply begins, streams, and settles once) and
the engine lock; this controller puts it on screen: it runs the blocking calls
in thread workers, gives each reply a ``ReplyStream`` (buffer, pacer,
sanitiser, widget), renders what the workers post, and settles the reply once
its last text is on screen. It answers its own messages (``handlers()``: the
workers'), and writes what the chat is doing into the
``ChatState``, which the status bar follows: the figures are cleared when a reply
starts, show the reply's tokens so far with each paced render, and its final
stats when it ends. While a long prompt is read (``PromptProgress``), the reply's status line
and the bar's state say how far, until the first words. Messages of a reply the session has
left (a new chat, an edit) are ignored by their generation number.

A message sent while a reply is on its way is queued in the input (``PromptInput.queue``,
shown above it: queued_prompts.py): a reply that ends on its own (complete, or cut at a
limit) sends it next; one that is stopped (Esc, Ctrl+C, another model), fails, or is left
(a new chat, an edit, another conversation) gives it back into the input, unsent: the user
stopped things, or has an error to read first, and nothing typed is lost.

A reply asked for while the tool servers are still being listed (just after the start) waits
for them, "starting tool servers…" under it and in the status bar, so that it is offered the
tools the config names (a server that fails to start is left out, and said); Esc stops it
there, before the model is asked.

What the chat does around its replies has controllers of its own: the model's load
(model_loads.py), a reply asked again (regenerations.py), the thinking blocks' keys
(thinking_blocks.py), copying the last reply (copies.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vibechat.engine.chat.convlock import ConversationBusy
from vibechat.engine.chat.session import ChatSession
from vibechat.engine.chat.turn import Turn
from vibechat.engine.errors import VibechatError
from vibechat.engine.system import available_cores
from vibechat.engine.turns.attachments import Attachment
from vibechat.engine.turns.backend import (
    ChatEvent,
    ContextTrimmed,
    DraftProgress,
    GenerationDone,
    LensNotice,
    PromptProgress,
    ReplyPrefix,
    ThinkingDelta,
    TokenCandidates,
)

from ...appconfig import chat_settings
from ...report import reading_line, structured_note
from ..chat_state import ChatState, LiveReply, context_after
from ..conversation.assistant_message import AssistantMessage
from ..conversation.attachment_view import UserMessage
from ..conversation.messages import ChatMessageWidget
from ..conversation.pacing import FrameHold, RenderPacer, ui_budget
from ..conversation.reply_stream import ReplyStream
from .compactions import mark_left_out
from .events import (
    CacheReset,
    ContextCounted,
    ModelProgress,
    ReplyCompacted,
    ReplyEvent,
    ReplyFailed,
    ReplyText,
    ReplyThinking,
)
from .host import ChatHost
from .prompt_edit import PromptEdit

if TYPE_CHECKING:
    from .host import Handlers

log = logging.getLogger("vibechat.tui")
# A refused prompt goes back into the input up to this many characters.
MAX_KEPT_IN_INPUT = 4 << 20


class Replies:
    """A reply from its prompt to settled, on screen (see the module docstring)."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host
        # The reply on screen while it streams.
        self.stream: ReplyStream | None = None
        # The reply on screen, while it streams and after it ended.
        self.last_stream: ReplyStream | None = None
        # The sent message's frame, waiting for the first words.
        self.hold: FrameHold | None = None
        self.turn: Turn | None = None
        # The reply waiting for the tool servers' listing, not asked for yet.
        self.waiting: AssistantMessage | None = None
        # A prompt taken back with Ctrl+L, being edited.
        self.edit = PromptEdit(self)

    @property
    def session(self) -> ChatSession:
        return self.host.session

    @property
    def state(self) -> ChatState:
        return self.host.state

    @property
    def last(self) -> GenerationDone | None:
        """How the last reply that ended ended (kept in the chat state: /stats)."""
        return self.state.last

    def handlers(self) -> Handlers:
        """The messages this controller answers (the app hands them here)."""
        return {
            ReplyText: self.on_text,
            ReplyThinking: self.on_thinking,
            ReplyEvent: self.on_event,
            ReplyFailed: self.on_failed,
            ContextCounted: self.on_context_counted,
            CacheReset: self.on_cache_reset,
        }

    # ---------------------------------------------------------------- sending
    async def send(self, text: str, attachments: tuple[Attachment, ...] | None = None) -> None:
        """A prompt typed in the input (slash commands already handled), with what the tray holds
        (``attachments`` None), or a queued prompt with its own. Refused, the attachments stay
        pending (a queued prompt's go back to the tray)."""
        host = self.host
        pending = attachments is None
        attached = host.attachments.pending if attachments is None else attachments
        # Sent just as a reply started (the input queues them itself): it waits too.
        if self.state.generating:
            if not host.prompt_input.queue(text):
                host.prompt_input.give_back(text)
            if not pending:
                await host.attachments.give_back(attached)
            return
        try:
            self.session.check_prompt(text, attached)
        # Refused before it is saved or tokenized; kept in the input if editable there.
        except VibechatError as exc:
            detach = (
                " (its attachments stay: /detach N or /detach all, "
                "or Delete on a line of the tray, removes them)"
            )
            host.notify(str(exc) + (detach if attached else ""), severity="error")
            if len(text) <= MAX_KEPT_IN_INPUT:
                host.prompt_input.give_back(text)
            if not pending:
                await host.attachments.give_back(attached)
            return
        if not await self.catch_up():
            host.prompt_input.give_back(text)
            if not pending:
                await host.attachments.give_back(attached)
            return
        # A comparison waiting for a pick goes on from A (said).
        host.comparisons.leave()
        # From here until the reply's first words: no frame (see FrameHold).
        self._hold()
        host.tool_rounds.new_prompt()
        # Saved before generation starts.
        self.session.chat.add_user(text, attached)
        if pending and attached:
            await host.attachments.take()
        host.chats.changed()
        await host.chat.add(self._saved(UserMessage(text, attached)))
        # /compare armed: answered twice (comparisons.py).
        if not await host.comparisons.start_if_armed():
            await self.start()

    def _saved(self, widget: ChatMessageWidget) -> ChatMessageWidget:
        """The message just saved (the branch's last): its id, and its place among its
        siblings (an edited prompt, a regenerated reply: ‹ 2/2 ›)."""
        chat = self.session.chat
        widget.message_id = chat.leaf if chat.saving else None
        if widget.message_id is not None and chat.history is not None:
            try:
                widget.branch = chat.history.branch(widget.message_id)
            # Only a label: the reply goes on.
            except VibechatError:
                pass
        return widget

    async def catch_up(self) -> bool:
        """Before a turn is added: turns another vibechat (``run --continue``) saved since join the
        conversation and the screen (``ChatSession.catch_up``). False, said: it is adding one
        now."""

        try:
            others = self.session.catch_up()
        except ConversationBusy as exc:
            self.host.notify(str(exc), severity="warning", timeout=6)
            return False
        if others:
            await self.host.chat.add_all(self.host.chats.message_widgets(others))
            self.host.chats.changed()
        return True

    async def start(self, prefix: ReplyPrefix | None = None) -> None:
        """Answer the conversation's last prompt; ``prefix``: going on from those tokens
        (another path from a token: paths.py)."""
        host = self.host
        # The edited prompt was sent (or another reply asked for).
        await self.edit.end()
        self._hold()
        widget = await host.chat.add(AssistantMessage(code_theme=host.code_theme(), live=True))
        generation = self.session.generation
        if host.tool_rounds.when_listed(lambda: self._tools_listed(widget, generation, prefix)):
            self._wait_for_tools(widget)
            return
        await self._begin(widget, prefix)

    def _wait_for_tools(self, widget: AssistantMessage) -> None:
        """The tool servers are still being listed: the reply waits, said (frames drawn)."""
        self._release()
        self.waiting = widget
        widget.set_status("starting tool servers…")
        state = self.state
        # The input queues, Esc stops (``stop``).
        state.generating = True
        state.status = "starting tool servers…"

    async def _tools_listed(
        self, widget: AssistantMessage, generation: int, prefix: ReplyPrefix | None
    ) -> None:
        """The tools are listed: the waiting reply is asked for, unless it was stopped or left."""
        if self.waiting is not widget or not self.session.is_current(generation):
            return
        self.waiting = None
        widget.set_status("")
        await self._begin(widget, prefix)

    async def _begin(self, widget: AssistantMessage, prefix: ReplyPrefix | None = None) -> None:
        """The reply on screen (``widget``) is asked of the model, with the tools on offer
        (going on from ``prefix``, when given)."""
        host = self.host
        self._hold()
        if not self.state.model_ready:
            widget.set_status("waiting for the model to load…")
        tools, tool_choice = host.tool_rounds.offer()
        turn = self.session.begin_reply(tools=tools, tool_choice=tool_choice, prefix=prefix)
        self._saved(widget).set_branch(*widget.branch)
        # Its tokens' candidates, kept while it streams when the lens is on.
        widget.lens = host.lens.lens_for(self.session.conversation.params)
        model = self.session.info
        pacer = RenderPacer(ui_budget(model.n_threads if model else None, available_cores()))
        stream = ReplyStream(
            widget,
            turn.generation,
            pacer,
            expand_thinking=chat_settings(host.config).thinking_expanded,
        )
        self.turn, self.stream = turn, stream
        self.last_stream = stream
        state = self.state
        # The input queues what Enter sends from now until the reply ends.
        state.generating = True
        state.status = "generating…"
        # The last reply's figures go: the bar shows this one's as it streams.
        state.stats, state.thought, state.live = None, False, LiveReply()
        state.left_out = 0
        host.run_worker(
            lambda: self._generate(turn, stream),
            thread=True,
            exclusive=True,
            group="generate",
            exit_on_error=False,
        )

    def _generate(self, turn: Turn, stream: ReplyStream) -> None:
        """In a worker: the reply streams into ``stream``; the UI is told by messages."""
        post, generation = self.host.post_message, turn.generation
        lens = stream.widget.lens

        def text(piece: str) -> None:
            if stream.put(piece):
                post(ReplyText(generation))

        def event(ev: ChatEvent) -> None:
            # Buffered like the text: one message while one is pending.
            if isinstance(ev, ThinkingDelta):
                if stream.put_thinking(ev.text, ev.tokens):
                    post(ReplyThinking(generation))
                return
            # A token's candidates are kept with the reply, no message each (read when the
            # lens is opened on it).
            if isinstance(ev, TokenCandidates):
                if lens is not None:
                    lens.add(ev)
                return
            post(ReplyEvent(generation, ev))

        try:
            done = self.session.stream(
                turn,
                text,
                on_event=event,
                on_context=lambda n: post(ContextCounted(generation, n)),
                on_reset=lambda: post(CacheReset()),
                # An engine restarted after a crash reloads.
                on_load=lambda f: post(ModelProgress(f)),
                on_tokens=stream.count_tokens,
                on_compact=lambda notice: post(ReplyCompacted(generation, notice)),
            )
        # A cut stream (StreamInterrupted) keeps its text as the reply.
        except VibechatError as exc:
            post(ReplyFailed(generation, str(exc), ChatSession.partial_of(turn, exc)))
        except Exception as exc:
            log.exception("generation failed")
            post(ReplyFailed(generation, f"unexpected error while generating: {exc}"))
        else:
            post(ReplyEvent(generation, done))

    def _current(self, generation: int) -> ReplyStream | None:
        stream = self.stream
        return stream if stream is not None and stream.generation == generation else None

    def _hold(self) -> None:
        """Hold the screen's frames until the reply's first words (a loaded model only: a
        model still loading shows its progress at once)."""
        if (self.hold is None or not self.hold.held) and self.state.model_ready:
            self.hold = FrameHold(self.host)

    def _release(self) -> None:
        """Whatever the engine says first about a reply releases the held frame."""
        if self.hold is not None:
            self.hold.release()
            self.hold = None

    async def on_text(self, message: ReplyText) -> None:
        self._release()
        stream = self._current(message.generation)
        if stream is None:
            return
        self._read(stream)
        # Renders are paced (see pacing.py): each one takes CPU that the model's threads
        # may need; text arriving meanwhile waits in the buffer.
        wait = stream.wait()
        if wait > 0:
            self.host.set_timer(wait, lambda: self.host.post_message(ReplyText(message.generation)))
            return
        more = await stream.render()
        self._show_live(stream)
        # A burst: render it in slices, with a screen refresh between them.
        if more:
            self.host.call_after_refresh(self.host.post_message, ReplyText(message.generation))
            return
        done = stream.take_done()
        if done is not None:
            await self._finish(stream, done)

    async def on_thinking(self, message: ReplyThinking) -> None:
        self._release()
        stream = self._current(message.generation)
        if stream is not None:
            self._read(stream)
            await stream.render_thinking()
            self._pace_live(stream)

    def _pace_live(self, stream: ReplyStream) -> None:
        """While the model thinks (no text renders yet), the status bar's figures are drawn at
        the pace of the renders: now, or when the pacer allows (one timer at a time)."""
        if stream.started or stream.live_waiting:
            return
        wait = stream.wait()
        if wait > 0:
            stream.live_waiting = True

            def later() -> None:
                stream.live_waiting = False
                if self._current(stream.generation) is stream:
                    self._pace_live(stream)

            self.host.set_timer(wait, later)
            return
        stream.pacer.rendering()
        self._show_live(stream)

    def _show_live(self, stream: ReplyStream) -> None:
        """The reply's figures so far in the status bar (a repaint of its one line)."""
        self.state.live = stream.count.live()

    async def on_event(self, message: ReplyEvent) -> None:
        self._release()
        stream = self._current(message.generation)
        if stream is None:
            return
        event = message.event
        if isinstance(event, ContextTrimmed):
            # What is left of the conversation, and what is not (the meter, and a marker).
            self.state.context_used = event.prompt_tokens
            self.state.left_out = event.dropped_messages
            await mark_left_out(self.host, stream.widget, event)
        elif isinstance(event, PromptProgress):
            self._reading(stream, event)
        elif isinstance(event, DraftProgress):
            self.state.drafting = event
        elif isinstance(event, LensNotice):
            self._lens_notice(stream, event)
        # A reply that ended while slices are still queued finishes after them (``hold``).
        elif isinstance(event, GenerationDone) and not stream.hold(event):
            await self._finish(stream, event)

    def _lens_notice(self, stream: ReplyStream, notice: LensNotice) -> None:
        """The lens was asked for and this reply has none (a server without logprobs): said in
        one line under the reply, and kept for the lens to say when opened on it."""
        if stream.widget.lens is not None:
            stream.widget.lens.notice = notice.reason
        stream.widget.set_status(f"lens: {notice.reason}")

    def _reading(self, stream: ReplyStream, progress: PromptProgress) -> None:
        """A long prompt is being read: how far, under the reply and in the status bar (one line
        each, repainted; nothing else is drawn again)."""
        # Never after the reply's first words.
        if stream.started:
            return
        stream.reading = True
        line = reading_line(progress)
        stream.widget.set_progress(line)
        self.state.status = line

    def _read(self, stream: ReplyStream) -> None:
        """The prompt's reading is over (the first words came, or the reply ended): its line
        goes."""
        if stream.reading:
            stream.reading = False
            stream.widget.set_status("")
            if self.state.generating:
                self.state.status = "generating…"

    async def _finish(self, stream: ReplyStream, done: GenerationDone) -> None:
        self._read(stream)
        await stream.settle_thinking(done)
        await stream.finish(done.text)
        offered = self.turn is not None and bool(self.turn.tools)
        if self.turn is not None and self.session.finish_reply(self.turn, done):
            self.host.chats.changed()
        stats, state = done.stats, self.state
        state.last = done
        # The reply's own stats replace the live figures.
        state.live = None
        state.thought = bool(done.thinking)
        state.stats = stats
        state.context_used = context_after(stats)
        stopped = stats.finish_reason == "cancelled"
        if stopped:
            stream.widget.set_status("⏹ stopped", "stopped")
        elif stats.finish_reason == "length":
            stream.widget.set_status(f"… cut at the token limit{structured_note(done)}")
        elif stats.finish_reason == "stop" and (note := structured_note(done)):
            stream.widget.set_status(f"… ended{note}")
        self._ended()
        if done.thinking and self.state.model_ready:
            # The thinking is not sent back to the model (nor kept in its context): the meter
            # shows the conversation as the next prompt will be, counted by the engine.
            self.count_context()
        # Stopped by the user (or a model switch): what waited is theirs again.
        if stopped:
            self.host.prompt_input.unqueue()
            return
        if done.tool_calls:
            stream.widget.set_status(
                "→ asked for " + ", ".join(sorted({c.name[:40] for c in done.tool_calls}))
            )
            if offered and self.host.tool_rounds.take_over(done):
                # The calls are answered, then the model answers again.
                return
        queued = self.host.prompt_input.take_queued()
        if queued is not None:
            await self.send(queued, self.host.attachments.take_queued())

    async def on_failed(self, message: ReplyFailed) -> None:
        self._release()
        stream = self._current(message.generation)
        if stream is None:
            return
        self._read(stream)
        # The user message stays in the conversation, so Ctrl+R retries it.
        await stream.fail(message.error, message.partial)
        if self.turn is not None and self.session.fail_reply(
            self.turn, message.error, message.partial
        ):
            self.host.chats.changed()
        self.host.notify(message.error, severity="error", timeout=10)
        self._ended()
        # Not sent after an error: back in the input, to send once it is read.
        self.host.prompt_input.unqueue()

    def _leave_waiting(self) -> None:
        """The reply waiting for the tools is not asked for (its prompt stays saved: Ctrl+R)."""
        if self.waiting is not None:
            self.waiting.end_live()
            self.waiting = None
            self._ended()

    def _ended(self) -> None:
        self._release()
        self.stream = self.turn = None
        state = self.state
        state.generating = False
        # The reply's own stats (if any) say the rest.
        state.drafting = state.live = None
        state.status = state.at_rest

    # ------------------------------------------------------ leaving a reply
    def stop(self) -> None:
        """Esc: the reply stops; the text so far stays (it settles as stopped). A queued
        message goes back into the input, unsent."""
        if self.host.tool_rounds.active:
            self.host.tool_rounds.stop()
            self.host.prompt_input.unqueue()
        elif self.waiting is not None:
            self.waiting.set_status("⏹ stopped", "stopped")
            self._leave_waiting()
            self.host.prompt_input.unqueue()
        elif self.state.generating:
            self.session.cancel()
            # A comparison's side B on a backend of its own stops too.
            self.host.comparisons.stop()
            self.host.prompt_input.unqueue()

    def abandon(self) -> None:
        """A new chat, an edit, quitting, another model: the reply in progress is left
        (saved as stopped) and its later messages ignored."""
        if self.host.tool_rounds.active:
            self.host.tool_rounds.abandon()
            self._ended()
        if self.waiting is not None:
            self._leave_waiting()
        self.host.comparisons.abandon()
        if self.session.abandon():
            self.host.chats.changed()
        # The reply it waited for is gone: back in the input.
        self.host.prompt_input.unqueue()
        if self.stream is not None:
            self._read(self.stream)
            self.stream.widget.end_live()
            block = self.stream.widget.thinking
            # Its clock stops (the widget may stay on screen).
            if block is not None and block.live:
                block.fold(stopped=True)
            self._ended()

    async def new_conversation(self, reset_cache: bool = True) -> None:
        """Clear the view and the conversation; ``reset_cache``: empty the model's KV cache
        too (a freshly loaded model has nothing to forget)."""
        host = self.host
        self.abandon()
        # The lens on a reply of the conversation left closes.
        host.lens.closed()
        await self.edit.end()
        self.session.new_conversation(reset_cache=reset_cache)
        host.sidebar.current = None
        await host.chat.clear()
        self.state.stats = None
        self.state.context_used = 0
        if reset_cache:
            self.reset_cache()
        # An empty chat's welcome offers the last conversation again.
        host.chats.offer_last()
        host.prompt_input.focus()
        host.refresh_bindings()

    def after(self, widget: ChatMessageWidget) -> list[ChatMessageWidget]:
        """The messages on screen after ``widget``."""
        widgets = self.host.chat.messages()
        return widgets[widgets.index(widget) + 1 :] if widget in widgets else []

    # ------------------------------------------------------------ the context
    def reset_cache(self) -> None:
        """A new conversation: the KV cache empties before the engine's next use."""
        self.host.run_worker(self._apply_reset, thread=True, group="reset", exit_on_error=False)

    def _apply_reset(self) -> None:
        if self.session.apply_pending_reset():
            self.host.post_message(CacheReset())

    def count_context(self) -> None:
        """The context meter after a turn was taken back (Ctrl+L)."""
        generation = self.session.generation

        def count() -> None:
            tokens = self.session.count_context(generation)
            if tokens is not None:
                self.host.post_message(ContextCounted(generation, tokens))

        self.host.run_worker(count, thread=True, exclusive=True, group="count", exit_on_error=False)

    def on_context_counted(self, message: ContextCounted) -> None:
        if self.session.is_current(message.generation):
            self.state.context_used = message.tokens
            # The prompt is being evaluated (after a reload, say).
            if self.state.generating:
                self.state.status = "generating…"

    def on_cache_reset(self, _message: CacheReset) -> None:
        self.state.context_used = 0
