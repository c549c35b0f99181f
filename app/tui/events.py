"""Messages the engine workers post to the app (from worker threads; post_message is
thread-safe). The UI thread renders them."""

from __future__ import annotations

import threading

from textual.message import Message

from vibechat.engine.backend import Backend, ChatEvent, ModelInfo
from vibechat.engine.download import Progress
from vibechat.engine.models import LocalModel


class ModelProgress(Message):
    def __init__(self, fraction: float) -> None:
        super().__init__()
        self.fraction = fraction


class ModelReady(Message):
    def __init__(self, info: ModelInfo) -> None:
        super().__init__()
        self.info = info


class ModelFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ReplyText(Message):
    """New reply text is waiting in the app's ``DeltaBuffer`` for generation ``generation``."""

    def __init__(self, generation: int) -> None:
        super().__init__()
        self.generation = generation


class DeltaBuffer:
    """Coalesces streamed text between the worker thread and the UI.

    The worker appends every delta; it posts a ``ReplyText`` only when none is
    pending, and the UI takes everything buffered at once. At 60 tokens/s each
    token still arrives on its own; when tokens come faster than the UI renders,
    they arrive in batches instead of queueing one message each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: list[str] = []
        self._posted = False

    def put(self, text: str) -> bool:
        """Buffer ``text``; True when the caller must post a ``ReplyText``."""
        with self._lock:
            self._parts.append(text)
            if self._posted:
                return False
            self._posted = True
            return True

    @property
    def pending(self) -> bool:
        with self._lock:
            return bool(self._parts)

    def take(self, limit: int | None = None) -> tuple[str, bool]:
        """Up to ``limit`` characters (cut after a newline when possible), and whether
        more is left (then the caller handles it on a later turn of the event loop)."""
        with self._lock:
            text = "".join(self._parts)
            self._parts.clear()
            rest = ""
            if limit is not None and len(text) > limit:
                cut = text.rfind("\n", 0, limit) + 1 or limit
                text, rest = text[:cut], text[cut:]
                self._parts.append(rest)
            self._posted = bool(rest)
            return text, bool(rest)


class ReplyEvent(Message):
    """One engine event of generation number ``generation``."""

    def __init__(self, generation: int, event: ChatEvent) -> None:
        super().__init__()
        self.generation = generation
        self.event = event


class ReplyFailed(Message):
    """Generation failed; ``partial``: the text received before a stream was cut (kept)."""

    def __init__(self, generation: int, error: str, partial: str | None = None) -> None:
        super().__init__()
        self.generation = generation
        self.error = error
        self.partial = partial


class ContextCounted(Message):
    """The conversation as generation ``generation`` sees it takes ``tokens`` tokens: the
    prompt being sent, or what is left after a turn was taken back."""

    def __init__(self, generation: int, tokens: int) -> None:
        super().__init__()
        self.generation = generation
        self.tokens = tokens


class CacheReset(Message):
    """The backend's KV cache was emptied (a new conversation)."""


class ModelSwitched(Message):
    """Another model is loaded (the previous one is closed); ``reload``: the same model with
    other engine settings."""

    def __init__(self, backend: Backend, info: ModelInfo, name: str, reload: bool = False) -> None:
        super().__init__()
        self.backend = backend
        self.info = info
        self.name = name
        self.reload = reload


class ModelSwitchFailed(Message):
    """The new model could not be loaded; the current one stays."""

    def __init__(self, name: str, error: str) -> None:
        super().__init__()
        self.name = name
        self.error = error


class DownloadUpdate(Message):
    """Where the running download stands."""

    def __init__(self, progress: Progress) -> None:
        super().__init__()
        self.progress = progress


class DownloadEnded(Message):
    """The download finished (``model`` set), failed or was cancelled (``error`` set)."""

    def __init__(self, title: str, model: LocalModel | None = None, error: str | None = None,
                 cancelled: bool = False) -> None:
        super().__init__()
        self.title = title
        self.model = model
        self.error = error
        self.cancelled = cancelled
