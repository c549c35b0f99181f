"""Evaluating a prompt into the KV cache after what it already holds, for ``LlamaCppBackend``
(engine/llama/llamacpp.py): text in batches through ``llama_decode``, each image's placeholder
run (engine/llama/vision.py) whole through the projector; and cutting the cache back to the
prefix a new prompt shares with it (never inside an image)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import llama_cpp as ll

from ..errors import GenerationError
from .kv_state import trim_allowed
from .prompt_parts import common_prefix
from .vision import Vision, image_start, is_image_start

log = logging.getLogger("vibechat.llama_cpp")

OUT_OF_PLACE = "the prompt's image tokens are out of place: start a new conversation."


def decode_prompt(ctx: Any, mem: Any, kept: list[int], tokens: Sequence[int], n_batch: int,
                  cancel: threading.Event, vision: Vision | None) -> bool:
    """Evaluate ``tokens`` after the cached ones (``kept``, extended as they are evaluated);
    False if cancelled."""
    start = 0
    while start < len(tokens):
        if cancel.is_set():
            return False
        if tokens[start] < 0:
            done = _decode_image(ctx, mem, kept, tokens, start, n_batch, cancel, vision)
            if not done:
                return False
            start += done
            continue
        end = start
        while end < len(tokens) and end - start < n_batch and tokens[end] >= 0:
            end += 1
        chunk = tokens[start:end]
        start = end
        arr = (ll.llama_token * len(chunk))(*chunk)
        rc = ll.llama_decode(ctx, ll.llama_batch_get_one(arr, len(chunk)))
        if rc == 2:
            return False
        if rc != 0:
            raise GenerationError(f"llama.cpp failed to evaluate the prompt (llama_decode returned {rc}); "
                                  "start a new conversation or lower --ctx.")
        kept.extend(chunk)
    return True


def _decode_image(ctx: Any, mem: Any, kept: list[int], tokens: Sequence[int], start: int, n_batch: int,
                  cancel: threading.Event, vision: Vision | None) -> int:
    """Encode and evaluate the image run at ``tokens[start]``: its length, or 0 if cancelled (the
    encode itself cannot be stopped: the cancel takes effect after it)."""
    head = tokens[start]
    if vision is None or not is_image_start(head):  # never built so: a bookkeeping slip
        raise GenerationError(OUT_OF_PLACE)
    n = vision.run_length(head)
    run = tokens[start:start + n]
    if len(run) != n:
        raise GenerationError(OUT_OF_PLACE)
    rc = vision.evaluate(ctx, head, len(kept), n_batch)
    if rc != 0 or cancel.is_set():  # a cancel may have cut the encode short: its output is not kept
        ll.llama_memory_seq_rm(mem, 0, len(kept), -1)  # no half image left behind
        if rc in (0, 2) or cancel.is_set():
            return 0
        raise GenerationError(f"llama.cpp failed to evaluate an image (code {rc}); start a new conversation "
                              "or lower --ctx.")
    kept.extend(run)
    return n


def trim_cache(mem: Any, model: Any, kept: list[int], tokens: Sequence[int], at_most: int) -> int:
    """Drop what the KV cache holds (``kept``) past its common prefix with ``tokens`` (at most
    ``at_most`` kept; a cut inside an image backs up to its start): the tokens kept. A cache
    that cannot be trimmed is emptied."""
    keep = image_start(tokens, min(common_prefix(kept, tokens), at_most))
    if keep < len(kept):
        if not trim_allowed(mem, model, keep):  # a restored sliding window ends later
            log.info("the KV cache cannot be continued at token %d (its sliding-window layers start "
                     "later: a restored state): evaluating the prompt", keep)
            keep = 0
        if not keep or not ll.llama_memory_seq_rm(mem, 0, keep, -1):
            ll.llama_memory_clear(mem, True)
            keep = 0
        del kept[keep:]
    return keep
