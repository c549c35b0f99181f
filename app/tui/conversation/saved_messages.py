"""A saved conversation's messages as the chat shows them: each prompt and reply as its widget,
with the status line its end left (an error, a cut, a stop, a reply that asked for tools), a
reply's stored thinking folded above it, each tool's result under the call it answers, and each
message's place among its siblings (‹ 1/2 ›). The text is the model's and the files': untrusted,
sanitised before it is shown.

Imports inside functions are deliberate: the tool block loads when a conversation with tool
calls is first shown, not before the chat's first frame (tests/app/test_startup.py).
"""

from __future__ import annotations

from typing import Any

from vibechat.engine.chat.records import StoredConversation, StoredMessage
from vibechat.engine.sanitize import sanitize
from vibechat.engine.settings.params import PARAM_SPECS
from vibechat.engine.turns.tool_calls import ToolCall

from ..reply_lens import ReplyLens
from .assistant_message import AssistantMessage
from .attachment_view import UserMessage
from .messages import ChatMessageWidget
from .thinking_block import ThinkingBlock

# How a reply that ended otherwise than whole says so: its status line, and the line's kind.
STATUS_NOTES: dict[str, tuple[str, str | None]] = {
    "cut": ("… cut at the token limit", None),
    "stopped": ("⏹ stopped", "stopped"),
    "interrupted": ("⚠ interrupted: vibechat closed while this reply streamed", "stopped"),
}


def message_widgets(
    messages: list[StoredMessage],
    *,
    code_theme: str,
    thinking_expanded: bool,
    opened: StoredConversation | None,
) -> list[ChatMessageWidget]:
    """The widgets of ``messages``; ``opened``: the conversation they are of (their branches),
    ``thinking_expanded``: whether a reply's thinking shows expanded."""
    from .tool_block import ToolCallBlock

    widgets: list[ChatMessageWidget] = []
    calls = {call.id: call for m in messages for call in m.tool_calls}
    for m in messages:
        # A tool's result, under the call it answers.
        if m.role == "tool":
            call_id, name = m.tool_call_id or "", m.tool_name or ""
            call = calls.get(call_id) or ToolCall(call_id, name, "")
            block = ToolCallBlock(call, name or "a tool", state="done", result=m.content)
            block.message_id = m.id
            widgets.append(block)
            continue
        status, kind = status_line(m)
        widget: ChatMessageWidget
        if m.is_summary:
            # A compaction's summary: the model reads it in place of what it replaces (← on it
            # shows the original branch, its sibling).
            widget = UserMessage(
                sanitize(m.content),
                label="Summary (compacted)",
                status="stands for the conversation before it; ← shows the original",
            )
        elif m.role == "user":
            widget = UserMessage(
                sanitize(m.content), m.attachments, status=status, status_kind=kind
            )
        else:
            if not status and opened is not None:
                # A version run with other settings than its siblings (/compare) says so.
                status = run_with(m, opened.tree)
            widget = AssistantMessage(
                sanitize(m.content),
                code_theme=code_theme,
                status=status,
                status_kind=kind,
                thinking=thinking_block(m, thinking_expanded),
            )
            # Its token lens, read back when first looked at.
            if m.logprobs is not None:
                widget.lens = ReplyLens(saved=m.logprobs, params=m.params)
        widget.message_id = m.id
        widget.pinned = m.pinned
        if opened is not None:
            widget.branch = opened.branch(m.id)
        widgets.append(widget)
    return widgets


def run_with(m: StoredMessage, tree: list[StoredMessage]) -> str:
    """``run with temperature=1.2``: the settings reply ``m`` was run with where they differ from
    another reply to the same prompt (two replies compared: ``/compare``); "" when they do not
    (a seed of its own is not a setting)."""
    mine = m.params or {}
    others = [
        o.params or {}
        for o in tree
        if o.role == "assistant" and o.parent_id == m.parent_id and o.id != m.id
    ]
    names = [
        name
        for name in mine
        if name != "seed" and any(name in other and other[name] != mine[name] for other in others)
    ]
    if not names:
        return ""
    return "run with " + ", ".join(f"{name}={_shown(name, mine[name])}" for name in names)


def _shown(name: str, value: Any) -> str:
    spec = PARAM_SPECS.get(name)
    return spec.show(value) if spec is not None else sanitize(str(value))[:40]


def status_line(m: StoredMessage) -> tuple[str, str | None]:
    """The line under a saved message, and its kind ("" and None: none)."""
    # A cut stream says why.
    if m.status == "error" or (m.status == "interrupted" and m.error):
        return f"⚠ {m.error or 'failed'}", "error"
    if m.status in STATUS_NOTES:
        return STATUS_NOTES[m.status]
    if m.stats and m.stats.get("finish_reason") == "length":
        return "… cut at the token limit", None
    if m.tool_calls:
        return "→ asked for " + ", ".join(sorted({c.name[:40] for c in m.tool_calls})), None
    return "", None


def thinking_block(m: StoredMessage, expanded: bool) -> ThinkingBlock | None:
    """A reply's stored thinking, folded to "Thought" unless ``expanded`` (its time is not
    stored; its token count is, with the reply's stats)."""
    if not m.thinking:
        return None
    tokens = (m.stats or {}).get("thinking_tokens")
    return ThinkingBlock(
        m.thinking,
        expanded=expanded,
        count=tokens if isinstance(tokens, int) and tokens > 0 else 0,
        stopped=m.status == "stopped" and not m.content,
    )
