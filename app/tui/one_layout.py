"""One layout per change of size, not two.

When a layout gives a widget a new size, Textual's ``Widget._size_updated`` also sets its
``virtual_size``, a reactive declared with ``layout=True``: every widget that grew asks for
another full layout of the screen right after the one that just sized it. While a reply
streams, its live tail grows by a line every few renders, and the tail, the reply's body and
the message each ask again: measured, two full layouts per render (docs/PERFORMANCE.md).

For a widget that does not scroll, its virtual size is its size, and the layout that just ran
already placed it and everything around it: ``SizedByLayout`` records the new size without
asking for a second layout. It is still repainted (Textual marks a resized widget dirty
either way).

The chat view scrolls, and its virtual size (the height of the conversation) grows with every
line of a streaming reply: a second full layout per render, measured as a third of the layouts
of a reply (docs/PERFORMANCE.md). The layout that grew it has already arranged its children,
scrolled it to the bottom when it is anchored, and updated its scrollbar (Textual's
``_scroll_update``). What a second layout could still change is the width left to the
messages when the scrollbar appears or goes; with ``scrollbar-gutter: stable`` that width
never changes, and the scrollbar's own appearance asks for a layout anyway.
``StableGutterScroll`` records the virtual size without asking again, and requires the
stable gutter.

Every layout of the screen also arranges the chat view's column again (a layout asked for
anywhere clears the arrangement of the containers above the widget that asked), and Textual's
vertical layout asks each message its box, whatever changed: a new reply's words, a sealed
segment, or the footer's keys when Stop appears asked every message above again (issue 42).
``KeptColumn`` keeps the places of the children above the first one that changed.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from textual.geometry import NULL_OFFSET, Region, Size
from textual.layout import ArrangeResult, WidgetPlacement
from textual.layouts.vertical import VerticalLayout
from textual.widget import Widget

if TYPE_CHECKING:
    _Mixin = Widget
else:
    _Mixin = object


class SizedByLayout(Widget):
    """Mix in first, before the Textual base class, on widgets that never scroll.

    A ``Widget`` subclass first in the bases: Textual takes default CSS along the first base
    only, so the widgets it is mixed into get their own CSS and ``Widget``'s, not that of
    ``Vertical`` (their own says what they need, and the snapshots hold the look). Made a
    plain mixin, the containers' defaults come back and the chat's layout changes.

    ``KEEPS_LINES``: a new height at the same width keeps the lines painted above the old
    bottom (see ``_size_updated``); for widgets whose lines do not depend on their height
    (their content is drawn from the top, no outline, nothing centred vertically)."""

    KEEPS_LINES = False

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        """Textual's, without the second layout (above). A widget that ``KEEPS_LINES`` and only
        changed its height is repainted from its old bottom (less its bottom border and
        padding) down, not whole: Textual marks a resized widget dirty from top to bottom, and
        a streaming reply that grows by a line scrolled the view and painted every line of the
        reply on screen again, in the worst turn of the event loop while it grows (issue 42,
        ``bench/bench_worst_turn.py``). What changed inside it asks for its own repaint, as
        ever (``refresh`` with regions)."""
        old = self._size
        if not (
            self.KEEPS_LINES
            and old.width == size.width
            and old.height
            and old.height != size.height
            and self.is_mounted
        ):
            return super()._size_updated(size, virtual_size, container_size, layout=False)
        self._size = size  # Textual's own repaint of the whole widget skipped
        super()._size_updated(size, virtual_size, container_size, layout=False)
        gutter = self.styles.gutter
        top = max(0, min(old.height, size.height) - max(1, gutter.bottom))
        # ``_set_dirty`` takes regions of the content and moves them by its offset: these are
        # its lines from ``top`` down, borders included.
        self._set_dirty(Region(-gutter.left, top - gutter.top, size.width, size.height - top))
        return True


class StableGutterScroll(_Mixin):
    """Mix in first, on a scrolling container styled ``scrollbar-gutter: stable`` (see above).
    Not a ``Widget`` itself: a Widget subclass first in the bases would put Textual's default
    CSS for every widget ahead of the container's own (its ``overflow-y: auto`` lost)."""

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        # Without the stable gutter the width could change: Textual's way.
        if self.styles.scrollbar_gutter != "stable":
            return super()._size_updated(size, virtual_size, container_size, layout)
        return super()._size_updated(size, virtual_size, container_size, layout=False)


class KeptColumn(VerticalLayout):
    """A vertical layout that keeps the places of the children above the first one that
    changed: those are not asked their size again (``_get_box_model``), however many there
    are. For the conversation (``ChatView``): a new message, a reply's new words or segment,
    or a layout asked for elsewhere on the screen (the footer's keys when Stop appears)
    rearranges only the messages from the one that changed down, never those above it.

    A child "changed" when it is not the one that stood at its index last time, or its own
    layout count (``_layout_updates``: bumped when it or anything in it asks for a layout) or
    its styles' cache key moved: exactly what Textual's box-model cache is keyed on, besides
    the container's size, which, changed, lays everything out again (``VerticalLayout``).
    Children that are not plain ``height: auto`` boxes (a fraction, an offset, an overlay or
    an absolute position) also take the plain path: their places depend on the others.
    One instance per container: it holds that container's last arrangement."""

    name = "vertical"

    def __init__(self) -> None:
        super().__init__()
        self._size: Size | None = None
        self._viewport: Size | None = None
        self._greedy = True
        self._children: list[Widget] = []
        self._stamps: list[tuple[int, int]] = []
        self._placements: list[WidgetPlacement] = []
        # Where each child's box starts (below the collapsed margin above it).
        self._tops: list[Fraction] = []

    def arrange(
        self, parent: Widget, children: list[Widget], size: Size, greedy: bool = True
    ) -> ArrangeResult:
        viewport = parent.app.viewport_size
        kept = self._kept(children, size, viewport, greedy)
        if kept == 0 or not all(_plain(child) for child in children[kept:]):
            placements = super().arrange(parent, children, size, greedy)
            self._remember(children, size, viewport, greedy, placements)
            return placements
        parent.pre_layout(self)
        placements = self._placements[:kept]
        tops = self._tops[:kept]
        app_size = parent.app.size
        last = placements[-1]
        top = tops[-1] + last.region.height
        above = last.margin.bottom
        for child in children[kept:]:
            margin = child.styles.margin
            top += max(above, margin.top)
            width_fraction = Fraction(max(0, size.width - margin.width))
            box = child._get_box_model(
                size, app_size, width_fraction, Fraction(size.height), greedy=greedy
            )
            width, height, box_margin = box
            region = Region(box_margin.left, top.__floor__(), width.__floor__(), height.__floor__())
            placements.append(
                WidgetPlacement(region, NULL_OFFSET, box_margin, child, 0, False, False, False)
            )
            tops.append(top)
            top += region.height
            above = box_margin.bottom
        self._remember(children, size, viewport, greedy, placements, tops)
        return placements

    def _kept(self, children: list[Widget], size: Size, viewport: Size, greedy: bool) -> int:
        """How many children, from the top, keep their places (0: lay out all)."""
        if (size, viewport, greedy) != (self._size, self._viewport, self._greedy):
            return 0
        kept = 0
        for child, was, stamp in zip(children, self._children, self._stamps, strict=False):
            if child is not was or _stamp(child) != stamp:
                break
            kept += 1
        return kept

    def _remember(
        self,
        children: list[Widget],
        size: Size,
        viewport: Size,
        greedy: bool,
        placements: list[WidgetPlacement],
        tops: list[Fraction] | None = None,
    ) -> None:
        """Keep this arrangement for the next (``tops``: None, read from the placements)."""
        # Not one placement per child: never reused.
        if len(placements) != len(children):
            self._size = None
            return
        self._size, self._viewport, self._greedy = size, viewport, greedy
        self._children = list(children)
        self._stamps = [_stamp(child) for child in children]
        self._placements = list(placements)
        self._tops = tops if tops is not None else [Fraction(p.region.y) for p in placements]


def _stamp(widget: Widget) -> tuple[int, int]:
    """What moves when a widget's box may have changed (see ``KeptColumn``)."""
    return (widget._layout_updates, widget.styles._cache_key)


def _plain(widget: Widget) -> bool:
    """A ``height: auto`` box in the flow, placed only by the boxes above it."""
    styles = widget.styles
    height = styles.height
    return (
        height is not None
        and height.is_auto
        and styles.overlay != "screen"
        and not styles.has_rule("offset")
        and not (styles.has_rule("position") and styles.position == "absolute")
    )
