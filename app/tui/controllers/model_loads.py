"""The model's load, on screen: the first model loads in a worker when the chat opens, its
progress (and that of any later load: another model, an engine restarted after a crash) is the
status bar's, and a load that fails says why in the welcome and a notice. A model that is ready
is the ``Models`` controller's (``ModelReady``, models.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vibechat.engine.errors import VibechatError

from ..conversation.markdown_segment import warm_up as warm_up_markdown
from ..gc_policy import hold_startup_freeze, release_startup_freeze
from .events import ModelFailed, ModelProgress, ModelReady, ModelWarmUp
from .host import ChatHost

if TYPE_CHECKING:
    from .host import Handlers

log = logging.getLogger("vibechat.tui")


class ModelLoads:
    """Loads the first model, and shows how far a load has come, or why it failed."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host

    def handlers(self) -> Handlers:
        """The messages this controller answers (the app hands them here)."""
        return {ModelProgress: self.progress, ModelFailed: self.failed, ModelWarmUp: self.warm_up}

    def load(self) -> None:
        """The chat's model loads in a worker (the chat opens at once; the bar says how far)."""
        self.host.state.status = "loading…"
        self.host.run_worker(
            self._load, thread=True, exclusive=True, group="model", exit_on_error=False
        )

    def _load(self) -> None:
        """In a worker: the load, told to the UI by messages."""
        post = self.host.post_message
        try:
            info = self.host.session.load(on_progress=lambda f: post(ModelProgress(f)))
        except VibechatError as exc:
            post(ModelFailed(str(exc)))
        # Never crash the UI over a load.
        except Exception as exc:
            log.exception("model load failed")
            post(ModelFailed(f"unexpected error while loading the model: {exc}"))
        else:
            # The freeze once the model is ready (gc_policy) waits for the warm-up's objects.
            hold_startup_freeze()
            post(ModelReady(info))
            # Handled after ModelReady: the app's messages keep their order.
            post(ModelWarmUp())

    def warm_up(self, message: ModelWarmUp) -> None:
        """Once the frame that says the model is ready is drawn, while the user types the first
        prompt: the Markdown's first render (its imports and caches, ~60 ms) in a worker. Begun
        in the load's worker as soon as the model was ready, it shared the interpreter with
        the UI thread's handling and drawing of ``ready``, and delayed it. What it builds (its
        modules, lexers and caches) lives as long as the chat: the startup freeze, held since
        the model was ready, runs after it, on the UI thread after a frame (gc_policy)."""
        host = self.host

        def work() -> None:
            try:
                warm_up_markdown(host.console, host.code_theme())
            finally:
                # Posted from this thread (a message: thread-safe, and it never waits).
                try:
                    host.call_after_refresh(release_startup_freeze)
                # The app closed meanwhile: nothing to freeze for.
                except RuntimeError:
                    pass

        host.call_after_refresh(
            host.run_worker, work, thread=True, group="warm-up", exit_on_error=False
        )

    def progress(self, message: ModelProgress) -> None:
        """A model loads (at start, after a switch, or an engine restarted after a crash)."""
        self.host.state.status = f"loading {message.fraction:.0%}"

    def failed(self, message: ModelFailed) -> None:
        """The model could not be loaded: the welcome says why; the conversation the chat
        started on opens all the same (its messages at least)."""
        host = self.host
        host.state.status = "no model"
        host.chat.set_welcome(f"The model could not be loaded: {message.error}")
        host.chats.model_settled()
        host.notify(message.error, title="Model", severity="error", timeout=15)
