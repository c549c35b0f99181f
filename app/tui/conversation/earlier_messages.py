"""The stand-in for an opened conversation's older messages: they are mounted only when
asked for (Enter or a click), so a long conversation opens at once."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import Static


class EarlierMessages(Static, can_focus=True):
    """Stands in for the older messages of an opened conversation, which are mounted
    only when asked for: a long conversation opens at once."""

    DEFAULT_CSS = """
    EarlierMessages {
        margin: 0 1 1 1;
        padding: 0 1;
        color: $text-muted;
        text-style: italic;
    }
    EarlierMessages:focus {
        background: $boost;
    }
    """
    BINDINGS = [Binding("enter", "show", "Show earlier messages", id="chat.show_earlier")]

    class Requested(Message):
        def __init__(self, stand_in: EarlierMessages) -> None:
            super().__init__()
            self.stand_in = stand_in

    def __init__(self, pending: list) -> None:
        count = len(pending)
        super().__init__(
            f"↑ {count} earlier message{'s' if count != 1 else ''} · Enter or click to show",
            markup=False,
        )
        # What it stands for (the app knows how to show them).
        self.pending = pending

    def on_click(self) -> None:
        self.post_message(self.Requested(self))

    def action_show(self) -> None:
        self.post_message(self.Requested(self))
