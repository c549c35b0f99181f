"""The model pickers: every model on this machine, which one is loaded (and how many of
its layers are on the GPU), and the way to the downloader; or, on a remote backend, the
models the server offers.

They find the models in a worker (other tools' folders can be slow to walk, a
server can be slow to answer) and dismiss with what the user chose; the app does
the loading (or, for a server, switches the model id).

The local picker also opens a .gguf file by its path ("Open a file", ``o``): the path
completes as in a shell (``path_complete``), the file's header is checked in a worker
before the picker closes (a missing file, a folder, a FIFO or a file that is no GGUF is
one line under the table), and the app remembers the file once it has loaded, so it is
listed here next time (source ``file``).

Names come from outside (other tools' folder names, a server's model ids, its errors):
cells and lines are built with ``outside``, sanitised and never read as markup (a
``DataTable`` reads a ``str`` cell as markup).

Imports inside functions are deliberate: model resolution loads only when the picker lists
models (start-up time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, Static

from vibechat.engine.errors import VibechatError
from vibechat.engine.models.local_model import LocalModel
from vibechat.engine.turns.backend import ModelInfo

from ...progress import human_size
from ..laid_out import LaidOut
from ..outside import ELLIPSIS, block, cell, line, one_line
from ..widgets.path_complete import GGUFPathSuggester
from . import dialog


@dataclass(frozen=True)
class PickerChoice:
    """What the picker was closed with: a model to load, the downloader to open, or a
    remote server's model id to use."""

    model: LocalModel | None = None
    download: bool = False
    remote_id: str | None = None


PICKER_CSS = """
    PICKER .picker--title {
        text-style: bold;
        color: $primary;
        padding: 0 0 1 0;
    }
    PICKER DataTable {
        height: auto;
        max-height: 24;
    }
    PICKER.-short DataTable {
        max-height: 6;
    }
    PICKER .picker--keys {
        color: $text-muted;
        padding: 1 0 0 0;
        dock: bottom;
    }
    PICKER #picker-path {
        margin: 1 0 0 0;
    }
"""


class ModelPicker(ModalScreen[PickerChoice | None]):
    DEFAULT_CSS = dialog.frame("ModelPicker", 100, max_height="85%") + PICKER_CSS.replace(
        "PICKER", "ModelPicker"
    )
    # -short: its list shows fewer rows.
    VERTICAL_BREAKPOINTS = dialog.BREAKPOINTS
    BINDINGS = [
        Binding("escape", "dismiss_picker", "Close", id="picker.close"),
        Binding("d", "download", "Download a model", id="picker.download"),
        Binding(
            "o",
            "open_file",
            "Open a file",
            id="picker.open_file",
            tooltip="Type the path of a .gguf file to load (Right completes it)",
        ),
    ]

    class Found(Message):
        def __init__(self, models: list[LocalModel]) -> None:
            super().__init__()
            self.models = models

    class Checked(Message):
        """The file typed into "Open a file", checked: the model to load, or why not."""

        def __init__(self, text: str, model: LocalModel | None, error: str | None) -> None:
            super().__init__()
            self.text = text
            self.model = model
            self.error = error

    def __init__(
        self,
        loaded_path: str | None,
        downloading: str | None = None,
        loaded_info: ModelInfo | None = None,
    ) -> None:
        super().__init__()
        self.loaded_path = loaded_path
        self.downloading = downloading
        self.loaded_info = loaded_info
        self.models: list[LocalModel] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Models on this machine", classes="picker--title")
            table: DataTable[str | Text] = DataTable(
                cursor_type="row", zebra_stripes=True, id="picker-table"
            )
            table.add_columns(" ", "name", "quant", "size", "source", "GPU layers")
            yield table
            yield Static("Looking for models…", id="picker-status")
            yield Input(
                placeholder="Open a file: the path of a .gguf (o), Right completes, Enter loads",
                suggester=GGUFPathSuggester(),
                id="picker-path",
            )
            downloading = (
                Content.assemble(" (downloading ", line(self.downloading), ")")
                if self.downloading
                else ""
            )
            # "o open a file" is said by the path line's placeholder: this line holds a download's
            # name.
            yield Static(
                Content.assemble("Enter load · d download a model", downloading, " · Esc close"),
                classes="picker--keys",
            )

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self._find()

    @work(thread=True, exclusive=True, group="picker", exit_on_error=False)
    def _find(self) -> None:
        from vibechat.engine.models.resolve import all_models

        self.post_message(self.Found(all_models()))

    def on_model_picker_found(self, message: Found) -> None:
        self.models = message.models
        table = self.query_one(DataTable)
        table.clear()
        info = self.loaded_info
        for index, model in enumerate(self.models):
            is_loaded = bool(self.loaded_path) and str(model.path) == self.loaded_path
            layers = (
                f"{info.gpu_layers}/{info.n_layers}" if is_loaded and info and info.n_layers else ""
            )
            table.add_row(
                "●" if is_loaded else "",
                cell(model.name),
                cell(model.quant),
                human_size(model.size),
                cell(model.source),
                layers,
                key=str(index),
            )
        status = self.query_one("#picker-status", Static)
        count = f"{len(self.models)} model" + ("" if len(self.models) == 1 else "s")
        where = f" ({one_line(info.device)})" if info is not None else ""
        # Broken between its parts where it does not fit (LaidOut sanitises the device's name).
        status.update(
            LaidOut.text(
                f"{count} · ● loaded{where} · other tools' models are used in place, read-only"
            )
        )
        for index, model in enumerate(self.models):
            if self.loaded_path and str(model.path) == self.loaded_path:
                table.move_cursor(row=index)

    @on(DataTable.RowSelected)
    def _chosen(self, event: DataTable.RowSelected) -> None:
        # Never: every row is added with its index as its key.
        if event.row_key.value is None:
            return
        self.dismiss(PickerChoice(model=self.models[int(event.row_key.value)]))

    def action_download(self) -> None:
        self.dismiss(PickerChoice(download=True))

    def action_open_file(self) -> None:
        self.query_one("#picker-path", Input).focus()

    @on(Input.Submitted, "#picker-path")
    def _open_file(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if text:
            self._status(Content.assemble("Checking ", line(text), "…"))
            self._check(text)

    @work(thread=True, exclusive=True, group="picker-file", exit_on_error=False)
    def _check(self, text: str) -> None:
        """The file's header (and whether it is listed already, under another name)."""

        from vibechat.engine.models.resolve import file_model

        try:
            self.post_message(self.Checked(text, file_model(Path(text)), None))
        except VibechatError as exc:
            self.post_message(self.Checked(text, None, str(exc)))

    def on_model_picker_checked(self, message: Checked) -> None:
        if message.model is None:
            self._status(block(f"⚠ {message.error}"))
            return
        # Not typed over meanwhile.
        if self.query_one("#picker-path", Input).value.strip() == message.text:
            self.dismiss(PickerChoice(model=message.model))

    def _status(self, content: Content) -> None:
        self.query_one("#picker-status", Static).update(content)

    def action_dismiss_picker(self) -> None:
        self.dismiss(None)


class RemoteModelPicker(ModalScreen[PickerChoice | None]):
    """The models a remote server offers (``GET /v1/models``); choosing one makes it the
    model the chat asks for (nothing is loaded here)."""

    DEFAULT_CSS = dialog.frame("RemoteModelPicker", 100, max_height="85%") + PICKER_CSS.replace(
        "PICKER", "RemoteModelPicker"
    )
    # -short: its list shows fewer rows.
    VERTICAL_BREAKPOINTS = dialog.BREAKPOINTS
    BINDINGS = [
        Binding("escape", "dismiss_picker", "Close", id="remote_picker.close"),
    ]

    class Listed(Message):
        def __init__(self, ids: list[str], error: str | None = None) -> None:
            super().__init__()
            self.ids = ids
            self.error = error

    def __init__(
        self, server: str, current: str | None, list_models: Callable[[], list[str]]
    ) -> None:
        super().__init__()
        self.server = server
        self.current = current
        self._list_models = list_models
        self.ids: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Content.assemble("Models on ", line(self.server)), classes="picker--title")
            table: DataTable[str | Text] = DataTable(
                cursor_type="row", zebra_stripes=True, id="picker-table"
            )
            table.add_columns(" ", "model id")
            yield table
            yield Static("Asking the server…", id="picker-status", markup=False)
            yield Static("Enter use · Esc close", classes="picker--keys")

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self._find()

    @work(thread=True, exclusive=True, group="picker", exit_on_error=False)
    def _find(self) -> None:
        try:
            self.post_message(self.Listed(self._list_models()))
        except VibechatError as exc:
            self.post_message(self.Listed([], str(exc)))

    def on_remote_model_picker_listed(self, message: Listed) -> None:
        self.ids = message.ids
        self._fill()
        status = self.query_one("#picker-status", Static)
        if message.error:
            status.update(block(f"⚠ {message.error}"))
        else:
            count = f"{len(self.ids)} model" + ("" if len(self.ids) == 1 else "s")
            status.update(Content(f"{count} · ● in use · the server loads and runs them"))

    def _fill(self) -> None:
        """The ids as rows, each shortened in its middle to the table's width (``fit_id``),
        the cursor kept on its row (else on the model in use)."""
        table = self.query_one(DataTable)
        row = table.cursor_row if table.row_count else None
        table.clear()
        # The marker's column and the cells' padding.
        room = (table.size.width or self.app.size.width) - 6
        # The ids come from the server: untrusted text.
        for index, model_id in enumerate(self.ids):
            shown = cell(fit_id(one_line(model_id), room))
            table.add_row("●" if model_id == self.current else "", shown, key=str(index))
            if row is None and model_id == self.current:
                table.move_cursor(row=index)
        if row is not None:
            table.move_cursor(row=min(row, len(self.ids) - 1))

    def on_resize(self) -> None:
        if self.ids:
            self._fill()

    @on(DataTable.RowSelected)
    def _chosen(self, event: DataTable.RowSelected) -> None:
        # Never: every row is added with its index as its key.
        if event.row_key.value is None:
            return
        self.dismiss(PickerChoice(remote_id=self.ids[int(event.row_key.value)]))

    def action_dismiss_picker(self) -> None:
        self.dismiss(None)


def fit_id(model_id: str, room: int) -> str:
    """``model_id`` in ``room`` cells, shortened in its middle (``…``) when longer: a server's ids
    often differ only at their ends (``…-GGUF:Q4_K_M`` against ``…-GGUF:Q8_0``), which a cut at
    the right edge would hide."""
    room = max(room, 12)
    if len(model_id) <= room:
        return model_id
    head = (room - 1) // 2
    return model_id[:head] + ELLIPSIS + model_id[len(model_id) - (room - 1 - head) :]
