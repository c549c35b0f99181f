"""The chat's model management: the picker, switching models (``/load`` too: by name
or by a .gguf file's path, remembered once it loads), reloading one with other GPU
layers, downloading them; on a remote backend, the server's models (switching one
only changes the model id).

A controller of ``VibechatApp`` (see ``host.py``): it keeps its own state (the
download, the reload timer) and drives the engine through the ``ChatSession``,
whose ``replace_backend`` never leaves the user without a model: the new file's
header is checked first; it is loaded beside the current model when memory
allows, else the current one is closed first and loaded again if the new one
fails, and the swap happens under the engine lock, so a reply started meanwhile
never meets a closed backend.

Imports inside functions are deliberate: the model picker, the downloader and the model store
load when first opened, not before the chat's first frame (tests/app/test_startup.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vibechat.engine.errors import DownloadCancelled, VibechatError
from vibechat.engine.models.gguf import inspect_gguf
from vibechat.engine.models.local_model import LocalModel
from vibechat.engine.models.opened import SOURCE as OPENED
from vibechat.engine.models.opened import remember
from vibechat.engine.turns.backend import Backend, ModelInfo

from ...progress import human_size
from ..outside import one_line
from ..screens.screen_messages import DownloadCancel, DownloadStart
from ..widgets.param_panel import ParamPanel
from ..widgets.welcome import welcome_text
from .events import (
    DownloadEnded,
    DownloadUpdate,
    ModelProgress,
    ModelReady,
    ModelSwitched,
    ModelSwitchFailed,
    OwnModelWanted,
)
from .host import ChatHost

if TYPE_CHECKING:
    from ..screens.downloader import DownloadScreen
    from ..screens.model_picker import PickerChoice
    from .host import Handlers

log = logging.getLogger("vibechat.tui")

# factory(path) -> a backend for another model file with the session's engine settings;
# factory(path, gpu_layers=N) -> ... with those settings changed, by config key (the GPU layers
# slider).
BackendFactory = Callable[..., Backend]
# Seconds the GPU layers slider must rest before the model reloads.
GPU_RELOAD_DELAY = 0.8


class Models:
    """See the module docstring."""

    def __init__(self, host: ChatHost, backend_factory: BackendFactory | None) -> None:
        self.host = host
        self.backend_factory = backend_factory
        # Engine settings changed in this session (GPU layers).
        self.engine_changes: dict[str, Any] = {}
        self._gpu_reload_timer: Any = None
        # The running download's title.
        self.download_title: str | None = None
        self._download_cancel: threading.Event | None = None
        self._download_screen: DownloadScreen | None = None

    def handlers(self) -> Handlers:
        """The messages this controller answers (the app hands them here)."""
        return {
            ModelReady: lambda message: self.show(message.info),
            ModelSwitched: self.switched,
            ModelSwitchFailed: self.switch_failed,
            OwnModelWanted: self.own_model,
            DownloadStart: self.start_download,
            DownloadCancel: lambda _message: self.cancel_download(),
            DownloadUpdate: self.download_update,
            DownloadEnded: self.download_ended,
            ParamPanel.GpuLayersChanged: lambda message: self.request_gpu_layers(message.layers),
        }

    def show(self, info: ModelInfo) -> None:
        """A model is loaded: the status bar, the panel and the welcome say which and how."""
        host, state = self.host, self.host.state
        state.model_ready = True
        state.model = info
        state.status = "ready"
        host.panel.show_model(info)
        host.chat.set_welcome(welcome_text(info))
        # Such as GPU layers asked of a build that cannot offload.
        for notice in info.notices:
            host.notify(notice, title="Model", severity="warning", timeout=20)
        # Tools configured, and a model that calls none: said once.
        host.tool_rounds.model_ready(info)

    # ---------------------------------------------------------------- picker
    def open_picker(self) -> None:
        from ..screens.model_picker import ModelPicker, RemoteModelPicker

        host, remote = self.host, self.host.session.remote
        # A server: its models, no files.
        if remote is not None:
            host.push_screen(
                RemoteModelPicker(remote.server, remote.model_id, remote.list_models), self._picked
            )
            return
        info = host.session.info
        host.push_screen(
            ModelPicker(info.path if info else None, self.download_title, loaded_info=info),
            self._picked,
        )

    def load(self, ref: str) -> None:
        """``/load MODEL_OR_PATH``: a local model by name or a .gguf file by path (checked, and
        remembered once it loads), as F3 would load it; on a server, another of its model ids.
        A name or path that does not work is one line, and the current model stays."""
        host = self.host
        if host.session.remote is not None:
            self.switch_remote_model(ref)
            return
        if self.backend_factory is None:
            host.notify("This session cannot switch models.", severity="warning")
            return
        host.run_worker(
            self._find_and_switch(ref), group="model-find", exclusive=True, exit_on_error=False
        )

    async def _find_and_switch(self, ref: str) -> None:
        """Find what ``ref`` names in a thread (other tools' folders can be slow to walk, a
        header is read), then switch to it here, on the UI thread."""

        from vibechat.engine.models.resolve import local_model

        try:
            model = await asyncio.to_thread(local_model, ref)
        except VibechatError as exc:
            error = str(exc)
        # Never crash the UI over a name.
        except Exception as exc:
            log.exception("finding %r failed", ref)
            error = f"unexpected error: {exc}"
        else:
            self.switch_model(model)
            return
        self.host.notify(
            f"Could not load {one_line(ref)}: {error} The current model stays loaded.",
            title="Model",
            severity="error",
            timeout=15,
        )

    def _picked(self, choice: PickerChoice | None) -> None:
        if choice is None:
            return
        if choice.download:
            self.open_downloads()
        elif choice.model is not None:
            self.switch_model(choice.model)
        elif choice.remote_id is not None:
            self.switch_remote_model(choice.remote_id)

    def own_model(self, message: OwnModelWanted) -> None:
        """A conversation had with another model was opened: the chat goes on with that model
        where it can load it (its file is here and the chat runs local models; or it is another
        model of the server the chat uses), keeping the conversation; else the warning says
        what differs and how to go on with it (model_change.model_change_note)."""
        from vibechat.engine.remote.options import api_root

        host, info = self.host, self.host.session.info
        remote = host.session.remote
        if (
            message.server is None
            and remote is None
            and self.backend_factory is not None
            and Path(message.path).is_file()
        ):
            path = Path(message.path)
            host.notify(
                f"This conversation was with {one_line(message.name)}: loading it.", timeout=6
            )
            model = LocalModel(
                name=message.name, path=path, size=path.stat().st_size, quant="", source="vibechat"
            )
            host.state.status = f"loading {one_line(message.name)}…"
            self._switch(model, keep=True)
        elif (
            message.server is not None
            and remote is not None
            and info is not None
            and api_root(info) == message.server
        ):
            host.state.status = "switching model…"
            host.run_worker(
                lambda: self._switch_remote(message.name, keep=True),
                thread=True,
                exclusive=True,
                group="model",
                exit_on_error=False,
            )
        else:
            host.notify(message.note, severity="warning", timeout=15)

    def switch_remote_model(self, model_id: str) -> None:
        """Ask the server for another of its models from now on (a new conversation)."""
        host, current = self.host, self.host.session.info
        if current is not None and current.name == model_id:
            host.notify(f"{model_id} is already in use.", timeout=3)
            return
        if host.state.generating:
            host.session.cancel()
        host.state.status = "switching model…"
        host.run_worker(
            lambda: self._switch_remote(model_id),
            thread=True,
            exclusive=True,
            group="model",
            exit_on_error=False,
        )

    def _switch_remote(self, model_id: str, keep: bool = False) -> None:
        post = self.host.post_message
        try:
            info = self.host.session.switch_remote(model_id)
        except VibechatError as exc:
            post(ModelSwitchFailed(model_id, str(exc)))
        else:
            post(ModelSwitched(info, model_id, keep=keep))

    def switch_model(self, model: LocalModel) -> None:
        host, current = self.host, self.host.session.info
        if self.backend_factory is None:
            host.notify("This session cannot switch models.", severity="warning")
            return
        if current is not None and str(model.path) == current.path:
            host.notify(f"{model.name} is already loaded.", timeout=3)
            return
        if host.state.generating:
            host.session.cancel()
        host.state.status = f"loading {model.name}…"
        self._switch(model)

    # ------------------------------------------------------------ GPU layers
    def request_gpu_layers(self, layers: int) -> None:
        """The GPU layers slider moved: reload the model once it rests. (On a build that
        cannot offload, or a server, the panel disables the slider and says why.)"""
        host, info = self.host, self.host.session.info
        if info is None:
            return
        if self._gpu_reload_timer is not None:
            self._gpu_reload_timer.stop()
            self._gpu_reload_timer = None
        if not info.gpu_offload_supported or info.server is not None or layers == info.gpu_layers:
            host.panel.show_model(info)
            return
        self._gpu_reload_timer = host.set_timer(
            GPU_RELOAD_DELAY, lambda: self.reload_model(gpu_layers=layers)
        )

    def reload_model(self, **changes: Any) -> None:
        """Load the current model again with ``changes`` to the engine settings (kept for the
        rest of the session); the conversation stays, its KV cache is rebuilt on the next reply."""
        host, info = self.host, self.host.session.info
        self._gpu_reload_timer = None
        if info is None or self.backend_factory is None:
            host.notify("This session cannot reload the model.", severity="warning")
            return
        self.engine_changes.update(changes)
        if host.state.generating:
            host.session.cancel()
        host.state.status = "reloading…"
        model = LocalModel(
            name=info.name,
            path=Path(info.path),
            size=info.file_size,
            quant=info.quantization,
            source="vibechat",
        )
        self._switch(model, reload=True)

    def _switch(self, model: LocalModel, reload: bool = False, keep: bool = False) -> None:
        self.host.run_worker(
            lambda: self._switch_in_worker(model, reload, keep),
            thread=True,
            exclusive=True,
            group="model",
            exit_on_error=False,
        )

    def _switch_in_worker(self, model: LocalModel, reload: bool, keep: bool = False) -> None:
        post = self.host.post_message
        try:
            info = self._swap_backend(model)
        except VibechatError as exc:
            post(ModelSwitchFailed(model.name, str(exc)))
        # Never crash the UI over a load.
        except Exception as exc:
            log.exception("switching to %s failed", model.name)
            post(ModelSwitchFailed(model.name, f"unexpected error: {exc}"))
        else:
            # A file opened by path, loaded: listed from now on.
            if model.source == OPENED:
                remember(model.path)
            post(ModelSwitched(info, model.name, reload=reload, keep=keep))

    def _swap_backend(self, model: LocalModel) -> ModelInfo:
        """In the worker: load ``model`` and make it the session's backend."""
        from vibechat.engine.models.fit import weights_to_load
        from vibechat.engine.models.resolve import resolve_model
        from vibechat.engine.system import available_memory

        assert self.backend_factory is not None
        path = resolve_model("starter") if model.source == "starter" else model.path
        # A corrupt file stops here; the current model is untouched.
        header = inspect_gguf(path)
        new = (
            self.backend_factory(path, **self.engine_changes)
            if self.engine_changes
            else self.backend_factory(path)
        )
        return self.host.session.replace_backend(
            new,
            name=model.name,
            file_size=weights_to_load(new) or header.file_size,
            available=available_memory(),
            on_progress=lambda f: self.host.post_message(ModelProgress(f)),
        )

    async def switched(self, message: ModelSwitched) -> None:
        host = self.host
        self.show(message.info)
        # The same model: the conversation goes on.
        if message.reload:
            host.notify(f"Reloaded {message.name}: {message.info.device}.", timeout=4)
            return
        # The model of the conversation just opened: it goes on with it.
        if message.keep:
            host.notify(
                f"Switched to {one_line(message.name)}, the model this conversation was had with.",
                timeout=4,
            )
            return
        await host.replies.new_conversation(reset_cache=False)
        verb = "Switched to" if message.info.server else "Loaded"
        host.notify(f"{verb} {message.name}: a new conversation starts.", timeout=4)

    def switch_failed(self, message: ModelSwitchFailed) -> None:
        host = self.host
        host.state.status = host.state.at_rest
        if host.session.info is not None:
            # The GPU layers slider shows what is loaded.
            host.panel.show_model(host.session.info)
        host.notify(
            f"Could not load {message.name}: {message.error} The current model stays loaded.",
            title="Model",
            severity="error",
            timeout=15,
        )

    # ------------------------------------------------------------- downloads
    def open_downloads(self) -> None:
        from ..screens.downloader import DownloadScreen

        screen = DownloadScreen(running=self.download_title)
        self._download_screen = screen

        def closed(path: str | None) -> None:
            self._download_screen = None
            # A local .gguf typed into the downloader: opened rather than searched for.
            if path:
                self.load(path)

        self.host.push_screen(screen, closed)

    def start_download(self, message: DownloadStart) -> None:
        host = self.host
        if self.download_title:
            host.notify("A download is already running.", severity="warning")
            return
        option = message.option
        title = f"{message.listing.repo} {option.label} ({human_size(option.size)})"
        self.download_title = title
        cancel = self._download_cancel = threading.Event()
        if self._download_screen is not None:
            self._download_screen.show_started(title)
        host.state.download = "⬇ starting"
        host.run_worker(
            lambda: self._download(message.listing, option, cancel, title),
            thread=True,
            group="download",
            exit_on_error=False,
        )

    def cancel_download(self) -> None:
        if self._download_cancel is not None:
            self._download_cancel.set()

    def _download(self, listing, option, cancel: threading.Event, title: str) -> None:
        from vibechat.engine.models.store import fetch

        post = self.host.post_message
        try:
            # A vision model's projector comes with it.
            model = fetch(
                listing, option, cancel=cancel, on_progress=lambda p: post(DownloadUpdate(p))
            )
        except DownloadCancelled as exc:
            post(DownloadEnded(title, error=str(exc), cancelled=True))
        except VibechatError as exc:
            post(DownloadEnded(title, error=str(exc)))
        except Exception as exc:
            log.exception("download failed")
            post(DownloadEnded(title, error=f"unexpected error: {exc}"))
        else:
            post(DownloadEnded(title, model=model))

    def download_update(self, message: DownloadUpdate) -> None:
        progress = message.progress
        self.host.state.download = f"⬇ {progress.fraction:.0%}"
        if self._download_screen is not None:
            self._download_screen.show_progress(progress)

    def download_ended(self, message: DownloadEnded) -> None:
        host = self.host
        self.download_title = None
        self._download_cancel = None
        host.state.download = ""
        if message.model is not None:
            text = f"Downloaded {message.model.name}: press F3 to load it."
            host.notify(text, title="Download", timeout=10)
        elif message.cancelled:
            text = f"Stopped {message.title}: start it again to resume where it stopped."
            host.notify(text, title="Download", timeout=6)
        else:
            text = f"{message.title}: {message.error}"
            host.notify(text, title="Download failed", severity="error", timeout=15)
        if self._download_screen is not None:
            self._download_screen.show_ended(text)
