"""A conversation: system prompt, sampling parameters and the ordered turns.

Plain data with the few edits a chat UI needs (append, regenerate, edit the last
message); the UI renders it, the backend consumes ``messages()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..settings.params import SamplingParams
from ..turns.attachments import Attachment
from ..turns.backend import ChatMessage
from .compaction import summary_system


@dataclass
class Conversation:
    system: str | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    turns: list[ChatMessage] = field(default_factory=list)
    # A compacted conversation's summary of what came before its turns
    # (engine/chat/compaction.py); None: not compacted.
    summary: str | None = None

    def messages(self) -> list[ChatMessage]:
        """What the backend sees: the system prompt (if any, with the summary of a compacted
        conversation after it) and every turn, each turn's text files inlined
        (``ChatMessage.inlined``)."""
        system = summary_system(self.system, self.summary)
        head = [ChatMessage("system", system)] if system else []
        return head + [turn.inlined() for turn in self.turns]

    def add_user(self, text: str, attachments: tuple[Attachment, ...] = ()) -> ChatMessage:
        """The user's prompt, with its images and files (kept already: engine/attach)."""
        message = ChatMessage("user", text, attachments=tuple(attachments))
        self.turns.append(message)
        return message

    def add_assistant(self, text: str) -> ChatMessage:
        message = ChatMessage("assistant", text)
        self.turns.append(message)
        return message

    @property
    def last_role(self) -> str | None:
        return self.turns[-1].role if self.turns else None

    def drop_last_reply(self) -> ChatMessage | None:
        """Remove the last assistant message (to regenerate it); returns it."""
        if self.turns and self.turns[-1].role == "assistant":
            return self.turns.pop()
        return None

    def take_last_user(self) -> str | None:
        """Remove the last user message and the reply after it (to edit and resend);
        returns the user's text."""
        self.drop_last_reply()
        if self.turns and self.turns[-1].role == "user":
            return self.turns.pop().content
        return None

    def clear(self) -> None:
        self.turns.clear()
        self.summary = None
