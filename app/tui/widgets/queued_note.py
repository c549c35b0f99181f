"""The queued message, shown above the input until it is sent or taken back; and the line that
says a message taken back with Ctrl+L is being edited (``EditingNote``).

A message sent while a reply is on its way waits in the input (``PromptInput.queued``);
this line shows it, dimmed, in the manner of a user message in the conversation (the
same left border), with what will happen to it and how to take it back. It is mounted
only while something is queued: the chat's layout is otherwise as it was.
"""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from .. import outside

# Lines of the queued message shown (the rest: "…").
PREVIEW_LINES = 2
HINT = " — sent when the reply ends · Esc or ↑ takes it back"


class NoteAboveInput(Static):
    """A dimmed line above the input, bordered as a user message in the conversation is."""

    DEFAULT_CSS = """
    NoteAboveInput {
        height: auto;
        margin: 0 1 0 1;
        padding: 0 1;
        border-left: thick $secondary 50%;
        color: $text-muted;
    }
    """


class QueuedNote(NoteAboveInput):
    def __init__(self, text: str) -> None:
        super().__init__(self.describe(text), id="queued")

    def show(self, text: str) -> None:
        self.update(self.describe(text))

    @staticmethod
    def describe(text: str) -> Content:
        """ "You · queued — …" and the message's first lines (its own text: never markup)."""
        lines = outside.plain(text).splitlines() or [""]
        preview = "\n".join(outside.one_line(line) for line in lines[:PREVIEW_LINES])
        if len(lines) > PREVIEW_LINES:
            preview += " …"
        return Content.assemble(("You · queued", "bold"), HINT, "\n", preview)


class EditingNote(NoteAboveInput):
    """ "editing · Esc cancels" above the input while a message taken back with Ctrl+L is edited
    (its reply left the screen with it): Esc puts the conversation back as it was."""

    def __init__(self, cancellable: bool) -> None:
        hint = " · Esc cancels: the message and its reply come back" if cancellable else ""
        super().__init__(Content.assemble(("You · editing", "bold"), hint), id="editing")
