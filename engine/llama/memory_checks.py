"""Whether a model fits in memory before llama.cpp allocates it: its weights, its KV cache
beside them, a draft model's KV cache beside both. llama.cpp would allocate what it is asked
for and the machine would swap, or the process be killed; each refusal names what fits."""

from __future__ import annotations

from ..errors import ModelLoadError
from ..settings.limits import CONTEXT_STEP
from ..system import available_memory


def _context_that_fits(
    kv_bytes: int | None, weights: int, n_ctx: int, available: int | None
) -> int | None:
    """None when an ``n_ctx``-token KV cache of ``kv_bytes`` fits in ``available`` memory
    beside ``weights`` (or either is unknown); else the largest context that would, in steps of
    CONTEXT_STEP (0: none)."""
    if not kv_bytes or available is None or weights + kv_bytes <= available:
        return None
    return (
        int((available - weights) / (kv_bytes / n_ctx)) // CONTEXT_STEP * CONTEXT_STEP
        if available > weights
        else 0
    )


def check_context_memory(
    kv_bytes: int | None,
    weights: int,
    n_ctx: int,
    kv_type: str,
    asked: bool,
    available: int | None = None,
) -> None:
    """Refuse a context whose KV cache cannot fit in memory beside the weights (llama.cpp would
    allocate it and the machine would swap, or the process be killed), naming the context size
    that fits. ``asked``: the size came from --ctx / the config (else it is the model's own)."""
    available = available_memory() if available is None else available
    fits = _context_that_fits(kv_bytes, weights, n_ctx, available)
    if fits is None:
        return
    assert kv_bytes and available is not None
    how = f"use --ctx {fits} or less" if fits >= CONTEXT_STEP else "free some memory"
    smaller = " or --kv-cache-type q8_0 (about half)" if kv_type == "f16" else ""
    where = "" if asked else " (the model's default context)"
    raise ModelLoadError(
        f"a {n_ctx:,}-token context{where} needs about {kv_bytes / 1e9:.1f} GB of {kv_type} "
        f"KV cache beside {weights / 1e9:.1f} GB of weights, but {available / 1e9:.1f} GB of "
        f"memory is available: {how}{smaller}."
    )


def check_draft_memory(
    kv_bytes: int | None, weights: int, n_ctx: int, available: int | None = None
) -> None:
    """Refuse a draft model whose KV cache (as long as the model's context) cannot fit in the
    memory left beside both models' weights, naming the context size that fits."""
    available = available_memory() if available is None else available
    fits = _context_that_fits(kv_bytes, weights, n_ctx, available)
    if fits is None:
        return
    assert kv_bytes and available is not None
    how = (
        f"use --ctx {fits} or less, or drop --draft-model"
        if fits >= CONTEXT_STEP
        else "drop --draft-model"
    )
    raise ModelLoadError(
        f"the draft model's {n_ctx:,}-token KV cache needs about {kv_bytes / 1e9:.1f} GB "
        f"beside {weights / 1e9:.1f} GB of weights, but {available / 1e9:.1f} GB of memory is "
        f"available: {how}."
    )


def check_memory(needed: int, name: str, available: int | None = None) -> None:
    """Refuse a model whose weights cannot fit in the memory available (it would page
    the machine to a crawl, or get killed)."""
    available = available_memory() if available is None else available
    if available is not None and needed > available:
        raise ModelLoadError(
            f"{name} needs about {needed / 1e9:.1f} GB of memory but {available / 1e9:.1f} GB "
            "is available: choose a smaller quantization (vibechat models search), or close "
            "other programs."
        )
