"""Rich's Markdown as the chat renders a reply: line breaks kept.

Its own module so that Rich's Markdown (markdown-it, Pygments) is imported on a reply's first
render, not before the chat's first frame: markdown_segment.py's ``chat_markdown`` imports it.
"""

from __future__ import annotations

from rich.markdown import Markdown as RichMarkdown

# The blocks that Rich's Markdown opens with a blank line even at the top of a document (it
# writes one before a block whenever an element closed before it, and these close their
# items, rows or paragraphs first): a segment that starts with one has its blank line.
OPENS_WITH_BLANK = frozenset(
    {"bullet_list_open", "ordered_list_open", "blockquote_open", "table_open"}
)


class ChatMarkdown(RichMarkdown):
    """Rich's Markdown with the text's line breaks kept (see the module doc). markdown-it's
    ``breaks`` option only changes its HTML output; its tokens still say ``softbreak``,
    which Rich renders as a space, and ``hardbreak`` as a new line (what two trailing
    spaces make). So each ``softbreak`` of the parsed document becomes a ``hardbreak``:
    only paragraph and heading text has them (a code block's lines are its own), and the
    walk is over the tokens already parsed, a few per line."""

    def __init__(self, markup: str, code_theme: str) -> None:
        super().__init__(markup, code_theme=code_theme, hyperlinks=False)
        for token in self.parsed:
            for child in token.children or ():
                if child.type == "softbreak":
                    child.type = "hardbreak"

    @property
    def opens_with_blank(self) -> bool:
        """Rendered alone, the document starts with a blank line (``OPENS_WITH_BLANK``)."""
        return bool(self.parsed) and self.parsed[0].type in OPENS_WITH_BLANK

    @property
    def ends_with_rule(self) -> bool:
        """The last block is a horizontal rule, the one block Rich puts no blank line after."""
        last = [token for token in self.parsed if token.level == 0]
        return bool(last) and last[-1].type == "hr"
