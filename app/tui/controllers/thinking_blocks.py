"""The replies' thinking on screen: a key opens or closes the last reply's thinking block (each
block's own Enter and click work on any), and another has new replies' thinking open expanded or
stay folded to one line (``thinking_expanded``, for as long as the app runs)."""

from __future__ import annotations

import dataclasses

from ...appconfig import chat_settings
from ..conversation.assistant_message import AssistantMessage
from .host import ChatHost


class ThinkingBlocks:
    """Opens and closes the replies' thinking blocks, and says how new ones open."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host

    def toggle_last(self) -> None:
        """Open or close the last reply's thinking (the thinking blocks' own Enter and click
        work on any)."""
        for widget in reversed(self.host.chat.messages()):
            if isinstance(widget, AssistantMessage) and widget.thinking is not None:
                widget.thinking.toggle()
                return
        self.host.notify("No reply in view has any thinking to show.", timeout=3)

    def toggle_expanded(self) -> None:
        """New replies' thinking opens expanded, or stays folded (until the app closes: the
        config file is left as it is)."""
        host = self.host
        settings = chat_settings(host.config)
        expanded = not settings.thinking_expanded
        settings = dataclasses.replace(settings, thinking_expanded=expanded)
        host.config = dataclasses.replace(host.config, config=settings)
        if expanded:
            host.notify("Thinking is shown expanded from the next reply.", timeout=3)
        else:
            host.notify("Thinking is folded to one line from the next reply.", timeout=3)
