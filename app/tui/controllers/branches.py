"""A saved conversation's branches: an edited prompt or a regenerated reply is saved beside
the one it replaces (‹ 1/2 ›). ← / → on a message shows its previous or next sibling, with the
conversation that follows it (``ChatMessageWidget.BranchRequested``: the conversation reopens
on that branch); the palette's "Fork this branch" copies the branch on screen into a new
conversation of its own, and the original keeps every branch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vibechat.engine.errors import VibechatError

from ..conversation.messages import ChatMessageWidget
from .host import ChatHost

if TYPE_CHECKING:
    from .host import Handlers


class Branches:
    """Switches a conversation between its branches, and forks one off."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host

    def handlers(self) -> Handlers:
        """The messages this controller answers (the app hands them here)."""
        return {ChatMessageWidget.BranchRequested: self.switch}

    def switch(self, message: ChatMessageWidget.BranchRequested) -> None:
        """A message's previous or next sibling (← / → on it) is shown instead, with the
        conversation that follows it (its newest branch): the conversation reopens on it."""
        host, chat = self.host, self.host.session.chat
        if host.history is None or chat.conversation_id is None:
            return
        if host.state.generating:
            host.notify(
                "Still answering: press Esc to stop the reply, then switch versions.",
                severity="warning",
                timeout=4,
            )
            return
        try:
            siblings = host.history.siblings(message.message_id)
        except VibechatError as exc:
            host.notify(str(exc), severity="error")
            return
        if message.message_id not in siblings:
            return
        index = siblings.index(message.message_id) + message.step
        if 0 <= index < len(siblings):
            host.chats.open_conversation(chat.conversation_id, jump_to=siblings[index])

    def fork(self) -> None:
        """The branch on screen, copied into a new conversation that opens (the palette's
        "Fork this branch"); the original keeps every branch."""
        host, chat = self.host, self.host.session.chat
        if host.history is None or chat.conversation_id is None or chat.leaf is None:
            host.notify(
                "This conversation is not saved yet: send a message first.", severity="warning"
            )
            return
        if host.state.generating:
            host.notify(
                "Still answering: press Esc to stop the reply, then fork.",
                severity="warning",
                timeout=4,
            )
            return
        try:
            new = host.history.fork(chat.conversation_id, chat.leaf)
        except VibechatError as exc:
            host.notify(str(exc), severity="error")
            return
        # The fork joins the list.
        host.chats.list_history()
        host.chats.open_conversation(new)
        host.notify("Forked: this branch goes on as a conversation of its own.", timeout=4)
