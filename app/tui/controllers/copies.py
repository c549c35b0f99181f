"""Copying to the clipboard: a message's text or its code blocks
(``ChatMessageWidget.CopyRequested``, posted up by a message), or the last reply (Ctrl+O) goes
through the terminal (OSC 52: works over SSH), and a notice says where it went
(``clipboard.copied_notice``: whether it reaches the clipboard is up to the terminal). Inside
tmux the notice waits for tmux's ``set-clipboard``, asked in a worker thread."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from vibechat.engine.sanitize import sanitize

from ..clipboard import copied_notice, tmux_set_clipboard
from ..conversation.messages import ChatMessageWidget
from .host import ChatHost

if TYPE_CHECKING:
    from .host import Handlers

NOTHING = {"no-code": "This message has no code block.", "no-link": "This reply has no links."}


class Copies:
    """Copies what a message asks for, and says where it went."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host

    def handlers(self) -> Handlers:
        return {ChatMessageWidget.CopyRequested: self.requested}

    def requested(self, message: ChatMessageWidget.CopyRequested) -> None:
        message.stop()
        if message.what in NOTHING:
            self.host.notify(NOTHING[message.what], severity="warning", timeout=2)
        else:
            self.copy(message.text, message.what)

    def copy_last(self) -> None:
        """Ctrl+O: the conversation's last reply (as the model wrote it, sanitised)."""
        for turn in reversed(self.host.session.conversation.turns):
            if turn.role == "assistant":
                self.copy(sanitize(turn.content), "reply")
                return
        self.host.notify(
            "No reply to copy yet: Ctrl+O copies the last reply once there is one.", timeout=4
        )

    def copy(self, text: str, what: str) -> None:
        """Copy ``text`` (``what`` it is, for the notice) and say so."""
        host = self.host
        host.copy_to_clipboard(text)
        env = dict(os.environ)
        if not env.get("TMUX"):
            self._say(copied_notice(what, len(text), env))
            return

        def ask_tmux() -> None:
            notice = copied_notice(what, len(text), env, tmux_set_clipboard(env))
            host.call_from_thread(self._say, notice)

        host.run_worker(ask_tmux, thread=True, group="copy-notice", exit_on_error=False)

    def _say(self, notice: str) -> None:
        self.host.notify(notice, timeout=6)
