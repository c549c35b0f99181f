"""The scrolling conversation: user messages, streamed assistant replies, notes.

Assistant text arrives sanitised (the app strips control sequences first) and is
appended through ``Markdown.get_stream()``, which batches appends while a render
is in flight; one full render happens when the reply ends. The view is anchored
to the bottom while the user stays there; scrolling up releases the anchor, so
reading is never yanked back.
"""

from __future__ import annotations

import re

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

_CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)


def code_blocks(markdown: str) -> list[str]:
    """Fenced code blocks in ``markdown``, in order (an unclosed last one included)."""
    blocks = [m.group(1) for m in _CODE_BLOCK.finditer(markdown)]
    tail = markdown[_CODE_BLOCK.sub("", markdown).rfind("```"):] if markdown.count("```") % 2 else ""
    if tail.startswith("```"):
        blocks.append(tail.split("\n", 1)[1] if "\n" in tail else "")
    return blocks


class ChatMessageWidget(Vertical, can_focus=True):
    """One message. Focus it (Tab) to copy it (c) or its code (k)."""

    DEFAULT_CSS = """
    ChatMessageWidget {
        height: auto;
        margin: 0 1 1 1;
        padding: 0 1;
    }
    ChatMessageWidget:focus {
        background: $boost;
    }
    ChatMessageWidget > .message--role {
        color: $text-muted;
        text-style: bold;
        height: 1;
    }
    ChatMessageWidget.-user {
        border-left: thick $secondary;
    }
    ChatMessageWidget.-assistant {
        border-left: thick $primary;
    }
    ChatMessageWidget.-note {
        border-left: thick $warning;
        color: $text-muted;
    }
    ChatMessageWidget.-stopped > .message--status, ChatMessageWidget.-error > .message--status {
        color: $warning;
        text-style: italic;
    }
    ChatMessageWidget > .message--status {
        height: auto;
        color: $text-muted;
    }
    ChatMessageWidget > Markdown {
        margin: 0;
        padding: 0;
        background: transparent;
    }
    ChatMessageWidget > Markdown > MarkdownFence {
        margin: 1 0;
    }
    """
    BINDINGS = [
        Binding("c", "copy_message", "Copy message", id="message.copy"),
        Binding("k", "copy_code", "Copy code", id="message.copy_code"),
    ]

    class CopyRequested(Message):
        def __init__(self, text: str, what: str) -> None:
            super().__init__()
            self.text = text
            self.what = what

    def __init__(self, role: str, text: str = "", *, label: str | None = None) -> None:
        super().__init__(classes=f"-{role}")
        self.role = role
        self.text = text
        self._label = label or {"user": "You", "assistant": "Assistant", "note": "vibechat"}[role]

    def compose(self) -> ComposeResult:
        yield Static(self._label, classes="message--role")
        yield from self.compose_body()
        yield Static("", classes="message--status")

    def compose_body(self) -> ComposeResult:
        yield Static(self.text, markup=False, classes="message--body")

    def set_status(self, text: str, kind: str | None = None) -> None:
        self.query_one(".message--status", Static).update(text)
        self.remove_class("-stopped", "-error")
        if kind:
            self.add_class(f"-{kind}")

    def action_copy_message(self) -> None:
        self.post_message(self.CopyRequested(self.text, "message"))

    def action_copy_code(self) -> None:
        blocks = code_blocks(self.text)
        self.post_message(self.CopyRequested("\n".join(blocks), "code" if blocks else "no-code"))


class AssistantMessage(ChatMessageWidget):
    """An assistant reply, streamed as Markdown. Links go up as ``LinkRequested``."""

    class LinkRequested(Message):
        def __init__(self, href: str) -> None:
            super().__init__()
            self.href = href

    def __init__(self, text: str = "", *, label: str | None = None) -> None:
        super().__init__("assistant", text, label=label)
        self._stream: MarkdownStream | None = None

    def compose_body(self) -> ComposeResult:
        yield Markdown(self.text, open_links=False)

    @property
    def markdown(self) -> Markdown:
        return self.query_one(Markdown)

    async def append(self, text: str) -> None:
        self.text += text
        if self._stream is None:
            self._stream = Markdown.get_stream(self.markdown)
        await self._stream.write(text)

    async def finish(self, final_text: str | None = None) -> None:
        """End the stream and render the whole reply once."""
        if final_text is not None:
            self.text = final_text
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        await self.markdown.update(self.text)

    def on_markdown_link_clicked(self, event: Markdown.LinkClicked) -> None:
        event.stop()
        self.post_message(self.LinkRequested(event.href))


class ChatView(VerticalScroll, can_focus=False):
    """The scrollable list of messages."""

    DEFAULT_CSS = """
    ChatView {
        height: 1fr;
        padding: 1 0 0 0;
        scrollbar-gutter: stable;
    }
    ChatView > .chat--empty {
        color: $text-muted;
        margin: 1 2;
    }
    """
    BINDINGS = [
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield Static("", classes="chat--empty")

    def set_welcome(self, text: str) -> None:
        self.query_one(".chat--empty", Static).update(text)

    def on_mount(self) -> None:
        self.anchor()

    async def add(self, widget: ChatMessageWidget, follow: bool = True) -> ChatMessageWidget:
        """Mount a message; ``follow`` (the user just sent something) re-anchors to the bottom.
        Streaming text never re-anchors: once the user scrolls up, they stay where they are."""
        await self.mount(widget)
        if follow:
            self.anchor()
        return widget

    async def clear(self) -> None:
        await self.query(ChatMessageWidget).remove()
        self.anchor()

    def messages(self) -> list[ChatMessageWidget]:
        return list(self.query(ChatMessageWidget))
