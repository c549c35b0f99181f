"""The scrolling conversation (``ChatView``): the list of messages (``messages.py``; a reply's
own is ``assistant_message.py``), the welcome line and its offer while it is empty.

The view is anchored to the bottom while the user stays there; scrolling up releases the
anchor, so reading is never yanked back. A printable key or a paste while the view or a
message has the focus belongs in the input (``TypesIntoInput``).

Every text shown here may come from outside (a model name in the welcome, a conversation's
title in the offer): it is sanitised and shown as text, never read as markup (``outside``).
"""

from __future__ import annotations

from typing import TypeVar

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.layout import Layout
from textual.widget import Widget
from textual.widgets import Static

from .. import outside
from ..laid_out import LaidOut
from ..one_layout import KeptColumn, StableGutterScroll
from ..widgets.type_through import TypesIntoInput
from .earlier_messages import EarlierMessages
from .messages import ChatMessageWidget

W = TypeVar("W", bound=Widget)


class ChatView(TypesIntoInput, StableGutterScroll, VerticalScroll):
    """The scrollable list of messages. Focus it (Tab) for PgUp/PgDn/Home/End scrolling;
    from the input, PgUp/PgDn scroll it too. A printable key pressed while it or a message
    has focus is posted as ``Typed``: it belongs in the input (a paste too, whole)."""

    DEFAULT_CSS = """
    ChatView {
        height: 1fr;
        padding: 1 0 0 0;
        scrollbar-gutter: stable;
    }
    ChatView > .chat--empty {
        color: $text-muted;
        margin: 1 2;
    }
    ChatView > .chat--offer {
        color: $text-accent;
        margin: 0 2 1 2;
        display: none;
    }
    ChatView > .chat--offer.-shown {
        display: block;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._column = KeptColumn()

    @property
    def layout(self) -> Layout:
        """A column that keeps the places of the messages above the one that changed: a new
        reply, its new words and segments, or a layout asked for elsewhere on the screen never
        ask the messages above it their size again (``one_layout.KeptColumn``)."""
        return self._column

    def compose(self) -> ComposeResult:
        yield Static("", classes="chat--empty")
        yield Static("", classes="chat--offer")

    def set_welcome(self, text: str) -> None:
        """The line an empty chat shows (it names the model): shown as text, sanitised, broken
        between its `` · `` parts, else between words (never inside a word at 80 columns)."""
        self.query_one(".chat--empty", Static).update(LaidOut.text(text))

    def set_offer(self, text: str | None) -> None:
        """The welcome's offer under it (the last conversation and its key); None: none. Shown
        as text, sanitised."""
        offer = self.query_one(".chat--offer", Static)
        offer.update(outside.block(text or ""))
        offer.set_class(text is not None, "-shown")

    def on_mount(self) -> None:
        self.anchor()

    async def add(self, widget: W, follow: bool = True) -> W:
        """Mount a message; ``follow`` (the user just sent something) re-anchors to the bottom.
        Streaming text never re-anchors: once the user scrolls up, they stay where they are."""
        await self.mount(widget)
        if follow:
            self.anchor()
        return widget

    async def add_all(self, widgets: list, follow: bool = True) -> None:
        """Mount many messages in one go (an opened conversation)."""
        if widgets:
            await self.mount_all(widgets)
        if follow:
            self.anchor()

    async def clear(self) -> None:
        await self.query("ChatMessageWidget, EarlierMessages, CompareView").remove()
        self.anchor()

    def scroll_pages(self, pages: int) -> None:
        if pages < 0:
            self.action_page_up()
        else:
            self.action_page_down()

    def scroll_to_start(self) -> None:
        # The start really is the start: the stand-ins show what they stand for.
        for stand_in in self.query(EarlierMessages):
            stand_in.action_show()
        self.release_anchor()
        self.scroll_home(animate=False)

    def focus_newest(self) -> bool:
        """Focus the newest message, scrolled into view (Tab from the input), or the comparison
        below it, whose keys (1 / 2 pick) work only while it has the focus; False: none yet."""
        newest = self._newest()
        if newest is None:
            return False
        newest.focus()
        return True

    def _newest(self) -> Widget | None:
        """The last of the conversation's messages and comparisons, in the order shown."""
        shown = [
            widget
            for widget in self.query("ChatMessageWidget, CompareView")
            if not widget.has_class("-compared")
        ]
        return shown[-1] if shown else None

    def messages(self) -> list[ChatMessageWidget]:
        # A comparison's two replies are its own (compare_view.py), not the conversation's.
        return [w for w in self.query(ChatMessageWidget) if not w.has_class("-compared")]
