"""A yes/no modal (before opening a link from model output, deleting a conversation,
replacing a file). The question quotes outside text (a link, a title, a path): it is shown
sanitised, as text, never read as markup."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from . import outside


class ConfirmScreen(ModalScreen[bool]):
    DEFAULT_CSS = """
    ConfirmScreen {
        align: center middle;
    }
    ConfirmScreen > Vertical {
        width: 70;
        max-width: 95%;
        height: auto;
        border: thick $warning;
        background: $surface;
        padding: 1 2;
    }
    ConfirmScreen .confirm--keys {
        color: $text-muted;
        margin: 1 0 0 0;
    }
    """
    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(outside.block(self.question))
            yield Static("y yes · n / Esc no", classes="confirm--keys")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
