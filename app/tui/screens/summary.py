"""The summary ``/compact`` asks about: the model's summary of the conversation, in a text area
the user may edit, then accepted (the conversation goes on from a new branch that starts with
it; the original stays in the history) or cancelled (nothing is replaced).

Typing edits the summary and nothing else: accepting is Ctrl+Y, a key ordinary typing never
produces (the text area's redo gives it up here), and a Ctrl+Y pressed before the dialog was
drawn, or within ``SETTLE`` seconds after, is not taken as an answer (the summary may take
a while to come, and the user's keys go on meanwhile). Esc cancels. The model's text is
outside text: the text area shows it as text, never as markup, sanitised first."""

from __future__ import annotations

from textual._time import get_time
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static, TextArea

from vibechat.engine.sanitize import sanitize

from . import dialog


class SummaryScreen(ModalScreen["str | None"]):
    """The summary to accept (the text, as edited) or cancel (None)."""

    DEFAULT_CSS = (
        dialog.modal_css("SummaryScreen")
        + """
    SummaryScreen TextArea {
        height: 14;
    }
    SummaryScreen .summary--note {
        color: $text-muted;
        padding: 0 0 1 0;
    }
    """
    )
    BINDINGS = [
        Binding("ctrl+y", "accept", "Accept the summary", id="summary.accept", priority=True),
        Binding("escape", "cancel", "Cancel", id="summary.cancel", priority=True),
    ]
    # Seconds after the first frame in which Ctrl+Y is not yet an answer.
    SETTLE = 0.5

    def __init__(self, summary: str, replaced: int) -> None:
        """``replaced``: the messages the summary would stand for."""
        super().__init__()
        self.summary = sanitize(summary)
        self.replaced = replaced
        self._takes_keys_from: float | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Compact the conversation", classes="modal--title")
            yield Static(
                f"The model's summary of {self.replaced} messages. Accepted, the conversation "
                "goes on from a new branch that starts with it; the original stays in the history "
                "as it is (← on the summary shows it). Edit it as you like.",
                classes="summary--note",
                markup=False,
            )
            yield TextArea(self.summary, id="summary-text", soft_wrap=True)
            yield Static("Ctrl+Y accept · Esc cancel (nothing is replaced)", classes="modal--keys")

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()
        self.call_after_refresh(self._drawn)

    def _drawn(self) -> None:
        self._takes_keys_from = get_time() + self.SETTLE

    @property
    def ready(self) -> bool:
        """Drawn, and the settle time is over: Ctrl+Y pressed now accepts."""
        return self._takes_keys_from is not None and get_time() >= self._takes_keys_from

    def action_accept(self) -> None:
        if not self.ready:
            return
        text = self.query_one(TextArea).text
        if not text.strip():
            self.notify("The summary is empty: write one, or Esc to cancel.", severity="warning")
            return
        self.dismiss(text)

    def action_cancel(self) -> None:
        self.dismiss(None)
