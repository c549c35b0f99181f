"""A conversation kept in step with its saved copy.

``ChatLog`` wraps a :class:`Conversation` and, when given a :class:`History`,
saves every change as it happens: the conversation is created with its first
prompt (an empty "new chat" leaves nothing behind), the user's message is saved
before generation starts, the reply while it streams. The TUI and ``vibechat run``
both go through here, so they save the same way.

Saving never stops a chat: after a failed write the log keeps the conversation in
memory, reports the problem once through ``problem`` and stops saving.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from ..settings.params import SamplingParams
from ..turns.attachments import Attachment
from ..turns.backend import ChatMessage, GenerationDone, TokenCandidates
from .conversation import Conversation
from .database import HistoryError
from .history import History
from .records import StoredConversation, StoredMessage
from .reply_writer import ReplyWriter
from .titles import title_from

log = logging.getLogger("vibechat.history")


@dataclass
class Reply:
    """A reply being generated: what the log needs to settle it."""

    writer: ReplyWriter | None
    # A save while it streamed failed: reported when it ends.
    failed: HistoryError | None = None

    def append(self, text: str) -> None:
        """Called with every piece of text as it streams (from the generating thread)."""
        if self.writer is not None:
            try:
                self.writer.append(text)
            except HistoryError as exc:
                # Reported when the reply ends; keep generating.
                self._failed(exc)

    def append_thinking(self, text: str) -> None:
        """Called with every piece of the reply's thinking (saved apart from the text)."""
        if self.writer is not None:
            try:
                self.writer.append_thinking(text)
            except HistoryError as exc:
                self._failed(exc)

    def append_candidates(self, step: TokenCandidates) -> None:
        """A step of the token lens (kept with the reply, bounded: ``ReplyWriter``)."""
        if self.writer is not None:
            self.writer.add_candidates(step)

    def _failed(self, exc: HistoryError) -> None:
        log.warning("could not save the reply while it streams: %s", exc)
        self.writer, self.failed = None, exc


class ChatLog:
    def __init__(
        self,
        conversation: Conversation,
        history: History | None = None,
        *,
        model: str | None = None,
        model_path: str | None = None,
        source: str = "chat",
    ) -> None:
        self.conversation = conversation
        # Where a new conversation is saved as coming from: chat, run, batch.
        self.source = source
        self.history = history
        self.model = model
        self.model_path = model_path
        self.conversation_id: int | None = None
        self.title: str | None = None
        # The first save that failed, for the UI to show.
        self.problem: str | None = None
        # Saved message ids, aligned with conversation.turns.
        self._rows: list[int] = []
        # The saved branch on screen as (message id, role), first message to last, failed
        # replies included: each row's parent is the one before it (``leaf`` is the last). A new
        # message follows it.
        self._path: list[tuple[int, str]] = []
        # Tool call id -> the name the model called it by.
        self._call_names: dict[str, str] = {}
        # The newest message id this log read or wrote: another writer's turns come after it.
        self.seen = 0
        # A compacted branch's summary message (None: the branch starts with no summary).
        self.summary_id: int | None = None

    # -------------------------------------------------------------- opening
    @classmethod
    def open(cls, history: History, conversation_id: int) -> ChatLog:
        """A saved conversation, ready to continue: its system prompt and parameters come
        back, and its turns are what the model sees (failed replies are left out)."""
        return cls.from_stored(history.get(conversation_id), history)

    @classmethod
    def from_stored(cls, stored: StoredConversation, history: History | None) -> ChatLog:
        conversation = Conversation(system=stored.system, params=stored.params)
        chat = cls(conversation, history, model=stored.summary.model, model_path=stored.model_path)
        chat.conversation_id = stored.id
        chat.title = stored.title
        streaming = False
        for message in stored.messages:
            # A reply still being written (by another vibechat: a crash's was repaired when the
            # history opened) is read again once done (take_in): ``seen`` stops before it.
            streaming = streaming or message.status == "streaming"
            chat.seen = chat.seen if streaming else message.id
            chat._path.append((message.id, message.role))
            if message.is_summary:
                # The model reads it in the system prompt (Conversation.messages).
                conversation.summary, chat.summary_id = message.content, message.id
                continue
            chat._call_names.update((call.id, call.name) for call in message.tool_calls)
            if message.in_context:
                conversation.turns.append(message.chat_message(chat._call_names))
                chat._rows.append(message.id)
        return chat

    @property
    def leaf(self) -> int | None:
        """The last saved message of the branch on screen (None: nothing saved yet)."""
        return self._path[-1][0] if self._path else None

    @property
    def saving(self) -> bool:
        return self.history is not None

    def set_model(self, name: str | None, path: str | None) -> None:
        self.model, self.model_path = name, path

    # ---------------------------------------------------------------- saving
    def _save(self, what: str, fn, *args, **kwargs):
        if self.history is None:
            return None
        try:
            return fn(*args, **kwargs)
        except HistoryError as exc:
            self._stop_saving(what, exc)
            return None

    def _stop_saving(self, what: str, exc: HistoryError) -> None:
        if self.history is not None:
            # One line, said once: what could not be saved and why (the error names the
            # file, the reason and the fix); the conversation itself stays in memory.
            self.problem = f"saving stopped ({what} failed): {exc}"
            log.warning("could not %s: %s", what, exc)
            self.history = None

    def add_user(self, text: str, attachments: tuple[Attachment, ...] = ()) -> ChatMessage:
        """The prompt, saved before any generation starts, with its attachments (their rows in
        the same transaction as the prompt's; their copies kept already by engine/attach)."""
        attachments = tuple(attachments)
        message = self.conversation.add_user(text, attachments)
        if self.history is not None and self.conversation_id is None:
            # A prompt that is only attachments is titled by the first one's name.
            self.title = title_from(
                text if text.strip() or not attachments else attachments[0].name
            )
            self.conversation_id = self._save(
                "save the conversation",
                self.history.create,
                title=self.title,
                model=self.model,
                model_path=self.model_path,
                system=self.conversation.system,
                params=self.conversation.params,
                source=self.source,
            )
        if self.conversation_id is not None and self.history is not None:
            row = self._save(
                "save the prompt",
                self.history.add_message,
                self.conversation_id,
                "user",
                text,
                parent_id=self.leaf,
                attachments=attachments,
            )
            if row is not None:
                self._rows.append(row)
                self._path.append((row, "user"))
                self.seen = max(self.seen, row)
        return message

    def start_reply(self) -> Reply:
        """A reply row (status 'streaming') saved before the first token."""
        writer = None
        if self.conversation_id is not None and self.history is not None:
            # The settings this reply was generated with come back when the chat is opened.
            self._save(
                "save the settings",
                self.history.set_settings,
                self.conversation_id,
                system=self.conversation.system,
                params=self.conversation.params,
                model=self.model,
                model_path=self.model_path,
            )
            row = self._save(
                "save the reply",
                self.history.add_message,
                self.conversation_id,
                "assistant",
                "",
                "streaming",
                parent_id=self.leaf,
            )
            if row is not None and self.history is not None:
                writer = ReplyWriter(self.history, row)
                self._path.append((row, "assistant"))
                self.seen = max(self.seen, row)
        return Reply(writer)

    def finish_reply(self, reply: Reply, done: GenerationDone) -> None:
        """The reply is part of the conversation (its answer: the thinking is saved, never
        sent to the model again, and the tool calls it asks for); saved as complete, cut (by
        a limit), or stopped."""
        self.conversation.turns.append(
            ChatMessage("assistant", done.text, tool_calls=done.tool_calls)
        )
        self._call_names.update((call.id, call.name) for call in done.tool_calls)
        status = {"cancelled": "stopped", "length": "cut"}.get(done.finish_reason, "complete")
        if reply.failed is not None:
            self._stop_saving("save the reply", reply.failed)
        if reply.writer is not None and self.history is not None:
            self._save(
                "save the reply",
                reply.writer.finish,
                status,
                done.text,
                params=done.params,
                stats=done.stats.to_dict(),
                thinking=done.thinking,
                tool_calls=done.tool_calls,
            )
            self._rows.append(reply.writer.message_id)
        else:
            # Not saved: keeps the rows aligned with the turns.
            self._rows.append(0)

    def fail_reply(self, reply: Reply, error: str, partial: str | None = None) -> None:
        """A reply that failed: saved with its partial text and the error; not sent to the
        model again (the prompt stays, so it can be retried).

        With ``partial`` (a stream cut mid-reply, e.g. a remote server's connection
        dropped: ``StreamInterrupted``), the text received is kept as the reply, part of
        the conversation like a stopped one, and saved with status 'interrupted' and the
        reason."""
        if reply.failed is not None:
            self._stop_saving("save the reply", reply.failed)
        if partial:
            self.conversation.add_assistant(partial)
            if reply.writer is not None and self.history is not None:
                self._save(
                    "save the reply", reply.writer.finish, "interrupted", partial, error=error
                )
                self._rows.append(reply.writer.message_id)
            else:
                self._rows.append(0)
            return
        if reply.writer is not None and self.history is not None:
            self._save("save the reply", reply.writer.finish, "error", error=error)

    def add_tool_result(
        self, call_id: str, tool: str, text: str, name: str | None = None
    ) -> int | None:
        """A tool call's result (``tool``: SERVER/NAME; ``name``: as the model called it), after
        the reply that asked for it: part of the conversation (the model reads it next) and
        saved. Returns its row."""
        name = name or self._call_names.get(call_id) or tool.rsplit("/", 1)[-1]
        self.conversation.turns.append(ChatMessage("tool", text, tool_call_id=call_id, name=name))
        row = None
        if self.conversation_id is not None and self.history is not None:
            row = self._save(
                "save the tool's result",
                self.history.add_message,
                self.conversation_id,
                "tool",
                text,
                parent_id=self.leaf,
                tool_call_id=call_id,
                tool_name=tool,
            )
        if row is not None:
            self._path.append((row, "tool"))
            self.seen = max(self.seen, row)
        self._rows.append(row or 0)
        return row

    def _cut_path(self, index: int) -> None:
        """The branch on screen now ends before its ``index``-th saved message: the turns from
        there on leave the conversation (not the history: a new message added now starts a
        sibling branch, and the one cut stays saved, one switch away)."""
        kept = {row for row, _role in self._path[:index]}
        del self._path[index:]
        keep = len(self._rows)
        while keep and self._rows[keep - 1] not in kept:
            keep -= 1
        del self.conversation.turns[keep:], self._rows[keep:]

    def drop_last_reply(self) -> ChatMessage | None:
        """To regenerate: the last reply (and a failed one after the prompt) leaves the
        branch on screen; the new reply will be its sibling, and it stays saved."""
        dropped = self.conversation.drop_last_reply()
        if not self.saving or not self._path:
            del self._rows[len(self.conversation.turns) :]
            return dropped
        index = len(self._path)
        while index and self._path[index - 1][1] == "assistant":
            index -= 1
        self._cut_path(index)
        return dropped

    def take_last_user(self) -> str | None:
        """To edit and resend the last prompt: it and what follows leave the branch on screen;
        the edited prompt will be its sibling, and it stays saved."""
        users = [row for row, role in self._path if role == "user"]
        if self.saving and users and users[-1] in self._rows:
            return self.take_user(users[-1])
        text = self.conversation.take_last_user()
        del self._rows[len(self.conversation.turns) :]
        return text

    def take_user(self, message_id: int) -> str | None:
        """To edit any earlier prompt (``message_id``, on the branch on screen): it and what
        follows leave the branch on screen; the edited prompt will be its sibling. Returns
        its text, or None when it is not on this branch."""
        if message_id not in self._rows or (message_id, "user") not in self._path:
            return None
        text = self.conversation.turns[self._rows.index(message_id)].content
        self._cut_path(self._path.index((message_id, "user")))
        return text

    def turns_before(self, message_id: int) -> list[ChatMessage] | None:
        """What the model was sent for the reply ``message_id`` (on the branch on screen, and
        part of the conversation): the turns before it. None when it is not one of them."""
        if (message_id, "assistant") not in self._path or message_id not in self._rows:
            return None
        return self.conversation.turns[: self._rows.index(message_id)]

    def take_reply(self, message_id: int) -> bool:
        """To regenerate an earlier reply (``message_id``, on the branch on screen): it and
        what follows leave the branch on screen; the new reply will be its sibling. False
        when it is not on this branch."""
        if (message_id, "assistant") not in self._path:
            return False
        self._cut_path(self._path.index((message_id, "assistant")))
        return True

    def turn_of(self, message_id: int) -> int | None:
        """The conversation's turn saved as ``message_id`` (None: not one the model is sent)."""
        return self._rows.index(message_id) if message_id in self._rows else None

    def row_of(self, index: int) -> int | None:
        """The saved id of the conversation's ``index``-th turn (None: not saved)."""
        row = self._rows[index] if 0 <= index < len(self._rows) else 0
        return row or None

    def compaction_point(self, kept: int) -> int | None:
        """The saved message a compaction keeping the turns from ``kept`` on replaces up to: the
        last message of the branch on screen before the ``kept``-th turn (a failed reply
        included). None: not saved."""
        if kept >= len(self._rows):
            return self.leaf
        row = self._rows[kept]
        index = next((i for i, (r, _role) in enumerate(self._path) if r == row), 0)
        return self._path[index - 1][0] if index > 0 else None

    def compact(self, kept: int, summary: str, reply: Reply | None = None) -> list[int]:
        """The conversation goes on from a new branch that starts with ``summary`` (replacing
        the turns before ``kept``) and holds the turns from ``kept`` on (History.compact: the
        original branch stays saved as it was). ``reply``: a reply being written, moved to the
        new branch (the ``compact`` policy compacts once its row is saved). Returns the new
        branch's saved ids (none when not saved)."""
        point = self.compaction_point(kept)
        conversation_id, history = self.conversation_id, self.history
        if history is None or conversation_id is None or point is None:
            self.conversation.summary = summary
            del self.conversation.turns[:kept], self._rows[:kept]
            return []
        moving = reply.writer.message_id if reply is not None and reply.writer else None
        leaf = self.leaf
        if moving is not None:
            leaf = self._path[-2][0] if len(self._path) > 1 else None
        try:
            assert leaf is not None
            ids = history.compact(conversation_id, point, summary, leaf, then=moving)
        except HistoryError as exc:
            self._stop_saving("save the summary", exc)
            self.conversation.summary = summary
            del self.conversation.turns[:kept], self._rows[:kept]
            return []
        self._reload()
        return ids

    def _reload(self) -> None:
        """The branch on screen read again from the history (after a compaction)."""
        assert self.history is not None and self.conversation_id is not None
        fresh = ChatLog.from_stored(self.history.get(self.conversation_id), self.history)
        self.conversation.turns = fresh.conversation.turns
        self.conversation.summary = fresh.conversation.summary
        self._rows, self._path = fresh._rows, fresh._path
        self._call_names, self.summary_id = fresh._call_names, fresh.summary_id
        self.seen = max(self.seen, fresh.seen)

    def set_pinned(self, index: int, pinned: bool) -> bool:
        """Pin (or unpin) the ``index``-th turn: a pinned message is never left out to fit the
        context (saved with it). False: no such turn."""
        if not 0 <= index < len(self.conversation.turns):
            return False
        turns = self.conversation.turns
        turns[index] = replace(turns[index], pinned=pinned)
        row = self.row_of(index)
        if row is not None and self.history is not None:
            self._save("save the pin", self.history.set_pinned, row, pinned)
        return True

    def save_settings(self) -> None:
        """Parameters or system prompt changed: remembered with the conversation."""
        if self.conversation_id is not None and self.history is not None:
            self._save(
                "save the settings",
                self.history.set_settings,
                self.conversation_id,
                system=self.conversation.system,
                params=self.conversation.params,
            )

    def set_params(self, params: SamplingParams) -> None:
        self.conversation.params = params
        self.save_settings()

    def set_system(self, system: str | None) -> None:
        self.conversation.system = system
        self.save_settings()

    def rename(self, title: str) -> None:
        if self.conversation_id is not None and self.history is not None:
            self.history.rename(self.conversation_id, title)
            self.title = " ".join(title.split())

    def clear(self) -> None:
        """A new conversation: the saved one stays as it is."""
        self.conversation.clear()
        self.conversation_id = None
        self.title = None
        self._rows = []
        self._path = []
        self._call_names = {}
        self.seen = 0
        self.summary_id = None

    def take_in(self, messages: list[StoredMessage]) -> list[StoredMessage]:
        """Turns another vibechat saved after those this log knows (``History.messages_after``
        its ``seen``): they join the conversation, so the model is sent what the history holds
        (a failed reply is shown, not sent, as when a conversation is opened). Returns the new
        ones, to show; one read while it was still being written now counts as it ended. A
        reply still being written (a writer without the lock) is left for the next time."""
        taken = []
        for message in messages:
            if message.status == "streaming":
                # Its turn is not over: it and what follows are read again next time.
                break
            self.seen = max(self.seen, message.id)
            self._call_names.update((call.id, call.name) for call in message.tool_calls)
            turn = message.chat_message(self._call_names)
            on_branch = (message.id, message.role) in self._path
            # Read when it was still being written: now as it ended.
            if on_branch and message.id in self._rows:
                index = self._rows.index(message.id)
                if message.in_context:
                    self.conversation.turns[index] = turn
                else:
                    del self.conversation.turns[index], self._rows[index]
                continue
            if not on_branch:
                # Another branch's (an edit elsewhere): one switch away.
                if message.parent_id != self.leaf:
                    continue
                self._path.append((message.id, message.role))
            taken.append(message)
            if message.in_context:
                self.conversation.turns.append(turn)
                self._rows.append(message.id)
        return taken
