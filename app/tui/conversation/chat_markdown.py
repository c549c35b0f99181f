"""Rich's Markdown as the chat renders a reply: line breaks kept.

Its own module so that Rich's Markdown (markdown-it, Pygments) is imported on a reply's first
render, not before the chat's first frame: markdown_segment.py's ``chat_markdown`` imports it.
"""

from __future__ import annotations

import threading

from markdown_it import MarkdownIt
from rich.markdown import Markdown as RichMarkdown

# The blocks that Rich's Markdown opens with a blank line even at the top of a document (it
# writes one before a block whenever an element closed before it, and these close their
# items, rows or paragraphs first): a segment that starts with one has its blank line.
OPENS_WITH_BLANK = frozenset(
    {"bullet_list_open", "ordered_list_open", "blockquote_open", "table_open"}
)

# The chat's markdown-it parser (``_parser``), made once.
_parser_made = threading.Lock()
_shared: MarkdownIt | None = None
# Parsed once by the new parser: its rule chains (core, block, inline) are compiled then.
_COMPILE = "# a\n\n*b* `c`\n\n- d\n"


def _parser() -> MarkdownIt:
    """The parser every document of the chat parses with, configured as Rich's Markdown
    configures the one it builds for every document it renders (~0.35 ms each, and its rule
    chains compiled again on its first parse: 0.4-0.8 ms of the 2-3 ms a reply's first 290
    characters take to render on a 533 µs host). Shared by the event loop and the worker threads
    that render a burst's slices: markdown-it's ``parse`` keeps its state in objects of its own
    per call, and its rules' lookup, compiled lazily (a thread could read it half built), is
    compiled here before the parser is shared, and never changes after."""
    global _shared
    parser = _shared
    if parser is None:
        with _parser_made:
            if _shared is None:
                made = MarkdownIt().enable("strikethrough").enable("table")
                made.parse(_COMPILE)
                _shared = made
            parser = _shared
    return parser


class ChatMarkdown(RichMarkdown):
    """Rich's Markdown with the text's line breaks kept (see the module doc). markdown-it's
    ``breaks`` option only changes its HTML output; its tokens still say ``softbreak``,
    which Rich renders as a space, and ``hardbreak`` as a new line (what two trailing
    spaces make). So each ``softbreak`` of the parsed document becomes a ``hardbreak``:
    only paragraph and heading text has them (a code block's lines are its own), and the
    walk is over the tokens already parsed, a few per line."""

    def __init__(self, markup: str, code_theme: str) -> None:
        # Rich's ``Markdown.__init__`` with these arguments, parsed by the chat's one parser
        # instead of a new one (tests/app/tui/test_send_frame.py holds the two the same).
        self.markup = markup
        self.parsed = _parser().parse(markup)
        self.code_theme = code_theme
        self.justify = None
        self.style = "none"
        self.hyperlinks = False
        self.inline_code_lexer = None
        self.inline_code_theme = code_theme
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
