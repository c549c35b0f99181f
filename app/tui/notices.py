"""Where notices (Textual's toasts) may go: at the top right, over the conversation, and
never over the input, the status bar or the footer.

Textual docks its toast rack at the bottom of the screen, over the input and the status
bar. The app's CSS docks it at the top; this keeps its height within the conversation's
area, which shrinks as the input grows (a notice that would not fit is cut, never laid
over the input).
"""

from __future__ import annotations

from textual.screen import Screen
from textual.widget import Widget

CSS = """
ToastRack {
    dock: top;
    align: right top;
    margin-bottom: 0;
    max-height: 66%;
}
"""


def fit_above(screen: Screen, area: Widget) -> None:
    """Keep ``screen``'s notices within the rows above the bottom of ``area`` (the chat view)."""
    if not area.is_attached or area.screen is not screen or not area.region.height:
        return
    for rack in screen.query("ToastRack"):
        rack.styles.max_height = max(1, area.region.bottom - screen.region.y)
