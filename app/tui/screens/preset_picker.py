"""The preset picker: the config file's presets in a table, read in a worker; Enter dismisses
with the chosen preset's name (controllers/presets.py applies it). Names, models and prompts
come from the user's file: cells and lines are built with ``outside`` (sanitised, never read
as markup).

Imports inside functions are deliberate: the preset files load only when the picker opens
(start-up time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from ..outside import block, cell
from . import dialog

if TYPE_CHECKING:
    from pathlib import Path

    from vibechat.engine.settings.preset_file import PresetBook


class PresetPicker(ModalScreen["str | None"]):
    """The config file's presets; Enter applies one (dismisses with its name)."""

    DEFAULT_CSS = (
        dialog.modal_css("PresetPicker")
        + """
    PresetPicker > Vertical {
        width: 110;
    }
    PresetPicker DataTable {
        height: auto;
        max-height: 20;
    }
    PresetPicker.-short DataTable {
        max-height: 9;
    }
    """
    )
    # -short: its list shows fewer rows.
    VERTICAL_BREAKPOINTS = dialog.BREAKPOINTS
    BINDINGS = [Binding("escape", "dismiss_picker", "Close", id="preset_picker.close")]

    class Found(Message):
        def __init__(self, book: PresetBook) -> None:
            super().__init__()
            self.book = book

    def __init__(self, config_path: Path) -> None:
        super().__init__()
        self.config_path = config_path
        self.names: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Presets", classes="modal--title")
            table: DataTable[Any] = DataTable(
                cursor_type="row", zebra_stripes=True, id="preset-table"
            )
            table.add_columns("name", "model", "system prompt", "parameters")
            yield table
            yield Static("Reading the presets…", id="preset-status")
            yield Static(
                "Enter apply · Esc close · [presets.NAME] in the config file adds one",
                classes="modal--keys",
            )

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self._find()

    @work(thread=True, exclusive=True, group="preset-picker", exit_on_error=False)
    def _find(self) -> None:
        from vibechat.engine.settings.preset_file import load_presets

        self.post_message(self.Found(load_presets(self.config_path)))

    def on_preset_picker_found(self, message: Found) -> None:
        book = message.book
        presets = sorted(book.presets.values(), key=lambda p: p.name)
        self.names = [p.name for p in presets]
        table = self.query_one(DataTable)
        table.clear()
        for preset in presets:
            table.add_row(
                cell(preset.name, limit=30),
                cell(preset.model or "", limit=40),
                cell(preset.system if preset.system is not None else "", limit=40),
                cell(preset.summary(), limit=60),
                key=preset.name,
            )
        problems = [p for p in (book.problem, *book.problems.values()) if p]
        if not presets and not problems:
            text = (
                f"No presets yet: add a [presets.NAME] table to {book.path} "
                "('vibechat config edit'), or import an Ollama Modelfile "
                "('vibechat presets import Modelfile')."
            )
        else:
            count = f"{len(presets)} preset" + ("" if len(presets) == 1 else "s")
            text = count + "".join(f"\n⚠ {p}" for p in problems[:5])
        self.query_one("#preset-status", Static).update(block(text))

    @on(DataTable.RowSelected)
    def _chosen(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.dismiss(str(event.row_key.value))

    def action_dismiss_picker(self) -> None:
        self.dismiss(None)
