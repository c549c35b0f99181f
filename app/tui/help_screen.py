"""F1: every key binding and slash command, in one scrollable screen."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

Section = tuple[str, Sequence[tuple[str, str]]]


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > VerticalScroll {
        width: 84;
        max-width: 95%;
        height: 90%;
        border: thick $primary;
        background: $surface;
        padding: 0 2;
    }
    HelpScreen .help--title {
        text-style: bold;
        color: $primary;
        margin: 1 0 0 0;
    }
    """
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close", id="help.close")]

    def __init__(self, sections: Sequence[Section]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            for title, rows in self.sections:
                yield Static(title, classes="help--title")
                width = max((len(k) for k, _ in rows), default=0)
                yield Static("\n".join(f"{k.ljust(width)}  {d}" for k, d in rows), markup=False)
            yield Static("\nEsc, F1 or q closes this screen.", classes="help--hint")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
