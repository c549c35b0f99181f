"""Where notices (Textual's toasts) may go: at the top right, over the conversation, and
never over the input, the status bar or the footer.

Textual docks its toast rack at the bottom of the screen, over the input and the status
bar. The app's CSS docks it at the top; this keeps its height within the conversation's
area, which shrinks as the input grows (a notice that would not fit is cut, never laid
over the input).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.notifications import Notification, Notify
from textual.screen import Screen
from textual.widget import Widget

if TYPE_CHECKING:
    from textual.app import App

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


class Slot:
    """One place for a notice that replaces its previous self: ten presses of F6 show one
    "Temperature 1.2" notice, not ten stacked ones. Our own text only (no markup)."""

    def __init__(self) -> None:
        self._shown: Notification | None = None

    def show(self, app: App[Any], message: str, *, timeout: float) -> None:
        if self._shown is not None:
            # Textual's own removal: a no-op once the notice has expired.
            app._unnotify(self._shown)
        self._shown = Notification(message, timeout=timeout, markup=False)
        app.post_message(Notify(self._shown))
