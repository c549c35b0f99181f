"""Ctrl+R: a new reply in place of one on screen. The focused reply, else the last one (a failed
one too, after its prompt), leaves the screen and the conversation's branch; the replies
controller (replies.py) answers the prompt again. The replaced reply stays saved, as the new
one's sibling (‹ 1/2 ›: ← on the new one switches back); before the last, the branch on screen
ends at its prompt and the new reply starts a sibling branch."""

from __future__ import annotations

from ..conversation.assistant_message import AssistantMessage
from ..conversation.messages import ChatMessageWidget
from .host import ChatHost


class Regenerations:
    """Takes a reply back and has the replies controller answer its prompt again."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host

    async def regenerate(self) -> None:
        """A new reply in place of the focused reply, else the last one (and a failed one after
        the prompt). The replaced reply stays saved, as its sibling (‹ 1/2 ›: ← switches back)."""
        host, replies = self.host, self.host.replies
        focused = host.focused
        if isinstance(focused, AssistantMessage) and focused.message_id is not None:
            later = replies.after(focused)
            if later and not host.state.generating:
                await self._regenerate_earlier(focused, later)
                return
        session = host.session
        if host.state.generating:
            host.notify(
                "Still answering: press Esc to stop the reply, then Ctrl+R to regenerate it.",
                severity="warning",
                timeout=4,
            )
            return
        if not session.chat.conversation.turns:
            # an empty chat: its Ctrl+R reopens the last chat when there is one (conversations.py)
            reopen = "" if host.sidebar.summaries else " (and no saved conversation to reopen)"
            host.notify(f"Nothing to regenerate yet{reopen}: send a message first.", timeout=4)
            return
        if not await replies.catch_up():
            return
        session.chat.drop_last_reply()
        widgets = host.chat.messages()
        if widgets and widgets[-1].role == "assistant":
            await widgets[-1].remove()
        # A prompt, or tools' results.
        if session.chat.conversation.last_role in ("user", "tool"):
            await replies.start()
        else:
            session.stop_writing()

    async def _regenerate_earlier(
        self, widget: ChatMessageWidget, later: list[ChatMessageWidget]
    ) -> None:
        """Regenerate a reply before the last: the branch on screen ends at its prompt, and
        the new reply starts a sibling branch (the old one stays, one ← away)."""
        replies, session = self.host.replies, self.host.session
        if not await replies.catch_up():
            return
        assert widget.message_id is not None
        if not session.chat.take_reply(widget.message_id):
            session.stop_writing()
            return
        for other in [widget, *later]:
            await other.remove()
        await replies.start()
