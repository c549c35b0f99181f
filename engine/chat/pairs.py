"""Two replies to one prompt (issue 44): the pair run for a conversation through its session,
and a compared reply saved as a sibling of the other.

The chat's ``/compare`` answers the conversation's last prompt twice. Side A is the session's own
``Turn`` (saved while it streams, as any reply: the conversation goes on from it unless the user
picks B); side B is saved when it ends, as A's sibling under the same prompt, with its own
parameters and stats (``save_sibling``, which ``vibechat run --compare`` uses too). With the
same local model on both sides the session's backend answers both at once (``PairedReplies``:
``stream_pair`` here, under the engine lock).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import VibechatError
from ..turns.backend import (
    ChatMessage,
    GenerationDone,
    GenerationStats,
    PairedReplies,
    Side,
    SideEvent,
    SideRequest,
    TextDelta,
    ThinkingDelta,
)
from .compaction import summary_system
from .conversation import Conversation
from .history import History
from .session import ChatSession
from .turn import Turn

# A saved reply's status by how it ended.
_STATUS = {"cancelled": "stopped", "length": "cut"}


def reply_status(done: GenerationDone) -> str:
    """How a reply that ended is saved: complete, cut (at a limit) or stopped."""
    return _STATUS.get(done.finish_reason, "complete")


def save_sibling(
    history: History,
    conversation_id: int,
    parent_id: int | None,
    done: GenerationDone,
) -> int:
    """A compared reply saved under ``parent_id`` (the prompt; its other side is a sibling),
    with its parameters, stats, thinking and the tool calls it asks for. Its row."""
    row = history.add_message(
        conversation_id,
        "assistant",
        done.text,
        reply_status(done),
        params=done.params,
        parent_id=parent_id,
    )
    history.update_message(
        row,
        done.text,
        stats=done.stats.to_dict(),
        thinking=done.thinking or None,
        tool_calls=done.tool_calls or None,
    )
    return row


def with_system(
    messages: list[ChatMessage], conversation: Conversation, system: str | None
) -> list[ChatMessage]:
    """``messages`` (the conversation as the backend is sent it) with ``system`` as their system
    prompt in place of the conversation's own (a compacted conversation's summary kept after
    it); None: none."""
    body = messages[1:] if messages and messages[0].role == "system" else messages
    head = summary_system(system, conversation.summary)
    return [*([ChatMessage("system", head)] if head else []), *body]


def stopped_side(text: str, request: SideRequest, thinking: str = "") -> GenerationDone:
    """The end of a side stopped (or left) before its backend said it was done."""
    stats = GenerationStats(finish_reason="cancelled", seed=request.params.seed)
    return GenerationDone(text, stats, request.params, thinking=thinking)


def stream_pair(
    session: ChatSession,
    turn: Turn,
    b: SideRequest,
    on_event: Callable[[SideEvent], object],
) -> dict[Side, GenerationDone]:
    """Both replies at once on the session's backend (a ``PairedReplies``), with the engine lock
    held (blocks: a worker's job): side A is ``turn`` (its text and thinking kept in it, saved
    as it streams), side B is ``b``; every ``SideEvent`` goes to ``on_event``. Returns each
    side's end that came (a side the pair did not end is missing: the caller stops it). A turn
    superseded before it began returns at once. A failure raises (``VibechatError``)."""
    backend = session.backend
    if not isinstance(backend, PairedReplies):
        raise VibechatError("this engine cannot answer twice at once.")
    dones: dict[Side, GenerationDone] = {}
    with session.engine_lock:
        session.apply_pending_reset(locked=True)
        if not session.is_current(turn.generation) or turn.settled:
            return dones
        session.backend.load()
        a = SideRequest(tuple(turn.messages), turn.params, turn.tools, turn.tool_choice)
        events = backend.stream_pair(a, b)
        try:
            for item in events:
                event = item.event
                if item.side == "A" and isinstance(event, TextDelta):
                    turn.add(event.text)
                elif item.side == "A" and isinstance(event, ThinkingDelta):
                    turn.add_thinking(event.text)
                elif isinstance(event, GenerationDone):
                    dones[item.side] = event
                on_event(item)
        finally:
            events.close()
    return dones
