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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.geometry import Size
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
    plain mixin, the containers' defaults come back and the chat's layout changes."""

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        return super()._size_updated(size, virtual_size, container_size, layout=False)


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
