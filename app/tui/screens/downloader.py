"""The downloader: search the Hub, pick a repo's quantization, watch it download.

Type text to search GGUF repos (most downloaded first), or a reference
(``owner/repo``, ``owner/repo:Q5_K_M``) to go straight to its files. Enter on a
quantization asks the app to download it (``DownloadScreen.Start``): the download
runs in an app worker, so Esc hides this screen and chatting goes on; the app
feeds progress back with ``show_progress`` while the screen is open.

A path to a .gguf file on this machine is not searched for: its header is checked, and
Enter again closes the screen with the path, which the app opens (and remembers).

Repo ids, file names, quantization labels and the Hub's errors come from outside:
cells and lines are built with ``outside``, sanitised and never read as markup (a
``DataTable`` reads a ``str`` cell as markup; so would a ``Static``).

Imports inside functions are deliberate: model resolution and the fit estimate load only when a
download is chosen (start-up time).
"""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Input, ProgressBar, Static

from vibechat.engine.errors import VibechatError
from vibechat.engine.models import hub
from vibechat.engine.models.download import Progress
from vibechat.engine.models.hub import HubModel, RepoListing
from vibechat.engine.models.local_model import LocalModel
from vibechat.engine.settings.refs import HubRef, QuantOption, parse_hub_ref

from ...progress import human_size, progress_line
from ..laid_out import LaidOut
from ..outside import block, cell, line
from . import dialog
from .screen_messages import DownloadCancel, DownloadStart


class DownloadScreen(ModalScreen[str | None]):
    """Dismissed with None, or with the path of a local .gguf file to open instead."""

    DEFAULT_CSS = (
        dialog.frame("DownloadScreen", 100, max_height="90%")
        + """
    DownloadScreen .download--title {
        text-style: bold;
        color: $primary;
    }
    DownloadScreen DataTable {
        height: auto;
        max-height: 18;
    }
    DownloadScreen.-short DataTable {
        max-height: 9;
    }
    DownloadScreen.-short.-downloading DataTable {
        max-height: 5;
    }
    DownloadScreen #download-status {
        color: $text-muted;
        height: auto;
    }
    DownloadScreen #download-progress {
        display: none;
        height: auto;
        padding: 1 0 0 0;
    }
    DownloadScreen.-downloading #download-progress {
        display: block;
    }
    DownloadScreen .download--keys {
        color: $text-muted;
        padding: 1 0 0 0;
        dock: bottom;
    }
    """
    )
    # -short: its list shows fewer rows.
    VERTICAL_BREAKPOINTS = dialog.BREAKPOINTS
    BINDINGS = [
        Binding("escape", "hide", "Hide (the download goes on)", id="download.hide"),
        Binding("ctrl+x", "cancel_download", "Cancel the download", id="download.cancel"),
    ]

    # What it asks of the models controller: defined apart (screen_messages.py), so that the
    # controller can name them at start-up while this screen is imported when first opened.
    Start = DownloadStart
    Cancel = DownloadCancel

    class _Searched(Message):
        def __init__(self, query: str, found: list[HubModel] | None, error: str | None) -> None:
            super().__init__()
            self.query = query
            self.found = found
            self.error = error

    class _Checked(Message):
        def __init__(self, text: str, model: LocalModel | None, error: str | None) -> None:
            super().__init__()
            self.text = text
            self.model = model
            self.error = error

    class _Listed(Message):
        def __init__(
            self, listing: RepoListing | None, ref: HubRef, fits: dict[str, str], error: str | None
        ) -> None:
            super().__init__()
            self.listing = listing
            self.ref = ref
            self.fits = fits
            self.error = error

    def __init__(self, running: str | None = None) -> None:
        super().__init__()
        # The title of a download already under way.
        self.running = running
        self._repos: list[HubModel] = []
        self._listing: RepoListing | None = None
        self._options: list[QuantOption] = []
        # "repos" or "files": what the table shows.
        self._mode = "idle"
        # A local .gguf path, checked: Enter again opens it.
        self._local: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Download a model from the Hugging Face Hub", classes="download--title")
            # Enter is in the key line: the placeholder fits the input at 80 columns.
            yield Input(
                placeholder="Search (e.g. llama 3.2 1b), owner/repo[:QUANT] or a .gguf path",
                id="download-query",
            )
            yield DataTable(cursor_type="row", zebra_stripes=True, id="download-table")
            yield Static("", id="download-status")
            with Vertical(id="download-progress"):
                yield Static("", id="download-title")
                yield ProgressBar(total=100, show_eta=False, id="download-bar")
                yield Static("", id="download-line")
            yield Static(
                LaidOut.text(
                    "Enter search / open / download · Esc hide (downloads go on) · "
                    "Ctrl+X cancel the download"
                ),
                classes="download--keys",
            )

    def on_mount(self) -> None:
        self.query_one(DataTable).display = False
        if self.running:
            self.add_class("-downloading")
            self.query_one("#download-title", Static).update(line(self.running))
        self.query_one(Input).focus()

    # ------------------------------------------------------------ searching
    @on(Input.Submitted, "#download-query")
    def _query(self, event: Input.Submitted) -> None:
        from vibechat.engine.models.resolve import path_ref

        text = event.value.strip()
        if not text:
            return
        if text == self._local:
            self.dismiss(text)
            return
        self._local = None
        try:
            # A file on this machine: nothing to search the Hub for.
            if path_ref(text) is not None:
                self._status(f"Checking {text}…")
                self._check(text)
                return
            ref = parse_hub_ref(text)
        except VibechatError as exc:
            self._status(str(exc))
            return
        if ref is not None:
            self._status(f"Listing {ref.repo}…")
            self._list(ref)
        else:
            self._status(f"Searching for {text!r}…")
            self._search(text)

    @work(thread=True, exclusive=True, group="hub", exit_on_error=False)
    def _check(self, text: str) -> None:
        from vibechat.engine.models.resolve import file_model, path_ref

        try:
            path = path_ref(text)
            assert path is not None  # checked by the caller
            self.post_message(self._Checked(text, file_model(path), None))
        except VibechatError as exc:
            self.post_message(self._Checked(text, None, str(exc)))

    @on(_Checked)
    def _checked(self, message: _Checked) -> None:
        if message.model is None:
            self._status(
                f"{message.error} (This screen downloads from the Hugging Face Hub; a .gguf file's "
                "path opens it.)"
            )
            return
        if self.query_one(Input).value.strip() != message.text:
            # Typed over meanwhile.
            return
        self._local = message.text
        model = message.model
        self._status(
            f"{message.text} is a model file on this machine "
            f"({model.quant}, {human_size(model.size)}), "
            "not a Hub search: press Enter again to open it in the chat."
        )

    @work(thread=True, exclusive=True, group="hub", exit_on_error=False)
    def _search(self, query: str) -> None:
        try:
            self.post_message(self._Searched(query, hub.Hub().search(query, limit=30), None))
        except VibechatError as exc:
            self.post_message(self._Searched(query, None, str(exc)))

    @work(thread=True, exclusive=True, group="hub", exit_on_error=False)
    def _list(self, ref: HubRef) -> None:
        from vibechat.engine.models.fit import memory_fit

        try:
            listing = hub.Hub().listing(ref.repo)
            fit = memory_fit()
            fits = {o.label: fit(o.size) for o in listing.options}
            self.post_message(self._Listed(listing, ref, fits, None))
        except VibechatError as exc:
            self.post_message(self._Listed(None, ref, {}, str(exc)))

    @on(_Searched)
    def _searched(self, message: _Searched) -> None:
        if message.error:
            self._status(message.error)
            return
        self._repos = message.found or []
        table = self._table("repo", "downloads", "likes")
        for index, repo in enumerate(self._repos):
            table.add_row(
                cell(repo.id + (" (gated)" if repo.gated else "")),
                f"{repo.downloads:,}",
                f"{repo.likes:,}",
                key=str(index),
            )
        self._mode = "repos"
        if self._repos:
            table.focus()
        self._status(
            f"{len(self._repos)} GGUF repos for {message.query!r}: Enter shows a repo's files"
            if self._repos
            else f"No GGUF repos match {message.query!r}."
        )

    @on(_Listed)
    def _listed(self, message: _Listed) -> None:
        if message.error or message.listing is None:
            self._status(message.error or "Could not list the repo.")
            return
        self._listing = message.listing
        # Smallest first.
        self._options = sorted(message.listing.options, key=lambda o: o.size)
        if not self._options:
            self._status(f"{message.listing.repo} has no GGUF model files.")
            return
        try:
            chosen = message.listing.choose(message.ref)
        except VibechatError as exc:
            self._status(str(exc))
            chosen = self._options[0]
        table = self._table("quant", "size", "fits in memory", "files")
        for index, option in enumerate(self._options):
            files = option.first.path + (
                f" (+{len(option.files) - 1})" if len(option.files) > 1 else ""
            )
            table.add_row(
                cell(option.label + (" *" if option.files == chosen.files else "")),
                human_size(option.size),
                cell(message.fits.get(option.label, "?")),
                cell(files),
                key=str(index),
            )
        table.move_cursor(
            row=next(i for i, o in enumerate(self._options) if o.files == chosen.files)
        )
        table.focus()
        self._mode = "files"
        gated = " · gated: needs HF_TOKEN" if message.listing.gated else ""
        projector = message.listing.projector_for(chosen)
        vision = (
            f" · a vision model: its projector {projector.path} "
            f"({human_size(projector.size)}) comes with it"
            if projector is not None
            else ""
        )
        self._status(
            f"{message.listing.repo}: Enter downloads the highlighted quantization (* default)"
            f"{gated}{vision}"
        )

    def _table(self, *columns: str) -> DataTable:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_columns(*columns)
        table.display = True
        return table

    @on(DataTable.RowSelected, "#download-table")
    def _row(self, event: DataTable.RowSelected) -> None:
        # Never: every row is added with its index as its key.
        if event.row_key.value is None:
            return
        index = int(event.row_key.value)
        if self._mode == "repos":
            repo = self._repos[index].id
            self._status(f"Listing {repo}…")
            self._list(HubRef(repo))
        elif self._mode == "files" and self._listing is not None:
            if self.has_class("-downloading"):
                self._status(
                    "A download is already running: wait for it, or cancel it with Ctrl+X."
                )
                return
            self.post_message(self.Start(self._listing, self._options[index]))

    def _status(self, text: str) -> None:
        """The line under the table; it quotes repo names, the query, the Hub's errors."""
        self.query_one("#download-status", Static).update(block(text))

    # ------------------------------------------------ fed by the app (attributes down)
    def show_started(self, title: str) -> None:
        self.add_class("-downloading")
        self.query_one("#download-title", Static).update(line(title))
        self.query_one("#download-line", Static).update("starting…")

    def show_progress(self, progress: Progress) -> None:
        self.add_class("-downloading")
        bar = self.query_one(ProgressBar)
        bar.update(total=progress.total, progress=progress.done)
        self.query_one("#download-line", Static).update(Content(progress_line(progress)))

    def show_ended(self, text: str) -> None:
        self.remove_class("-downloading")
        self._status(text)

    # ------------------------------------------------------------- actions
    def action_hide(self) -> None:
        self.dismiss(None)

    def action_cancel_download(self) -> None:
        if self.has_class("-downloading"):
            self.post_message(self.Cancel())
