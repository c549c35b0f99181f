"""One piece of a streamed reply, rendered as Markdown at the least possible cost.

A streaming reply re-renders its live tail several times a second while the
model needs every core. ``MarkdownSegment`` keeps that cheap:

* the Markdown is parsed and rendered once per text and width (Textual asks for
  the height and then for the lines; both come from one cached render);
* a new text whose height is unchanged repaints only the lines that changed
  (usually the last one or two). Only a height change asks for a layout, which
  (with the view anchored to the bottom) scrolls and repaints the whole screen;
* the live tail keeps ``room`` blank lines below its text while it streams, so its
  height changes once every ``room + 1`` lines instead of with every line: a
  reply at ~90 tokens/s grows by about three lines a second, and each layout of
  a 120×40 screen costs the UI thread 5–7 ms that the model's threads need
  (docs/PERFORMANCE.md). The room goes when the segment settles;
* what a segment keeps is small for the garbage collector. A long reply is
  thousands of rendered lines, and Python's full collections, which scan every
  live container object, paused the event loop for 60–90 ms at 16,000 tokens
  when each line was kept as Rich segments plus two Textual strips (about 40
  objects a line). The lines are kept packed in tuples of strings and integers,
  which the collector stops tracking, and a segment hands Textual strips only for
  the lines on screen, and forgets them when it scrolls out of view.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import Markdown as RichMarkdown
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import RichVisual, Visual

from .one_layout import SizedByLayout

WARM_UP = "# A\n\nText *em* **strong** `code` [link](https://x.example).\n\n- a\n\n1. b\n\n> q\n\n" \
          "| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\ndef f(x):\n    return x\n```\n"

# A packed line: (text, style index, text, style index, ...) -- strings and integers
# only, so the garbage collector stops tracking it. A line with a control segment
# (never seen from Markdown) is kept as its segments.
PackedLine = tuple


def warm_up(console: Console, code_theme: str) -> None:
    """Render one of everything once: the first Markdown render in a process costs
    ~60 ms of imports and caches (code highlighting above all), which would
    otherwise land on the first reply. Safe to call from a worker thread."""
    CachedMarkdown(WARM_UP, code_theme).lines(console, console.options.update_width(80))


class _Rendered:
    """The lines of one render, packed (see the module doc)."""

    __slots__ = ("lines", "styles")

    def __init__(self, lines: Sequence[Sequence[Segment]]) -> None:
        styles: list[Style | None] = []
        index: dict[Style | None, int] = {}
        packed: list[PackedLine] = []
        for line in lines:
            row: list[object] = []
            for text, style, control in line:
                if control:
                    row = list(line)
                    break
                number = index.get(style)
                if number is None:
                    number = index[style] = len(styles)
                    styles.append(style)
                row.append(text)
                row.append(number)
            packed.append(tuple(row))
        self.lines: tuple[PackedLine, ...] = tuple(packed)
        self.styles = styles

    def __len__(self) -> int:
        return len(self.lines)

    def segments(self, start: int = 0, end: int | None = None) -> list[list[Segment]]:
        styles, out = self.styles, []
        for row in self.lines[start:end]:
            if row and isinstance(row[0], Segment):
                out.append(list(row))
            else:
                out.append([Segment(row[k], styles[row[k + 1]]) for k in range(0, len(row), 2)])
        return out


def first_difference(before: _Rendered, after: _Rendered) -> int:
    """The first line that renders differently in ``after`` (its length if none does). A
    packed line names its styles by number, in order of first use, so equal lines mean
    equal text only where the styles they number are equal too."""
    first = min(len(before), len(after))
    for y, (old, new) in enumerate(zip(before.lines, after.lines)):
        if old != new:
            first = y
            break
    used = 1 + max((n for row in before.lines[:first] for n in row[1::2] if isinstance(n, int)), default=-1)
    if before.styles[:used] != after.styles[:used]:
        return 0
    return first


class CachedMarkdown:
    """A Rich renderable: ``text`` as Markdown, its lines cached (packed) per render
    width. The parsed document is not kept: a new width parses again."""

    KEEP = 2  # renders kept (the current width and the one before)

    def __init__(self, text: str, code_theme: str) -> None:
        self.text = text
        self.code_theme = code_theme
        self._renders: dict[tuple, _Rendered] = {}

    def rendered(self, console: Console, options: ConsoleOptions) -> _Rendered:
        key = (options.max_width, options.justify, options.overflow, options.no_wrap)
        rendered = self._renders.get(key)
        if rendered is None:
            markdown = RichMarkdown(self.text, code_theme=self.code_theme, hyperlinks=False)
            # No height: Textual passes the widget's, and Rich would crop or pad to it.
            rendered = _Rendered(console.render_lines(markdown, options.update(height=None), pad=False))
            while len(self._renders) >= self.KEEP:
                del self._renders[next(iter(self._renders))]
            self._renders[key] = rendered
        return rendered

    def lines(self, console: Console, options: ConsoleOptions) -> list[list[Segment]]:
        return self.rendered(console, options).segments()

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        new_line = Segment.line()
        for line in self.lines(console, options):
            yield from line
            yield new_line


class _Lines:
    """Some already rendered lines, as a Rich renderable."""

    def __init__(self, lines: list[list[Segment]]) -> None:
        self._lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        new_line = Segment.line()
        for line in self._lines:
            yield from line
            yield new_line


class MarkdownSegment(SizedByLayout):
    """Markdown text; ``text`` is replaced as the stream grows (see the module doc)."""

    DEFAULT_CSS = """
    MarkdownSegment {
        height: auto;
    }
    """

    def __init__(self, text: str = "", *, code_theme: str = "monokai", classes: str | None = None,
                 room: int = 0) -> None:
        super().__init__(classes=classes)
        self.code_theme = code_theme
        self._renderable = CachedMarkdown(text, code_theme)
        self.room = room  # blank lines the live tail may keep below its text (see the module doc)
        self._rows = 0  # the height the last layout gave it
        self._wanted = (0, 0)  # the lines Textual is painting (render_lines' crop)
        self._window: tuple[int, list[Strip]] | None = None  # strips made for that paint

    @property
    def text(self) -> str:
        return self._renderable.text

    def set_text(self, text: str) -> None:
        if text == self._renderable.text:
            return
        before = self._rendered(self._renderable)
        self._renderable = CachedMarkdown(text, self.code_theme)
        after = self._rendered(self._renderable)
        if before is None or after is None or self.rows(len(after)) != self._rows:
            self.refresh(layout=True)
            return
        first = first_difference(before, after)
        end = max(len(before), len(after))
        if first < end:
            self.refresh(Region(0, first, self.content_size.width, end - first))

    def settle(self) -> None:
        """The text stops streaming: the room below it goes."""
        if self.room:
            self.room = 0
            self.refresh(layout=True)

    def rows(self, lines: int) -> int:
        """The height for ``lines`` of text: the height it has while they fit in it with at
        most ``room`` blank lines left, else the lines and ``room`` blank lines."""
        if self.room and lines <= self._rows <= lines + self.room:
            return self._rows
        return lines + self.room

    def _rendered(self, renderable: CachedMarkdown) -> _Rendered | None:
        """``renderable`` at the current width (None before the first layout)."""
        width = self.content_size.width
        if not width or not self.is_attached:
            return None
        return self._rendered_at(renderable, width)

    def _rendered_at(self, renderable: CachedMarkdown, width: int) -> _Rendered:
        app = self.app
        return renderable.rendered(app.console, app.console_options.update_width(width))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._rows = self.rows(len(self._rendered_at(self._renderable, width)))
        return self._rows

    def render(self) -> CachedMarkdown:
        return self._renderable

    # Painting: Textual's default renders every line of a widget into strips and keeps
    # them, and its styles cache keeps the strips it painted. Here strips are made only
    # for the lines Textual paints, through Textual's own pipeline (so they are the
    # same strips), and nothing is kept once the segment leaves the screen.
    def render_lines(self, crop: Region) -> list[Strip]:
        self._wanted = (crop.y, crop.bottom)
        try:
            return super().render_lines(crop)
        finally:
            self._window = None
            self._dirty_regions.clear()  # what the default render_line would have re-rendered

    def render_line(self, y: int) -> Strip:
        window = self._window
        if window is None or not window[0] <= y < window[0] + len(window[1]):
            window = self._window = (y, self._strips(y, max(y + 1, self._wanted[1])))
        start, strips = window
        if y - start < len(strips):
            return strips[y - start]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    def _strips(self, start: int, end: int) -> list[Strip]:
        width = self.size.width
        if not width:
            return []
        lines = self._rendered_at(self._renderable, width).segments(start, end)
        return Visual.to_strips(self, RichVisual(self, _Lines(lines)), width, None, self.visual_style)

    def forget_strips(self) -> None:
        """Out of view: drop the strips Textual's styles cache keeps for it (they come
        back from the packed lines, without parsing, if it scrolls into view again)."""
        self.refresh()
