"""A block folded to its header line that opens to its body and closes again: a reasoning
model's thinking (thinking_block.py) and a text file under a prompt (attachment_view.py).

``FoldableBlock`` owns what they share: the CSS (a one-line, muted header, highlighted while
focused; the body indented and hidden until the block has the ``-expanded`` class), whether
it is open (``expanded``), and ``toggle``. Its subclass draws the header and the body (the
children with the classes ``fold--header`` and ``fold--body``) and redraws them in
``folded_or_opened``; its key binding and click call ``toggle``.
"""

from __future__ import annotations

from textual.containers import Vertical

from ..one_layout import SizedByLayout


class FoldableBlock(SizedByLayout, Vertical, can_focus=True):
    """See the module docstring."""

    DEFAULT_CSS = """
    FoldableBlock {
        height: auto;
    }
    FoldableBlock > .fold--header {
        height: 1;
        color: $text-muted;
    }
    FoldableBlock:focus > .fold--header {
        background: $boost;
        color: $text;
    }
    FoldableBlock > .fold--body {
        height: auto;
        display: none;
        padding: 0 0 0 2;
    }
    FoldableBlock.-expanded > .fold--body {
        display: block;
    }
    """

    @property
    def expanded(self) -> bool:
        """Whether the body shows."""
        return self.has_class("-expanded")

    def toggle(self) -> None:
        """Open the block, or fold it again."""
        self.set_class(not self.expanded, "-expanded")
        self.folded_or_opened()

    def folded_or_opened(self) -> None:
        """Redraw the header and the body for ``expanded`` (the subclass's)."""
