"""An assistant's reply on screen (``AssistantMessage``): Markdown rendered while it streams,
only its live tail re-rendering, its thinking above it (``thinking_block.py``).

Assistant text arrives sanitised (the app strips control sequences first), in batches paced
by the app (``reply_stream.py``); large batches render in a worker thread. The reply's column
of segments is ``ReplyBody``; past a few segments the settled ones fold into one widget
(``reply_fold.py``).
"""

from __future__ import annotations

import asyncio
import time

from rich.console import Console, ConsoleOptions
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widget import Widget

from ..one_layout import SizedByLayout
from . import reply_fold
from .markdown_segment import CachedMarkdown, MarkdownSegment, SettledSegments, prepare
from .markdown_text import http_links
from .messages import ChatMessageWidget
from .segmenter import segment
from .thinking_block import ThinkingBlock


class ReplyBody(SizedByLayout, Vertical):
    """The column of a reply's Markdown segments. Its segments cover it whole (it has no
    border, padding nor gaps), so it paints nothing itself (``BLANK``): a container's own
    lines are rendered for its whole height whenever it changes size, and a streaming reply's
    body changes size with every render (thousands of lines, never seen)."""

    BLANK = True


class AssistantMessage(ChatMessageWidget):
    """An assistant reply, rendered as Markdown while it streams.

    The reply is a column of ``MarkdownSegment``s cut by a ``ReplySegmenter``:
    settled segments, each rendered once, and one live tail that re-renders as
    text arrives. The tail is sealed at a paragraph boundary once it passes
    ``SEAL_AT`` characters, or forced at a line break (inside a code block too)
    past ``FORCE_AT``, so the work per update stays bounded however long the reply
    gets. When the reply ends, forced cuts are merged back and rendered once.
    Once a streaming reply has more than ``FOLD_AT`` segment widgets, the settled ones go
    into one ``SettledSegments`` at the top of its body, so the layout after each render
    touches a few widgets however long the reply is (a burst's slice then mounts only its
    new tail: the segments it sealed go straight into the fold); a long reply opened from
    the history opens folded.
    While the reply streams (``live``), its tail keeps ``ROOM`` blank lines below the text
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
    # More segment widgets than this in a streaming reply's body: the settled ones are folded
    # into one widget (``SettledSegments``). A short reply keeps a widget per segment, as a
    # finished one does (the fold pays once the layout would visit many).
    FOLD_AT = 8

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
        # Segments above this one have dropped their strips.
        self._forgotten = 0
        # CPU seconds its renders took in worker threads (``append``), and on the event loop
        # (what a slice of a burst costs the loop).
        self.offloop_cpu = 0.0
        self.loop_cpu = 0.0
        # The segments' width at the last layout (``_render_options``).
        self._segment_width = 0

    def has_blocks(self) -> bool:
        """Its body is a column of Markdown segments (``ReplyBody``)."""
        return True

    def compose_body(self) -> ComposeResult:
        if self.thinking is not None:
            yield self.thinking
        with ReplyBody(classes="reply--body"):
            yield from self._column()

    def _column(self, tail: bool = True) -> list[MarkdownSegment]:
        """The body's widgets for the whole text (a reply opened, or rebuilt at its end): a
        widget per segment, or, past ``FOLD_AT`` segments, the fold of all but the last
        (``SettledSegments``) and the last."""
        made = self._segments(0, None, tail=tail)
        if len(made) <= self.FOLD_AT:
            return made
        return [
            SettledSegments(
                [widget.markdown for widget in made[:-1]], self.code_theme, classes="reply--settled"
            ),
            made[-1],
        ]

    def _segments(
        self,
        start: int,
        above: MarkdownSegment | None,
        tail: bool = True,
        prepared: list[CachedMarkdown] | None = None,
    ) -> list[MarkdownSegment]:
        """Widgets for the segmenter's segments from ``start`` on, below ``above`` (the widget
        of segment ``start - 1``); ``tail``: the last one is the live tail; ``prepared``:
        their texts already rendered (``markdown_segment.prepare``)."""
        made: list[MarkdownSegment] = []
        count = len(self._segmenter.segments)
        for index in range(start, count):
            above = self._segment(
                index,
                above,
                tail=tail and index == count - 1,
                prepared=prepared[index - start] if prepared else None,
            )
            made.append(above)
        return made

    def _segment(
        self,
        index: int,
        above: MarkdownSegment | None,
        tail: bool = False,
        prepared: CachedMarkdown | None = None,
    ) -> MarkdownSegment:
        """Segment ``index``'s widget. Below a clean cut it starts with the blank line that
        separates two blocks in the whole reply (``CachedMarkdown.gap_above``)."""
        room = self.ROOM if tail and self.live else 0
        # Its gap above was decided as it was rendered.
        if prepared is not None:
            return MarkdownSegment(
                prepared.text,
                code_theme=self.code_theme,
                classes="reply--segment",
                room=room,
                prepared=prepared,
            )
        gap = (
            above is not None
            and not self._segmenter.segments[index - 1].forced_after
            and not above.ends_with_rule
        )
        return MarkdownSegment(
            self._segmenter.display(index),
            code_theme=self.code_theme,
            classes="reply--segment",
            room=room,
            gap_above=gap,
        )

    @property
    def body(self) -> Vertical:
        return self.query_one(".reply--body", Vertical)

    async def show_thinking(self, block: ThinkingBlock) -> ThinkingBlock:
        """The reply's thinking began: its block goes above the answer."""
        self.thinking = block
        await self.mount(block, before=self.body)
        return block

    def renders_off_loop(self, size: int) -> bool:
        """An ``append`` of ``size`` characters renders its Markdown in a worker thread: a
        burst's slice (``OFF_LOOP_AT`` characters or more) once the live tail has been laid
        out (its width is known)."""
        if size < self.OFF_LOOP_AT or not self.is_attached or not self.body.children:
            return False
        tail = self.body.children[-1]
        return isinstance(tail, MarkdownSegment) and self._render_options(tail) is not None

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
        with the worker, every ``sys.getswitchinterval()``); the widgets take the rendered
        lines in one step afterwards. The worker's CPU seconds add up in ``offloop_cpu``
        (the UI's work all the same: the render pacer counts it)."""
        started = time.thread_time()
        self.text += text
        segmenter = self._segmenter
        body = self.body
        tail = body.children[-1]
        assert isinstance(tail, MarkdownSegment)
        sealed = segmenter.feed(text)
        count = len(segmenter.segments)
        # The tail's segment (settled when ``sealed``).
        first = count - sealed - 1
        texts = [segmenter.display(index) for index in range(first, count)]
        prepared = None
        options = self._render_options(tail) if len(text) >= self.OFF_LOOP_AT else None
        if options is not None:
            cuts = [None] + [
                not segmenter.segments[index - 1].forced_after for index in range(first + 1, count)
            ]

            def work() -> tuple[list[CachedMarkdown], float]:
                start = time.thread_time()
                made = prepare(
                    list(zip(texts, cuts, strict=True)), self.code_theme, *options, tail.gap_above
                )
                return made, time.thread_time() - start

            self.loop_cpu += time.thread_time() - started
            prepared, spent = await asyncio.to_thread(work)
            # The loop ran other work meanwhile: not this append's.
            started = time.thread_time()
            self.offloop_cpu += spent
            # Gone meanwhile (a new chat): nothing to show it in.
            if not self.is_attached or body.children[-1] is not tail:
                return
        if prepared:
            tail.offer(prepared[0])
        if sealed:
            tail.settle()
            tail.set_text(texts[0])
            made = self._segments(count - sealed, tail, prepared=prepared[1:] if prepared else None)
            standing = reply_fold.standing(body)
            if len(standing) + len(made) > self.FOLD_AT:
                reply_fold.fold(body, standing, made[:-1], self.code_theme)
                made = made[-1:]
                self._forgotten = 0
            # Not awaited: the new segments join the DOM now and are laid out with the
            # rest of this update in one refresh, instead of a refresh of their own.
            body.mount_all(made)
            self._forget_scrolled_away(body)
        else:
            tail.set_text(texts[0])
        self.loop_cpu += time.thread_time() - started

    def _forget_scrolled_away(self, body: Vertical) -> None:
        """Settled segments that scrolled above the view drop their painted strips (see
        ``MarkdownSegment``). The view only moves down while a reply streams, so each
        is looked at until it has gone, once."""
        view = self.parent
        if not isinstance(view, Widget):
            return
        top = view.region.y
        segments = reply_fold.standing(body)
        while self._forgotten < len(segments) - 2:
            segment = segments[self._forgotten]
            region = segment.region
            if not region or region.bottom > top:
                break
            assert isinstance(segment, MarkdownSegment)
            segment.forget_strips()
            self._forgotten += 1

    def end_live(self) -> None:
        """The reply no longer streams: the room below its tail goes."""
        self.live = False
        for part in self.query(MarkdownSegment):
            part.settle()

    async def finish(self, final_text: str | None = None) -> None:
        """End of the stream: merge segments that were cut by force (one render each);
        rebuild everything only if the final text differs from what streamed."""
        self.end_live()
        body = self.body
        self._forgotten = 0
        if final_text is not None and final_text != self.text:
            self.text = final_text
            self._segmenter = segment(final_text, self.SEAL_AT, self.FORCE_AT)
            await body.remove_children()
            await body.mount_all(self._column(tail=False))
            return
        # Indexes into the segments as they streamed.
        runs = self._segmenter.merge_forced()
        if not runs:
            return
        fold = body.children[0] if body.children else None
        if isinstance(fold, SettledSegments):
            await self._merge_folded(fold, runs)
            return
        widgets = list(body.query(MarkdownSegment))
        merged_away = 0
        for run in runs:
            widgets[run[0]].set_text(self._segmenter.display(run[0] - merged_away))
            merged_away += len(run) - 1
        await body.remove_children([widgets[i] for run in runs for i in run[1:]])

    async def _merge_folded(self, fold: SettledSegments, runs: list[list[int]]) -> None:
        """``finish`` for a folded reply: each run of forced cuts made one segment
        (reply_fold.py)."""
        streamed = fold.parts + [widget.markdown for widget in reply_fold.standing(self.body)]
        merged = reply_fold.merge_runs(streamed, runs, self._segmenter.display, self.code_theme)
        await reply_fold.show_merged(self.body, fold, merged, self.code_theme, self.FOLD_AT)

    def action_open_link(self) -> None:
        links = http_links(self.text)
        if not links:
            self.post_message(self.CopyRequested("", "no-link"))
            return
        href = links[self._link_index % len(links)]
        self._link_index += 1
        self.post_message(self.LinkRequested(href))
