"""How a conversation becomes prompt tokens safely, apart from the backend: the template's own
text told from the messages' contents (``content_parts``: a message holding a turn marker
cannot forge a turn), and dropping the oldest turn to fit the context."""

from __future__ import annotations

import dataclasses
import re
import secrets
from collections.abc import Callable, Sequence

import llama_cpp as ll

from ..errors import GenerationError
from ..turns.backend import ChatMessage


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens ``a`` and ``b`` share from the start."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def tokenize(vocab: object, text: str, add_special: bool, parse_special: bool = True) -> list[int]:
    """``text``'s tokens; ``parse_special``: whether special-token texts in it
    (``<end_of_turn>``, ``<|im_start|>``) become those tokens (the template's own text) or
    stay plain text (what people and models wrote)."""
    data = text.encode("utf-8", "replace")
    cap = len(data) + 16
    buf = (ll.llama_token * cap)()
    n = ll.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
    if n < 0:
        cap = -n
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise GenerationError("the prompt could not be tokenized.")
    return list(buf[:n])


def text_bytes(messages: Sequence[ChatMessage]) -> int:
    return sum(len(m.content.encode("utf-8", "replace")) for m in messages)


def oldest_turn(rest: Sequence[ChatMessage]) -> tuple[int, int] | None:
    """Where the oldest turn of ``rest`` with a message not pinned lies (start, end), the last
    message (the prompt) never part of it; None: there is none."""
    last = len(rest) - 1
    start = 0
    while start < last:
        end = start + 1
        while end < last and rest[end].role != "user":
            end += 1
        if any(not m.pinned for m in rest[start:end]):
            return start, end
        start = end
    return None


def content_parts(
    render: Callable[[Sequence[ChatMessage]], str], messages: Sequence[ChatMessage], text: str
) -> list[tuple[str, bool]] | None:
    """``text`` (the template's rendering of ``messages``) cut into the template's own pieces
    (False) and the messages' contents (True), or None when that cannot be told apart
    (``owned_parts``)."""
    parts = owned_parts(render, messages, text)
    return None if parts is None else [(piece, owner >= 0) for piece, owner in parts]


def owned_parts(
    render: Callable[[Sequence[ChatMessage]], str], messages: Sequence[ChatMessage], text: str
) -> list[tuple[str, int]] | None:
    """``text`` (the template's rendering of ``messages``) cut into the template's own pieces
    (owner -1) and the messages' contents (owner: the message's index; where its images go),
    or None when that cannot be told apart.

    The template is rendered again with each content replaced by a placeholder no message can
    contain (a fresh random nonce); the placeholders are then filled with the contents, as is
    or stripped (templates that ``trim``), and the result must be ``text`` exactly."""
    nonce = secrets.token_hex(8)
    marks = [f"\ue000{nonce}{i}\ue001" for i in range(len(messages))]
    # Each message as it is (its tool calls, its call id) but its content: the skeleton renders as
    # the text did.
    skeleton = render(
        [dataclasses.replace(m, content=mark) for m, mark in zip(messages, marks, strict=True)]
    )
    pattern = re.compile("\ue000" + nonce + "(\\d+)\ue001")
    for strip in (False, True):
        parts: list[tuple[str, int]] = []
        at = 0
        for match in pattern.finditer(skeleton):
            parts.append((skeleton[at : match.start()], -1))
            owner = int(match.group(1))
            content = messages[owner].content
            parts.append((content.strip() if strip else content, owner))
            at = match.end()
        parts.append((skeleton[at:], -1))
        if "".join(piece for piece, _ in parts) == text:
            return parts
    return None
