"""Messages the engine workers post to the app (from worker threads; post_message is
thread-safe). The UI thread renders them."""

from __future__ import annotations

from textual.message import Message

from vibechat.engine.backend import ChatEvent, ModelInfo


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


class ReplyEvent(Message):
    """One engine event of generation number ``generation``."""

    def __init__(self, generation: int, event: ChatEvent) -> None:
        super().__init__()
        self.generation = generation
        self.event = event


class ReplyFailed(Message):
    def __init__(self, generation: int, error: str) -> None:
        super().__init__()
        self.generation = generation
        self.error = error


class CacheReset(Message):
    """The backend's KV cache was emptied (a new conversation)."""
