"""A saved conversation's title: the model's, or the user's.

After a new conversation's first reply, an instruct model writes its title (``model_titles``
in the config): a short request in a worker, which waits for the engine and gives way to
the user's next message; until then, and for a base model, the title is the first prompt's
(engine/chat/titles.py), never the reply's words. The user's own title (a rename: the
sidebar's key or the palette) replaces it, and the model's never replaces the user's.

Imports inside functions are deliberate: the rename dialog loads when first opened, not before
the chat's first frame (tests/app/test_startup.py).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from vibechat.engine.errors import VibechatError
from vibechat.engine.settings.choices import COMPLETION

from .events import HistoryListed
from .host import ChatHost

log = logging.getLogger("vibechat.tui")


class Titles:
    """Has the model title a new conversation, and renames one when the user asks."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host
        # The conversations the model was asked to title.
        self._titled: set[int] = set()

    def ask(self) -> None:
        """After a conversation's first reply, an instruct model writes its title, in a worker
        that waits for the engine; a message sent meanwhile stops it (``write_title``)."""
        session = self.host.session
        chat = session.chat
        cid = chat.conversation_id
        if cid is None or cid in self._titled or chat.history is None or not self._wanted():
            return
        self._titled.add(cid)
        generation, history = session.generation, chat.history

        def stop() -> bool:
            return not session.is_current(generation) or session.turn is not None

        def write() -> None:
            title = session.write_title(generation, stop)
            try:
                if title is None or not history.set_title(cid, title):
                    # No title, or the user's own (a rename) stays.
                    return
                if session.chat is chat:
                    chat.title = title
                summaries = history.conversations()
            except VibechatError as exc:
                log.warning("could not save the title: %s", exc)
                return
            self.host.post_message(HistoryListed(summaries, 0, None))

        self.host.run_worker(write, thread=True, group="title", exit_on_error=False)

    def _wanted(self) -> bool:
        """The conversation on screen has had its first reply, and nothing else runs; an
        instruct model is loaded, and the config asks for its titles."""
        session = self.host.session
        turns, info = session.chat.conversation.turns, session.info
        return (
            len(turns) == 2
            and turns[1].role == "assistant"
            and bool(turns[1].content)
            and session.turn is None
            and info is not None
            and info.chat_format != COMPLETION
            and self.host.config.config.model_titles
        )

    def rename(self, conversation_id: int, title: str) -> None:
        """The rename dialog, on ``title``; the new title is saved, and shown in the list where
        the conversation keeps its place (renaming is no activity)."""
        from ..screens.history_screens import RenameScreen

        host = self.host

        def renamed(new_title: str | None) -> None:
            if not new_title or host.history is None:
                return
            try:
                host.history.rename(conversation_id, new_title)
            except VibechatError as exc:
                host.notify(str(exc), severity="error")
                return
            if conversation_id == host.session.chat.conversation_id:
                host.session.chat.title = new_title
            self._show(conversation_id, new_title)
            host.notify(f"Renamed to “{new_title}”.", timeout=2)

        host.push_screen(RenameScreen(title), renamed)

    def _show(self, conversation_id: int, title: str) -> None:
        """The list shows the conversation's new title, in its place (as in the database)."""
        sidebar = self.host.sidebar
        if not any(s.id == conversation_id for s in sidebar.summaries):
            return
        sidebar.summaries = [
            s if s.id != conversation_id else replace(s, title=title) for s in sidebar.summaries
        ]
        sidebar.show(sidebar.summaries)
        self.host.chats.offer_last()
