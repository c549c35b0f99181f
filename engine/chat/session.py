"""The chat core: one conversation with one backend, however it is driven.

``vibechat run``, ``--prompts-file`` and the chat all answer through a
:class:`ChatSession`. It owns what must be right for every front end:

- the **reply lifecycle**: :meth:`~ChatSession.begin_reply` (the reply row is saved
  before the first token) → :meth:`~ChatSession.stream` (text saved while it streams)
  → exactly one of :meth:`~ChatSession.finish_reply`, :meth:`~ChatSession.fail_reply`
  or :meth:`~ChatSession.abandon` (a new chat, an edit or quitting mid-reply: kept as
  stopped). A :class:`Turn` settles once, whichever thread gets there first.
- **one writer per conversation**: :meth:`~ChatSession.catch_up` takes the saved
  conversation's writer lock (engine/chat/convlock.py, across processes) and takes in the turns
  another vibechat added, before a turn is added; the lock is let go once the reply is saved.
- the **engine lock** (a backend is not thread-safe: one thread uses it at a time) and
  the **generation counter** (a front end ignores events of a reply that was abandoned).
- the **pending reset** (a new conversation empties the KV cache before the next use
  of the engine, not while a cancelled reply still holds it), **context counting**,
  **prefill** (an opened conversation's KV cache is rebuilt, so its next reply
  evaluates only the new prompt) and **swapping the backend** (another model, or the
  same one reloaded with other settings) without a reply ever meeting a closed one.

Threads: ``begin_reply``, ``abandon``, ``new_conversation``, ``open`` and the
settling calls run on the front end's thread (the UI thread, or the command's);
``load``, ``stream``, ``count_context``, ``apply_pending_reset``, ``rebuild_cache``
and ``replace_backend`` block on the engine, and a UI runs them in a worker thread.
``cancel`` may be called from anywhere. Nothing here knows about Textual.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace

from ..errors import ContextOverflowError, ModelLoadError, StreamInterrupted, VibechatError
from ..settings.choices import DEFAULT_CONTEXT_POLICY
from ..settings.limits import prompt_too_large
from ..settings.params import SamplingParams
from ..turns.attachments import Attachment, model_text
from ..turns.backend import (
    Backend,
    ChatEvent,
    ChatMessage,
    ContextTrimmed,
    GenerationDone,
    ModelInfo,
    RemoteModels,
    ReplyPrefix,
    TextDelta,
    ThinkingDelta,
    TokenCandidates,
)
from ..turns.tool_calls import ToolSpec
from .chatlog import ChatLog
from .compacting import Compacting
from .compaction import CompactionNotice
from .conversation import Conversation
from .convlock import WAIT_LIMIT
from .database import HistoryError
from .records import StoredMessage
from .titles import ask_title, title_from
from .turn import Answer, Turn
from .writer import ConversationWriter

log = logging.getLogger("vibechat.session")

NO_IMAGES = "this model takes no images: load a vision model with its projector (--mmproj FILE)"


class ImagesNotTaken(VibechatError):
    """A prompt with images for a model that cannot see them (a local model without a projector)."""


def _ignore(_text: str) -> None:
    pass


class ChatSession(Compacting):
    """See the module docstring. ``chat`` is the conversation (saved when it has a
    history); ``backend`` answers it and may be replaced (:meth:`replace_backend`)."""

    def __init__(self, backend: Backend, chat: ChatLog | None = None) -> None:
        self.backend = backend
        self.chat = chat if chat is not None else ChatLog(Conversation())
        # The loaded model (None until a load succeeds).
        self.info: ModelInfo | None = None
        self.engine_lock = threading.Lock()
        self.generation = 0
        # The reply in progress.
        self.turn: Turn | None = None
        self._reset_pending = False
        # This conversation's writer lock, while held.
        self._writer = ConversationWriter()
        # What a prompt about to overflow the context does: trim, compact or stop (the
        # ``context_policy`` setting; a front end sets it).
        self.context_policy = DEFAULT_CONTEXT_POLICY
        # The last reply's turns left out to fit the context (their indices), and the last
        # compaction (``compacted_from``): what ``run --json`` reports.
        self.left_out_turns: list[int] = []
        self.compacted_from: dict[str, object] | None = None

    @property
    def conversation(self) -> Conversation:
        return self.chat.conversation

    @property
    def remote(self) -> RemoteModels | None:
        """The backend as a server with models to choose from, or None (a local engine)."""
        return self.backend if isinstance(self.backend, RemoteModels) else None

    # ------------------------------------------------------------------ model
    def load(self, on_progress: Callable[[float], object] | None = None) -> ModelInfo:
        """Load the backend's model (blocks: a worker's job)."""
        with self.engine_lock:
            info = self.backend.load(on_progress=on_progress)
        self._loaded(info)
        return info

    def _loaded(self, info: ModelInfo) -> None:
        self.info = info
        self.chat.set_model(info.name, info.path)

    def replace_backend(
        self,
        new: Backend,
        *,
        name: str,
        file_size: int,
        available: int | None,
        on_progress: Callable[[float], object] | None = None,
    ) -> ModelInfo:
        """Load ``new`` and make it the session's backend (blocks: a worker's job).

        The user is never left without a model: ``new`` (model ``name``, ``file_size`` bytes of
        weights: its model's file and its draft model's)
        loads beside the current one when ``available`` memory allows (None: unknown),
        else the current one is closed first and loaded again if ``new`` fails. The swap
        happens under the engine lock, so a reply started meanwhile waits for it and
        never meets a closed backend."""
        with self.engine_lock:
            old = self.backend
            if available is None or file_size <= available:
                info = new.load(on_progress=on_progress)
                old.close()
            else:
                # The current model's memory, its draft model's included.
                freed = self.info.memory_bytes if self.info is not None else 0
                if file_size > available + freed:
                    raise ModelLoadError(
                        f"{name} needs about {file_size / 1e9:.1f} GB of memory and only "
                        f"{(available + freed) / 1e9:.1f} GB would be free: choose a smaller "
                        "quantization."
                    )
                # The new model fits only without the current one.
                old.close()
                try:
                    info = new.load(on_progress=on_progress)
                except VibechatError:
                    old.load()
                    raise
            self.backend = new
        self._loaded(info)
        return info

    def switch_remote(self, model_id: str) -> ModelInfo:
        """Ask the server for another of its models from now on (blocks)."""
        remote = self.remote
        if remote is None:
            raise VibechatError("this engine has no server models to switch between.")
        with self.engine_lock:
            info = remote.switch_model(model_id)
        self._loaded(info)
        return info

    def cancel(self) -> None:
        """Stop what the engine is doing (a load, a prompt evaluation, a reply); any thread."""
        self.backend.cancel()

    # ---------------------------------------------------------------- replies
    def is_current(self, generation: int) -> bool:
        return generation == self.generation

    def begin_reply(
        self,
        params: SamplingParams | None = None,
        *,
        tools: tuple[ToolSpec, ...] = (),
        tool_choice: str = "auto",
        prefix: ReplyPrefix | None = None,
    ) -> Turn:
        """A reply to the conversation as it stands (its last message is the prompt, or a
        tool's result); the reply row is saved (status 'streaming') before the first token.
        ``tools``: offered to the model (``tool_choice``: auto, none or required); ``prefix``:
        the reply goes on from those tokens (another path from a token of a reply taken back
        with ``ChatLog.take_reply``: the new one is its sibling)."""
        self.generation += 1
        params = (params or self.conversation.params).with_seed()
        self._writer.claim(self.chat)
        turn = Turn(
            self.generation,
            self._messages(),
            params,
            self.chat.start_reply(),
            tools=tools,
            tool_choice=tool_choice,
            prefix=prefix,
        )
        self.turn = turn
        return turn

    def stream(
        self,
        turn: Turn,
        on_text: Callable[[str], object],
        *,
        on_event: Callable[[ChatEvent], object] | None = None,
        on_context: Callable[[int], object] | None = None,
        on_reset: Callable[[], object] | None = None,
        on_load: Callable[[float], object] | None = None,
        on_tokens: Callable[[int], object] | None = None,
        stop_requested: Callable[[], bool] | None = None,
        on_compact: Callable[[CompactionNotice], object] | None = None,
    ) -> GenerationDone:
        """Generate ``turn``'s reply with the engine lock held (blocks): each piece of text
        is saved and given to ``on_text``; the thinking (``ThinkingDelta``) is saved apart
        and goes to ``on_event`` with the other events (``ContextTrimmed``); ``on_context`` gets the
        prompt's size in tokens before evaluation
        starts (the context meter), ``on_reset`` is called when a pending reset ran first,
        ``on_load`` gets the progress (0..1) of a load the backend needs first (an engine
        process restarted after a crash reloads its model; a loaded backend reports nothing).
        ``on_tokens`` gets the reply's generated tokens so far before each piece of text that
        carries the count (``TextDelta.tokens``: the local engine; a server's pieces do not).
        ``stop_requested()`` turning true stops it (so does :meth:`cancel`). A prompt about to
        overflow the context meets the ``context_policy`` first (:meth:`_keep_to_context`;
        ``on_compact`` gets what an automatic compaction did).

        Returns the backend's ``GenerationDone``, or a stopped one when the reply ended
        before it (cancelled, superseded). A failure raises (``VibechatError``;
        ``StreamInterrupted`` carries the partial text): settle the turn with
        :meth:`fail_reply`. An exception from a callback (``KeyboardInterrupt``, a closed
        pipe) closes the stream, which stops the engine, and propagates."""
        with self.engine_lock:
            if self.apply_pending_reset(locked=True) and on_reset is not None:
                on_reset()
            if (
                not self.is_current(turn.generation)
                or turn.settled
                or (stop_requested and stop_requested())
            ):
                # Superseded, or stopped before it began.
                return turn.stopped()
            if on_load is not None:
                # Idempotent: returns at once when the model is loaded.
                self.backend.load(on_progress=on_load)
            if on_context is not None:
                tokens = self._count(turn.messages)
                if tokens is not None:
                    on_context(tokens)
            self.left_out_turns = []
            if self.context_policy != "trim":
                self._keep_to_context(turn, on_compact, stop_requested)
            done: GenerationDone | None = None
            if turn.tools or turn.prefix is not None:
                # ``prefix`` only when there is one: a backend written before it takes tools.
                path = {} if turn.prefix is None else {"prefix": turn.prefix}
                events = self.backend.stream_chat(
                    turn.messages,
                    turn.params,
                    tools=turn.tools,
                    tool_choice=turn.tool_choice,
                    **path,
                )
            else:
                # As every backend takes it (a front end's test double too).
                events = self.backend.stream_chat(turn.messages, turn.params)
            try:
                for event in events:
                    if stop_requested is not None and stop_requested():
                        self.backend.cancel()
                    if isinstance(event, TextDelta):
                        turn.add(event.text)
                        if event.tokens and on_tokens is not None:
                            on_tokens(event.tokens)
                        on_text(event.text)
                    elif isinstance(event, ThinkingDelta):
                        turn.add_thinking(event.text)
                        if on_event is not None:
                            on_event(event)
                    elif isinstance(event, GenerationDone):
                        done = event
                    else:
                        if isinstance(event, TokenCandidates):
                            turn.add_candidates(event)
                        elif isinstance(event, ContextTrimmed):
                            self.left_out_turns = self.left_out(turn, event.left_out)
                        if on_event is not None:
                            on_event(event)
            finally:
                events.close()
        return done if done is not None else turn.stopped()

    def answer(
        self,
        params: SamplingParams | None = None,
        *,
        on_text: Callable[[str], object] | None = None,
        on_event: Callable[[ChatEvent], object] | None = None,
        stop_requested: Callable[[], bool] | None = None,
        tools: tuple[ToolSpec, ...] = (),
        tool_choice: str = "auto",
        on_compact: Callable[[CompactionNotice], object] | None = None,
    ) -> Answer:
        """The whole lifecycle in the caller's thread (``vibechat run``, ``--prompts-file``):
        answer the conversation's last prompt, saving the reply as it streams. Ctrl-C
        (``KeyboardInterrupt``), ``stop_requested()`` or a closed pipe (``BrokenPipeError``
        from ``on_text``) stop it, keeping the partial reply as stopped; a failure is saved
        with the reply and raised. ``tools``: offered to the model (engine/chat/tool_turns.py
        runs the calls)."""
        turn = self.begin_reply(params, tools=tools, tool_choice=tool_choice)
        try:
            done = self.stream(
                turn,
                on_text or _ignore,
                on_event=on_event,
                stop_requested=stop_requested,
                on_compact=on_compact,
            )
        except VibechatError as exc:
            self.fail_reply(turn, str(exc), self.partial_of(turn, exc))
            raise
        except (KeyboardInterrupt, BrokenPipeError) as exc:
            # The stream is closed: the engine stopped.
            done = turn.stopped()
            self.finish_reply(turn, done)
            return Answer(
                turn.text,
                done,
                interrupted=isinstance(exc, KeyboardInterrupt),
                pipe_closed=isinstance(exc, BrokenPipeError),
            )
        self.finish_reply(turn, done)
        return Answer(turn.text, done, interrupted=stop_requested is not None and stop_requested())

    def _messages(self) -> list[ChatMessage]:
        """The conversation as the backend is sent it. Images an earlier turn carries (a reopened
        conversation's, a model switched since) are left out for a model that takes none: the
        conversation goes on in text (check_prompt refuses new ones, with the fix)."""
        messages = self.conversation.messages()
        if self.info is None or self.info.takes_images:
            return messages
        return [replace(m, attachments=()) if m.attachments else m for m in messages]

    def check_prompt(self, text: str, attachments: tuple[Attachment, ...] = ()) -> None:
        """Refuse, before it is saved or tokenized, a prompt too large for the loaded model's
        context, its files' text counted (``ContextOverflowError``), or one with images for a
        model that takes none (``ImagesNotTaken``): one line naming the fix."""
        if (
            self.info is not None
            and not self.info.takes_images
            and any(a.is_image for a in attachments)
        ):
            raise ImagesNotTaken(NO_IMAGES)
        sent = model_text(text, tuple(attachments))
        problem = prompt_too_large(
            len(sent.encode("utf-8", "replace")),
            self.info.context_size if self.info is not None else None,
        )
        if problem:
            raise ContextOverflowError(problem)

    def finish_reply(self, turn: Turn, done: GenerationDone) -> bool:
        """The reply is part of the conversation: saved as complete (or stopped). False when
        the turn was settled already (abandoned)."""
        if not turn.settle():
            return False
        self.chat.finish_reply(turn.record, done)
        self._forget(turn)
        # Saved: the next writer may read it.
        self.stop_writing()
        self._title_first_prompt()
        return True

    def _title_first_prompt(self) -> None:
        """After the first reply, the saved title is the first prompt's (``title_from``), the
        prompt that stays when the first message was taken back and edited; never the reply's
        words (a chat model asked for a title writes its own: ``write_title``). A title the
        user gave stays; a prompt of attachments only keeps the first one's name."""
        chat = self.chat
        turns = chat.conversation.turns
        if (
            chat.history is None
            or chat.conversation_id is None
            or len(turns) != 2
            or not turns[0].content.strip()
        ):
            return
        title = title_from(turns[0].content)
        if title == chat.title:
            return
        try:
            if chat.history.set_title(chat.conversation_id, title):
                chat.title = title
        except HistoryError as exc:
            # A title is not worth stopping a chat for.
            log.warning("could not save the title: %s", exc)

    def write_title(self, generation: int, stop_requested: Callable[[], bool]) -> str | None:
        """The model's title for the conversation's first exchange (blocks: a worker's job):
        a short greedy request (``titles.ask_title``) after the exchange, which shares its prefix
        (the KV cache keeps it). None when the session moved on from ``generation``, a reply
        began, ``stop_requested()`` turned true (the user sent a message: the engine is
        stopped for it), or the request failed: the title from the exchange's words stays.
        Nothing is saved here (see ``History.set_title``)."""
        messages = self._messages()
        if len(self.conversation.turns) != 2:
            return None
        with self.engine_lock:
            if not self.is_current(generation) or self.turn is not None or stop_requested():
                return None
            return ask_title(self.backend, messages, stop_requested)

    def fail_reply(self, turn: Turn, error: str, partial: str | None = None) -> bool:
        """A reply that failed, saved with the error. With ``partial`` (a stream cut
        mid-reply: see :meth:`partial_of`) the text is kept as the reply (status
        'interrupted'); any other failure (an engine crash too) keeps the text saved so
        far with status 'error', out of what the model is sent again, and the prompt
        stays for a retry. False when the turn was settled already."""
        if not turn.settle():
            return False
        self.chat.fail_reply(turn.record, error, partial=partial)
        self._forget(turn)
        self.stop_writing()
        return True

    @staticmethod
    def partial_of(turn: Turn, error: BaseException) -> str | None:
        """The text a failure keeps as the reply: a cut stream's (``StreamInterrupted``)."""
        if isinstance(error, StreamInterrupted):
            return error.partial or turn.text
        return None

    def abandon(self) -> bool:
        """Leave the reply in progress (a new chat, an edit, quitting): the engine is told to
        stop, the reply is saved as stopped with the text it had, and its later events
        are stale (the generation moves on). False when no reply was in progress."""
        self.generation += 1
        turn, self.turn = self.turn, None
        if turn is None:
            return False
        self.backend.cancel()
        done = turn.stopped()
        if turn.settle():
            self.chat.finish_reply(turn.record, done)
        self.stop_writing()
        return True

    def _forget(self, turn: Turn) -> None:
        if self.turn is turn:
            self.turn = None

    # ---------------------------------------------------------- other writers
    def catch_up(
        self,
        *,
        wait: bool = False,
        limit: float = WAIT_LIMIT,
        on_wait: Callable[[], object] | None = None,
        stop_requested: Callable[[], bool] | None = None,
    ) -> list[StoredMessage]:
        """Before a turn is added: take the saved conversation's writer lock and take in the
        turns other vibechats saved since this session read it (``ConversationWriter.catch_up``,
        engine/chat/writer.py: what ``wait``, ``limit``, ``on_wait`` and ``stop_requested`` do).
        Returns those turns; :class:`ConversationBusy` when another vibechat is writing to it."""
        return self._writer.catch_up(
            self.chat, wait=wait, limit=limit, on_wait=on_wait, stop_requested=stop_requested
        )

    def stop_writing(self) -> None:
        """Let other vibechats add to the conversation again (the reply is saved, or left)."""
        self._writer.release()

    # ------------------------------------------------------- the conversation
    def new_conversation(self, reset_cache: bool = True) -> None:
        """An empty conversation (the saved one stays as it is). ``reset_cache``: empty the
        KV cache before the engine's next use (a freshly loaded model has nothing to forget)."""
        self.abandon()
        self.stop_writing()
        self.chat.clear()
        if reset_cache:
            self._reset_pending = True

    def open(self, chat: ChatLog, reset_cache: bool = False) -> None:
        """Go on with ``chat`` (a saved conversation: then :meth:`rebuild_cache` in a worker;
        or a fresh one). ``reset_cache``: the next reply starts from an empty KV cache;
        else it keeps the token prefix it shares with what the cache holds."""
        self.abandon()
        self.stop_writing()
        self._reset_pending = reset_cache
        self.chat = chat
        if self.info is not None:
            chat.set_model(self.info.name, self.info.path)

    def apply_pending_reset(self, locked: bool = False) -> bool:
        """Empty the KV cache if a new conversation asked for it (blocks); True when it ran."""
        if not locked:
            with self.engine_lock:
                return self.apply_pending_reset(locked=True)
        if not self._reset_pending:
            return False
        self._reset_pending = False
        self.backend.reset()
        return True

    def count_context(self, generation: int) -> int | None:
        """The conversation's size in tokens, as the model would be sent it (blocks; a
        tokenization, no evaluation). None when it cannot be counted, or the session
        moved on from ``generation``."""
        messages = self._messages()
        with self.engine_lock:
            if not self.is_current(generation):
                return None
            return self._count(messages)

    def _count(self, messages: list[ChatMessage]) -> int | None:
        try:
            return self.backend.count_tokens(messages, self.conversation.params.thinking)
        except Exception:
            # Only a meter: the generation reports real problems.
            log.debug("could not count the context", exc_info=True)
            return None

    def rebuild_cache(self, generation: int, tools: tuple[ToolSpec, ...] = ()) -> int | None:
        """Evaluate the opened conversation into the KV cache, so its next reply evaluates
        only the new prompt (blocks). Returns the tokens the cache holds, or None when
        the session moved on or no model is loaded."""
        messages = self._messages()
        with self.engine_lock:
            if not self.is_current(generation) or self.info is None:
                return None
            self._reset_pending = False
            try:
                # The next replies' tools: listed in the prompt as they will be.
                if tools:
                    return self.backend.prefill(messages, self.conversation.params.thinking, tools)
                return self.backend.prefill(messages, self.conversation.params.thinking)
            except VibechatError as exc:
                # Too long for the context: the next reply trims it.
                log.info("cache not rebuilt: %s", exc)
            except Exception:
                # A cache rebuild is an optimisation.
                log.exception("cache rebuild failed")
            try:
                self.backend.reset()
            except Exception:
                # The next reply reports an engine that is gone.
                log.debug("reset after a failed rebuild failed", exc_info=True)
            return 0
