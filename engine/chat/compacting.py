"""The session's compaction (issue 45), a part of ``ChatSession`` (engine/chat/session.py):
``/compact``'s summary and its acceptance, the context policy before a reply (``stop`` refuses a
prompt that would overflow, ``compact`` summarises first), and what a reply left out to fit the
context, as ``run --json`` reports it. What a summary is and how it is checked is
engine/chat/compaction.py's; the branch it starts, ``ChatLog.compact``'s."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from ..errors import ContextOverflowError
from ..settings.limits import reply_reserve
from ..turns.backend import Backend, ChatMessage, ModelInfo
from .chatlog import ChatLog, Reply
from .compaction import (
    Compaction,
    CompactionError,
    CompactionNotice,
    ask_summary,
    checked_summary,
    compaction_point,
    grounded_summary,
    replaced_size,
    summary_messages,
    summary_params,
    summary_system,
)
from .conversation import Conversation
from .turn import Turn


class Compacting:
    """``ChatSession``'s compaction: see the module docstring."""

    backend: Backend
    chat: ChatLog
    info: ModelInfo | None
    engine_lock: threading.Lock
    # What a prompt about to overflow the context does: trim, compact or stop.
    context_policy: str
    # The last reply's turns left out to fit the context (their indices), and the last
    # compaction: what ``run --json`` reports.
    left_out_turns: list[int]
    compacted_from: dict[str, object] | None

    @property
    def conversation(self) -> Conversation:
        return self.chat.conversation

    def _messages(self) -> list[ChatMessage]:
        raise NotImplementedError

    def _count(self, messages: list[ChatMessage]) -> int | None:
        raise NotImplementedError

    def compact(
        self,
        instructions: str = "",
        upto: int | None = None,
        *,
        stop_requested: Callable[[], bool] = lambda: False,
        on_text: Callable[[str], object] | None = None,
    ) -> Compaction:
        """The model's summary of the conversation's turns, up to the ``upto``-th (None: all;
        whole turns: engine/chat/compaction.py ``compaction_point``), with the user's
        ``instructions`` (blocks: a worker's job). Nothing is replaced yet
        (:meth:`accept_compaction`). ``CompactionError`` in one line: nothing to compact, a
        summary empty or not shorter than what it replaces, stopped."""
        kept = compaction_point(self.conversation.turns, upto)
        with self.engine_lock:
            return self._summarise(kept, instructions, stop_requested, on_text)

    def _summarise(
        self,
        kept: int,
        instructions: str,
        stop_requested: Callable[[], bool],
        on_text: Callable[[str], object] | None,
    ) -> Compaction:
        """The summary of the turns before ``kept`` (and of an earlier summary), checked; the
        engine lock held by the caller."""
        conversation = self.conversation
        replaced = [turn.inlined() for turn in conversation.turns[:kept]]
        if not replaced:
            raise CompactionError(
                "nothing to compact: no whole turn comes before the prompt (compact a longer "
                "conversation, or up to a later message)."
            )
        if self.info is not None and not self.info.takes_images:
            replaced = [replace(m, attachments=()) if m.attachments else m for m in replaced]
        size = replaced_size(replaced) + len(conversation.summary or "")
        system = summary_system(conversation.system, conversation.summary)
        messages = summary_messages(system, replaced, instructions)
        context = self.info.context_size if self.info is not None else None
        params = summary_params(conversation.params.with_seed(), context)
        text = ask_summary(self.backend, messages, params, stop_requested, on_text)
        return Compaction(grounded_summary(checked_summary(text, size), replaced), kept, size)

    def accept_compaction(self, compaction: Compaction, text: str | None = None) -> list[int]:
        """Go on from a new branch that starts with the summary (``text``: as the user edited
        it, checked again) and holds the turns after what it replaces; the original branch
        stays saved as it was. Returns the new branch's saved ids (the summary's first; none
        when the conversation is not saved). Then :meth:`rebuild_cache` in a worker: the new
        branch's prefix is evaluated once and kept as a KV snapshot."""
        summary = checked_summary(
            compaction.summary if text is None else text, compaction.replaced_chars
        )
        if compaction.kept > len(self.conversation.turns):
            raise CompactionError("the conversation changed meanwhile: nothing was replaced.")
        return self._compacted(compaction.kept, summary)

    def _compacted(self, kept: int, summary: str, reply: Reply | None = None) -> list[int]:
        """``ChatLog.compact``, remembered as ``compacted_from``: the original branch's message
        the summary replaces up to, the summary's id, and how many turns it replaces."""
        point = self.chat.compaction_point(kept)
        ids = self.chat.compact(kept, summary, reply=reply)
        self.compacted_from = {
            "message_id": point if ids else None,
            "summary_id": ids[0] if ids else None,
            "replaced_messages": kept,
        }
        return ids

    def _keep_to_context(
        self,
        turn: Turn,
        on_compact: Callable[[CompactionNotice], object] | None,
        stop_requested: Callable[[], bool] | None,
    ) -> None:
        """The context policy for ``turn``'s prompt when it is about to overflow (it and room
        for the reply do not fit): ``stop`` refuses it (``ContextOverflowError``, one line naming
        the choices); ``compact`` has the model summarise the turns before the prompt, and the
        reply goes on in the new branch; a summary refused says so in ``on_compact`` and the
        oldest messages are left out instead. The engine lock is held."""
        n_ctx = self.info.context_size if self.info is not None else 0
        tokens = self._count(turn.messages)
        if (
            not n_ctx
            or tokens is None
            or tokens + reply_reserve(turn.params.max_tokens, n_ctx) <= n_ctx
        ):
            return
        if self.context_policy == "stop":
            raise ContextOverflowError(
                f"the conversation takes {tokens:,} tokens and no longer fits the context "
                f"({n_ctx:,}, with room for the reply): compact it (/compact, run --compact), set "
                "context_policy to trim (leave out the oldest messages) or compact, or raise --ctx."
            )
        turns = self.conversation.turns
        kept = max((i for i, t in enumerate(turns) if t.role == "user"), default=0)
        try:
            compaction = self._summarise(kept, "", stop_requested or (lambda: False), None)
        except CompactionError as exc:
            if on_compact is not None:
                on_compact(CompactionNotice(problem=f"{exc} The oldest messages are left out."))
            return
        self._compacted(compaction.kept, compaction.summary, reply=turn.record)
        turn.messages = self._messages()
        if on_compact is not None:
            on_compact(CompactionNotice(summary=compaction.summary, replaced=kept))

    def left_out(self, turn: Turn, indices: tuple[int, ...]) -> list[int]:
        """The conversation's turn indices of ``turn``'s messages the backend left out
        (``ContextTrimmed.left_out``: indices in what it was sent, the system prompt first)."""
        offset = 1 if turn.messages and turn.messages[0].role == "system" else 0
        return [i - offset for i in indices if i >= offset]

    def left_out_messages(self) -> list[dict[str, object]]:
        """The last reply's messages left out to fit the context, as ``run --json`` lists them:
        each one's place among the conversation's turns (from 0), its saved id (None: not
        saved) and role."""
        turns = self.conversation.turns
        return [
            {"index": i, "id": self.chat.row_of(i), "role": turns[i].role}
            for i in self.left_out_turns
            if i < len(turns)
        ]
