"""The multi-line prompt input.

Enter sends; Ctrl+J (or Shift+Enter / Alt+Enter where the terminal reports them)
inserts a newline; Up in an empty input recalls earlier prompts, Down goes back
towards the newest. Posts ``PromptInput.Submitted``. Ctrl+D deletes to the right, as
in any text area, but an empty input lets the key go on to the app's binding, which
quits (as in ollama and shells): see ``check_action``.

The input is the user's: what is in it never moves. While a reply is on its way (``busy``:
the chat state's ``generating``, read from the ``ChatState`` the app hands down, so the input
never has a copy of its own to fall out of step), Enter on a message queues it (``queued``:
one at a time, posted as ``QueueChanged`` for the line above the input) instead of sending
it; the replies controller sends it when the reply ends, or gives it back (Esc, a failure, a
new chat).
Text that comes back (a queued message, Ctrl+L's last prompt, a refused prompt) goes in
with ``give_back``: into an empty input as it was, else on its own line before the draft,
the cursor staying on the character it was on. A paste is one edit at the cursor
(``TextArea``), never key presses: its line breaks never send it.

A paste that is one existing file's path (a file dragged onto the terminal) goes in as text,
and the input offers to attach it instead (``PathOffered``; the tray shows the offer): Enter
attaches it (``AttachAccepted``: the pasted text leaves the input), Esc or any other key keeps
the text as it is. Nothing is attached without that Enter. With attachments pending
(``has_attachments``, set by the attachments controller) an empty prompt may be sent.

A ``TextArea`` shows control characters as they are, so text loaded into it (a saved
message taken back with Ctrl+L, which may have come from a pipe or a paste) is sanitised
first; pasted text is sanitised by the app as it arrives.

Imports inside functions are deliberate: attachment reading (Pillow) loads only when a path is
pasted or dropped (start-up time).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

from vibechat.engine.sanitize import sanitize

from ... import slash

if TYPE_CHECKING:
    from ..chat_state import ChatState

NEWLINE_KEYS = {"ctrl+j", "shift+enter", "alt+enter", "ctrl+enter"}
QUEUE_FULL = (
    "One message is queued already: it is sent when the reply ends (Esc or ↑ takes it back)."
)


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
        Binding(
            "pagedown", "app.scroll_chat(1)", "Scroll down", id="input.scroll_down", show=False
        ),
        # Tab: the newest message first (the chat's oldest, far above, came first in the screen's
        # order).
        Binding(
            "tab", "app.focus_chat", "Focus the newest message", id="input.focus_chat", show=False
        ),
    ]

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class QueueChanged(Message):
        """A message was queued (``text``) or left the queue (``None``: sent or given back)."""

        def __init__(self, text: str | None) -> None:
            super().__init__()
            self.text = text

    class PathOffered(Message):
        """A pasted path may be attached (``path``), or the offer is withdrawn (``None``)."""

        def __init__(self, path: Path | None) -> None:
            super().__init__()
            self.path = path

    class AttachAccepted(Message):
        """Enter on the offer: attach ``path`` (its pasted text has left the input)."""

        def __init__(self, path: Path) -> None:
            super().__init__()
            self.path = path

    def __init__(self, state: ChatState, *, id: str | None = None, blink: bool = True) -> None:
        super().__init__(
            id=id,
            soft_wrap=True,
            show_line_numbers=False,
            tab_behavior="focus",
            highlight_cursor_line=False,
            placeholder="Message the model · Enter send · Ctrl+J newline · / commands",
        )
        self.cursor_blink = blink
        self.prompt_history: list[str] = []
        self._history_index: int | None = None
        # What the chat is doing: ``busy`` reads it.
        self.chat_state = state
        # The message sent when the reply ends.
        self.queued: str | None = None
        # Attachments wait to be sent: an empty prompt may go.
        self.has_attachments = False
        # The open offer to attach a pasted path: the path, and where its text lies in the input.
        self._offer: tuple[Path, tuple[int, int], tuple[int, int]] | None = None

    @property
    def busy(self) -> bool:
        """A reply is on its way: Enter queues a message. The chat state's, read at the key (the
        only moment it matters), never copied: whoever writes ``generating``, the input follows."""
        return self.chat_state.generating

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

    # ---------------------------------------------------------------- the queue
    def queue(self, text: str) -> bool:
        """Hold ``text`` until the reply ends; False (and a notice) when one is queued already:
        then ``text`` is the caller's to keep (see ``give_back``)."""
        if self.queued is not None:
            self.notify(QUEUE_FULL, severity="warning", timeout=4, markup=False)
            return False
        self.queued = text
        self.post_message(self.QueueChanged(text))
        return True

    def take_queued(self) -> str | None:
        """The queued message, out of the queue (to be sent now)."""
        text, self.queued = self.queued, None
        if text is not None:
            self.post_message(self.QueueChanged(None))
        return text

    def unqueue(self) -> None:
        """The queued message back into the input, unsent (see ``give_back``)."""
        text = self.take_queued()
        if text is not None:
            self.give_back(text)

    def give_back(self, text: str) -> None:
        """Put ``text`` back in the input without moving what is there: into an empty input
        as it was (the cursor at its end), else on its own line before the draft, whose text and
        cursor stay as they are. One edit: Ctrl+Z undoes it."""
        text = sanitize(text)
        if not text:
            return
        if not self.text:
            self.insert(text, (0, 0), maintain_selection_offset=False)
        else:
            self.insert(text + "\n", (0, 0), maintain_selection_offset=True)

    # ------------------------------------------------------------ a pasted path
    async def _on_paste(self, event: events.Paste) -> None:
        self.withdraw_offer()
        start = (
            self.selection.start
            if self.selection.start <= self.selection.end
            else self.selection.end
        )
        await super()._on_paste(event)
        # Inserted once: TextArea's own handler is not called again.
        event.prevent_default()
        path = _pasted_path(event.text)
        if path is not None:
            self._offer = (path, start, self.cursor_location)
            self.post_message(self.PathOffered(path))

    @property
    def offering(self) -> bool:
        return self._offer is not None

    def withdraw_offer(self) -> None:
        """The offer closes; the pasted text stays as it is."""
        if self._offer is not None:
            self._offer = None
            self.post_message(self.PathOffered(None))

    def _accept_offer(self) -> None:
        assert self._offer is not None
        path, start, end = self._offer
        self._offer = None
        self.delete(start, end)
        self.post_message(self.PathOffered(None))
        self.post_message(self.AttachAccepted(path))

    async def _on_key(self, event: events.Key) -> None:
        if self._offer is not None:
            if event.key in ("enter", "escape"):
                event.stop()
                event.prevent_default()
                self._accept_offer() if event.key == "enter" else self.withdraw_offer()
                return
            # Anything else typed: the text is the user's to keep.
            self.withdraw_offer()
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            text = self.text
            if not text.strip() and not (self.has_attachments and not self.busy):
                return
            if self.busy and slash.parse(text) is None:
                # A message while a reply is on its way waits for it (slash commands run now).
                # Decided here, with the key: a refused one stays exactly as it is typed.
                if not self.queue(text):
                    return
                self.remember(text)
                self.clear()
                return
            self.remember(text)
            self.clear()
            self.post_message(self.Submitted(text))
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        if event.key == "up" and self.queued is not None and not self.text:
            # The queued message back to edit (before any recall of older prompts).
            event.stop()
            event.prevent_default()
            self.unqueue()
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
        if not event.is_printable:
            await self._edit_now(event)

    async def _edit_now(self, event: events.Key) -> None:
        """Run the input's own binding for ``event`` (Ctrl+U, Backspace, the arrows ...) now, in
        the order the keys came. Textual runs a widget's bindings only once the key has bubbled up
        to the app, through every container's queue, while the input goes on inserting the keys
        after it: from a burst (tmux's ``send-keys``, a paste without brackets, a fast typist),
        "Ctrl+U hello" cleared the line after "hel" was typed. The binding is the one the app would
        have run (the focused widget's come first); one the input refuses (``check_action``) goes
        on up as before."""
        for binding in self._bindings.key_to_bindings.get(event.key, ()):
            if not binding.priority and await self.app.run_action(binding.action, self):
                event.stop()
                event.prevent_default()
                return

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


def _pasted_path(text: str) -> Path | None:
    """The file a paste names (engine/attach: quotes, ``file://``, ``~``, escaped spaces), or
    None. Only a short one-line paste is looked at (one ``stat``, no more)."""
    if not text or len(text) > 4096 or "\n" in text.strip():
        return None
    from vibechat.engine.attach.reading import looks_like_path

    return looks_like_path(text)
