"""Widgets on which typing belongs in the input: the chat view (and so its messages) and the
conversation list. None of them acts on a letter; a printable key or a paste there is posted
as ``TypesIntoInput.Typed`` (a paste whole, sanitised by the app as it arrived), and the app
puts it at the input's cursor. Someone who clicked a message, or took the list for closed,
and typed on meant the input."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import events
from textual.message import Message
from textual.widget import Widget

if TYPE_CHECKING:
    _Mixin = Widget
else:
    _Mixin = object


class TypesIntoInput(_Mixin):
    """Mix in first, before the Textual base class (a plain mixin: the widget keeps its base's
    default CSS)."""

    class Typed(Message):
        """Text typed (or pasted) on the widget: it belongs in the input."""

        def __init__(self, character: str) -> None:
            super().__init__()
            self.character = character

    def on_key(self, event: events.Key) -> None:
        if event.is_printable and event.character:
            event.stop()
            event.prevent_default()
            self.post_message(TypesIntoInput.Typed(event.character))

    def on_paste(self, event: events.Paste) -> None:
        event.stop()
        if event.text:
            self.post_message(TypesIntoInput.Typed(event.text))
