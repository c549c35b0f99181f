"""A reply's links: ``AssistantMessage.LinkRequested`` (Enter on a focused reply, or a click)
comes up to this controller. Only http(s) links open, each after the user's yes in a question
(the reply is untrusted: a link may point anywhere); another scheme is refused in one line."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlparse

from ..conversation.assistant_message import AssistantMessage
from ..screens.confirm import ConfirmScreen
from .host import ChatHost

if TYPE_CHECKING:
    from .host import Handlers

OPENED = ("http", "https")


class Links:
    """Opens a reply's links, each only after a confirmation."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host

    def handlers(self) -> Handlers:
        return {AssistantMessage.LinkRequested: self.requested}

    def requested(self, message: AssistantMessage.LinkRequested) -> None:
        message.stop()
        href = message.href.strip()
        scheme = urlparse(href).scheme.lower()
        if scheme not in OPENED:
            self.host.notify(
                f"Not opening a {scheme or 'relative'} link: only http and https links open.",
                severity="warning",
            )
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.host.open_url(href)

        self.host.push_screen(
            ConfirmScreen(
                f"The model's reply links to:\n\n{href}\n\nOpen it in your browser?",
                yes="open it",
                no="don't",
            ),
            answered,
        )
