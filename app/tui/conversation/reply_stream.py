"""One streaming reply on screen: from the engine's thread to the widget.

A ``ReplyStream`` holds what belongs to one reply and nothing else: the
``DeltaBuffer`` the generating thread fills, the ``RenderPacer`` that spaces
renders, the ``Sanitizer`` that holds back an escape sequence split across
tokens, the ``ReplyCount`` of its tokens so far (the status bar's live figures),
and the ``AssistantMessage`` whose segmenter renders the text. The app
makes one per reply and drops it when the reply settles, so no state leaks
from one reply into the next.

Threads: only :meth:`put`, :meth:`put_thinking` and :meth:`count_tokens` are called from
the generating thread; everything else runs on the UI thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from vibechat.engine.sanitize import Sanitizer, sanitize
from vibechat.engine.turns.backend import GenerationDone

from ..chat_state import LiveReply
from ..gc_policy import allow_full_collections, defer_full_collections
from .assistant_message import AssistantMessage
from .pacing import RenderPacer
from .thinking_block import ThinkingBlock

# Characters appended to the Markdown per render, at least and at most: between them, what fits
# in SLICE_BUDGET_S of the event loop's own time.
# The Markdown renders in a worker thread (assistant_message.py), so a slice costs the loop little
# more than the layout and repaint that follow it, each render one of them: larger slices
# are fewer of both (12,000 characters: 55 µs of CPU a token at 16,000 tokens against 68
# at 6,000; docs/PERFORMANCE.md, "Speed on slow CPUs").
APPEND_LIMIT = 1200
APPEND_MAX = 12000
# Event-loop time one render of a burst may take.
SLICE_BUDGET_S = 0.006
# Characters in the first render of a reply, which also lays the reply out.
FIRST_LIMIT = 300
# A live speed is measured over at least this long (a burst says nothing).
RATE_AFTER_S = 0.25


class DeltaBuffer:
    """Coalesces streamed text between the generating thread and the UI.

    The thread appends every delta; it posts a message only when none is pending,
    and the UI takes everything buffered at once. At 60 tokens/s each token still
    arrives on its own; when tokens come faster than the UI renders, they arrive
    in batches instead of queueing one message each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: list[str] = []
        self._posted = False

    def put(self, text: str) -> bool:
        """Buffer ``text``; True when the caller must post a message."""
        with self._lock:
            self._parts.append(text)
            if self._posted:
                return False
            self._posted = True
            return True

    def take_all(self) -> tuple[str, int]:
        """Everything buffered, and how many pieces it joins."""
        with self._lock:
            text, count = "".join(self._parts), len(self._parts)
            self._parts.clear()
            self._posted = False
            return text, count

    @property
    def pending(self) -> bool:
        with self._lock:
            return bool(self._parts)

    def take(self, limit: int | None = None) -> tuple[str, bool]:
        """Up to ``limit`` characters (cut after a newline when possible), and whether
        more is left (then the caller handles it on a later turn of the event loop)."""
        with self._lock:
            text = "".join(self._parts)
            self._parts.clear()
            rest = ""
            if limit is not None and len(text) > limit:
                cut = text.rfind("\n", 0, limit) + 1 or limit
                text, rest = text[:cut], text[cut:]
                self._parts.append(rest)
            self._posted = bool(rest)
            return text, bool(rest)


class ReplyCount:
    """The reply's generated tokens as they arrive, for the status bar's live figures.

    The generating thread notes each piece (text or thinking) and, where the backend says
    it (the local engine), the reply's token count so far; the UI reads a ``LiveReply`` at
    its render pace. Where the backend does not count (a server), the pieces are counted,
    about a token each, and the figures say they are an estimate. The speed is measured
    from the first piece to the moment the UI reads it (a stream that stalls slows down).

    A piece costs the generating thread an addition, no lock and no clock: it shares the
    interpreter with the UI thread, and a fast stream brings thousands of pieces a second.
    It is the only writer; the UI reads integers, at worst a piece behind."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.pieces = 0
        # The backend's count (0: it does not say).
        self.tokens = 0
        # (when, count) at the first piece
        self._first: tuple[float, int] | None = None
        # The last piece was thinking.
        self.thinking = False

    def piece(self, tokens: int = 0, thinking: bool = False) -> None:
        """From the generating thread: a piece arrived (``thinking``: of the thinking);
        ``tokens``: the reply's generated tokens so far, when the backend says (0: it does
        not)."""
        self.pieces += 1
        self.thinking = thinking
        if tokens > self.tokens:
            self.tokens = tokens
        if self._first is None:
            self._first = (self._clock(), self.tokens or self.pieces)

    def told(self, tokens: int) -> None:
        """From the generating thread: the reply's generated tokens so far, as the backend
        counts them (said before the piece that brings them)."""
        if tokens > self.tokens:
            self.tokens = tokens
        if self._first is None:
            self._first = (self._clock(), tokens)

    def live(self) -> LiveReply:
        first, tokens = self._first, self.tokens
        count = tokens or self.pieces
        rate = 0.0
        if first is not None:
            elapsed = self._clock() - first[0]
            if elapsed >= RATE_AFTER_S and count > first[1]:
                rate = (count - first[1]) / elapsed
        return LiveReply(count, rate, not tokens, self.thinking)


class ReplyStream:
    """The reply of generation ``generation`` as it streams into ``widget``."""

    def __init__(
        self,
        widget: AssistantMessage,
        generation: int,
        pacer: RenderPacer | None = None,
        expand_thinking: bool = False,
    ) -> None:
        self.widget = widget
        self.generation = generation
        self.pacer = pacer or RenderPacer()
        self.deltas = DeltaBuffer()
        self.sanitizer = Sanitizer()
        # Some text was rendered.
        self.started = False
        # The reply shows how far its (long) prompt was read.
        self.reading = False
        # Renders that drew text (one per delta while the UI keeps up).
        self.renders = 0
        # The last render left text behind: the stream outruns the UI.
        self.backlog = False
        # The end, waiting for queued text.
        self.done_waiting: GenerationDone | None = None
        # What a character cost to render in the last large render.
        self.s_per_char = 0.0
        # The thinking (a reasoning model's): buffered like the text, drawn by its block at
        # the block's own pace (thinking_block.py).
        self.thoughts = DeltaBuffer()
        # The reply's generated tokens at the last thinking piece (0: unknown).
        self.thought_tokens = 0
        self.expand_thinking = expand_thinking
        # Its tokens so far (the status bar's live figures).
        self.count = ReplyCount()
        # The status bar's figures wait for the pacer (while the model thinks).
        self.live_waiting = False
        # A slice rendering in a worker thread (``render``).
        self.pending: asyncio.Task[None] | None = None

    def limit(self) -> int:
        """Characters the next render may take: a stream that outruns the UI is drawn
        in slices sized to take about SLICE_BUDGET_S each (each render and each screen
        refresh costs a layout and a repaint whatever its size, so slices as large as
        the budget allows absorb the most text per second)."""
        if not self.started:
            return FIRST_LIMIT
        if self.s_per_char <= 0:
            return APPEND_LIMIT
        return max(APPEND_LIMIT, min(APPEND_MAX, int(SLICE_BUDGET_S / self.s_per_char)))

    def put(self, text: str) -> bool:
        """From the generating thread: True when the UI must be told (see ``DeltaBuffer``)."""
        self.count.piece()
        return self.deltas.put(text)

    def count_tokens(self, tokens: int) -> None:
        """From the generating thread: the reply's generated tokens so far, as the backend
        counts them (given before the piece of text that brings them)."""
        self.count.told(tokens)

    def put_thinking(self, text: str, tokens: int = 0) -> bool:
        """From the generating thread: a piece of thinking; True when the UI must be told."""
        if tokens:
            self.thought_tokens = tokens
        self.count.piece(tokens, thinking=True)
        return self.thoughts.put(text)

    async def render_thinking(self) -> ThinkingBlock | None:
        """Hand the buffered thinking to the reply's thinking block (mounted with the first
        piece: live, unless the answer has begun); the block draws it at its pace."""
        # While the reply streams (gc_policy.py).
        defer_full_collections()
        text, pieces = self.thoughts.take_all()
        block = self.widget.thinking
        if text:
            if block is None:
                block = await self.widget.show_thinking(
                    ThinkingBlock(live=not self.started, expanded=self.expand_thinking)
                )
            block.feed(text, pieces, self.thought_tokens)
        return block

    async def settle_thinking(self, done: GenerationDone | None = None) -> None:
        """The thinking is over (the answer began, or the reply ended: ``done``): the block
        folds, with the thinking and its token count as the engine kept them."""
        block = await self.render_thinking()
        if block is None and done is not None and done.thinking:
            block = await self.widget.show_thinking(ThinkingBlock(expanded=self.expand_thinking))
        if block is None:
            return
        if done is None:
            block.fold()
        else:
            block.fold(
                thinking=done.thinking,
                tokens=done.stats.thinking_tokens,
                stopped=done.finish_reason == "cancelled",
            )

    def wait(self) -> float:
        """Seconds until the next render may run (0: now)."""
        return self.pacer.wait(backlog=self.backlog)

    async def render(self) -> bool:
        """Render what is buffered (a slice of it in a burst); True when more is queued
        or the last slice is still rendering (render again after a screen refresh).

        A burst's slice, whose Markdown renders in a worker thread (``AssistantMessage.append``),
        runs as a task of its own: the caller, the app's message handler, returns at once,
        so a key pressed meanwhile is handled and drawn without waiting for the render. The
        next render, paced as ever, waits for it (and raises what it raised), so slices never
        overlap and nothing polls; so do ``finish`` and ``fail``.

        A slice that just finished rendering is shown before the next one begins: this
        render returns True at once (the caller renders again after the screen's refresh).
        The frame that shows a slice lays the view out and paints it, the longest turn of the
        event loop in a burst, and the next slice's Markdown, rendered in a worker thread
        meanwhile, shared the interpreter with it: the turn took two to three times its own CPU
        time (issue 42, ``bench/bench_worst_turn.py``)."""
        if await self._settle_pending() and self.deltas.pending:
            self.backlog = True
            return True
        self.pacer.rendering()
        # While the reply streams (gc_policy.py).
        defer_full_collections()
        text, more = self.deltas.take(self.limit())
        self.backlog = more
        if text:
            self.renders += 1
            if not self.started:
                self.started = True
                self.widget.set_status("")
                # The answer begins: the thinking folds.
                await self.settle_thinking()
            shown = self.sanitizer.feed(text)
            if shown:
                if self.widget.renders_off_loop(len(shown)):
                    self.pending = asyncio.create_task(self._append(shown))
                    return True
                await self._append(shown)
        return more

    async def _append(self, shown: str) -> None:
        on_loop, elsewhere = self.widget.loop_cpu, self.widget.offloop_cpu
        await self.widget.append(shown)
        # The append's own time on the event loop sizes the slices; the Markdown, rendered
        # in a worker thread, counts in the UI's CPU budget all the same.
        self.pacer.spent(self.widget.offloop_cpu - elsewhere)
        if len(shown) >= APPEND_LIMIT // 2:  # a token's cost says little
            self.s_per_char = (self.widget.loop_cpu - on_loop) / len(shown)

    async def _settle_pending(self) -> bool:
        """Wait for the slice still rendering, if any (its error is raised here); True when
        there was one."""
        task, self.pending = self.pending, None
        if task is None:
            return False
        await task
        return True

    def hold(self, done: GenerationDone) -> bool:
        """The reply ended while slices of a burst are still queued: keep ``done`` until
        they are rendered (True), else False (finish now)."""
        if self.deltas.pending or self.pending is not None:
            self.done_waiting = done
            return True
        return False

    def take_done(self) -> GenerationDone | None:
        """The held end, once nothing is queued any more."""
        if self.deltas.pending or self.pending is not None or self.done_waiting is None:
            return None
        done, self.done_waiting = self.done_waiting, None
        return done

    async def finish(self, final_text: str) -> None:
        """The reply ended: the held-back tail, then the final text (the same as what
        streamed, unless the stream was cut)."""
        await self._settle_pending()
        # An unfinished escape sequence at the end: its text.
        tail = self.sanitizer.flush()
        if tail:
            await self.widget.append(tail)
        await self.widget.finish(sanitize(final_text))
        allow_full_collections()

    async def fail(self, error: str, partial: str | None = None) -> None:
        """The reply failed: the text that arrived stays on screen (what was still queued
        is drawn too), marked with the error."""
        await self._settle_pending()
        await self.settle_thinking()
        rest, _ = self.deltas.take()
        shown = self.sanitizer.feed(rest) + self.sanitizer.flush()
        if shown:
            await self.widget.append(shown)
        # What arrived stays (a cut stream's text as the server sent it), settled.
        await self.widget.finish(sanitize(partial) if partial else None)
        self.widget.set_status(f"⚠ {error}", "error")
        allow_full_collections()
