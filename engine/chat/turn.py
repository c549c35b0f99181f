"""A reply while it is generated (``Turn``: what the model is sent, the text so far, settled
once whichever thread gets there first), and how a reply went for a blocking caller
(``Answer``). engine/chat/session.py's ``ChatSession`` makes and settles them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..settings.params import SamplingParams
from ..turns.backend import (
    ChatMessage,
    GenerationDone,
    GenerationStats,
    ReplyPrefix,
    TokenCandidates,
)
from ..turns.tool_calls import ToolSpec
from .chatlog import Reply


@dataclass
class Turn:
    """One reply being generated: its generation number, what the model is sent, the
    parameters (with the seed drawn, so even a reply stopped at once reports it), and
    the text so far (appended by the generating thread)."""

    generation: int
    messages: list[ChatMessage]
    params: SamplingParams
    record: Reply
    # Offered to the model (engine/chat/tool_turns.py).
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str = "auto"
    # The reply goes on from these tokens (another path taken from a token; None: a new reply).
    prefix: ReplyPrefix | None = None
    parts: list[str] = field(default_factory=list)
    thinking_parts: list[str] = field(default_factory=list)
    settled: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, text: str) -> None:
        with self._lock:
            # Abandoned: the saved row is final.
            if self.settled:
                return
            self.parts.append(text)
            # Saved while it streams (debounced).
            self.record.append(text)

    def add_thinking(self, text: str) -> None:
        """A piece of the reply's thinking: kept apart from the text, saved apart too."""
        with self._lock:
            if self.settled:
                return
            self.thinking_parts.append(text)
            self.record.append_thinking(text)

    def add_candidates(self, step: TokenCandidates) -> None:
        """A step of the token lens: saved with the reply (bounded)."""
        with self._lock:
            if not self.settled:
                self.record.append_candidates(step)

    @property
    def text(self) -> str:
        with self._lock:
            return "".join(self.parts)

    @property
    def thinking(self) -> str:
        with self._lock:
            return "".join(self.thinking_parts)

    def stopped(self) -> GenerationDone:
        """The end of a reply stopped before the backend said it was done."""
        stats = GenerationStats(finish_reason="cancelled", seed=self.params.seed)
        return GenerationDone(self.text, stats, self.params, thinking=self.thinking)

    def settle(self) -> bool:
        """True for the one caller that settles this turn (``ChatSession``'s settling calls)."""
        with self._lock:
            if self.settled:
                return False
            self.settled = True
            return True


@dataclass
class Answer:
    """How a reply went, for a blocking caller (:meth:`ChatSession.answer`): its text, the
    final event, and whether Ctrl-C (or ``stop_requested``) or a closed pipe cut it short."""

    text: str
    done: GenerationDone
    interrupted: bool = False
    pipe_closed: bool = False
