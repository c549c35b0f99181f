"""The palette's "Compare the next prompt…": a small dialog that asks for side B's settings (or
both sides'), the words ``/compare`` takes, and hands them back; Esc hands back nothing.

It names what a side may say (settings, a preset, a system prompt, another model or a server,
blind mode), and starts from the last comparison's words, if any; the comparisons controller parses
what comes back, and a spec that does not parse is its one line, as for ``/compare``. What is
typed here is the user's own text: it is never read as markup."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from ..outside import block, one_line
from . import dialog

HINT = (
    "Side A is this conversation's settings; side B is them with yours: temperature=1.2 top_k=80 · "
    "preset:NAME · system=TEXT · model:PATH-or-NAME · base-url=URL. Both sides: A-SPEC vs B-SPEC. "
    "Start with 'blind' to hide which side is which until you pick."
)


class CompareSetupScreen(ModalScreen[str | None]):
    """Ask for ``/compare``'s words; dismissed with them (stripped, one line) or None."""

    DEFAULT_CSS = dialog.modal_css("CompareSetupScreen")
    BINDINGS = [Binding("escape", "close", "Cancel", id="compare_setup.cancel")]

    def __init__(self, last: str = "") -> None:
        super().__init__()
        self.last = last

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Compare the next prompt", classes="modal--title")
            yield Static(block(HINT))
            yield Input(
                one_line(self.last, limit=None),
                placeholder="temperature=1.2",
                id="compare-spec",
            )
            yield Static("Enter arms it for the next prompt · Esc cancel", classes="modal--keys")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        spec = " ".join(event.value.split())
        if not spec:
            self.notify("Say what side B changes, e.g. temperature=1.2.", severity="warning")
            return
        self.dismiss(spec)

    def action_close(self) -> None:
        self.dismiss(None)
