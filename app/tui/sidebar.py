"""The conversation sidebar: saved conversations, newest first.

It shows summaries only (title, when, model), never messages, so it opens as fast
with a thousand conversations as with none; a conversation's messages are read
when it is opened. Attributes down (``show``, ``upsert``, ``forget``, ``current``),
messages up (``Open``, ``Rename``, ``Delete``, ``Export``, ``Search``): the app
does the work.
"""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from vibechat.engine.history import ConversationSummary
from vibechat.engine.sanitize import sanitize


def when(stamp: str, today: datetime | None = None) -> str:
    """``14:05`` for today, ``2025-01-31`` before that (local time)."""
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone()
    except ValueError:
        return ""
    today = today or datetime.now().astimezone()
    return moment.strftime("%H:%M") if moment.date() == today.date() else moment.strftime("%Y-%m-%d")


class ConversationSidebar(Vertical, can_focus=False):
    DEFAULT_CSS = """
    ConversationSidebar {
        display: none;
        width: 36;
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
    BINDINGS = [
        Binding("r", "request('rename')", "Rename", id="sidebar.rename"),
        Binding("d,delete", "request('delete')", "Delete", id="sidebar.delete"),
        Binding("e", "request('export')", "Export", id="sidebar.export"),
        Binding("slash", "search", "Search", id="sidebar.search"),
    ]

    current: reactive[int | None] = reactive(None)  # the open conversation, marked ●

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

    class Search(Message):
        pass

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.summaries: list[ConversationSummary] = []

    def compose(self) -> ComposeResult:
        yield Static("Conversations", classes="sidebar--title", id="sidebar-title")
        yield OptionList(id="sidebar-list")
        yield Static("Enter open · r rename · d delete\ne export · / search", classes="sidebar--keys")

    @property
    def options(self) -> OptionList:
        return self.query_one(OptionList)

    # ------------------------------------------------------------ attributes down
    def show(self, summaries: list[ConversationSummary]) -> None:
        self.summaries = list(summaries)
        self._rebuild()

    def upsert(self, summary: ConversationSummary) -> None:
        """A conversation was created or changed: it moves to the top."""
        self.summaries = [summary] + [s for s in self.summaries if s.id != summary.id]
        self._rebuild()

    def forget(self, conversation_id: int) -> None:
        self.summaries = [s for s in self.summaries if s.id != conversation_id]
        self._rebuild()

    def watch_current(self) -> None:
        if self.is_mounted:
            self._rebuild()

    def _rebuild(self) -> None:
        options = self.options
        highlighted = options.highlighted_option.id if options.highlighted_option is not None else None
        options.clear_options()
        options.add_options([self._option(s) for s in self.summaries])
        title = self.query_one("#sidebar-title", Static)
        count = len(self.summaries)
        title.update(f"Conversations ({count})" if count else "Conversations")
        ids = [str(s.id) for s in self.summaries]
        if highlighted in ids:
            options.highlighted = ids.index(highlighted)
        elif self.current is not None and str(self.current) in ids:
            options.highlighted = ids.index(str(self.current))
        elif ids:
            options.highlighted = 0

    def _option(self, summary: ConversationSummary) -> Option:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("● " if summary.id == self.current else "  ", style="bold")
        text.append(sanitize(summary.title))
        text.append("\n  ")
        text.append(f"{when(summary.updated)}  {sanitize(summary.model or '')}", style="dim")
        return Option(text, id=str(summary.id))

    def focus_list(self) -> None:
        """Focus the list, on the open conversation (else the newest)."""
        ids = [s.id for s in self.summaries]
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
        return next((s for s in self.summaries if str(s.id) == option.id), None)

    def action_request(self, what: str) -> None:
        summary = self._highlighted()
        if summary is not None:
            self.post_message(self.Request(what, summary))

    def action_search(self) -> None:
        self.post_message(self.Search())
