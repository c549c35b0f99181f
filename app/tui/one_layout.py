"""One layout per change of size, not two.

When a layout gives a widget a new size, Textual's ``Widget._size_updated`` also sets its
``virtual_size``, a reactive declared with ``layout=True``: every widget that grew asks for
another full layout of the screen right after the one that just sized it. While a reply
streams, its live tail grows by a line every few renders, and the tail, the reply's body and
the message each ask again: measured, two full layouts per render (docs/PERFORMANCE.md).

For a widget that does not scroll, its virtual size is its size, and the layout that just ran
already placed it and everything around it: ``SizedByLayout`` records the new size without
asking for a second layout. It is still repainted (Textual marks a resized widget dirty
either way). Scrolling containers (the chat view) keep Textual's behaviour: their scroll
range follows their virtual size.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.widget import Widget


class SizedByLayout(Widget):
    """Mix in first, before the Textual base class, on widgets that never scroll."""

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        return super()._size_updated(size, virtual_size, container_size, layout=False)
