"""The conversation sidebar: saved conversations, newest first; the chat's own by default.

Scripts save conversations too (``vibechat run``, ``--prompts-file``): the list shows
the chat's own first and ← / → cycle what it shows, chat → run → batch → all, the
choice named in its title ("Chats (6 of 25)").

The list acts on no letter: its keys are ones that ordinary typing does not produce (Enter,
Ctrl+E, Delete, Ctrl+S, ← / →), and a printable key pressed while it has the focus is posted as
``Typed`` (``type_through``): it belongs in the input (a user who thought Ctrl+B had closed the
list and typed on once deleted a conversation with the ``d`` and ``y`` of "good day").

It shows summaries only (title, when, model), never messages, so it opens as fast
with a thousand conversations as with none; a conversation's messages are read
when it is opened. Each entry is two lines whatever its title (cut with "…"), so
the list knows its height without measuring a thousand titles, and an entry's text
is made the first time it is drawn: only what scrolls into view costs anything.
Attributes down (``show``, ``upsert``, ``forget``, ``current``), messages up
(``Open``, ``Request``: rename, delete, export; ``Typed``): the app does the work. The app mounts
the sidebar after its first frame (it is hidden at start); what it is given before waits there
as it waits while the sidebar is hidden, and a ``focus_list`` until it is mounted.
The sidebar keeps every summary (``summaries``) and shows those its filter lets through
(``shown``): switching filters reads nothing.
Titles and model names come from outside (the user's and the model's words, a GGUF's
name): shown with ``outside``, sanitised and never read as markup.
"""

from __future__ import annotations

from datetime import datetime

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.css.styles import RulesMap
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.style import Style
from textual.visual import RenderOptions, Visual
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from vibechat.engine.chat.records import ConversationSummary

from ..outside import line
from .type_through import TypesIntoInput


def when(stamp: str, today: datetime | None = None) -> str:
    """``14:05`` for today, ``2025-01-31`` before that (local time)."""
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone()
    except ValueError:
        return ""
    today = today or datetime.now().astimezone()
    return (
        moment.strftime("%H:%M") if moment.date() == today.date() else moment.strftime("%Y-%m-%d")
    )


class Entry(Visual):
    """One conversation in the list: the title (● when open), then when and the model,
    each on one line, cut with "…" to the width. Always two lines high; the text is made
    on first render."""

    HEIGHT = 2

    def __init__(self, summary: ConversationSummary, current: bool) -> None:
        self.summary = summary
        self.current = current
        self._lines: tuple[Content, Content] | None = None

    @property
    def lines(self) -> tuple[Content, Content]:
        if self._lines is None:
            s = self.summary
            title = Content.assemble(("● " if self.current else "  ", "bold"), line(s.title))
            detail = Content.assemble(f"  {when(s.updated)}  ", line(s.model or "")).stylize("dim")
            self._lines = (title, detail)
        return self._lines

    def render_strips(
        self, width: int, height: int | None, style: Style, options: RenderOptions
    ) -> list[Strip]:
        strips: list[Strip] = []
        for content in self.lines:
            strips += content.truncate(width, ellipsis=True).render_strips(width, 1, style, options)
        return strips[:height] if height is not None else strips

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        return max(line.cell_length for line in self.lines)

    def get_height(self, rules: RulesMap, width: int) -> int:
        return self.HEIGHT


# What the list can show ("f" cycles them), and its title for each.
FILTERS = ("chat", "run", "batch", "all")
FILTER_TITLES = {
    "chat": "Chats",
    "run": "Runs",
    "batch": "Prompt files",
    "all": "All conversations",
}


class ConversationSidebar(TypesIntoInput, Vertical, can_focus=False):
    # Columns (the app keeps both side panels open only where the chat still fits).
    WIDTH = 36
    DEFAULT_CSS = (
        """
    ConversationSidebar {
        display: none;
        dock: left;
        border-right: vkey $foreground 15%;
        background: $surface;
    }
    ConversationSidebar.-visible {
        display: block;
    }
    ConversationSidebar .sidebar--title {
        text-style: bold;
        color: $primary;
        padding: 0 1;
    }
    ConversationSidebar OptionList {
        height: 1fr;
        border: none;
        background: $surface;
        padding: 0;
    }
    ConversationSidebar OptionList:focus {
        border: none;
    }
    ConversationSidebar .sidebar--keys {
        color: $text-muted;
        padding: 0 1;
    }
    """
        + f"ConversationSidebar {{ width: {WIDTH}; }}"
    )
    # Not in the footer (the app's keys fill it): the list's own hint line shows them. No letter:
    # typing goes to the input (``on_key``). Search is the app's Ctrl+F.
    BINDINGS = [
        Binding("ctrl+e", "request('rename')", "Rename", id="sidebar.rename", show=False),
        Binding("delete", "request('delete')", "Delete", id="sidebar.delete", show=False),
        Binding("ctrl+s", "request('export')", "Export", id="sidebar.export", show=False),
        Binding(
            "right",
            "cycle_filter(1)",
            "Show chats, runs, prompt files or all",
            id="sidebar.filter",
            show=False,
        ),
        Binding(
            "left",
            "cycle_filter(-1)",
            "Show the previous of chats, runs, prompt files, all",
            id="sidebar.filter_back",
            show=False,
        ),
    ]

    # The open conversation, marked ●.
    current: reactive[int | None] = reactive(None)
    # One of FILTERS.
    source_filter: reactive[str] = reactive("chat")

    class Open(Message):
        def __init__(self, conversation_id: int) -> None:
            super().__init__()
            self.conversation_id = conversation_id

    class Request(Message):
        """Rename, delete or export the highlighted conversation."""

        def __init__(self, what: str, summary: ConversationSummary) -> None:
            super().__init__()
            self.what = what
            self.summary = summary

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # All of them, newest first.
        self.summaries: list[ConversationSummary] = []
        # The list waits to be shown to be brought up to date (``_rebuild``).
        self._stale = False
        # ``focus_list`` asked before the list was mounted.
        self._focus_on_mount = False

    def compose(self) -> ComposeResult:
        yield Static(
            FILTER_TITLES[self.source_filter], classes="sidebar--title", id="sidebar-title"
        )
        yield OptionList(id="sidebar-list")
        yield Static(
            "Enter open · ^e rename\nDel delete · ^s export\n← → chats, runs, all",
            classes="sidebar--keys",
        )

    @property
    def shown(self) -> list[ConversationSummary]:
        """The summaries the filter lets through, newest first."""
        if self.source_filter == "all":
            return self.summaries
        return [s for s in self.summaries if s.source == self.source_filter]

    @property
    def options(self) -> OptionList:
        return self.query_one(OptionList)

    # ------------------------------------------------------------ attributes down
    def show(self, summaries: list[ConversationSummary]) -> None:
        self.summaries = list(summaries)
        self._rebuild()

    def upsert(self, summary: ConversationSummary) -> None:
        """A conversation was created or changed: it moves to the top. The usual case, the
        open conversation saved again while already on top, redraws that entry only."""
        if self.summaries and self.summaries[0].id == summary.id and self.is_mounted:
            self.summaries[0] = summary
            options = self.options
            if options.option_count and options.get_option_at_index(0).id == str(summary.id):
                options.replace_option_prompt_at_index(0, self._entry(summary))
            return
        self.summaries = [summary] + [s for s in self.summaries if s.id != summary.id]
        self._rebuild()

    def forget(self, conversation_id: int) -> None:
        self.summaries = [s for s in self.summaries if s.id != conversation_id]
        self._rebuild()

    def watch_current(self, old: int | None, new: int | None) -> None:
        """Move the ● mark: redraw the two entries concerned, not the list."""
        # Stale: the rebuild when shown draws the mark.
        if not self.is_mounted or self._stale:
            return
        options = self.options
        for summary in self.shown:
            if summary.id in (old, new):
                options.replace_option_prompt(str(summary.id), self._entry(summary))

    def _rebuild(self) -> None:
        """The list, from the summaries. While the sidebar is hidden it waits until shown
        (``on_show``, ``focus_list``): a new conversation moves to the top as its first prompt is
        saved, and rebuilding a list of a thousand conversations then cost the frame that shows
        the prompt ~10 ms, unseen (docs/PERFORMANCE.md, "Speed on slow CPUs"). Before the
        sidebar is mounted, it waits too (``on_mount``)."""
        if not self.has_class("-visible") or not self.is_mounted:
            self._stale = True
            return
        self._draw_list()

    def _draw_list(self) -> None:
        self._stale = False
        options = self.options
        highlighted = (
            options.highlighted_option.id if options.highlighted_option is not None else None
        )
        shown = self.shown
        options.clear_options()
        options.add_options([Option(self._entry(s), id=str(s.id)) for s in shown])
        self.query_one("#sidebar-title", Static).update(self._title(len(shown)))
        ids = [str(s.id) for s in shown]
        if highlighted in ids:
            options.highlighted = ids.index(highlighted)
        elif self.current is not None and str(self.current) in ids:
            options.highlighted = ids.index(str(self.current))
        elif ids:
            options.highlighted = 0

    def _title(self, count: int) -> str:
        """``Chats (6 of 25)``: what the filter shows, and that there are others."""
        name, total = FILTER_TITLES[self.source_filter], len(self.summaries)
        if not total:
            return name
        return f"{name} ({count})" if count == total else f"{name} ({count} of {total})"

    def watch_source_filter(self) -> None:
        if self.is_mounted:
            self._rebuild()

    def action_cycle_filter(self, step: int = 1) -> None:
        """Chat → run → batch → all → chat (``step`` -1: the other way)."""
        self.source_filter = FILTERS[(FILTERS.index(self.source_filter) + step) % len(FILTERS)]

    def _entry(self, summary: ConversationSummary) -> Entry:
        return Entry(summary, summary.id == self.current)

    def on_show(self) -> None:
        if self._stale:
            self._rebuild()

    def on_mount(self) -> None:
        """Mounted after the app's first frame: what it was given before, shown now (unless it
        composed nothing: mounted as the app closes)."""
        if not self.children:
            return
        if self._focus_on_mount:
            self._focus_on_mount = False
            self._focus_list()
        elif self._stale and self.has_class("-visible"):
            self._draw_list()

    def focus_list(self) -> None:
        """Focus the list, on the open conversation (else the newest); once it is mounted, if
        asked before."""
        self._focus_on_mount = not self.is_mounted
        if self.is_mounted:
            self._focus_list()

    def _focus_list(self) -> None:
        if self._stale:
            self._draw_list()
        ids = [s.id for s in self.shown]
        if ids:
            self.options.highlighted = ids.index(self.current) if self.current in ids else 0
        self.options.focus()

    # ------------------------------------------------------------- messages up
    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id is not None:
            self.post_message(self.Open(int(event.option.id)))

    def _highlighted(self) -> ConversationSummary | None:
        option = self.options.highlighted_option
        if option is None:
            return None
        return next((s for s in self.shown if str(s.id) == option.id), None)

    def action_request(self, what: str) -> None:
        summary = self._highlighted()
        if summary is not None:
            self.post_message(self.Request(what, summary))
