"""A message in the conversation: ``ChatMessageWidget`` (its label, its text and the status
line under it; the keys that copy it or switch to a sibling) and ``MessageText``, the lines
of a message whose body is widgets. A reply's own widget, rendered as Markdown while it
streams, is ``assistant_message.AssistantMessage``; the list of messages is
``chat_view.ChatView``.

A message draws its label and status line itself (issue 42: every widget a new message
mounts is laid out and painted in the frame that shows it). One whose body is only its text
(a prompt without attachments, a note) is one widget: it draws its label, text and status
line as one ``Content`` (``flat``), and mounts no child; its height comes from that text at
its width. One whose body is widgets (a reply's text and thinking, attachments, a tool's
call) mounts only those: they are laid out one line down, above as many lines as its status
line takes (``process_layout``), and it draws its label and status line on its own lines
that they leave uncovered (``render_line``; the compositor lays children over their parent).

Every text shown here may come from outside (a message, a model's reply, a server's error in
a status line): it is sanitised and shown as text, never read as markup (``outside``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.geometry import Offset, Region, Size, Spacing
from textual.layout import DockArrangeResult, WidgetPlacement
from textual.message import Message
from textual.selection import Selection
from textual.strip import Strip
from textual.visual import Visual
from textual.widgets import Static

from .. import outside
from ..one_layout import SizedByLayout
from .markdown_text import code_blocks

if TYPE_CHECKING:
    from textual.css.styles import RulesMap


class MessageText(SizedByLayout, Static):
    """A line or text of a message's body widgets (a note's table, a prompt's text below its
    attachments, a tool call's lines): sized by the layout that placed it (one layout when it
    appears or changes, not two: one_layout.py). A message's label and status line are never
    one: the message draws them (``ChatMessageWidget``)."""

    DEFAULT_CSS = """
    MessageText {
        height: auto;
    }
    """


class ChatMessageWidget(SizedByLayout, Vertical, can_focus=True):
    """One message. Focus it (Tab or a click) to copy it (Ctrl+C) or its code (Ctrl+K); its
    keys then show beside its label. No plain letters: typing on a focused message goes to
    the input (``TypesIntoInput.Typed``), as someone who clicked a message and typed expects.

    It draws its label and status line itself, styled by the rules of the widgets they once
    were (component classes ``message--role`` and ``message--status``); ``label_shown`` and
    ``status_shown`` say what they show. Its body is drawn by itself too (``flat``) unless it
    has widgets of its own (``has_blocks``: a reply's text, attachments, a tool's call): then
    those are its only children, laid out between its label line and its status line, which
    it leaves uncovered and draws there (``process_layout``, ``render_line``): a new reply
    mounts its text widget (and its thinking block), nothing else."""

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
    """
    # Its label and status line (drawn by the message) take the rules of the widgets they were.
    COMPONENT_CLASSES = {"message--role", "message--status"}
    # Grown or shrunk (a reply's text below its label): the lines above stay painted
    # (one_layout.py); its own lines are its background and left border, its label and its
    # status line (repainted where it was and where it is: ``_size_updated``), or (flat) its
    # text, which repaints it whole when it changes.
    KEEPS_LINES = True
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
        # The focused message's keys, beside its label (``on_focus``).
        self._keys = ""
        self._status = outside.block(status)
        # The status line shows a progress figure (``set_progress``).
        self._progress = False
        # A line of its own content (``render_line``).
        self._blank_line: Strip | None = None
        # Drawn by itself (``flat``): known once asked (its subclass decides, ``has_blocks``).
        self._flat: bool | None = None
        # A flat message's text at a width: (key, its content, its height) and its strips.
        self._laid: tuple[tuple, Content, int] | None = None
        self._drawn: tuple[tuple, list[Strip]] | None = None
        # Bumped when its label or status line changes (a key of ``_laid``).
        self._version = 0
        # A message with child widgets: the width it last arranged them at (``arrange``), and
        # its label's strip and its status line's strips, made when painted (``_around``).
        self._arranged_width = 0
        self._around_drawn: tuple[tuple, Strip, list[Strip]] | None = None
        # Its status line's height: (the status, the width, its lines).
        self._status_rows: tuple[Content, int, int] | None = None

    def has_blocks(self) -> bool:
        """Its body is widgets of its own (a note's table here; a subclass's attachments, a
        tool's call, a reply's Markdown): then it is a column of child widgets, else it draws
        its label, text and status line itself (``flat``)."""
        return self._body is not None

    @property
    def flat(self) -> bool:
        """It draws its label, text and status line itself and mounts no child widget."""
        if self._flat is None:
            self._flat = not self.has_blocks()
        return self._flat

    @property
    def label_shown(self) -> Content:
        """What its label line shows: the label, ``‹ 2/3 ›``, the focused message's keys."""
        return self._label_content(self._keys)

    @property
    def status_shown(self) -> Content:
        """What its status line shows (sanitised text)."""
        return self._status

    def compose(self) -> ComposeResult:
        """Its body's widgets, if any (``has_blocks``): its label and status line are its own
        lines, drawn around them (``render_line``)."""
        if self.flat:
            return
        yield from self.compose_body()

    def compose_body(self) -> ComposeResult:
        yield MessageText(
            self._body or outside.block(self.text, limit=None), classes="message--body"
        )

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if not self.flat:
            return super().get_content_height(container, viewport, width)
        return self._laid_out(width)[2]

    def _laid_out(self, width: int) -> tuple[tuple, Content, int]:
        """A flat message's text at ``width``: its label's first line (a focused message's
        keys may not fit; its label is one line, as ever), its body and its status line, one
        ``Content`` styled as the child widgets were, and its height (computed once per
        width and change)."""
        label_style = self.get_visual_style("message--role")
        status_style = self.get_visual_style("message--status")
        key = (width, self.branch, self._keys, self._version, label_style, status_style)
        laid = self._laid
        if laid is None or laid[0] != key:
            label = self._label_content(self._keys)
            if label.cell_length > width:
                label = (label.wrap(width) or [label])[0]
            body = outside.block(self.text, limit=None)
            content = Content("\n").join(
                [
                    label.stylize_before(label_style),
                    body,
                    self._status.stylize_before(status_style),
                ]
            )
            # Read as Textual reads them for a widget's content (``RenderStyles.get``).
            rules = cast("RulesMap", self.styles)
            laid = self._laid = (key, content, content.get_height(rules, width))
        return laid

    def _status_height(self, width: int) -> int:
        """The lines its status line takes at ``width`` (it wraps; an empty one takes one),
        computed once per status and width (asked for each of its lines painted)."""
        if width <= 0:
            return 1
        known = self._status_rows
        if known is not None and known[0] is self._status and known[1] == width:
            return known[2]
        rules = cast("RulesMap", self.styles)
        rows = max(1, self._status.get_height(rules, width))
        self._status_rows = (self._status, width, rows)
        return rows

    def arrange(self, size: Size, optimal: bool = False) -> DockArrangeResult:
        """Textual's; the width is kept for ``process_layout`` (its status line's height)."""
        self._arranged_width = size.width
        return super().arrange(size, optimal)

    def process_layout(self, placements: list[WidgetPlacement]) -> list[WidgetPlacement]:
        """Its child widgets one line down, below its label line, and its status line's lines
        left below the last: their margins grow by those lines, so its height (Textual's,
        from the children's boxes) counts them, and no child covers the lines it draws
        itself (``render_line``). The compositor lays the children over its own lines."""
        if self.flat or not placements:
            return placements
        moved = WidgetPlacement.translate(placements, Offset(0, 1))
        first = moved[0]
        top, right, bottom, left = first.margin
        moved[0] = first._replace(margin=Spacing(top + 1, right, bottom, left))
        below = self._status_height(self._arranged_width)
        last = moved[-1]  # the first, when it is the only one
        top, right, bottom, left = last.margin
        moved[-1] = last._replace(margin=Spacing(top, right, bottom + below, left))
        return moved

    def _around(self, width: int) -> tuple[Strip, list[Strip]]:
        """A message with child widgets: its label line and its status line's lines at
        ``width``, styled as the ``MessageText`` widgets that showed them were (made when
        painted, kept until they, their styles or the message's change)."""
        label_style = self.get_visual_style("message--role")
        status_style = self.get_visual_style("message--status")
        style = self.visual_style
        key = (width, self.branch, self._keys, self._version, label_style, status_style, style)
        drawn = self._around_drawn
        if drawn is None or drawn[0] != key:
            label = self._label_content(self._keys)
            label_strips = Visual.to_strips(
                self, label.stylize_before(label_style), width, 1, style
            )
            status_strips = Visual.to_strips(
                self, self._status.stylize_before(status_style), width, None, style
            )
            drawn = self._around_drawn = (key, label_strips[0], status_strips)
        return drawn[1], drawn[2]

    def _flat_strips(self, width: int) -> list[Strip]:
        """A flat message's lines at ``width``, made when it is painted (kept until it, its
        styles or the selection in it change)."""
        key, content, _height = self._laid_out(width)
        style = self.visual_style
        drawn_key = (key, style, self.text_selection)
        drawn = self._drawn
        if drawn is None or drawn[0] != drawn_key:
            drawn = self._drawn = (drawn_key, Visual.to_strips(self, content, width, None, style))
        return drawn[1]

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        if not self.flat:
            return super().get_selection(selection)
        return selection.extract(self._laid_out(self.size.width)[1].plain), "\n"

    def _changed(self, *regions: Region, layout: bool = False) -> None:
        """A flat message's text changed (``regions``: only those lines; ``layout``: its height
        may have)."""
        self._version += 1
        self.refresh(*regions, layout=layout)

    def render_line(self, y: int) -> Strip:
        """A line of the message's own content. A flat message's: its text's line ``y``.
        Else its label on line 0, its status line on its last lines, and its background
        between them, under its child widgets (``Blank``, the same on every line, rendered
        once per change as Textual renders it). Textual's default renders every line of a
        container's height whenever it changes size, and a streaming reply's message changes
        size with every render (thousands of lines; its padding and border are drawn around
        this, as ever)."""
        width, height = self.size
        if self.flat:
            self._dirty_regions.clear()
            strips = self._flat_strips(width)
            if y < len(strips):
                return strips[y]
            return Strip.blank(width, self.visual_style.rich_style)
        if y == 0 or y >= height - self._status_height(width):
            label, status = self._around(width)
            if y == 0:
                return label
            below = y - (height - len(status))
            if 0 <= below < len(status):
                return status[below]
        if self._dirty_regions or self._blank_line is None or self._blank_line.cell_length != width:
            self._blank_line = Visual.to_strips(self, self._render(), width, 1, self.visual_style)[
                0
            ]
            self._dirty_regions.clear()
        return self._blank_line

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        """``SizedByLayout``'s; a message with child widgets also repaints its status line's
        lines where they were and where they are now (its lines above the old bottom are
        kept: the status line moved)."""
        old = self._size
        changed = super()._size_updated(size, virtual_size, container_size, layout)
        if not self.flat and old.width == size.width and old.height != size.height:
            gutter = self.styles.gutter
            width = size.width - gutter.width
            rows = self._status_height(width)
            for outer in (old.height, size.height):
                inner = outer - gutter.height
                self._set_dirty(Region(0, max(0, inner - rows), width, rows))
        return changed

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
            self._show_keys("   " + " · ".join(keys))

    def on_blur(self) -> None:
        self._show_keys("")

    def _show_keys(self, keys: str) -> None:
        """The keys beside the label ("" none): its one line redrawn."""
        self._keys = keys
        self._show_label()

    def _show_label(self) -> None:
        """The label line, as it is now (``label_shown``): repainted, never laid out again."""
        self._changed(Region(0, 0, self.size.width, 1))

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
            self._show_label()

    def set_branch(self, index: int, count: int) -> None:
        """Its place among its siblings (``index`` of ``count``, 1-based): shown as ``‹ 2/3 ›``."""
        self.branch = (index, count)
        if self.is_mounted:
            self._show_label()
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
        """The line under the message (``⚠ the server's error``): shown as text, sanitised. A
        message with child widgets repaints its status line's lines, and is laid out again
        only when their number changes."""
        self._progress = False
        self._show_status(outside.block(text))
        self.remove_class("-stopped", "-error")
        if kind:
            self.add_class(f"-{kind}")

    def set_progress(self, text: str) -> None:
        """The line under the message as a figure that changes a few times a second (a long
        prompt's reading, ``set_status("")`` clears it): only repainted, in place, while it
        fits its one line (the conversation is not laid out again; a flat message's lines are
        laid out once when it appears)."""
        in_place = self._progress and len(text) < self.size.width
        self._progress = True
        self._show_status(outside.block(text), in_place)

    def _show_status(self, status: Content, in_place: bool = False) -> None:
        """The status line shows ``status``. A flat message's, ``in_place``: one line replacing
        one line (only repainted, the conversation not laid out again); another message's is
        only repainted while it takes as many lines as before."""
        width, height = self.size
        if not self.flat:
            before = self._status_height(width)
            self._status = status
            rows = self._status_height(width)
            if rows == before:
                self._changed(Region(0, max(0, height - rows), width, rows))
            else:  # its height changes: its old lines repainted, its children arranged again
                self._set_dirty(Region(0, max(0, height - before), width, before))
                self._clear_arrangement_cache()
                self._changed(layout=True)
            return
        self._status = status
        if in_place:
            size = self.size
            self._changed(Region(0, size.height - 1, size.width, 1))
        else:
            self._changed(layout=True)

    def action_copy_message(self) -> None:
        # Text selected with the mouse: the screen copies that.
        if self.screen.get_selected_text():
            raise SkipAction()
        self.post_message(self.CopyRequested(self.text, "message"))

    def action_copy_code(self) -> None:
        blocks = code_blocks(self.text)
        self.post_message(self.CopyRequested("\n".join(blocks), "code" if blocks else "no-code"))
