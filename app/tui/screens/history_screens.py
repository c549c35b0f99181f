"""Modals for saved conversations: full-text search, rename, export.

Titles, snippets and paths come from outside (the user's and the model's words, the
current directory): shown sanitised and as text (``outside``), never read as markup."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, RadioButton, RadioSet, Static
from textual.widgets.option_list import Option

from vibechat.engine.chat.history import History
from vibechat.engine.chat.records import HIT_END, HIT_START, SearchHit
from vibechat.engine.errors import VibechatError

from ..outside import one_line, plain
from ..widgets.sidebar import when
from . import dialog


def highlighted(snippet: str) -> Text:
    """A search snippet with its matched words highlighted. (Split at the markers first:
    they are control characters, which sanitising removes.)"""
    text = Text(no_wrap=True, overflow="ellipsis")
    for i, part in enumerate(snippet.replace(HIT_END, HIT_START).split(HIT_START)):
        text.append(plain(part, limit=None), style="bold reverse" if i % 2 else "")
    return text


class SearchScreen(ModalScreen[SearchHit | None]):
    """Search every saved message as you type; Enter jumps to the chosen one."""

    DEFAULT_CSS = (
        dialog.modal_css("SearchScreen")
        + """
    SearchScreen OptionList {
        height: auto;
        max-height: 20;
    }
    SearchScreen.-short OptionList {
        max-height: 9;
        border: none;
    }
    """
    )
    # -short: its list shows fewer rows.
    VERTICAL_BREAKPOINTS = dialog.BREAKPOINTS
    BINDINGS = [
        Binding("escape", "close", "Close", id="search.close"),
        Binding("down", "to_results", "Results", id="search.results", show=False),
    ]

    class Found(Message):
        def __init__(self, query: str, hits: list[SearchHit]) -> None:
            super().__init__()
            self.query = query
            self.hits = hits

    def __init__(self, history: History, query: str = "") -> None:
        super().__init__()
        self.history = history
        self.query_text = query
        self.hits: list[SearchHit] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Search conversations", classes="modal--title")
            yield Input(
                self.query_text, placeholder="words to find in any message", id="search-input"
            )
            yield OptionList(id="search-results")
            yield Static("", id="search-status")
            yield Static(
                "type to search · ↓ results · Enter open · Esc close", classes="modal--keys"
            )

    def on_mount(self) -> None:
        self.query_one(Input).focus()
        if self.query_text:
            self._search(self.query_text)

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        self._search(event.value)

    @on(Input.Submitted)
    def _submitted(self) -> None:
        if self.hits:
            self.dismiss(self.hits[0])

    @work(thread=True, exclusive=True, group="search", exit_on_error=False)
    def _search(self, query: str) -> None:
        try:
            hits = self.history.search(query)
        except VibechatError:
            hits = []
        self.post_message(self.Found(query, hits))

    def on_search_screen_found(self, message: Found) -> None:
        if message.query != self.query_one(Input).value:
            # An older search finished late.
            return
        self.hits = message.hits
        results = self.query_one(OptionList)
        results.clear_options()
        for index, hit in enumerate(self.hits):
            label = Text(no_wrap=True, overflow="ellipsis")
            label.append(one_line(hit.title), style="bold")
            # Titles repeat (the same first question, asked again): when and which one tell them
            # apart.
            stamp = when(hit.updated)
            label.append(
                f"  {stamp + ' · ' if stamp else ''}#{hit.conversation_id} · {hit.role}",
                style="dim",
            )
            label.append("\n")
            label.append_text(highlighted(hit.snippet))
            results.add_option(Option(label, id=str(index)))
        status = self.query_one("#search-status", Static)
        if not message.query.strip():
            status.update("")
        else:
            status.update(f"{len(self.hits)} match" + ("" if len(self.hits) == 1 else "es"))

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.hits[int(event.option.id or 0)])

    def action_to_results(self) -> None:
        """From the input to the results, on the first one (Enter then opens it at once)."""
        if self.hits:
            results = self.query_one(OptionList)
            if results.highlighted is None:
                results.highlighted = 0
            results.focus()

    def action_close(self) -> None:
        self.dismiss(None)


class RenameScreen(ModalScreen[str | None]):
    DEFAULT_CSS = dialog.modal_css("RenameScreen")
    BINDINGS = [Binding("escape", "close", "Cancel", id="rename.cancel")]

    def __init__(self, title: str) -> None:
        super().__init__()
        self.old_title = title

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Rename the conversation", classes="modal--title")
            yield Input(one_line(self.old_title, limit=None), id="rename-input")
            yield Static("Enter save · Esc cancel", classes="modal--keys")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        title = " ".join(event.value.split())
        if not title:
            self.notify("A title cannot be empty.", severity="warning")
            return
        self.dismiss(title)

    def action_close(self) -> None:
        self.dismiss(None)


class FormatRow(RadioSet):
    """The export formats as a row: Left and Right choose (a row has no "highlighted but not
    chosen" state worth a second key), Enter exports (``Submitted``) as it does in the path."""

    BINDINGS = [
        Binding("right,down", "pick(1)", "Next format", id="export.next_format", show=False),
        Binding("left,up", "pick(-1)", "Previous format", id="export.previous_format", show=False),
        Binding("enter", "submit", "Export", id="export.submit", show=False),
    ]

    class Submitted(Message):
        pass

    def action_pick(self, step: int) -> None:
        buttons = list(self.query(RadioButton))
        if not buttons:
            return
        current = next((i for i, button in enumerate(buttons) if button.value), 0)
        target = max(0, min(len(buttons) - 1, current + step))
        buttons[target].value = True
        # The highlight follows the choice.
        self._selected = target

    def action_submit(self) -> None:
        self.post_message(self.Submitted())


@dataclass(frozen=True)
class ExportChoice:
    format: str  # "md" or "json"
    path: Path


class ExportScreen(ModalScreen[ExportChoice | None]):
    """Where to write the conversation, and as what."""

    DEFAULT_CSS = (
        dialog.modal_css("ExportScreen")
        + """
    ExportScreen .export--formats {
        height: auto;
    }
    ExportScreen RadioSet {
        layout: horizontal;
        border: none;
        height: auto;
        margin: 0 0 1 0;
    }
    """
    )
    BINDINGS = [Binding("escape", "close", "Cancel", id="export.cancel")]

    def __init__(self, default_stem: Path) -> None:
        super().__init__()
        self.stem = default_stem

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Export the conversation", classes="modal--title")
            with Horizontal(classes="export--formats"):
                with FormatRow(id="export-format"):
                    yield RadioButton("Markdown", value=True, id="format-md")
                    yield RadioButton("JSON", id="format-json")
            yield Input(plain(str(self.stem.with_suffix(".md")), limit=None), id="export-path")
            yield Static(
                "Enter write · Tab switch format/path · ←→ format · Esc cancel",
                classes="modal--keys",
            )

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @property
    def format(self) -> str:
        pressed = self.query_one(RadioSet).pressed_button
        return "json" if pressed is not None and pressed.id == "format-json" else "md"

    @on(RadioSet.Changed)
    def _format_changed(self) -> None:
        path_input = self.query_one(Input)
        path = Path(path_input.value)
        if path.suffix.lower() in (".md", ".json", ""):
            path_input.value = str(path.with_suffix("." + self.format))

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        self._export(event.value)

    @on(FormatRow.Submitted)
    def _submitted_from_formats(self) -> None:
        self._export(self.query_one(Input).value)

    def _export(self, value: str) -> None:
        text = value.strip()
        if not text:
            self.notify("Give a file to write to.", severity="warning")
            return
        self.dismiss(ExportChoice(self.format, Path(text).expanduser()))

    def action_close(self) -> None:
        self.dismiss(None)
