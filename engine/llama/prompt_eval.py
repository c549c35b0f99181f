"""Evaluating a prompt into the KV cache after what it already holds, for ``LlamaCppBackend``
(engine/llama/llamacpp.py): text in batches through ``llama_decode`` (a long prompt in chunks
sized to say its progress a few times a second), each image's placeholder run
(engine/llama/vision.py) whole through the projector; and cutting the cache back to the
prefix a new prompt shares with it (never inside an image)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Generator, Sequence
from typing import Any

import llama_cpp as ll

from ..errors import GenerationError
from ..turns.backend import PromptProgress
from .kv_state import trim_allowed
from .prompt_parts import common_prefix
from .vision import Vision, image_start, is_image_start

log = logging.getLogger("vibechat.llama_cpp")

OUT_OF_PLACE = "the prompt's image tokens are out of place: start a new conversation."


# Reading progress (``PromptProgress``, engine/turns/backend.py). A prompt is evaluated in chunks of
# n_batch tokens, and one chunk takes a while on a CPU (512 tokens at 130 tokens/s: 4 s). Where the
# chunks fall never depends on time or on whether progress is said: llama.cpp's kernels round
# differently for other batch shapes, so timed chunks would let the same seed give another reply
# to the same prompt. A prompt of more than LONG_PROMPT tokens is read first in a chunk of
# PROBE_TOKENS (in every path: a reply, a prefill), then in n_batch chunks. While a chunk of a
# reply's prompt is read (in a thread of its own), how far it came is estimated every REPORT_S from
# llama.cpp's abort callback, which the CPU backend calls once per node of the graph it computes:
# the probe counts the nodes of one decode.
LONG_PROMPT = 128
PROBE_TOKENS = 32
REPORT_S = 0.2


class AbortTicks:
    """llama.cpp's abort callback (``llama_set_abort_callback``): stops a decode once ``cancel``
    is set (or ``halt()`` was called), and counts its calls (one per graph node on the CPU; a GPU
    backend does not call it), which is how far a decode came."""

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel = cancel
        self.count = 0
        self.halted = False
        self.callback = ll.ggml_abort_callback(self._check)

    def _check(self, _data: Any) -> bool:
        self.count += 1
        return self.halted or self.cancel.is_set()


def chunk_ends(tokens: Sequence[int], start: int, n_batch: int) -> int:
    """Where the text chunk starting at ``tokens[start]`` ends: the probe first in a long prompt,
    then n_batch tokens at most, never into an image's run. A function of the tokens alone."""
    size = PROBE_TOKENS if start == 0 and len(tokens) > LONG_PROMPT else n_batch
    end = start
    while end < len(tokens) and end - start < max(1, size) and tokens[end] >= 0:
        end += 1
    return end


def read_prompt(
    ctx: Any,
    mem: Any,
    kept: list[int],
    tokens: Sequence[int],
    n_batch: int,
    ticks: AbortTicks,
    vision: Vision | None,
    report: bool = False,
) -> Generator[PromptProgress, None, bool]:
    """Evaluate ``tokens`` after the cached ones (``kept``, extended as they are evaluated).
    A generator: with ``report``, a prompt of more than ``LONG_PROMPT`` tokens yields how far its
    reading came after each chunk and, within one, about every ``REPORT_S`` (from ``ticks``, the
    abort callback in use), the last time with all of ``tokens`` read; a short one yields
    nothing. Returns False if cancelled (``ticks.cancel``, checked between chunks; the abort
    callback stops one midway)."""
    cancel = ticks.cancel
    total = len(tokens)
    report = report and total > LONG_PROMPT
    # Graph nodes in one decode, counted in the probe (0: not known).
    nodes = 0
    start = 0
    while start < total:
        if cancel.is_set():
            return False
        if tokens[start] < 0:
            done = _decode_image(ctx, mem, kept, tokens, start, n_batch, cancel, vision)
            if not done:
                return False
            start += done
            if report:
                yield PromptProgress(start, total)
            continue
        end = chunk_ends(tokens, start, n_batch)
        chunk = tokens[start:end]
        counted = ticks.count
        if report and nodes:
            rc = yield from _decode_watched(ctx, chunk, ticks, nodes, start, total)
        else:
            rc = _decode_text(ctx, chunk)
        if rc == 2:
            return False
        if rc != 0:
            raise GenerationError(
                f"llama.cpp failed to evaluate the prompt (llama_decode returned {rc}); "
                "start a new conversation or lower --ctx."
            )
        if not nodes:
            nodes = ticks.count - counted
        kept.extend(chunk)
        start = end
        if report:
            yield PromptProgress(start, total)
    return True


def _decode_text(ctx: Any, chunk: Sequence[int]) -> int:
    arr = (ll.llama_token * len(chunk))(*chunk)
    return int(ll.llama_decode(ctx, ll.llama_batch_get_one(arr, len(chunk))))


def _decode_watched(
    ctx: Any, chunk: Sequence[int], ticks: AbortTicks, nodes: int, start: int, total: int
) -> Generator[PromptProgress, None, int]:
    """``llama_decode`` of ``chunk`` in a thread of its own, its progress estimated every
    ``REPORT_S`` from the abort callback's count (``nodes`` a decode): its return code. Closed
    early (the reply was dropped), it stops the decode and waits for it before the context is
    touched again."""
    result: list[int | BaseException] = []
    finished = threading.Event()
    counted = ticks.count

    def run() -> None:
        try:
            result.append(_decode_text(ctx, chunk))
        except BaseException as exc:  # noqa: BLE001  (handed to the reading thread, raised there)
            result.append(exc)
        finally:
            finished.set()

    thread = threading.Thread(target=run, name="vibechat-prompt-read", daemon=True)
    thread.start()
    said = start
    try:
        while not finished.wait(REPORT_S):
            read = start + min(len(chunk) - 1, len(chunk) * (ticks.count - counted) // nodes)
            if read > said:
                said = read
                yield PromptProgress(read, total)
    finally:
        if not finished.is_set():
            ticks.halted = True
        thread.join()
        ticks.halted = False
    outcome = result[0]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def decode_all(reading: Generator[object, None, bool]) -> bool:
    """A ``read_prompt`` run to its end, its progress unsaid (a prefill): False if cancelled."""
    while True:
        try:
            next(reading)
        except StopIteration as end:
            return bool(end.value)


def _decode_image(
    ctx: Any,
    mem: Any,
    kept: list[int],
    tokens: Sequence[int],
    start: int,
    n_batch: int,
    cancel: threading.Event,
    vision: Vision | None,
) -> int:
    """Encode and evaluate the image run at ``tokens[start]``: its length, or 0 if cancelled (the
    encode itself cannot be stopped: the cancel takes effect after it)."""
    head = tokens[start]
    if vision is None or not is_image_start(head):
        # Never built so: a bookkeeping slip.
        raise GenerationError(OUT_OF_PLACE)
    n = vision.run_length(head)
    run = tokens[start : start + n]
    if len(run) != n:
        raise GenerationError(OUT_OF_PLACE)
    rc = vision.evaluate(ctx, head, len(kept), n_batch)
    if rc != 0 or cancel.is_set():
        # A cancel may have cut the encode short: its output is not kept (no half image left
        # behind).
        ll.llama_memory_seq_rm(mem, 0, len(kept), -1)
        if rc in (0, 2) or cancel.is_set():
            return 0
        raise GenerationError(
            f"llama.cpp failed to evaluate an image (code {rc}); start a new conversation "
            "or lower --ctx."
        )
    kept.extend(run)
    return n


def trim_cache(mem: Any, model: Any, kept: list[int], tokens: Sequence[int], at_most: int) -> int:
    """Drop what the KV cache holds (``kept``) past its common prefix with ``tokens`` (at most
    ``at_most`` kept; a cut inside an image backs up to its start): the tokens kept. A cache
    that cannot be trimmed is emptied."""
    keep = image_start(tokens, min(common_prefix(kept, tokens), at_most))
    if keep < len(kept):
        if not trim_allowed(mem, model, keep):
            # A restored sliding window ends later.
            log.info(
                "the KV cache cannot be continued at token %d (its sliding-window layers start "
                "later: a restored state): evaluating the prompt",
                keep,
            )
            keep = 0
        if not keep or not ll.llama_memory_seq_rm(mem, 0, keep, -1):
            ll.llama_memory_clear(mem, True)
            keep = 0
        del kept[keep:]
    return keep
