"""One piece of a streamed reply, rendered as Markdown at the least possible cost.

A streaming reply re-renders its live tail several times a second while the
model needs every core. ``MarkdownSegment`` keeps that cheap:

* the Markdown is parsed once per text and rendered once per width (Textual asks
  for the height and then for the lines; both come from one cached render);
* a new text whose rendered height is unchanged only repaints the segment's own
  region. Only a height change asks for a layout, which (with the view anchored
  to the bottom) scrolls and repaints the whole screen. Text grows by a line
  every few renders, so most renders are repaints of a few lines.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import Markdown as RichMarkdown
from rich.segment import Segment
from textual.geometry import Size
from textual.widget import Widget


WARM_UP = "# A\n\nText *em* **strong** `code` [link](https://x.example).\n\n- a\n\n1. b\n\n> q\n\n" \
          "| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\ndef f(x):\n    return x\n```\n"


def warm_up(console: Console, code_theme: str) -> None:
    """Render one of everything once: the first Markdown render in a process costs
    ~60 ms of imports and caches (code highlighting above all), which would
    otherwise land on the first reply. Safe to call from a worker thread."""
    CachedMarkdown(WARM_UP, code_theme).lines(console, console.options.update_width(80))


class CachedMarkdown:
    """A Rich renderable: ``text`` as Markdown, its lines cached per render width."""

    def __init__(self, text: str, code_theme: str) -> None:
        self.text = text
        self._markdown = RichMarkdown(text, code_theme=code_theme, hyperlinks=False)
        self._lines: dict[tuple, list[list[Segment]]] = {}

    def lines(self, console: Console, options: ConsoleOptions) -> list[list[Segment]]:
        key = (options.max_width, options.justify, options.overflow, options.no_wrap)
        lines = self._lines.get(key)
        if lines is None:
            # No height: Textual passes the widget's, and Rich would crop or pad to it.
            lines = self._lines[key] = console.render_lines(self._markdown, options.update(height=None),
                                                            pad=False)
        return lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        new_line = Segment.line()
        for line in self.lines(console, options):
            yield from line
            yield new_line


class MarkdownSegment(Widget):
    """Markdown text; ``text`` is replaced as the stream grows (see the module doc)."""

    DEFAULT_CSS = """
    MarkdownSegment {
        height: auto;
    }
    """

    def __init__(self, text: str = "", *, code_theme: str = "monokai", classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self.code_theme = code_theme
        self._renderable = CachedMarkdown(text, code_theme)

    @property
    def text(self) -> str:
        return self._renderable.text

    def set_text(self, text: str) -> None:
        if text == self._renderable.text:
            return
        before = self._height(self._renderable)
        self._renderable = CachedMarkdown(text, self.code_theme)
        after = self._height(self._renderable)
        self.refresh(layout=before is None or before != after)

    def _height(self, renderable: CachedMarkdown) -> int | None:
        """Lines ``renderable`` takes at the current width (None before the first layout)."""
        width = self.content_size.width
        if not width or not self.is_attached:
            return None
        return self._lines_at(renderable, width)

    def _lines_at(self, renderable: CachedMarkdown, width: int) -> int:
        app = self.app
        return len(renderable.lines(app.console, app.console_options.update_width(width)))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self._lines_at(self._renderable, width)

    def render(self) -> CachedMarkdown:
        return self._renderable
