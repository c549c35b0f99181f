"""F1: every key binding and slash command, in one scrollable screen."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..laid_out import LaidOut
from . import dialog

Section = tuple[str, Sequence[tuple[str, str]]]


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = (
        dialog.frame("HelpScreen", 84, height="90%", padding="0 2")
        + """
    HelpScreen .help--keys {
        color: $text-muted;
    }
    HelpScreen .help--title {
        text-style: bold;
        color: $primary;
        margin: 1 0 0 0;
    }
    """
    )
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close", id="help.close")]

    def __init__(self, sections: Sequence[Section]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        with Vertical():
            # Above the scrolling part: how to close it is on the first page, at any size.
            yield Static(
                LaidOut.text("Esc, F1 or q closes this screen · ↑ ↓ PgUp PgDn scroll"),
                classes="help--keys",
            )
            with VerticalScroll():
                for title, rows in self.sections:
                    yield Static(title, classes="help--title", markup=False)
                    # A description too long for its line goes on under itself, not under the keys.
                    yield Static(LaidOut.rows(rows))

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
