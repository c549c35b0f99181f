"""A saved conversation exported to a file: the export dialog offers a path in the working
directory (from its id and title) and Markdown or JSON; a file that exists is replaced only
after the user's yes, and is written whole or not at all (``write_export``).

Imports inside functions are deliberate: the export dialog loads when first opened, not before
the chat's first frame (tests/app/test_startup.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from vibechat.engine.chat.export import write_export
from vibechat.engine.chat.records import StoredConversation
from vibechat.engine.errors import VibechatError

from ..screens.confirm import ConfirmScreen
from .host import ChatHost

if TYPE_CHECKING:
    from ..screens.history_screens import ExportChoice


class Exports:
    """Exports a saved conversation to the file the user chooses."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host

    def export(self, conversation_id: int, title: str) -> None:
        """The export dialog for a conversation; then the file, written (after a yes, when it
        would replace one)."""
        from ..screens.history_screens import ExportScreen

        host = self.host
        slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40] or "conversation"
        stem = Path.cwd() / f"vibechat-{conversation_id}-{slug}"

        def chosen(choice: ExportChoice | None) -> None:
            if choice is None or host.history is None:
                return
            if not choice.path.is_file():
                self._write(conversation_id, choice)
                return

            # A file is replaced only when asked to.
            def answered(replace: bool | None) -> None:
                if replace:
                    self._write(conversation_id, choice)
                else:
                    host.notify(f"Not exported: {choice.path} is left as it was.", timeout=5)

            question = f"{choice.path} already exists.\n\nReplace it?"
            host.push_screen(ConfirmScreen(question, yes="replace it", no="keep it"), answered)

        host.push_screen(ExportScreen(stem), chosen)

    def _write(self, conversation_id: int, choice: ExportChoice) -> None:
        """The conversation, read and written to the chosen file; what went wrong in one line."""
        host = self.host
        if host.history is None:
            return
        try:
            stored = host.history.get(conversation_id)
            text = stored.to_markdown() if choice.format == "md" else _json(stored)
            choice.path.parent.mkdir(parents=True, exist_ok=True)
            # Whole or not at all (the dialog asked before replacing a file):
            write_export(choice.path, text, overwrite=True)
        except VibechatError as exc:
            host.notify(str(exc), severity="error")
        except OSError as exc:
            host.notify(f"Could not write {choice.path}: {exc.strerror or exc}.", severity="error")
        else:
            host.notify(f"Exported to {choice.path}", timeout=5)


def _json(stored: StoredConversation) -> str:
    """The conversation as the JSON export writes it."""
    return json.dumps(stored.to_dict(), ensure_ascii=False, indent=2) + "\n"
