"""The scrolling conversation: user messages, streamed assistant replies, notes.

Assistant text arrives sanitised (the app strips control sequences first) and is
appended through ``Markdown.get_stream()``, which batches appends while a render
is in flight; one full render happens when the reply ends. The view is anchored
to the bottom while the user stays there; scrolling up releases the anchor, so
reading is never yanked back.
"""

from __future__ import annotations

import re

from rich.markdown import Markdown as RichMarkdown

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Static

def code_blocks(markdown: str) -> list[str]:
    """Fenced code blocks in ``markdown``, in order (an unclosed last one included)."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in markdown.splitlines(keepends=True):
        if line.lstrip().startswith(("```", "~~~")):
            if current is None:
                current = []
            else:
                blocks.append("".join(current))
                current = None
        elif current is not None:
            current.append(line)
    if current is not None:
        blocks.append("".join(current))
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
    ChatMessageWidget .reply--body {
        height: auto;
    }
    ChatMessageWidget .reply--segment {
        height: auto;
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
    """An assistant reply, rendered as Markdown while it streams.

    The reply is a column of segments: settled segments, each rendered once, and
    one live tail that re-renders as text arrives. When the tail grows past
    ``SEAL_AT`` characters it is sealed at a paragraph boundary outside code
    fences and a new tail starts, so the work per update stays bounded however
    long the reply gets, and nothing re-renders the whole reply. (Textual's
    ``Markdown`` widget makes one widget per block and re-lays-out all of them on
    every append: a 2,000-token reply took ~250 ms per append and 2 s for the
    final render, starving both the UI and the model's cores.)

    Links are not clickable in the text (model output is untrusted): ``o`` on a
    focused reply asks to open its http(s) links one by one, after confirmation.
    """

    SEAL_AT = 600

    BINDINGS = [Binding("o", "open_link", "Open link", id="message.open_link")]

    class LinkRequested(Message):
        def __init__(self, href: str) -> None:
            super().__init__()
            self.href = href

    def __init__(self, text: str = "", *, label: str | None = None, code_theme: str = "monokai") -> None:
        super().__init__("assistant", text, label=label)
        self.code_theme = code_theme
        self._sealed = 0  # characters of self.text already in settled segments
        self._link_index = 0

    def compose_body(self) -> ComposeResult:
        segments = split_segments(self.text, self.SEAL_AT)
        with Vertical(classes="reply--body"):
            for segment in segments:
                yield self._segment(segment)
        self._sealed = len(self.text) - len(segments[-1])

    def _segment(self, text: str) -> Static:
        return Static(self._markdown_renderable(text), classes="reply--segment")

    def _markdown_renderable(self, text: str) -> RichMarkdown:
        return RichMarkdown(text, code_theme=self.code_theme, hyperlinks=False)

    @property
    def body(self) -> Vertical:
        return self.query_one(".reply--body", Vertical)

    async def append(self, text: str) -> None:
        """Add streamed text; only the live tail re-renders."""
        self.text += text
        tail = self.text[self._sealed:]
        if len(tail) > self.SEAL_AT:
            cut = seal_point(tail)
            if cut:
                segments = self.body.query(".reply--segment")
                segments.last().update(self._markdown_renderable(tail[:cut]))
                self._sealed += cut
                tail = tail[cut:]
                await self.body.mount(self._segment(tail))
                return
        self.body.query(".reply--segment").last().update(self._markdown_renderable(tail))

    async def finish(self, final_text: str | None = None) -> None:
        """End of the stream: re-render only if the final text differs from what streamed."""
        if final_text is not None and final_text != self.text:
            self.text = final_text
            body = self.body
            await body.remove_children()
            segments = split_segments(final_text, self.SEAL_AT)
            await body.mount_all([self._segment(t) for t in segments])
            self._sealed = len(final_text) - len(segments[-1])

    def action_open_link(self) -> None:
        links = http_links(self.text)
        if not links:
            self.post_message(self.CopyRequested("", "no-link"))
            return
        href = links[self._link_index % len(links)]
        self._link_index += 1
        self.post_message(self.LinkRequested(href))


_LINK = re.compile(r"\]\((\S+?)\)|<(https?://[^>\s]+)>|(https?://[^\s)\]>\"']+)")


def http_links(markdown: str) -> list[str]:
    """Every link target in ``markdown`` (Markdown links and bare URLs), in order, once."""
    seen: list[str] = []
    for match in _LINK.finditer(markdown):
        href = next(g for g in match.groups() if g).rstrip(".,;:!?")
        if href not in seen:
            seen.append(href)
    return seen


def seal_point(text: str) -> int:
    """Where ``text`` may be cut into two Markdown documents: after the last blank line
    that is outside a code fence (0 when there is none)."""
    best = 0
    fence_open = False
    pos = 0
    for line in text.splitlines(keepends=True):
        pos += len(line)
        stripped = line.lstrip()
        if stripped.startswith("```") or stripped.startswith("~~~"):
            fence_open = not fence_open
        elif not stripped.strip() and not fence_open and pos < len(text):
            best = pos
    return best


def split_segments(text: str, size: int) -> list[str]:
    """``text`` cut at safe points into segments of about ``size`` characters (at least one)."""
    segments: list[str] = []
    while len(text) > size:
        cut = seal_point(text[: size * 2])
        if not cut:
            break
        segments.append(text[:cut])
        text = text[cut:]
    segments.append(text)
    return segments


class ChatView(VerticalScroll):
    """The scrollable list of messages. Focus it (Tab) for PgUp/PgDn/Home/End scrolling;
    from the input, PgUp/PgDn scroll it too."""

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
