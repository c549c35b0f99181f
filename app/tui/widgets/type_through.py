"""Widgets on which typing belongs in the input: the chat view (and so its messages), the
conversation list and the parameter panel. None of them acts on a letter. A printable key
pressed there never reaches them: the app gives the input the focus before it hands the key on
(``KeyRouter.typing_elsewhere``, shell/key_routing.py), so the keys of a burst follow it there
in order. A paste there is posted as ``TypesIntoInput.Typed`` (whole, sanitised by the app as
it arrived), and the app puts it at the input's cursor. Someone who clicked a message, or took
the list for closed, and typed on meant the input."""

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
        """Text pasted on the widget: it belongs in the input."""

        def __init__(self, character: str) -> None:
            super().__init__()
            self.character = character

    def on_paste(self, event: events.Paste) -> None:
        event.stop()
        if event.text:
            self.post_message(TypesIntoInput.Typed(event.text))
