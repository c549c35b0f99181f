"""A model load begun ahead of its caller (``WorkerBackend.preload``, engine/llama/worker.py):
the chat starts the engine process's load before its screen opens, and its first ``load()``
takes the load over, with its progress so far and from then on."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..turns.backend import ModelInfo

log = logging.getLogger("vibechat.llama_cpp")


class Preload:
    """A load begun ahead of its caller (``WorkerBackend.preload``): the next ``load()`` takes
    it over, with its progress so far and from then on, and its result or its error."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.info: ModelInfo | None = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._latest: float | None = None
        self._sink: Callable[[float], object] | None = None

    def progress(self, fraction: float) -> None:
        with self._lock:
            # In order with the replay below.
            self._latest = fraction
            self._tell(fraction)

    def take_over(self, on_progress: Callable[[float], object] | None) -> ModelInfo:
        with self._lock:
            self._sink = on_progress
            if self._latest is not None:
                # Where it stands (it may be done already).
                self._tell(self._latest)
        self.done.wait()
        if self.error is not None:
            raise self.error
        assert self.info is not None
        return self.info

    def _tell(self, fraction: float) -> None:
        if self._sink is not None:
            try:
                self._sink(fraction)
            except Exception:
                # As for a load's own progress: never fails the load.
                log.debug("load progress callback failed", exc_info=True)
