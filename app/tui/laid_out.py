"""Text that lays itself out for the width it is shown at (``columns``): label-and-value rows
with their values in one column (a continued line hangs under its value, never at the left
edge), and key lines broken between their `` · `` parts. A Textual ``Visual``, so a ``Static``
shows it as it would a string, and its ``str`` is the text at no width (one line a row).

The text is plain: outside text in it is sanitised here (``outside.plain``), never read as
markup."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from textual.content import Content
from textual.css.styles import RulesMap
from textual.strip import Strip
from textual.style import Style
from textual.visual import RenderOptions, Visual

from .. import columns
from .outside import plain


class LaidOut(Visual):
    """Lines of plain text as ``lay_out(width)`` breaks them (``None``: not broken)."""

    def __init__(self, lay_out: Callable[[int | None], list[str]]) -> None:
        self._lay_out = lru_cache(maxsize=4)(lay_out)

    @classmethod
    def rows(cls, items: Sequence[tuple[str, columns.Value]], heading: str = "") -> LaidOut:
        """``label  value`` rows, each value in its column (``columns.rows``), under the
        lines of ``heading`` (broken as ``text``)."""
        safe = [
            (
                plain(label, None),
                plain(value, None) if isinstance(value, str) else [plain(p, None) for p in value],
            )
            for label, value in items
        ]
        top = plain(heading, None)
        return cls(lambda width: cls._text(top, width) + columns.rows(safe, width))

    @classmethod
    def text(cls, text: str) -> LaidOut:
        """Lines broken between their `` · `` parts, else between words (``columns.fit``)."""
        safe = plain(text, None)
        return cls(lambda width: cls._text(safe, width))

    @staticmethod
    def _text(text: str, width: int | None) -> list[str]:
        if not text:
            return []
        return text.splitlines() if width is None else columns.fit(text, width)

    def __str__(self) -> str:
        return "\n".join(self._lay_out(None))

    def lines(self, width: int) -> list[str]:
        """The lines shown at ``width`` columns."""
        return self._lay_out(max(1, width))

    def render_strips(
        self, width: int, height: int | None, style: Style, options: RenderOptions
    ) -> list[Strip]:
        return Content("\n".join(self.lines(width))).render_strips(width, height, style, options)

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        return max((len(line) for line in self._lay_out(None)), default=0)

    def get_height(self, rules: RulesMap, width: int) -> int:
        return len(self.lines(width))
