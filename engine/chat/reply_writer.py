"""A reply saved while it streams: the row exists (status ``streaming``, with the writing
process's id, so a crash is told from a live writer) before the first token, its text is
written at most every ``interval`` seconds, so a crash loses at most that much, and
``finish`` settles it (``complete``, ``cut``, ``stopped`` or ``error``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..settings.params import SamplingParams
from ..turns.backend import TokenCandidates
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
        # The token lens's steps (OpenAI's items), kept while they fit in the history's
        # ``lens_bytes``; those past it are counted.
        self._lens: list[dict[str, Any]] = []
        self._lens_size = 0
        self._lens_dropped = 0

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

    def add_candidates(self, step: TokenCandidates) -> None:
        """A step of the token lens: kept with the reply while its steps fit in the history's
        ``lens_bytes`` (the ``lens_history_bytes`` setting), counted once they do not."""
        if not self._lens_dropped:
            item = step.to_openai()
            size = len(json.dumps(item))
            if self._lens_size + size <= self.history.lens_bytes:
                self._lens.append(item)
                self._lens_size += size
                return
        self._lens_dropped += 1

    def lens_object(self) -> dict[str, Any] | None:
        """The reply's candidates as saved: OpenAI's ``{"content": [...]}``, with ``truncated``:
        the steps left out past the bound (None: the lens was off)."""
        if not self._lens and not self._lens_dropped:
            return None
        obj: dict[str, Any] = {"content": self._lens}
        if self._lens_dropped:
            obj["truncated"] = self._lens_dropped
        return obj

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
            logprobs=self.lens_object(),
        )
