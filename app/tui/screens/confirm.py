"""A yes/no question before something that cannot be taken back or that acts outside the chat
(opening a link from model output, deleting a conversation, replacing a file).

Yes is Ctrl+Y, a key ordinary typing never produces, and the key line says what it will do
("Ctrl+Y delete"); no is Esc. The question is a ``QuestionScreen``: a key
pressed before it was seen is not an answer, and typing while it is up goes on in the input.
The question quotes outside text (a link, a title, a path): it is shown sanitised, as text,
never read as markup."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Static

from .. import outside
from . import dialog
from .question import QuestionScreen


class ConfirmScreen(QuestionScreen[bool]):
    DEFAULT_CSS = (
        dialog.frame("ConfirmScreen", 70, border="warning", padding="1 2")
        + """
    ConfirmScreen .confirm--keys {
        color: $text-muted;
        margin: 1 0 0 0;
    }
    """
    )
    BINDINGS = [
        Binding("ctrl+y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str, yes: str = "yes", no: str = "no") -> None:
        """``yes`` and ``no`` say what each answer does ("delete", "keep it")."""
        super().__init__()
        self.question = question
        self.yes = yes
        self.no = no

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(outside.block(self.question))
            yield Static(
                f"Ctrl+Y {self.yes} · Esc {self.no}", classes="confirm--keys", markup=False
            )

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
