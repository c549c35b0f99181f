"""Two replies to one prompt side by side (the chat's ``/compare``, issue 44).

``CompareView`` stands in the conversation in place of the one reply: two columns, each a header
(its side and what it was run with, or only its number in blind mode) over an
``AssistantMessage`` that streams as any reply does (the controller gives each its
``ReplyStream``), whose status line says the side's tokens, speed and time to first token.
Below ``NARROW_BELOW`` cells it shows one column at a time (``f`` flips; the header says
``A (1/2)``).

Its keys work only while it has the focus (Tab, Shift+Tab or a click: the chat never moves the
focus here by itself, and typing elsewhere stays typing): 1 / 2 pick a reply, [ / ] stop a side
alone. A pick key pressed before the view was drawn is dropped (the user cannot have chosen what
they had not seen). It posts what the user asked (``Picked``, ``StopAsked``) and never acts on
the app: the controller (controllers/comparisons.py) does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static

from ..outside import line
from .assistant_message import AssistantMessage

# Narrower than this (cells), one column at a time.
NARROW_BELOW = 100
# The pick keys (the view's own, by binding id).
PICK_IDS = ("compare.pick_1", "compare.pick_2")


class CompareColumn(Vertical):
    """One side: its header and its reply."""

    DEFAULT_CSS = """
    CompareColumn {
        width: 1fr;
        height: auto;
    }
    CompareColumn > .compare--head {
        color: $text-accent;
        text-style: bold;
        padding: 0 1;
    }
    """

    def __init__(self, head: str, reply: AssistantMessage) -> None:
        super().__init__()
        self.head = Static(line(head, limit=None), classes="compare--head")
        self.reply = reply

    def compose(self) -> ComposeResult:
        yield self.head
        yield self.reply

    async def add(self, widget: Widget) -> Widget:
        """``widget`` below what the column shows (a side's tool call, its continuation)."""
        await self.mount(widget)
        return widget


class CompareView(Widget, can_focus=True):
    """Two replies side by side (see the module docstring). ``heads``: each column's header;
    ``replies``: each column's reply widget (streamed by the controller)."""

    DEFAULT_CSS = """
    CompareView {
        layout: horizontal;
        height: auto;
        margin: 0 0 1 0;
    }
    CompareView:focus {
        background: $boost;
    }
    CompareView.-narrow > CompareColumn.-hidden {
        display: none;
    }
    """
    BINDINGS = [
        Binding("1", "pick(0)", "Pick the first reply", id="compare.pick_1", show=False),
        Binding("2", "pick(1)", "Pick the second reply", id="compare.pick_2", show=False),
        Binding(
            "left_square_bracket",
            "stop(0)",
            "Stop the first reply alone",
            id="compare.stop_1",
            show=False,
        ),
        Binding(
            "right_square_bracket",
            "stop(1)",
            "Stop the second reply alone",
            id="compare.stop_2",
            show=False,
        ),
        Binding("f", "flip", "Show the other reply (narrow screen)", id="compare.flip", show=False),
    ]

    @dataclass
    class Picked(Message):
        """The user picked the reply of column ``column`` (0 or 1)."""

        view: CompareView
        column: int

    @dataclass
    class StopAsked(Message):
        """The user asked to stop column ``column``'s side alone."""

        view: CompareView
        column: int

    def __init__(self, heads: tuple[str, str], replies: tuple[AssistantMessage, AssistantMessage]):
        super().__init__()
        for reply in replies:
            # The view takes the focus, never a reply inside it.
            reply.can_focus = False
            reply.add_class("-compared")
        self.columns = (CompareColumn(heads[0], replies[0]), CompareColumn(heads[1], replies[1]))
        self.heads = heads
        # The column shown on a narrow screen.
        self.shown = 0
        # When it was first drawn (a pick key pressed earlier is dropped).
        self.drawn_at: float | None = None

    def compose(self) -> ComposeResult:
        yield from self.columns

    def on_mount(self) -> None:
        self.call_after_refresh(self._drawn)

    def _drawn(self) -> None:
        self.drawn_at = time.monotonic()

    @property
    def replies(self) -> tuple[AssistantMessage, AssistantMessage]:
        return (self.columns[0].reply, self.columns[1].reply)

    def acts_on(self, key: str) -> bool:
        """``key`` is one of the view's own (the app hands it here, not to the input)."""
        return key in self._bindings.key_to_bindings

    def on_key(self, event: events.Key) -> None:
        """A pick key pressed before the view was drawn goes nowhere."""
        picks = {
            key
            for key, bindings in self._bindings.key_to_bindings.items()
            if any(b.id in PICK_IDS for b in bindings)
        }
        if event.key in picks and (self.drawn_at is None or event.time < self.drawn_at):
            event.stop()
            event.prevent_default()

    def on_resize(self, event: events.Resize) -> None:
        self._lay_out(event.size.width)

    @property
    def narrow(self) -> bool:
        return self.has_class("-narrow")

    def _lay_out(self, width: int) -> None:
        """Two columns, or one at a time below ``NARROW_BELOW`` cells."""
        narrow = 0 < width < NARROW_BELOW
        self.set_class(narrow, "-narrow")
        for index, column in enumerate(self.columns):
            column.set_class(index != self.shown, "-hidden")
            head = self.heads[index]
            if narrow:
                name, _, rest = head.partition(" ")
                head = f"{name} ({index + 1}/2) {rest}".rstrip() + "  · f: the other"
            column.head.update(line(head, limit=None))

    def set_heads(self, heads: tuple[str, str]) -> None:
        """New headers (blind mode's reveal)."""
        self.heads = heads
        self._lay_out(self.size.width)

    def action_pick(self, column: int) -> None:
        self.post_message(self.Picked(self, column))

    def action_stop(self, column: int) -> None:
        self.post_message(self.StopAsked(self, column))

    def action_flip(self) -> None:
        self.flip()

    def flip(self) -> None:
        """The other column (a narrow screen shows one at a time)."""
        self.shown = 1 - self.shown
        self._lay_out(self.size.width)
