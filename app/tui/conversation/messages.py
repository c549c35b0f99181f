"""A message in the conversation: ``ChatMessageWidget`` (its label, its text and the status
line under it; the keys that copy it or switch to a sibling) and ``MessageText``, the lines it
is made of. A reply's own widget, rendered as Markdown while it streams, is
``assistant_message.AssistantMessage``; the list of messages is ``chat_view.ChatView``.

Every text shown here may come from outside (a message, a model's reply, a server's error in
a status line): it is sanitised and shown as text, never read as markup (``outside``).
"""

from __future__ import annotations

from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.strip import Strip
from textual.visual import Visual
from textual.widgets import Static

from .. import outside
from ..one_layout import SizedByLayout
from .markdown_text import code_blocks


class MessageText(SizedByLayout, Static):
    """A message's label, plain text or status line: sized by the layout that placed it (one
    layout when a message appears or its status changes, not two: one_layout.py)."""

    DEFAULT_CSS = """
    MessageText {
        height: auto;
    }
    """


class ChatMessageWidget(SizedByLayout, Vertical, can_focus=True):
    """One message. Focus it (Tab or a click) to copy it (Ctrl+C) or its code (Ctrl+K); its
    keys then show beside its label. No plain letters: typing on a focused message goes to
    the input (``TypesIntoInput.Typed``), as someone who clicked a message and typed expects."""

    DEFAULT_CSS = """
    ChatMessageWidget {
        height: auto;
        margin: 0 1 1 1;
        padding: 0 1;
    }
    ChatMessageWidget:focus {
        background: $boost;
    }
    ChatMessageWidget > .message--role {
        color: $text-muted;
        text-style: bold;
        height: 1;
    }
    ChatMessageWidget.-user {
        border-left: thick $secondary;
    }
    ChatMessageWidget.-assistant {
        border-left: thick $primary;
    }
    ChatMessageWidget.-note {
        border-left: thick $warning;
        color: $text-muted;
    }
    ChatMessageWidget.-tool {
        border-left: thick $accent;
    }
    ChatMessageWidget.-stopped > .message--status, ChatMessageWidget.-error > .message--status {
        color: $warning;
        text-style: italic;
    }
    ChatMessageWidget > .message--status {
        height: auto;
        color: $text-muted;
    }
    ChatMessageWidget .reply--body {
        height: auto;
    }
    ChatMessageWidget .reply--segment {
        height: auto;
    }
    """
    # Shown beside the focused message's label rather than in the footer (the app's keys fill it).
    BINDINGS = [
        Binding("ctrl+c", "copy_message", "Copy message", id="message.copy", show=False),
        Binding("ctrl+k", "copy_code", "Copy code", id="message.copy_code", show=False),
        # A message with siblings (a regenerated reply, an edited prompt: ‹ 2/3 › beside its
        # label) switches to the previous or next one; the conversation below follows it.
        Binding(
            "left", "branch(-1)", "Previous version", id="message.previous_version", show=False
        ),
        Binding("right", "branch(1)", "Next version", id="message.next_version", show=False),
        # A pinned message is never left out to fit the context (saved with it).
        Binding("ctrl+u", "pin", "Pin or unpin", id="message.pin", show=False),
        # /compact up to this message (whole turns): the model summarises it and what came
        # before; the dialog asks before anything is replaced.
        Binding("ctrl+x", "compact_here", "Compact up to here", id="message.compact", show=False),
    ]

    class CopyRequested(Message):
        def __init__(self, text: str, what: str) -> None:
            super().__init__()
            self.text = text
            self.what = what

    class BranchRequested(Message):
        """Show the message's previous (``step`` -1) or next (+1) sibling instead, and the
        conversation that follows it."""

        def __init__(self, message_id: int, step: int) -> None:
            super().__init__()
            self.message_id = message_id
            self.step = step

    class PinRequested(Message):
        """Pin the message (``pinned`` True) or unpin it: never left out to fit the context."""

        def __init__(self, message_id: int, pinned: bool) -> None:
            super().__init__()
            self.message_id = message_id
            self.pinned = pinned

    class CompactRequested(Message):
        """Compact the conversation up to this message (its turn included)."""

        def __init__(self, message_id: int) -> None:
            super().__init__()
            self.message_id = message_id

    def __init__(
        self,
        role: str,
        text: str = "",
        *,
        label: str | None = None,
        status: str = "",
        status_kind: str | None = None,
        body: Visual | None = None,
    ) -> None:
        """``body``: what is shown of ``text`` when it is laid out (a note's table), not as
        it is. ``message_id``: its row in the history, once saved; ``branch``: its place among
        its siblings, and how many (``set_branch``)."""
        super().__init__(classes=f"-{role}" + (f" -{status_kind}" if status_kind else ""))
        self.role = role
        self.text = text
        self._body = body
        self.message_id: int | None = None
        self.branch: tuple[int, int] = (1, 1)
        # Pinned: never left out to fit the context (``set_pinned``).
        self.pinned = False
        self._label = (
            label
            or {"user": "You", "assistant": "Assistant", "note": "vibechat", "tool": "Tool"}[role]
        )
        self._status = status
        # The status line shows a progress figure (``set_progress``).
        self._progress = False
        # A line of its own content (``render_line``).
        self._blank_line: Strip | None = None

    def compose(self) -> ComposeResult:
        yield MessageText(self._label_content(), classes="message--role")
        yield from self.compose_body()
        yield MessageText(outside.block(self._status), classes="message--status")

    def compose_body(self) -> ComposeResult:
        yield MessageText(
            self._body or outside.block(self.text, limit=None), classes="message--body"
        )

    def render_line(self, y: int) -> Strip:
        """A line of the message's own content: its background, the same on every line
        (``Blank``), rendered once per change as Textual renders it. Textual's default
        renders every line of a container's height whenever it changes size, and a
        streaming reply's message changes size with every render (thousands of lines; its
        padding and border are drawn around this, as ever)."""
        width = self.size.width
        if self._dirty_regions or self._blank_line is None or self._blank_line.cell_length != width:
            self._blank_line = Visual.to_strips(self, self._render(), width, 1, self.visual_style)[
                0
            ]
            self._dirty_regions.clear()
        return self._blank_line

    def on_focus(self) -> None:
        """The message's keys beside its label, as they are now (a streaming reply's Ctrl+C
        stops it: then not shown)."""
        mine = [
            binding
            for node, binding, enabled, _tooltip in self.screen.active_bindings.values()
            if node is self and enabled
        ]
        # The branch keys first: they fit at 80 columns.
        mine.sort(key=lambda binding: not binding.action.startswith("branch"))
        keys = [
            f"{self.app.get_key_display(binding)} {binding.description.lower()}" for binding in mine
        ]
        if keys:
            self.query_one(".message--role", Static).update(
                self._label_content("   " + " · ".join(keys))
            )

    def on_blur(self) -> None:
        self.query_one(".message--role", Static).update(self._label_content())

    def _label_content(self, keys: str = "") -> Content:
        """The label, ``‹ 2/3 ›`` when the message has siblings, and the focused message's keys."""
        index, count = self.branch
        return Content.assemble(
            self._label,
            (f"  ‹ {index}/{count} ›" if count > 1 else "", "not bold"),
            ("  · pinned" if self.pinned else "", "not bold"),
            (keys, "not bold"),
        )

    def set_pinned(self, pinned: bool) -> None:
        """Pinned or not: said beside its label (``· pinned``)."""
        self.pinned = pinned
        if self.is_mounted:
            self.query_one(".message--role", Static).update(self._label_content())

    def set_branch(self, index: int, count: int) -> None:
        """Its place among its siblings (``index`` of ``count``, 1-based): shown as ``‹ 2/3 ›``."""
        self.branch = (index, count)
        if self.is_mounted:
            self.query_one(".message--role", Static).update(self._label_content())
            # Its keys (‹ › between siblings) are in the footer only while it has the focus, and a
            # focus change refreshes them anyway. A refresh rebuilds the footer's keys (a layout
            # and their first render, ~10 ms of the frame that shows a sent prompt: the worst
            # event-loop gap of a reply's start, docs/PERFORMANCE.md), so only then.
            if self.has_focus_within:
                self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Only towards a sibling that exists: else the arrows scroll the chat as ever.
        if action == "branch":
            index, count = self.branch
            step = parameters[0] if parameters else 0
            towards = index > 1 if isinstance(step, int) and step < 0 else index < count
            return count > 1 and towards and self.message_id is not None
        if action in ("pin", "compact_here"):
            # A saved message of the conversation (not a note of vibechat's).
            return self.message_id is not None and self.role in ("user", "assistant", "tool")
        return True

    def action_pin(self) -> None:
        if self.message_id is not None:
            self.post_message(self.PinRequested(self.message_id, not self.pinned))

    def action_compact_here(self) -> None:
        if self.message_id is not None:
            self.post_message(self.CompactRequested(self.message_id))

    def action_branch(self, step: int) -> None:
        if self.message_id is not None:
            self.post_message(self.BranchRequested(self.message_id, step))

    def set_status(self, text: str, kind: str | None = None) -> None:
        """The line under the message (``⚠ the server's error``): shown as text, sanitised."""
        self._progress = False
        self.query_one(".message--status", Static).update(outside.block(text))
        self.remove_class("-stopped", "-error")
        if kind:
            self.add_class(f"-{kind}")

    def set_progress(self, text: str) -> None:
        """The line under the message as a figure that changes a few times a second (a long
        prompt's reading, ``set_status("")`` clears it): laid out when it appears, then only
        repainted, in place, while it fits its one line (the conversation is not laid out again)."""
        line = self.query_one(".message--status", Static)
        in_place = self._progress and len(text) < line.size.width
        self._progress = True
        line.update(outside.block(text), layout=not in_place)

    def action_copy_message(self) -> None:
        # Text selected with the mouse: the screen copies that.
        if self.screen.get_selected_text():
            raise SkipAction()
        self.post_message(self.CopyRequested(self.text, "message"))

    def action_copy_code(self) -> None:
        blocks = code_blocks(self.text)
        self.post_message(self.CopyRequested("\n".join(blocks), "code" if blocks else "no-code"))
