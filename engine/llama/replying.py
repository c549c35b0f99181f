"""One reply of ``LlamaCppBackend`` (engine/llama/llamacpp.py) as it forms: its text and
thinking kept as they stream out as events, its timings, how it ended (``Reply``); and the
decode loop's pieces turned into those events, with drafting's live figures
(``reply_events``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator

from ..settings.params import SamplingParams
from ..turns.backend import (
    ChatEvent,
    DraftProgress,
    FinishReason,
    GenerationDone,
    GenerationStats,
)
from ..turns.thinking import Piece
from ..turns.tool_calls import ToolCall
from .decoding import Emitter, split_events
from .speculative import AdaptiveDraft, FixedDraft

# While drafting, a DraftProgress this often (the chat's live status).
DRAFT_PROGRESS_S = 0.5


@dataclasses.dataclass
class Reply:
    """A reply being written: its text and thinking so far, when it started, when its prompt
    was evaluated and its first token came, how it ended and the tool calls it asks for."""

    t_start: float
    text_parts: list[str] = dataclasses.field(default_factory=list)
    thinking_parts: list[str] = dataclasses.field(default_factory=list)
    t_prompt_done: float = 0.0
    # None: no token came.
    t_first_token: float | None = None
    # Until the reply is decoded.
    finish: FinishReason = "cancelled"
    tool_calls: tuple[ToolCall, ...] = ()
    # Of the reply's tokens, those of a path's prefix (engine/llama/paths.py): not decoded.
    forced: int = 0

    def events(self, pieces: list[Piece], generated: int) -> Iterator[ChatEvent]:
        """The splitter's ``pieces`` as events, kept; ``generated``: tokens so far."""
        return split_events(pieces, self.text_parts, self.thinking_parts, generated)

    def ended(self, out: Emitter, finish: FinishReason) -> None:
        """The decoding ended with ``finish``: the calls ``out`` found are asked for when the
        reply ends asking for them."""
        self.finish = finish
        if finish == "tool_calls":
            self.tool_calls = tuple(out.tool_calls)

    def done(self, stats: GenerationStats, params: SamplingParams) -> GenerationDone:
        """The reply's end: its timings and finish in ``stats``, the whole reply."""
        t_end = time.perf_counter()
        stats.finish_reason = self.finish
        first = self.t_first_token
        stats.ttft_ms = (first - self.t_start) * 1000 if first is not None else 0.0
        stats.decode_ms = (t_end - self.t_prompt_done) * 1000
        decoded = stats.completion_tokens - self.forced
        if decoded > 0 and stats.decode_ms > 0:
            stats.decode_tokens_per_s = decoded / (stats.decode_ms / 1000)
        return GenerationDone(
            text="".join(self.text_parts),
            stats=stats,
            params=params,
            thinking="".join(self.thinking_parts),
            tool_calls=self.tool_calls,
        )


def reply_events(
    pieces: Iterable[list[Piece]],
    out: Emitter,
    reply: Reply,
    policy: FixedDraft | AdaptiveDraft | None,
    stats: GenerationStats,
) -> Iterator[ChatEvent]:
    """A decode loop's ``pieces`` as the reply's events, the first token's time noted in
    ``reply``; while drafting (``policy``), a ``DraftProgress`` every ``DRAFT_PROGRESS_S``
    (the status bar's live figures)."""
    next_progress = 0.0
    for split in pieces:
        if reply.t_first_token is None:
            reply.t_first_token = time.perf_counter()
            next_progress = reply.t_first_token + DRAFT_PROGRESS_S
        yield from reply.events(split, out.generated)
        if policy is not None and (now := time.perf_counter()) >= next_progress:
            next_progress = now + DRAFT_PROGRESS_S
            yield DraftProgress(
                stats.drafted_tokens,
                stats.accepted_draft_tokens,
                0 if policy.turned_off else policy.k,
                policy.turned_off,
            )
