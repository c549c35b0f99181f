"""A reasoning model's thinking in the chat: one block above the reply's answer.

While the model thinks, the block is one line: ``▸ Thinking… 3.2 s · 41 tokens`` and
the latest line of the thinking, cut to the width. The line is redrawn at a fixed pace
(``TICK_S``), never per token: pieces only accumulate between ticks, and a tick redraws
that one line (the full thinking is drawn only when the block is expanded, once per
tick at most while it streams). When the answer starts, or the reply ends, stops or
fails, the block folds to ``▸ Thought for 12 s · 312 tokens``; Enter on the focused
block or a click opens it (``▾``) to the whole thinking, dim, and closes it again.

The count says what it counts: ``tokens`` where the backend knows them (the local
engine, a server that reports its reasoning tokens), else ``pieces`` (the streamed
chunks, about a token each on llama-server and vLLM).

The thinking is model output, untrusted: it is sanitised (escape sequences split
across pieces included: a ``Sanitizer`` per block) and shown as ``Content``, never
markup. The block posts ``Toggled`` up when it opens or closes.
"""

from __future__ import annotations

import time

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Static

from vibechat.engine.sanitize import Sanitizer, sanitize

from .foldable import FoldableBlock

# The live line's pace (at most 4 redraws of one line a second).
TICK_S = 0.25
# Characters of the current line kept for the live line (its end is shown).
LINE_KEEP = 1000


def seconds_text(seconds: float) -> str:
    """``0.4 s``, ``12 s``, ``2 min 5 s``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


class ThinkingBlock(FoldableBlock):
    """See the module docstring. ``thinking``: the whole thinking (a reopened reply);
    ``live``: the model is thinking now (fed with :meth:`feed`, then :meth:`fold`)."""

    DEFAULT_CSS = """
    ThinkingBlock > .thinking--body {
        color: $text-muted;
        text-style: dim;
    }
    ThinkingBlock.-expanded {
        margin: 0 0 1 0;
    }
    """
    BINDINGS = [
        Binding(
            "enter",
            "toggle_open",
            "Toggle thinking",
            id="thinking.toggle",
            show=False,
            tooltip="Open or close the model's thinking",
        )
    ]

    class Toggled(Message):
        """The block was opened (``expanded``) or closed."""

        def __init__(self, block: ThinkingBlock, expanded: bool) -> None:
            super().__init__()
            self.block = block
            self.expanded = expanded

    def __init__(
        self,
        thinking: str = "",
        *,
        live: bool = False,
        expanded: bool = False,
        seconds: float | None = None,
        count: int = 0,
        counted: str = "tokens",
        stopped: bool = False,
    ) -> None:
        super().__init__(classes="-expanded" if expanded else "")
        self._sanitizer = Sanitizer()
        self._parts: list[str] = (
            [self._sanitizer.feed(thinking) + self._sanitizer.flush()] if thinking else []
        )
        # The current (last) line, at most LINE_KEEP characters, and the last line with words
        # in it before that.
        self._line = ""
        self._last_line = ""
        self.live = live
        self.count = count
        self.counted = counted  # "tokens" or "pieces"
        self.pieces = 0
        self.stopped = stopped
        self._started = time.monotonic()
        # None: unknown (a reopened reply) until it folds.
        self._seconds = seconds
        self._body_stale = True
        self._timer: Timer | None = None

    # ------------------------------------------------------------------ state
    @property
    def text(self) -> str:
        """The thinking as shown (sanitised)."""
        return "".join(self._parts)

    @property
    def seconds(self) -> float | None:
        if self.live:
            return time.monotonic() - self._started
        return self._seconds

    def compose(self) -> ComposeResult:
        yield Static(self.header(), classes="thinking--header fold--header")
        yield Static(
            Content(self.text) if self.expanded else Content(""),
            classes="thinking--body fold--body",
        )

    def on_mount(self) -> None:
        self._body_stale = not self.expanded
        if self.live:
            self._timer = self.set_interval(TICK_S, self._tick)

    # ------------------------------------------------------------ streaming
    def feed(self, text: str, pieces: int, tokens: int = 0) -> None:
        """More thinking (raw model output) arrived: kept, drawn at the next tick. ``tokens``:
        the reply's generated tokens so far when the backend knows them (0: count pieces)."""
        shown = self._sanitizer.feed(text)
        if shown:
            self._parts.append(shown)
            self._note_lines(shown)
        self.pieces += pieces
        if tokens:
            self.count, self.counted = tokens, "tokens"
        elif self.counted == "pieces" or not self.count:
            self.count, self.counted = self.pieces, "pieces"
        self._body_stale = True

    def _note_lines(self, shown: str) -> None:
        if "\n" not in shown:
            self._line = (self._line + shown)[-LINE_KEEP:]
            return
        head, _, tail = shown.rpartition("\n")
        # Bounded: LINE_KEEP and this piece.
        for line in reversed((self._line + head).split("\n")):
            if line.strip():
                self._last_line = line[-LINE_KEEP:]
                break
        self._line = tail[-LINE_KEEP:]

    def live_line(self) -> str:
        """The latest line of the thinking with words in it (one line, sanitised)."""
        line = self._line if self._line.strip() else self._last_line
        return " ".join(line.split())

    def fold(self, *, thinking: str | None = None, tokens: int = 0, stopped: bool = False) -> None:
        """The thinking ended (the answer started, or the reply ended): fold to "Thought for
        N s". ``thinking``: the whole thinking as the engine kept it (replaces what streamed
        when it differs); ``tokens``: the thinking's tokens, when known."""
        if self.live:
            self.live = False
            self._seconds = time.monotonic() - self._started
            self.stopped = stopped
            if self._timer is not None:
                self._timer.stop()
                self._timer = None
        tail = self._sanitizer.flush()
        if tail:
            self._parts.append(tail)
        if thinking is not None:
            final = sanitize(thinking)
            if final != self.text:
                self._parts = [final] if final else []
        if tokens:
            self.count, self.counted = tokens, "tokens"
        self._body_stale = True
        self._tick()

    # ---------------------------------------------------------------- drawing
    def header(self) -> Content:
        arrow = "▾" if self.expanded else "▸"
        seconds = self.seconds
        count = (
            f" · {self.count:,} {self.counted if self.count != 1 else self.counted[:-1]}"
            if self.count
            else ""
        )
        if self.live:
            head = f"{arrow} Thinking… {seconds_text(seconds or 0.0)}{count}"
            line = self.live_line()
            room = self.size.width - cell_len(head) - 3 if self.size.width else 0
            if not line or room < 8:
                return Content(head)
            if cell_len(line) > room:
                line = "…" + _tail_cells(line, room - 1)
            return Content.assemble(head, ("  " + line, "italic"))
        when = f" for {seconds_text(seconds)}" if seconds is not None else ""
        stopped = " (stopped)" if self.stopped else ""
        return Content(f"{arrow} Thought{when}{count}{stopped}")

    def _tick(self) -> None:
        if not self.is_mounted:
            return
        self.query_one(".thinking--header", Static).update(self.header())
        if self.expanded and self._body_stale:
            self.query_one(".thinking--body", Static).update(Content(self.text))
            self._body_stale = False

    # ------------------------------------------------------------------ toggle
    def folded_or_opened(self) -> None:
        self._tick()
        self.post_message(self.Toggled(self, self.expanded))

    def action_toggle_open(self) -> None:
        self.toggle()

    def on_click(self) -> None:
        self.toggle()

    def on_resize(self) -> None:
        if self.live:
            self._tick()


def _tail_cells(text: str, cells: int) -> str:
    """The end of ``text`` that fits in ``cells`` terminal cells."""
    out: list[str] = []
    used = 0
    for char in reversed(text):
        width = cell_len(char)
        if used + width > cells:
            break
        out.append(char)
        used += width
    return "".join(reversed(out))
