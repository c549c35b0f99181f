"""A prompt sent while a reply is on its way waits in the input (``PromptInput.queue``): this
controller shows it in a line above the input (``QueuedNote``) and has the tray's attachments go
with it. When it goes is the replies controller's (replies.py): sent next after a reply that
ends on its own, given back into the input, unsent, after one that is stopped, fails or is left.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widget import Widget

from ..widgets.prompt_input import PromptInput
from ..widgets.queued_note import QueuedNote
from .host import ChatHost

if TYPE_CHECKING:
    from .host import Handlers


class QueuedPrompts:
    """The queued prompt's line above the input, and its attachments."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host

    def handlers(self) -> Handlers:
        """The messages this controller answers (the app hands them here)."""
        return {PromptInput.QueueChanged: self.changed}

    async def changed(self, message: PromptInput.QueueChanged) -> None:
        """A prompt was queued (it takes the tray's attachments with it) or left the queue (given
        back unsent: its attachments come back to the tray; sent: they went with it)."""
        if message.text is not None:
            await self.host.attachments.hold_for_queue()
        else:
            await self.host.attachments.queue_left()
        await self.show(message.text)

    async def show(self, text: str | None) -> None:
        """The line above the input that shows the queued message (``None``: none now)."""
        prompt = self.host.prompt_input
        area = prompt.parent
        if not isinstance(area, Widget):  # the app is closing
            return
        notes = list(area.query_children(QueuedNote))
        if text is None:
            await area.remove_children(notes)
        elif notes:
            notes[0].show(text)
        else:
            await area.mount(QueuedNote(text), before=prompt)
