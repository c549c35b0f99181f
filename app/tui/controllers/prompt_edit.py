"""Ctrl+L: a prompt taken back into the input to edit and resend, and Esc to put it back.

Ctrl+L takes the focused prompt, else the last one, back into the input (``edit_last``); it and
what followed leave the screen (they stay saved: the edited prompt, once sent, becomes their
sibling). While it is edited, a line above the input says so (``EditingNote``: "editing · Esc
cancels"), and Esc (``cancel``) puts the conversation back as it was: it is read again as it is
saved, the message and its reply back on screen, and the input and the tray go back to what they
held before Ctrl+L. A reply that starts (the edited prompt sent), a new chat or another
conversation ends the edit (``end``). A chat that is not saved (history off) has no way back:
its line says only "editing".
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from textual.widget import Widget

from vibechat.engine.chat.session import ChatSession
from vibechat.engine.turns.attachments import Attachment

from ..chat_state import ChatState
from ..conversation.attachment_view import UserMessage
from ..conversation.messages import ChatMessageWidget
from ..widgets.queued_note import EditingNote
from .host import ChatHost


class Replies(Protocol):
    """What the edit uses of the replies controller that owns it (replies.py)."""

    host: ChatHost

    @property
    def session(self) -> ChatSession: ...
    @property
    def state(self) -> ChatState: ...
    def abandon(self) -> None: ...
    async def catch_up(self) -> bool: ...
    def after(self, widget: ChatMessageWidget) -> list[ChatMessageWidget]: ...
    def count_context(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class Editing:
    """A prompt taken back into the input with Ctrl+L, being edited: what Esc puts back."""

    # The saved conversation, reopened as it was (None: not saved, no way back).
    conversation_id: int | None
    # The input's text before Ctrl+L.
    draft: str
    # The tray's attachments before Ctrl+L.
    tray: tuple[Attachment, ...]


class PromptEdit:
    """The edit of a prompt taken back (Ctrl+L), for the replies controller that owns it."""

    def __init__(self, replies: Replies) -> None:
        self.replies = replies
        # The edit in progress.
        self.editing: Editing | None = None
        # As things were at the last Ctrl+L.
        self._before: Editing | None = None

    async def _edit_earlier(self, widget: ChatMessageWidget) -> bool:
        """Take a prompt before the last back into the input: the branch on screen ends
        before it, and sending starts a sibling branch (the old one stays, one ← away)."""
        host = self.replies.host
        assert widget.message_id is not None
        self.replies.abandon()
        if not await self.replies.catch_up():
            return True
        text = self.replies.session.chat.take_user(widget.message_id)
        self.replies.session.stop_writing()
        if text is None:
            return False
        for other in [widget, *self.replies.after(widget)]:
            await other.remove()
        # Its attachments come back to the tray too.
        if isinstance(widget, UserMessage):
            await host.attachments.give_back(widget.attachments)
        await self._took_back(text)
        return True

    async def _took_back(self, text: str) -> None:
        """``text`` taken back: into the input, and the edit begins (its line above the input)."""
        host = self.replies.host
        self.editing = self._before
        await self.show()
        # A draft in the input stays as it is, after it.
        host.prompt_input.give_back(text)
        host.prompt_input.focus()
        host.refresh_bindings()
        # The meter leaves the turn taken back out.
        if not self.replies.session.conversation.turns:
            self.replies.state.context_used = 0
        elif self.replies.state.model_ready:
            self.replies.count_context()

    async def edit_last(self) -> None:
        """Take the focused prompt, else the last one, back into the input (and what followed
        it off the screen: it stays saved, and the edited prompt becomes its sibling)."""
        host = self.replies.host
        chatlog = self.replies.session.chat
        # A second Ctrl+L while editing: Esc still goes back to before the first.
        if self.editing is None:
            self._before = Editing(
                chatlog.conversation_id if chatlog.saving else None,
                host.prompt_input.text,
                host.attachments.pending,
            )
        focused = host.focused
        if (
            isinstance(focused, ChatMessageWidget)
            and focused.role == "user"
            and focused.message_id is not None
            and any(w.role == "user" for w in self.replies.after(focused))
        ):
            if await self._edit_earlier(focused):
                return
        if not any(turn.role == "user" for turn in self.replies.session.conversation.turns):
            host.notify(
                "Nothing to edit yet: Ctrl+L takes your last message back into the input "
                "once you have sent one.",
                timeout=4,
            )
            return
        self.replies.abandon()
        caught_up = await self.replies.catch_up()
        text = self.replies.session.chat.take_last_user() if caught_up else None
        self.replies.session.stop_writing()
        if text is None:
            return
        widgets = host.chat.messages()
        while widgets:
            last = widgets.pop()
            await last.remove()
            if last.role == "user":
                # Its attachments come back to the tray too.
                if isinstance(last, UserMessage):
                    await host.attachments.give_back(last.attachments)
                break
        await self._took_back(text)

    @property
    def can_cancel(self) -> bool:
        """Esc puts the conversation back as it was before Ctrl+L (a saved one, no reply on its
        way)."""
        return (
            self.editing is not None
            and self.editing.conversation_id is not None
            and not self.replies.state.generating
        )

    async def cancel(self) -> None:
        """Esc while editing a prompt taken back: the conversation is read again as it is saved (the
        message and its reply back on screen), the input and the tray as they were before Ctrl+L."""
        editing = self.editing
        if editing is None or editing.conversation_id is None or not self.can_cancel:
            return
        await self.end()
        prompt = self.replies.host.prompt_input
        prompt.load_text(editing.draft)
        prompt.move_cursor(prompt.document.end)
        await self.replies.host.attachments.take()
        await self.replies.host.attachments.give_back(editing.tray)
        self.replies.host.chats.reopen(editing.conversation_id)

    async def end(self) -> None:
        """The edit is over (sent, cancelled, another conversation): its line goes."""
        if self.editing is not None:
            self.editing = None
            await self.show()
            self.replies.host.refresh_bindings()

    async def show(self) -> None:
        """The line above the input that says a prompt is being edited (none when not)."""
        prompt = self.replies.host.prompt_input
        area = prompt.parent
        if not isinstance(area, Widget):  # the app is closing
            return
        notes = list(area.query_children(EditingNote))
        if self.editing is None:
            await area.remove_children(notes)
        elif not notes:
            await area.mount(EditingNote(self.editing.conversation_id is not None), before=prompt)
