"""The model picker: every model on this machine, which one is loaded (and how many of
its layers are on the GPU), and the way to the downloader.

It finds the models in a worker (other tools' folders can be slow to walk) and
dismisses with what the user chose; the app does the loading.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from vibechat.engine.backend import ModelInfo
from vibechat.engine.models import LocalModel

from ..progress import human_size


@dataclass(frozen=True)
class PickerChoice:
    """What the picker was closed with: a model to load, or the downloader to open."""

    model: LocalModel | None = None
    download: bool = False


class ModelPicker(ModalScreen[PickerChoice | None]):
    DEFAULT_CSS = """
    ModelPicker {
        align: center middle;
    }
    ModelPicker > Vertical {
        width: 100;
        max-width: 95%;
        height: auto;
        max-height: 85%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    ModelPicker .picker--title {
        text-style: bold;
        color: $primary;
        padding: 0 0 1 0;
    }
    ModelPicker DataTable {
        height: auto;
        max-height: 24;
    }
    ModelPicker .picker--keys {
        color: $text-muted;
        padding: 1 0 0 0;
    }
    """
    BINDINGS = [
        Binding("escape", "dismiss_picker", "Close", id="picker.close"),
        Binding("d", "download", "Download a model", id="picker.download"),
    ]

    class Found(Message):
        def __init__(self, models: list[LocalModel]) -> None:
            super().__init__()
            self.models = models

    def __init__(self, loaded_path: str | None, downloading: str | None = None,
                 loaded_info: ModelInfo | None = None) -> None:
        super().__init__()
        self.loaded_path = loaded_path
        self.downloading = downloading
        self.loaded_info = loaded_info
        self.models: list[LocalModel] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Models on this machine", classes="picker--title")
            table = DataTable(cursor_type="row", zebra_stripes=True, id="picker-table")
            table.add_columns(" ", "name", "quant", "size", "source", "GPU layers")
            yield table
            yield Static("Looking for models…", id="picker-status")
            yield Static("Enter load · d download a model" + (f" (downloading {self.downloading})"
                                                               if self.downloading else "") + " · Esc close",
                         classes="picker--keys")

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self._find()

    @work(thread=True, exclusive=True, group="picker", exit_on_error=False)
    def _find(self) -> None:
        from vibechat.engine.models import all_models

        self.post_message(self.Found(all_models()))

    def on_model_picker_found(self, message: Found) -> None:
        self.models = message.models
        table = self.query_one(DataTable)
        table.clear()
        info = self.loaded_info
        for index, model in enumerate(self.models):
            is_loaded = bool(self.loaded_path) and str(model.path) == self.loaded_path
            layers = f"{info.gpu_layers}/{info.n_layers}" if is_loaded and info and info.n_layers else ""
            table.add_row("●" if is_loaded else "", model.name, model.quant, human_size(model.size), model.source,
                          layers, key=str(index))
        status = self.query_one("#picker-status", Static)
        count = f"{len(self.models)} model" + ("" if len(self.models) == 1 else "s")
        where = f" ({info.device})" if info is not None else ""
        status.update(f"{count} · ● loaded{where} · other tools' models are used in place, read-only")
        for index, model in enumerate(self.models):
            if self.loaded_path and str(model.path) == self.loaded_path:
                table.move_cursor(row=index)

    @on(DataTable.RowSelected)
    def _chosen(self, event: DataTable.RowSelected) -> None:
        index = int(event.row_key.value)
        self.dismiss(PickerChoice(model=self.models[index]))

    def action_download(self) -> None:
        self.dismiss(PickerChoice(download=True))

    def action_dismiss_picker(self) -> None:
        self.dismiss(None)
