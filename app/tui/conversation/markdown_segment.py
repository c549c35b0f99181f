"""A reply's text, rendered as Markdown at the least possible cost, in one widget.

A streaming reply is cut into segments (segmenter.py) and re-renders its live tail several
times a second while the model needs every core. ``MarkdownSegment`` shows them all: the
settled segments, one below the other (``SettledMarkdown``), and the tail below them. A
sealed segment joins the settled ones: nothing is mounted, nothing above the tail is rendered
or painted again, and the layout after a render touches this one widget however long the
reply is (issue 42). It keeps that cheap:

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
  which the collector stops tracking, and the widget hands Textual strips only for
  the lines on screen, and has Textual forget them once they scroll out of view
  (``forget_strips``).

A reply's line breaks are shown as line breaks (``ChatMarkdown``), as every chat UI
shows a model's output: in Markdown a single newline is a space, which joined JSON,
poems, lists written without blank lines and unfenced code into one line.

Imports inside functions are deliberate: the chat's Markdown widget (markdown-it, Pygments)
loads when a reply is first rendered, not before the chat's first frame.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import RichVisual, Visual

from ..one_layout import SizedByLayout

if TYPE_CHECKING:
    from .chat_markdown import ChatMarkdown

WARM_UP = (
    "# A\n\nText *em* **strong** `code` [link](https://x.example).\nA second line.\n\n"
    "- a\n\n1. b\n\n> q\n\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\ndef f(x):\n    return x\n```\n"
)

# A line that may be a horizontal rule.
_RULE = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")

# A packed line: (text, style index, text, style index, ...) -- strings and integers
# only, so the garbage collector stops tracking it. A line with a control segment
# (never seen from Markdown) is kept as its segments.
PackedLine = tuple


def warm_up(console: Console, code_theme: str) -> None:
    """Render one of everything once: the first Markdown render in a process costs
    ~60 ms of imports and caches (code highlighting above all), which would
    otherwise land on the first reply. Safe to call from a worker thread."""
    CachedMarkdown(WARM_UP, code_theme).lines(console, console.options.update_width(80))


def chat_markdown(markup: str, code_theme: str) -> ChatMarkdown:
    """``markup`` as the chat renders it (chat_markdown.py). That module, and with it Rich's
    Markdown, markdown-it and Pygments (~27 ms on a 355 µs host, ~70 ms at the 974 µs
    reference), is imported on the first render, not before the chat's first frame (an
    empty conversation needs none): the model's load worker renders ``WARM_UP`` once the model
    is ready (``warm_up``), so the import lands there, off the event loop, while the user
    types the first prompt; a conversation opened at start imports it on its first render."""
    from .chat_markdown import ChatMarkdown

    return ChatMarkdown(markup, code_theme)


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


class _Joined(_Rendered):
    """The rendered lines of several texts, one below the other (``SettledMarkdown``): the
    parts' own packed lines, looked up where they are, never copied."""

    __slots__ = ("parts", "starts", "total")

    def __init__(self, parts: Sequence[_Rendered]) -> None:
        """No ``super().__init__``: there is nothing to pack. ``starts``: the first line of
        each part."""
        self.parts = list(parts)
        self.starts: list[int] = []
        total = 0
        for part in self.parts:
            self.starts.append(total)
            total += len(part)
        self.total = total

    def __len__(self) -> int:
        return self.total

    def segments(self, start: int = 0, end: int | None = None) -> list[list[Segment]]:
        end = self.total if end is None else min(end, self.total)
        out: list[list[Segment]] = []
        index = max(0, bisect_right(self.starts, start) - 1)
        # Bounded: one step per part.
        while start < end and index < len(self.parts):
            first = self.starts[index]
            out += self.parts[index].segments(start - first, end - first)
            start = first + len(self.parts[index])
            index += 1
        return out


def first_difference(before: _Rendered, after: _Rendered) -> int:
    """The first line that renders differently in ``after`` (its length if none does). A
    packed line names its styles by number, in order of first use, so equal lines mean
    equal text only where the styles they number are equal too."""
    first = min(len(before), len(after))
    for y, (old, new) in enumerate(zip(before.lines, after.lines, strict=False)):
        if old != new:
            first = y
            break
    used = 1 + max(
        (n for row in before.lines[:first] for n in row[1::2] if isinstance(n, int)), default=-1
    )
    if before.styles[:used] != after.styles[:used]:
        return 0
    return first


class CachedMarkdown:
    """A Rich renderable: ``text`` as Markdown, its lines cached (packed) per render
    width. The parsed document is not kept: a new width parses again.

    ``gap_above``: the text continues a reply below a segment cut after a blank line
    (segmenter.py), whose last block Rich separates from the next by a blank line (every
    block but a horizontal rule). Rendered whole, the reply has that blank line; rendered
    alone, this segment has it only if its first block opens with one. So it is added
    here, and the segments render exactly as the whole reply."""

    # Renders kept (the current width and the one before).
    KEEP = 2

    def __init__(self, text: str, code_theme: str, gap_above: bool = False) -> None:
        self.text = text
        self.code_theme = code_theme
        self.gap_above = gap_above
        self._renders: dict[tuple, _Rendered] = {}
        # Known once parsed.
        self._ends_with_rule: bool | None = None

    @property
    def ends_with_rule(self) -> bool:
        """Its last block is a horizontal rule (then no blank line separates the next). Parsed
        only when its last line looks like one (it may be a heading's underline)."""
        if self._ends_with_rule is None:
            last = self.text.rstrip().rpartition("\n")[2]
            self._ends_with_rule = (
                bool(_RULE.match(last)) and chat_markdown(self.text, self.code_theme).ends_with_rule
            )
        return self._ends_with_rule

    def rendered(self, console: Console, options: ConsoleOptions) -> _Rendered:
        key = (options.max_width, options.justify, options.overflow, options.no_wrap)
        rendered = self._renders.get(key)
        if rendered is None and not self.text:
            # No lines, as Rich renders it, without importing and building a Markdown parser: a
            # reply is laid out before its first words (a prompt sent while the model loads:
            # before the warm-up, the import landed on the event loop, ~55 ms in that frame).
            self._ends_with_rule = False
            rendered = self._renders[key] = _Rendered([])
        if rendered is None:
            markdown = chat_markdown(self.text, self.code_theme)
            self._ends_with_rule = markdown.ends_with_rule
            # No height: Textual passes the widget's, and Rich would crop or pad to it.
            lines = console.render_lines(markdown, options.update(height=None), pad=False)
            if self.gap_above and markdown.parsed and not markdown.opens_with_blank:
                lines.insert(0, [])
            rendered = _Rendered(lines)
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


class SettledMarkdown(CachedMarkdown):
    """The settled segments of a reply, one below the other, as one renderable: each
    part renders (and caches) its own lines as its segment would have, and the lines of the
    whole are theirs in order (``_Joined``), so a new width re-renders each part once.
    Only ``parts`` says the text (``text`` is not kept: the message has it)."""

    def __init__(self, parts: Sequence[CachedMarkdown], code_theme: str) -> None:
        super().__init__("", code_theme, gap_above=bool(parts) and parts[0].gap_above)
        self.parts = list(parts)
        # (width key, parts, lines)
        self._joined: tuple[tuple, int, _Joined] | None = None

    @property
    def ends_with_rule(self) -> bool:
        return bool(self.parts) and self.parts[-1].ends_with_rule

    def rendered(self, console: Console, options: ConsoleOptions) -> _Rendered:
        key = (options.max_width, options.justify, options.overflow, options.no_wrap)
        joined = self._joined
        if joined is None or joined[0] != key or joined[1] != len(self.parts):
            joined = self._joined = (
                key,
                len(self.parts),
                _Joined([part.rendered(console, options) for part in self.parts]),
            )
        return joined[2]


def prepare(
    texts: Sequence[tuple[str, bool | None]],
    code_theme: str,
    console: Console,
    options: ConsoleOptions,
    gap_above_first: bool,
) -> list[CachedMarkdown]:
    """``texts`` parsed and rendered at ``options``, for segments about to show them; safe
    in a worker thread (Rich renders with the console's settings, read only). Each text
    comes with whether a clean cut separates it from the one before (None for the first:
    ``gap_above_first`` says); below a clean cut it starts with a blank line unless the
    text before ends with a horizontal rule (``CachedMarkdown.gap_above``)."""
    prepared: list[CachedMarkdown] = []
    for text, clean_cut in texts:
        if clean_cut is None:
            gap = gap_above_first
        else:
            gap = clean_cut and not prepared[-1].ends_with_rule
        markdown = CachedMarkdown(text, code_theme, gap)
        markdown.rendered(console, options)
        prepared.append(markdown)
    return prepared


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
    """A reply's Markdown in one widget: the settled segments (``settled``: each rendered
    once and cached, their lines one below the other, ``SettledMarkdown``) and below them the
    live tail, whose ``text`` is replaced as the stream grows (see the module doc). A sealed
    segment moves into the settled ones (``seal``): nothing is mounted, and the lines above
    the tail are neither rendered nor painted again."""

    DEFAULT_CSS = """
    MarkdownSegment {
        height: auto;
    }
    """
    # Grown by a line: the lines above stay painted (one_layout.py); its text is drawn from
    # the top, and what changed in it is repainted from the first line that changed.
    KEEPS_LINES = True

    def __init__(
        self,
        text: str = "",
        *,
        code_theme: str = "monokai",
        classes: str | None = None,
        room: int = 0,
        gap_above: bool = False,
        prepared: CachedMarkdown | None = None,
        settled: Sequence[CachedMarkdown] = (),
    ) -> None:
        super().__init__(classes=classes)
        self.code_theme = code_theme
        # The settled segments above the tail.
        self._settled = SettledMarkdown(settled, code_theme)
        # ``prepared``: the text already parsed and rendered, off the event loop (``prepare``)
        self._renderable = (
            prepared if prepared is not None else CachedMarkdown(text, code_theme, gap_above)
        )
        # Blank lines the live tail may keep below its text (see the module doc).
        self.room = room
        # The height the last layout gave it.
        self._rows = 0
        # The lines Textual is painting (render_lines' crop), and the strips made for that paint.
        self._wanted = (0, 0)
        self._window: tuple[int, list[Strip]] | None = None
        # The next text, already rendered (``offer``).
        self._offered: CachedMarkdown | None = None

    @property
    def text(self) -> str:
        """The live tail's text."""
        return self._renderable.text

    @property
    def ends_with_rule(self) -> bool:
        """Its last block is a horizontal rule (``CachedMarkdown.gap_above``)."""
        return self._renderable.ends_with_rule

    @property
    def markdowns(self) -> list[CachedMarkdown]:
        """What it shows, top to bottom: the settled segments, then the tail."""
        return [*self._settled.parts, self._renderable]

    def offer(self, prepared: CachedMarkdown) -> None:
        """The next ``set_text`` of ``prepared``'s text takes it as it is, already rendered
        (``prepare``), instead of rendering the text itself."""
        self._offered = prepared

    def set_text(self, text: str) -> None:
        """The tail's text is now ``text``: only its lines from the first that renders
        differently are painted again, unless its height changed (then a layout)."""
        offered, self._offered = self._offered, None
        if text == self._renderable.text:
            return
        before = self._rendered(self._renderable)
        gap_above = self._renderable.gap_above
        if offered is not None and offered.text == text and offered.gap_above == gap_above:
            self._renderable = offered
        else:
            self._renderable = CachedMarkdown(text, self.code_theme, gap_above)
        after = self._rendered(self._renderable)
        if before is None or after is None:
            self.refresh(layout=True)
            return
        above = self._settled_lines()
        first = first_difference(before, after)
        if self.rows(above + len(after)) != self._rows:
            # Laid out again; painted from the first line that changed (one_layout.py).
            self._repaint_from(above + first, layout=True)
            return
        end = max(len(before), len(after))
        if first < end:
            self.refresh(Region(0, above + first, self.content_size.width, end - first))

    def seal(self, settled: Sequence[CachedMarkdown], tail: CachedMarkdown) -> None:
        """The tail was sealed: ``settled`` (its text as it ended, and any segments sealed
        with it) go below the settled segments, ``tail`` is the new live tail. Painted from
        the first line of the old tail that renders differently sealed, laid out only if its
        height changed."""
        start = self._settled_lines()
        before = self._rendered(self._renderable)
        self._settled.parts.extend(settled)
        self._renderable = tail
        self._offered = None
        width = self.content_size.width
        if not width or not self.is_attached:
            self.refresh(layout=True)
            return
        if before is not None and settled:
            start += first_difference(before, self._rendered_at(settled[0], width))
        lines = self._settled_lines() + len(self._rendered_at(tail, width))
        self._repaint_from(start, layout=self.rows(lines) != self._rows)

    def _repaint_from(self, y: int, layout: bool = False) -> None:
        """Repaint its lines from ``y`` down (``layout``: and lay it out again: its height
        changed; the lines above stay painted, ``KEEPS_LINES``)."""
        width = self.content_size.width
        bottom = max(self._rows, self.size.height)
        self.refresh(Region(0, y, width, max(1, bottom - y)), layout=layout)

    def show(self, markdowns: Sequence[CachedMarkdown]) -> None:
        """Show ``markdowns`` instead, the last one as the tail (a reply's merged segments
        at its end, or its text rebuilt)."""
        self._settled = SettledMarkdown(markdowns[:-1], self.code_theme)
        self._renderable = markdowns[-1]
        self._offered = None
        self.refresh(layout=True)

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

    @property
    def gap_above(self) -> bool:
        """The tail starts with the blank line between two blocks (``CachedMarkdown``)."""
        return self._renderable.gap_above

    def render_options(self, width: int = 0) -> tuple[Console, ConsoleOptions] | None:
        """What renders this segment at its current width, or at ``width`` before its first
        layout (None: neither known): a text rendered with them ahead of time (``prepare``) is
        the one the segment would render at that width."""
        width = self.content_size.width or width
        if not width or not self.is_attached:
            return None
        app = self.app
        return app.console, app.console_options.update_width(width)

    def _rendered(self, renderable: CachedMarkdown) -> _Rendered | None:
        """``renderable`` at the current width (None before the first layout)."""
        width = self.content_size.width
        if not width or not self.is_attached:
            return None
        return self._rendered_at(renderable, width)

    def _rendered_at(self, renderable: CachedMarkdown, width: int) -> _Rendered:
        app = self.app
        return renderable.rendered(app.console, app.console_options.update_width(width))

    def _settled_lines(self, width: int = 0) -> int:
        """The settled segments' lines at ``width`` (the current width by default)."""
        width = width or self.content_size.width
        if not self._settled.parts or not width or not self.is_attached:
            return 0
        return len(self._rendered_at(self._settled, width))

    def _whole(self, width: int) -> _Rendered:
        """Every line it shows at ``width``: the settled segments' and the tail's."""
        tail = self._rendered_at(self._renderable, width)
        if not self._settled.parts:
            return tail
        return _Joined([self._rendered_at(self._settled, width), tail])

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._rows = self.rows(len(self._whole(width)))
        return self._rows

    def render(self) -> CachedMarkdown:
        return self._renderable

    # Painting: Textual's default renders every line of a widget into strips and keeps
    # them, and its styles cache keeps the strips it painted. Here strips are made only
    # for the lines Textual paints, through Textual's own pipeline (so they are the
    # same strips), and what Textual keeps is dropped once out of view (``forget_strips``).
    def render_lines(self, crop: Region) -> list[Strip]:
        self._wanted = (crop.y, crop.bottom)
        try:
            return super().render_lines(crop)
        finally:
            self._window = None
            # What the default render_line would have re-rendered.
            self._dirty_regions.clear()

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
        lines = self._whole(width).segments(start, end)
        return Visual.to_strips(
            self, RichVisual(self, _Lines(lines)), width, None, self.visual_style
        )

    @property
    def markdown(self) -> CachedMarkdown:
        """The tail: its text, rendered (and cached) per width."""
        return self._renderable

    def forget_strips(self, above: int | None = None) -> None:
        """Drop the strips Textual's styles cache keeps for its lines above line ``above``, those
        scrolled out of view (None: all of them; those in view are painted again). They come back
        from the packed lines, without parsing, if they scroll into view again. The lines in view
        stay painted: dropped whole, the frame after was a repaint of every line of the reply on
        screen, once a view's height had scrolled by (issue 42)."""
        # Textual's styles cache keeps a strip per line painted, by line (``StylesCache._cache``);
        # should it keep them otherwise, all go, as they did.
        cache = getattr(self._styles_cache, "_cache", None)
        if above is None or not isinstance(cache, dict):
            self.refresh()
            return
        for y in [y for y in cache if isinstance(y, int) and y < above]:
            del cache[y]
