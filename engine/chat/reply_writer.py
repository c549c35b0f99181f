"""A reply saved while it streams: the row exists (status ``streaming``, with the writing
process's id, so a crash is told from a live writer) before the first token, its text is
written at most every ``interval`` seconds, so a crash loses at most that much, and
``finish`` settles it (``complete``, ``cut``, ``stopped`` or ``error``).
"""

from __future__ import annotations

import time
from typing import Any

from ..settings.params import SamplingParams
from ..turns.tool_calls import ToolCall
from .history import History


class ReplyWriter:
    """Saves one assistant reply while it streams: the row exists (status 'streaming')
    before the first token, and its text is written at most every ``interval`` seconds,
    so a crash loses at most that much; ``finish`` settles it."""

    def __init__(self, history: History, message_id: int, interval: float = 0.5) -> None:
        self.history = history
        self.message_id = message_id
        self.interval = interval
        self._parts: list[str] = []
        self._thinking: list[str] = []
        self._saved_len = 0
        self._saved_thinking = 0
        self._last_save = time.monotonic()

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def thinking(self) -> str:
        return "".join(self._thinking)

    def append(self, text: str) -> None:
        self._parts.append(text)
        if time.monotonic() - self._last_save >= self.interval:
            self.flush()

    def append_thinking(self, text: str) -> None:
        """A piece of the reply's thinking: saved apart (the ``thinking`` column), as often."""
        self._thinking.append(text)
        if time.monotonic() - self._last_save >= self.interval:
            self.flush()

    def flush(self) -> None:
        text = self.text
        thinking_len = sum(map(len, self._thinking))
        if len(text) != self._saved_len or thinking_len != self._saved_thinking:
            self.history.update_message(
                self.message_id,
                text,
                thinking=self.thinking if thinking_len != self._saved_thinking else None,
            )
            self._saved_len, self._saved_thinking = len(text), thinking_len
        self._last_save = time.monotonic()

    def finish(
        self,
        status: str,
        text: str | None = None,
        *,
        error: str | None = None,
        params: SamplingParams | None = None,
        stats: dict[str, Any] | None = None,
        thinking: str | None = None,
        tool_calls: tuple[ToolCall, ...] = (),
    ) -> None:
        self.history.update_message(
            self.message_id,
            self.text if text is None else text,
            status,
            error=error,
            params=params,
            stats=stats,
            thinking=self.thinking if thinking is None else thinking,
            tool_calls=tool_calls,
        )
