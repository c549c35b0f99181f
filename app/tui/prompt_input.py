"""The multi-line prompt input.

Enter sends; Ctrl+J (or Shift+Enter / Alt+Enter where the terminal reports them)
inserts a newline; Up in an empty input recalls earlier prompts, Down goes back
towards the newest. Posts ``PromptInput.Submitted``. Ctrl+D deletes to the right, as
in any text area, but an empty input lets the key go on to the app's binding, which
quits (as in ollama and shells): see ``check_action``.

A ``TextArea`` shows control characters as they are, so text loaded into it (a saved
message taken back with Ctrl+L, which may have come from a pipe or a paste) is sanitised
first; pasted text is sanitised by the app as it arrives.
"""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

from vibechat.engine.sanitize import sanitize

NEWLINE_KEYS = {"ctrl+j", "shift+enter", "alt+enter", "ctrl+enter"}


class PromptInput(TextArea):
    DEFAULT_CSS = """
    PromptInput {
        height: auto;
        min-height: 3;
        min-width: 16;  /* never squeezed to nothing (the placeholder cannot wrap at width 0) */
        max-height: 12;
        margin: 0 1;
        border: tall $primary 50%;
    }
    PromptInput:focus {
        border: tall $primary;
    }
    """

    BINDINGS = [
        Binding("pageup", "app.scroll_chat(-1)", "Scroll up", id="input.scroll_up", show=False),
        Binding("pagedown", "app.scroll_chat(1)", "Scroll down", id="input.scroll_down", show=False),
    ]

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, *, id: str | None = None, blink: bool = True) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, tab_behavior="focus",
                         highlight_cursor_line=False,
                         placeholder="Message the model · Enter send · Ctrl+J newline · / commands")
        self.cursor_blink = blink
        self.prompt_history: list[str] = []
        self._history_index: int | None = None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Delete-right (Delete, Ctrl+D) has nothing to do in an empty input: refused there,
        the key goes on up to the app's bindings (Ctrl+D: quit, as in a shell)."""
        if action == "delete_right" and not self.text:
            return False
        return super().check_action(action, parameters)

    def load_text(self, text: str) -> None:
        """Replace the input's text with ``text``, sanitised (see the module doc)."""
        super().load_text(sanitize(text))

    def remember(self, text: str) -> None:
        if text.strip() and (not self.prompt_history or self.prompt_history[-1] != text):
            self.prompt_history.append(text)
        self._history_index = None

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            text = self.text
            if text.strip():
                self.remember(text)
                self.clear()
                self.post_message(self.Submitted(text))
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        if event.key == "up" and self._can_recall(older=True):
            event.stop()
            event.prevent_default()
            self._recall(-1)
            return
        if event.key == "down" and self._history_index is not None and self._on_last_line():
            event.stop()
            event.prevent_default()
            self._recall(1)
            return
        await super()._on_key(event)

    def _on_last_line(self) -> bool:
        return self.cursor_location[0] >= self.document.line_count - 1

    def _can_recall(self, older: bool) -> bool:
        if not self.prompt_history:
            return False
        if self._history_index is None:
            return not self.text
        return self.cursor_location[0] == 0

    def _recall(self, step: int) -> None:
        index = len(self.prompt_history) if self._history_index is None else self._history_index
        index = max(0, index + step)
        if index >= len(self.prompt_history):
            self._history_index = None
            self.load_text("")
            return
        self._history_index = index
        self.load_text(self.prompt_history[index])
        self.move_cursor(self.document.end)
