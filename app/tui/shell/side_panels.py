"""The side panels beside the chat: the conversation list (Ctrl+B, on the left) and the
parameter panel (F2, on the right).

Both open at once where the terminal holds them beside a usable chat (``MIN_CHAT_WIDTH``
columns); where it cannot, opening one closes the other, and narrowing the terminal with both
open keeps the one in use (focused, else the one opened last).
"""

from __future__ import annotations

from collections.abc import Callable

from textual.widget import Widget

from ..widgets.param_panel import ParamPanel
from ..widgets.sidebar import ConversationSidebar

# Columns the chat keeps when both side panels are open.
MIN_CHAT_WIDTH = 40


def room_for_both(width: int) -> bool:
    """A terminal ``width`` columns wide holds both panels beside a usable chat."""
    return width >= ConversationSidebar.WIDTH + ParamPanel.WIDTH + MIN_CHAT_WIDTH


class SidePanels:
    """Which side panels are shown: the two panels (queried when needed: they are composed
    after this is made) and the one opened last."""

    def __init__(
        self, sidebar: Callable[[], ConversationSidebar], params: Callable[[], ParamPanel]
    ) -> None:
        self._sidebar = sidebar
        self._params = params
        self._opened_last: Widget | None = None

    def show(self, panel: Widget, width: int) -> None:
        """Show ``panel`` (the conversation list or the parameter panel) in a terminal
        ``width`` columns wide. Where it cannot hold both beside a usable chat, the other one
        closes."""
        sidebar = self._sidebar()
        other = self._params() if panel is sidebar else sidebar
        if other.has_class("-visible") and not room_for_both(width):
            other.remove_class("-visible")
        panel.add_class("-visible")
        self._opened_last = panel

    def fit(self, width: int) -> None:
        """The terminal is now ``width`` columns wide: with both panels open and no room for
        both, the one in use (focused, else opened last) stays."""
        if room_for_both(width):
            return
        shown = [p for p in (self._sidebar(), self._params()) if p.has_class("-visible")]
        if len(shown) < 2:
            return
        keep = next((p for p in shown if p.has_focus_within), self._opened_last or shown[-1])
        for panel in shown:
            if panel is not keep:
                panel.remove_class("-visible")
