"""The app's model management: the picker, switching models, reloading one with other
GPU layers, downloading them; on a remote backend, the server's models (switching one
only changes the model id).

A mixin of ``VibechatApp`` (it uses the app's backend, engine lock, status bar and
conversation), kept apart so the app module stays about chatting.

Switching never leaves the user without a model: the new file's header is
checked first; it is loaded beside the current model when memory allows, else
the current one is closed first and loaded again if the new one fails. Either
way the backend is swapped in the worker, under the engine lock, so a reply
started meanwhile never meets a closed backend.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work

from vibechat.engine.backend import Backend
from vibechat.engine.errors import DownloadCancelled, ModelLoadError, VibechatError
from vibechat.engine.knobs import gpu_unavailable_message
from vibechat.engine.models import LocalModel

from ..progress import human_size
from .downloader import DownloadScreen
from .events import DownloadEnded, DownloadUpdate, ModelProgress, ModelSwitched, ModelSwitchFailed
from .model_picker import ModelPicker, PickerChoice, RemoteModelPicker

log = logging.getLogger("vibechat.tui")

# factory(path) -> a backend for another model file with the session's engine settings;
# factory(path, n_gpu_layers=N) -> ... with those settings changed (the GPU layers slider).
BackendFactory = Callable[..., Backend]
GPU_RELOAD_DELAY = 0.8  # seconds the GPU layers slider must rest before the model reloads

if TYPE_CHECKING:  # what the mixin needs of the app it is mixed into
    from textual.app import App

    from vibechat.engine.backend import ModelInfo

    from .param_panel import ParamPanel
    from .status_bar import StatusBar

    class _Host(App[None]):
        backend: Backend
        generating: bool
        model_ready: bool
        _engine_lock: threading.Lock

        @property
        def status(self) -> StatusBar: ...
        @property
        def panel(self) -> ParamPanel: ...
        def _show_model(self, info: ModelInfo) -> None: ...
        async def start_new_conversation(self, reset_cache: bool = True) -> None: ...
else:
    _Host = object


class ModelActions(_Host):
    """Mixed into ``VibechatApp``; see the module docstring."""

    backend_factory: BackendFactory | None
    engine_changes: dict[str, Any]  # engine settings changed in this session (GPU layers)
    _gpu_reload_timer: Any = None
    _gpu_notice_at: float = -1e9
    _download_title: str | None = None
    _download_cancel: threading.Event | None = None
    _download_screen: DownloadScreen | None = None

    # ---------------------------------------------------------------- picker
    def action_models(self) -> None:
        from vibechat.engine.openai_backend import OpenAICompatibleBackend

        backend = self.backend
        if isinstance(backend, OpenAICompatibleBackend):  # a server: its models, no files
            self.push_screen(RemoteModelPicker(backend.server, backend.options.model, backend.list_models),
                             self._picked)
            return
        info = self.status.model
        self.push_screen(ModelPicker(info.path if info else None, self._download_title, loaded_info=info),
                         self._picked)

    def _picked(self, choice: PickerChoice | None) -> None:
        if choice is None:
            return
        if choice.download:
            self.action_download()
        elif choice.model is not None:
            self.switch_model(choice.model)
        elif choice.remote_id is not None:
            self.switch_remote_model(choice.remote_id)

    def switch_remote_model(self, model_id: str) -> None:
        """Ask the server for another of its models from now on (a new conversation)."""
        current = self.status.model
        if current is not None and current.name == model_id:
            self.notify(f"{model_id} is already in use.", timeout=3)
            return
        if self.generating:
            self.backend.cancel()
        self.status.state = "switching model…"
        self._switch_remote(model_id)

    @work(thread=True, exclusive=True, group="model", exit_on_error=False)
    def _switch_remote(self, model_id: str) -> None:
        backend = self.backend
        try:
            with self._engine_lock:
                info = backend.switch_model(model_id)  # type: ignore[attr-defined]
        except VibechatError as exc:
            self.post_message(ModelSwitchFailed(model_id, str(exc)))
        else:
            self.post_message(ModelSwitched(backend, info, model_id))

    def switch_model(self, model: LocalModel) -> None:
        current = self.status.model
        if self.backend_factory is None:
            self.notify("This session cannot switch models.", severity="warning")
            return
        if current is not None and str(model.path) == current.path:
            self.notify(f"{model.name} is already loaded.", timeout=3)
            return
        if self.generating:
            self.backend.cancel()
        self.status.state = f"loading {model.name}…"
        self._switch(model)

    # ------------------------------------------------------------ GPU layers
    def request_gpu_layers(self, layers: int) -> None:
        """The GPU layers slider moved: reload the model once it rests, or, on a build that
        cannot offload, say how to get one (and the slider goes back to 0)."""
        info = self.status.model
        if info is None:
            return
        if self._gpu_reload_timer is not None:
            self._gpu_reload_timer.stop()
            self._gpu_reload_timer = None
        if not info.gpu_offload_supported:
            self.panel.show_model(info)
            now = time.monotonic()
            if now - self._gpu_notice_at > 5:  # once, not on every key press
                self._gpu_notice_at = now
                self.notify(gpu_unavailable_message(layers, asked_by="the GPU layers slider"),
                            title="GPU layers", severity="warning", timeout=20)
            return
        if layers == info.gpu_layers:
            return
        self._gpu_reload_timer = self.set_timer(GPU_RELOAD_DELAY, lambda: self.reload_model(n_gpu_layers=layers))

    def reload_model(self, **changes: Any) -> None:
        """Load the current model again with ``changes`` to the engine settings (kept for the
        rest of the session); the conversation stays, its KV cache is rebuilt on the next reply."""
        info = self.status.model
        self._gpu_reload_timer = None
        if info is None or self.backend_factory is None:
            self.notify("This session cannot reload the model.", severity="warning")
            return
        self.engine_changes.update(changes)
        if self.generating:
            self.backend.cancel()
        self.status.state = "reloading…"
        model = LocalModel(name=info.name, path=Path(info.path), size=info.file_size, quant=info.quantization,
                           source="vibechat")
        self._switch(model, reload=True)

    @work(thread=True, exclusive=True, group="model", exit_on_error=False)
    def _switch(self, model: LocalModel, reload: bool = False) -> None:
        try:
            info = self._swap_backend(model)
        except VibechatError as exc:
            self.post_message(ModelSwitchFailed(model.name, str(exc)))
        except Exception as exc:  # noqa: BLE001 - never crash the UI over a load
            log.exception("switching to %s failed", model.name)
            self.post_message(ModelSwitchFailed(model.name, f"unexpected error: {exc}"))
        else:
            self.post_message(ModelSwitched(self.backend, info, model.name, reload=reload))

    def _swap_backend(self, model: LocalModel):
        """In the worker: load ``model`` and make it the app's backend (see the module doc)."""
        from vibechat.engine.gguf import inspect_gguf
        from vibechat.engine.models import resolve_model
        from vibechat.engine.system import available_memory

        assert self.backend_factory is not None
        path = resolve_model("starter") if model.source == "starter" else model.path
        header = inspect_gguf(path)  # a corrupt file stops here; the current model is untouched
        new = self.backend_factory(path, **self.engine_changes) if self.engine_changes else self.backend_factory(path)
        progress = lambda f: self.post_message(ModelProgress(f))  # noqa: E731
        with self._engine_lock:
            old: Backend = self.backend
            current = self.status.model
            available = available_memory()
            if available is None or header.file_size <= available:
                info = new.load(on_progress=progress)
                old.close()
            else:
                freed = current.file_size if current is not None else 0
                if header.file_size > available + freed:
                    raise ModelLoadError(
                        f"{model.name} needs about {header.file_size / 1e9:.1f} GB of memory and only "
                        f"{(available + freed) / 1e9:.1f} GB would be free: choose a smaller quantization.")
                old.close()  # it fits only without the current model
                try:
                    info = new.load(on_progress=progress)
                except VibechatError:
                    old.load()
                    raise
            self.backend = new
        return info

    async def on_model_switched(self, message: ModelSwitched) -> None:
        self._show_model(message.info)
        if message.reload:  # the same model: the conversation goes on
            self.notify(f"Reloaded {message.name}: {message.info.device}.", timeout=4)
            return
        await self.start_new_conversation(reset_cache=False)
        verb = "Switched to" if message.info.server else "Loaded"
        self.notify(f"{verb} {message.name}: a new conversation starts.", timeout=4)

    def on_model_switch_failed(self, message: ModelSwitchFailed) -> None:
        self.status.state = "ready" if self.model_ready else "no model"
        if self.status.model is not None:
            self.panel.show_model(self.status.model)  # the GPU layers slider shows what is loaded
        self.notify(f"Could not load {message.name}: {message.error} The current model stays loaded.",
                    title="Model", severity="error", timeout=15)

    # ------------------------------------------------------------- downloads
    def action_download(self) -> None:
        screen = DownloadScreen(running=self._download_title)
        self._download_screen = screen

        def closed(_result: None) -> None:
            self._download_screen = None

        self.push_screen(screen, closed)

    # Handlers are found by name: Textual's @on does not see a plain mixin's methods.
    def on_download_screen_start(self, message: DownloadScreen.Start) -> None:
        if self._download_title:
            self.notify("A download is already running.", severity="warning")
            return
        option = message.option
        title = f"{message.listing.repo} {option.label} ({human_size(option.size)})"
        self._download_title = title
        self._download_cancel = threading.Event()
        if self._download_screen is not None:
            self._download_screen.show_started(title)
        self.status.download = "⬇ starting"
        self._download(message.listing, option, self._download_cancel, title)

    def on_download_screen_cancel(self, _message: DownloadScreen.Cancel) -> None:
        if self._download_cancel is not None:
            self._download_cancel.set()

    @work(thread=True, group="download", exit_on_error=False)
    def _download(self, listing, option, cancel: threading.Event, title: str) -> None:
        from vibechat.engine.download import Downloader
        from vibechat.engine.hub import Hub
        from vibechat.engine.store import model_folder, register

        post = self.post_message
        try:
            Downloader(Hub(), cancel=cancel, on_progress=lambda p: post(DownloadUpdate(p))).download(
                listing.repo, listing.revision, option, model_folder(listing.repo))
            model = register(listing.repo, listing.revision, option)
        except DownloadCancelled as exc:
            post(DownloadEnded(title, error=str(exc), cancelled=True))
        except VibechatError as exc:
            post(DownloadEnded(title, error=str(exc)))
        except Exception as exc:  # noqa: BLE001
            log.exception("download failed")
            post(DownloadEnded(title, error=f"unexpected error: {exc}"))
        else:
            post(DownloadEnded(title, model=model))

    def on_download_update(self, message: DownloadUpdate) -> None:
        progress = message.progress
        self.status.download = f"⬇ {progress.fraction:.0%}"
        if self._download_screen is not None:
            self._download_screen.show_progress(progress)

    def on_download_ended(self, message: DownloadEnded) -> None:
        self._download_title = None
        self._download_cancel = None
        self.status.download = ""
        if message.model is not None:
            text = f"Downloaded {message.model.name}: press F3 to load it."
            self.notify(text, title="Download", timeout=10)
        elif message.cancelled:
            text = f"Stopped {message.title}: start it again to resume where it stopped."
            self.notify(text, title="Download", timeout=6)
        else:
            text = f"{message.title}: {message.error}"
            self.notify(text, title="Download failed", severity="error", timeout=15)
        if self._download_screen is not None:
            self._download_screen.show_ended(text)

    def stop_downloads(self) -> None:
        """On exit: a running download stops at once (it resumes on the next attempt)."""
        if self._download_cancel is not None:
            self._download_cancel.set()
