"""The attachments waiting to go with the next prompt, one line each above the input, and the
offer to attach a pasted path ("Attach photo.png? Enter attach · Esc keep the text").

The tray holds what is pending (``attachments``) and shows it; it posts ``Changed`` whenever
that changes (the input learns it may send a prompt that is only attachments) and
``RemoveRequested`` when a line asks to go (Delete or Backspace on a focused line). Hidden while
empty: a chat with nothing attached looks as it always did.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Static

from vibechat.engine.turns.attachments import Attachment

from .. import outside
from ..one_layout import SizedByLayout

# The attachments one prompt may carry at most.
MAX_PENDING = 16


class TrayItem(Static, can_focus=True):
    """One pending attachment's line; Delete (or Backspace) removes it."""

    DEFAULT_CSS = """
    TrayItem {
        height: 1;
        color: $text-muted;
    }
    TrayItem:focus {
        background: $boost;
        color: $text;
    }
    """
    BINDINGS = [
        Binding(
            "delete,backspace",
            "remove",
            "Remove the attachment",
            id="attachment.remove",
            show=False,
        )
    ]

    def __init__(self, attachment: Attachment, index: int) -> None:
        icon = "🖼" if attachment.is_image else "📄"
        note = f" · {attachment.note}" if attachment.note else ""
        super().__init__(outside.line(f"{icon} {attachment.label()}{note}", limit=None))
        self.attachment = attachment
        self.index = index

    def on_focus(self) -> None:
        self.update(
            outside.line(
                f"{'🖼' if self.attachment.is_image else '📄'} {self.attachment.label()}"
                "   Delete removes it",
                limit=None,
            )
        )

    def on_blur(self) -> None:
        icon = "🖼" if self.attachment.is_image else "📄"
        note = f" · {self.attachment.note}" if self.attachment.note else ""
        self.update(outside.line(f"{icon} {self.attachment.label()}{note}", limit=None))

    def action_remove(self) -> None:
        self.post_message(AttachmentTray.RemoveRequested(self.index))


class AttachmentTray(SizedByLayout, Vertical):
    """See the module docstring."""

    DEFAULT_CSS = """
    AttachmentTray {
        height: auto;
        max-height: 8;
        margin: 0 2;
        display: none;
    }
    AttachmentTray.-shown {
        display: block;
    }
    AttachmentTray > .tray--offer {
        height: auto;
        color: $warning;
        display: none;
    }
    AttachmentTray > .tray--offer.-shown {
        display: block;
    }
    """

    class Changed(Message):
        """What is pending changed: ``count`` attachments now."""

        def __init__(self, count: int) -> None:
            super().__init__()
            self.count = count

    class RemoveRequested(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.attachments: tuple[Attachment, ...] = ()
        # The pasted file's name an offer is open for ("": none).
        self.offering = ""

    def compose(self) -> ComposeResult:
        yield Static("", classes="tray--offer")

    @property
    def full(self) -> bool:
        return len(self.attachments) >= MAX_PENDING

    async def add(self, attachment: Attachment) -> bool:
        """Pending from now; False when it is pending already (the same file twice)."""
        if any(
            a.digest == attachment.digest and a.kind == attachment.kind for a in self.attachments
        ):
            return False
        await self.set_pending((*self.attachments, attachment))
        return True

    async def drop(self, index: int) -> Attachment | None:
        if not 0 <= index < len(self.attachments):
            return None
        gone = self.attachments[index]
        await self.set_pending(self.attachments[:index] + self.attachments[index + 1 :])
        return gone

    async def take(self) -> tuple[Attachment, ...]:
        """Everything pending, out of the tray (it goes with a prompt)."""
        taken = self.attachments
        if taken:
            await self.set_pending(())
        return taken

    async def give_back(self, attachments: tuple[Attachment, ...]) -> None:
        """Attachments back into the tray (an edited prompt's, a queued prompt's given back),
        before what is pending now."""
        kept = {(a.digest, a.kind) for a in attachments}
        await self.set_pending(
            (*attachments, *(a for a in self.attachments if (a.digest, a.kind) not in kept))
        )

    async def set_pending(self, attachments: tuple[Attachment, ...]) -> None:
        had_focus = any(item.has_focus for item in self.query(TrayItem))
        self.attachments = tuple(attachments)
        await self.remove_children(list(self.query_children(TrayItem)))
        if self.attachments:
            await self.mount_all([TrayItem(a, i) for i, a in enumerate(self.attachments)])
        self._shown()
        items = list(self.query_children(TrayItem))
        # A line removed with Delete: the last line takes the focus.
        if had_focus and items:
            items[-1].focus()
        self.post_message(self.Changed(len(self.attachments)))

    def offer(self, name: str | None) -> None:
        """Show the offer to attach a pasted path (``name``), or hide it (``None``)."""
        self.offering = name or ""
        line = self.query_one(".tray--offer", Static)
        if name:
            line.update(
                outside.line(f"Attach {name}? Enter attach · Esc keep the text", limit=None)
            )
        line.set_class(bool(name), "-shown")
        self._shown()

    def _shown(self) -> None:
        self.set_class(bool(self.attachments or self.offering), "-shown")
