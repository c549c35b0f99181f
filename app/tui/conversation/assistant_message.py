"""An assistant's reply on screen (``AssistantMessage``): Markdown rendered while it streams,
only its live tail re-rendering, its thinking above it (``thinking_block.py``).

Assistant text arrives sanitised (the app strips control sequences first), in batches paced
by the app (``reply_stream.py``); large batches render in a worker thread. The reply's text is
one widget (``MarkdownSegment``, its ``body``): its settled segments, each rendered once, and
its live tail; a sealed segment joins the settled ones and mounts nothing, so a new segment
never lays out or paints the reply above it (issue 42). Its forced cuts are merged when it
ends (``reply_fold.py``). Its label and status line are its own lines, drawn around its
thinking and its text (``messages.ChatMessageWidget``): those two are all it mounts.
"""

from __future__ import annotations

import asyncio
import time

from rich.console import Console, ConsoleOptions
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widget import Widget

from ..reply_lens import ReplyLens
from . import reply_fold
from .markdown_segment import CachedMarkdown, MarkdownSegment, prepare
from .markdown_text import http_links
from .messages import ChatMessageWidget
from .segmenter import segment
from .thinking_block import ThinkingBlock


class AssistantMessage(ChatMessageWidget):
    """An assistant reply, rendered as Markdown while it streams.

    The reply's text is cut into segments by a ``ReplySegmenter`` and shown by one
    ``MarkdownSegment`` (``body``): settled segments, each rendered once, and one live tail
    that re-renders as text arrives. The tail is sealed at a paragraph boundary once it
    passes ``SEAL_AT`` characters, or forced at a line break (inside a code block too) past
    ``FORCE_AT``, so the work per update stays bounded however long the reply gets; a sealed
    segment joins the settled ones in the same widget (nothing is mounted, so the layout
    after each render touches the same few widgets however long the reply is). When the
    reply ends, forced cuts are merged back and rendered once.
    While the reply streams (``live``), its text keeps ``ROOM`` blank lines below it
    (``MarkdownSegment.room``), so the conversation scrolls once every ``ROOM + 1`` lines.
    (Textual's ``Markdown`` widget, streamed with ``Markdown.get_stream()``, mounts
    one widget per block; measured in docs/PERFORMANCE.md, it absorbs about a
    quarter of the tokens per second.)

    Links are not clickable in the text (model output is untrusted): Enter on a
    focused reply asks to open its http(s) links one by one, after confirmation.
    """

    SEAL_AT = 600
    FORCE_AT = 1500
    ROOM = 3
    # Appends this large (a burst's slices) render their Markdown in a worker thread. Text at
    # a model's pace (15 renders a second at most, each a few tokens) renders on the event loop:
    # its live tail is small, and a worker would hold the GIL while the loop draws a keypress
    # (docs/PERFORMANCE.md, "Speed on slow CPUs").
    OFF_LOOP_AT = 1000

    BINDINGS = [Binding("enter", "open_link", "Open link", id="message.open_link", show=False)]

    class LinkRequested(Message):
        def __init__(self, href: str) -> None:
            super().__init__()
            self.href = href

    def __init__(
        self,
        text: str = "",
        *,
        label: str | None = None,
        code_theme: str = "monokai",
        status: str = "",
        status_kind: str | None = None,
        thinking: ThinkingBlock | None = None,
        live: bool = False,
    ) -> None:
        super().__init__("assistant", text, label=label, status=status, status_kind=status_kind)
        self.code_theme = code_theme
        # Streaming: the tail keeps room below its text.
        self.live = live
        # The model's thinking, above the answer (thinking_block.py).
        self.thinking = thinking
        self._segmenter = segment(text, self.SEAL_AT, self.FORCE_AT)
        self._link_index = 0
        # Lines of its text above the view when it last dropped its painted strips.
        self._forgotten = 0
        # CPU seconds its renders took in worker threads (``append``), and on the event loop
        # (what a slice of a burst costs the loop).
        self.offloop_cpu = 0.0
        self.loop_cpu = 0.0
        # The segments' width at the last layout (``_render_options``).
        self._segment_width = 0
        # Its tokens' candidates (the token lens; None: it was off for this reply).
        self.lens: ReplyLens | None = None

    def has_blocks(self) -> bool:
        """Its text is a widget of its own (``body``), below its thinking, if any."""
        return True

    def compose_body(self) -> ComposeResult:
        if self.thinking is not None:
            yield self.thinking
        markdowns = self._markdowns(0, [self._segmenter.display(i) for i in self._indexes()])
        self._shown = MarkdownSegment(
            code_theme=self.code_theme,
            classes="reply--body",
            room=self.ROOM if self.live else 0,
            prepared=markdowns[-1],
            settled=markdowns[:-1],
        )
        yield self._shown

    def _indexes(self) -> range:
        """The segmenter's segments' indexes."""
        return range(len(self._segmenter.segments))

    def _markdowns(
        self, start: int, texts: list[str], above: CachedMarkdown | None = None
    ) -> list[CachedMarkdown]:
        """``texts``, the segmenter's segments from ``start`` on, as Markdown to show, below
        ``above`` (segment ``start - 1``'s). Below a clean cut each starts with the blank line
        that separates two blocks in the whole reply (``CachedMarkdown.gap_above``)."""
        made: list[CachedMarkdown] = []
        segments = self._segmenter.segments
        for index, text in enumerate(texts, start):
            gap = (
                above is not None
                and not segments[index - 1].forced_after
                and not above.ends_with_rule
            )
            above = CachedMarkdown(text, self.code_theme, gap)
            made.append(above)
        return made

    @property
    def body(self) -> MarkdownSegment:
        """The reply's text: one widget (``MarkdownSegment``)."""
        return self._shown

    async def show_thinking(self, block: ThinkingBlock) -> ThinkingBlock:
        """The reply's thinking began: its block goes above the answer."""
        self.thinking = block
        await self.mount(block, before=self.body)
        return block

    def renders_off_loop(self, size: int) -> bool:
        """An ``append`` of ``size`` characters renders its Markdown in a worker thread: a
        burst's slice (``OFF_LOOP_AT`` characters or more) once the live tail has been laid
        out (its width is known)."""
        if size < self.OFF_LOOP_AT or not self.is_attached:
            return False
        return self._render_options(self.body) is not None

    def _render_options(self, tail: MarkdownSegment) -> tuple[Console, ConsoleOptions] | None:
        """The tail's render options: at its width, or, a tail mounted by the last slice and
        not laid out yet, at the width of the segments before it (the same column; should it
        differ, the layout renders the text again, as it would have)."""
        if tail.content_size.width:
            self._segment_width = tail.content_size.width
        return tail.render_options(self._segment_width)

    async def append(self, text: str) -> None:
        """Add streamed text; only the live tail re-renders. The Markdown of the changed
        segments of a large append (``OFF_LOOP_AT``) is parsed and rendered in a worker
        thread (``markdown_segment.prepare``),
        so the event loop keeps turning meanwhile (the Python in it still takes turns
        with the worker, every ``sys.getswitchinterval()``); the widget takes the rendered
        lines in one step afterwards. The worker's CPU seconds add up in ``offloop_cpu``
        (the UI's work all the same: the render pacer counts it)."""
        started = time.thread_time()
        self.text += text
        segmenter = self._segmenter
        body = self.body
        sealed = segmenter.feed(text)
        count = len(segmenter.segments)
        # The tail's segment (settled when ``sealed``).
        first = count - sealed - 1
        texts = [segmenter.display(index) for index in range(first, count)]
        prepared = None
        options = self._render_options(body) if len(text) >= self.OFF_LOOP_AT else None
        if options is not None:
            cuts = [None] + [
                not segmenter.segments[index - 1].forced_after for index in range(first + 1, count)
            ]

            def work() -> tuple[list[CachedMarkdown], float]:
                start = time.thread_time()
                made = prepare(
                    list(zip(texts, cuts, strict=True)), self.code_theme, *options, body.gap_above
                )
                return made, time.thread_time() - start

            self.loop_cpu += time.thread_time() - started
            prepared, spent = await asyncio.to_thread(work)
            # The loop ran other work meanwhile: not this append's.
            started = time.thread_time()
            self.offloop_cpu += spent
            # Gone meanwhile (a new chat): nothing to show it in.
            if not self.is_attached:
                return
        if not sealed:
            if prepared:
                body.offer(prepared[0])
            body.set_text(texts[0])
        else:
            body.seal(*self._sealed(first, texts, prepared))
            self._forget_scrolled_away(body)
        self.loop_cpu += time.thread_time() - started

    def _sealed(
        self, first: int, texts: list[str], prepared: list[CachedMarkdown] | None
    ) -> tuple[list[CachedMarkdown], CachedMarkdown]:
        """The segments from ``first`` (the tail's, sealed) on, as Markdown: those sealed and
        the new tail. The old tail keeps its render when its text did not change."""
        if prepared:
            return prepared[:-1], prepared[-1]
        tail = self.body.markdown
        if tail.text == texts[0]:
            made = [tail, *self._markdowns(first + 1, texts[1:], tail)]
        else:
            made = [CachedMarkdown(texts[0], self.code_theme, tail.gap_above)]
            made += self._markdowns(first + 1, texts[1:], made[0])
        return made[:-1], made[-1]

    def _forget_scrolled_away(self, body: MarkdownSegment) -> None:
        """The lines of its text that scrolled above the view drop the strips Textual keeps
        for them (see ``MarkdownSegment``), once a view's height of them has gone since the
        last time: the view only moves down while a reply streams."""
        view = self.parent
        if not isinstance(view, Widget):
            return
        above = view.region.y - body.region.y
        if above - self._forgotten >= max(1, view.region.height):
            body.forget_strips(above)
            self._forgotten = above

    def end_live(self) -> None:
        """The reply no longer streams: the room below its tail goes."""
        self.live = False
        for part in self.query(MarkdownSegment):
            part.settle()

    async def finish(self, final_text: str | None = None) -> None:
        """End of the stream: merge segments that were cut by force (one render each);
        render everything again only if the final text differs from what streamed."""
        self.end_live()
        body = self.body
        self._forgotten = 0
        if final_text is not None and final_text != self.text:
            self.text = final_text
            self._segmenter = segment(final_text, self.SEAL_AT, self.FORCE_AT)
            texts = [self._segmenter.display(i) for i in self._indexes()]
            body.show(self._markdowns(0, texts))
            return
        # Indexes into the segments as they streamed.
        runs = self._segmenter.merge_forced()
        if runs:
            body.show(
                reply_fold.merge_runs(
                    body.markdowns, runs, self._segmenter.display, self.code_theme
                )
            )

    def action_open_link(self) -> None:
        links = http_links(self.text)
        if not links:
            self.post_message(self.CopyRequested("", "no-link"))
            return
        href = links[self._link_index % len(links)]
        self._link_index += 1
        self.post_message(self.LinkRequested(href))
