"""How much a context holds: llama.cpp's context step and its rounding, and the most text a
prompt may be for a context (refused before it is tokenized or saved)."""

from __future__ import annotations

from ..sizes import human_bytes

# llama.cpp allocates a context in steps of this many tokens: it pads n_ctx up to a multiple
# (llama-context.cpp: GGML_PAD(n_ctx, 256)), so a smaller context is never smaller in fact.
CONTEXT_STEP = 256
MAX_CONTEXT = 1 << 20


# No token of a GGUF vocabulary we know spans more bytes than this (the starter's longest is 48):
# text longer than context x this cannot fit, whatever it says, and is refused before it is
# tokenized or saved. Where the context is unknown (a server that does not say), a prompt is
# bounded by MAX_PROMPT_BYTES.
MAX_BYTES_PER_TOKEN = 256
MAX_PROMPT_BYTES = 16 << 20


def prompt_byte_limit(context_size: int | None) -> int:
    """The most UTF-8 bytes of text a prompt for a ``context_size``-token context may hold:
    what could fit (``MAX_BYTES_PER_TOKEN`` a token), and no more than ``MAX_PROMPT_BYTES``
    unless the context is larger than 1M tokens."""
    if not context_size:
        return MAX_PROMPT_BYTES
    return min(context_size * MAX_BYTES_PER_TOKEN, max(MAX_PROMPT_BYTES, context_size * 16))


def prompt_too_large(n_bytes: int, context_size: int | None) -> str | None:
    """Why a prompt of ``n_bytes`` (UTF-8) cannot be sent to a ``context_size``-token context
    (None: it may fit), one line naming the fix."""
    if context_size:
        limit = prompt_byte_limit(context_size)
        if n_bytes > limit:
            return (
                f"the prompt is {human_bytes(n_bytes)}, more than a "
                f"{context_size:,}-token context can hold (at most about "
                f"{human_bytes(limit)} of text): shorten it, or raise --ctx."
            )
        return None
    if n_bytes > MAX_PROMPT_BYTES:
        return (
            f"the prompt is {human_bytes(n_bytes)}; vibechat sends at most "
            f"{human_bytes(MAX_PROMPT_BYTES)}: shorten it."
        )
    return None


def reply_reserve(max_tokens: int | None, context_size: int) -> int:
    """The tokens a prompt leaves free for the reply: ``max_tokens`` (512 when it has no
    limit), a quarter of the context at most. A prompt that leaves less does not fit."""
    return min(max_tokens or 512, context_size // 4)


def round_context(n_ctx: int) -> int:
    """The context llama.cpp allocates for ``n_ctx`` tokens: the next multiple of
    ``CONTEXT_STEP``."""
    return -(-n_ctx // CONTEXT_STEP) * CONTEXT_STEP


def context_rounding_notice(asked: int, used: int) -> str | None:
    """What to tell a user who asked for ``asked`` tokens of context and got ``used``."""
    if used == asked:
        return None
    return (
        f"context {asked} rounded up to {used} (llama.cpp allocates it in steps of {CONTEXT_STEP})"
    )
