"""Evaluating a prompt into the KV cache after what it already holds, for ``LlamaCppBackend``
(engine/llama/llamacpp.py): text in batches through ``llama_decode`` (a long prompt in chunks
sized to say its progress a few times a second), each image's placeholder run
(engine/llama/vision.py) whole through the projector; and cutting the cache back to the
prefix a new prompt shares with it (never inside an image)."""

from __future__ import annotations

import logging
import threading
import time
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


# Reading progress (``PromptProgress``, engine/turns/backend.py). A prompt is evaluated in chunks of at
# most n_batch tokens, and a chunk cannot be interrupted to say how far it came: at 130 tokens/s
# (a slow CPU) a 512-token chunk takes 4 s. So a prompt of more than LONG_PROMPT tokens is read
# first in a chunk of PROBE_TOKENS, whose time measures the rate; if the rest would then take longer
# than QUIET_S it is read on in chunks worth CHUNK_S or a little less each (the power of two below:
# the same few batch shapes whatever the speed's jitter; never more than n_batch, never fewer than
# MIN_CHUNK tokens: each chunk costs a pass over the weights, and llama.cpp reads a small batch less
# efficiently), its progress said after each. Any other prompt is read in n_batch chunks as ever,
# and says nothing: a short one keeps its speed, and its batch shapes (llama.cpp's kernels round
# differently for other batch shapes, so a reply to a prompt read in timed chunks may part, at a
# near-tie, from one read in other chunks).
LONG_PROMPT = 128
PROBE_TOKENS = 32
QUIET_S = 0.25
CHUNK_S = 0.2
MIN_CHUNK = 32


class ChunkSizer:
    """How many tokens the next ``llama_decode`` of a prompt of ``total`` tokens takes, from
    the rate measured so far, and whether its progress is worth saying (``reporting``)."""

    def __init__(self, total: int, n_batch: int, report: bool) -> None:
        self.n_batch = max(1, n_batch)
        self.probing = report and total > LONG_PROMPT  # the next chunk is the probe
        self.reporting = False
        self.rate = 0.0  # tokens a second, in the last chunk measured (0: none yet)

    def next_size(self) -> int:
        """The next chunk's size at most (an image's run or the prompt's end may cut it shorter)."""
        if self.probing:
            return min(self.n_batch, PROBE_TOKENS)
        if not self.reporting or self.rate <= 0:
            return self.n_batch
        worth = max(MIN_CHUNK, int(self.rate * CHUNK_S))
        return min(self.n_batch, 1 << (worth.bit_length() - 1))  # a power of two: fewer shapes

    def measured(self, tokens: int, seconds: float, left: int) -> None:
        """A chunk of ``tokens`` took ``seconds``; ``left``: the prompt's tokens still to read.
        After the probe, whether to report is decided once."""
        if seconds > 0:
            self.rate = tokens / seconds
        if self.probing:
            self.probing = False
            self.reporting = seconds > 0 and left / self.rate > QUIET_S


def read_prompt(ctx: Any, mem: Any, kept: list[int], tokens: Sequence[int], n_batch: int,
                cancel: threading.Event, vision: Vision | None,
                report: bool = False) -> Generator[PromptProgress, None, bool]:
    """Evaluate ``tokens`` after the cached ones (``kept``, extended as they are evaluated).
    A generator: with ``report``, a prompt long enough to take a while (see ``ChunkSizer``)
    yields how far its reading came after each chunk (about every ``CHUNK_S``), the last time
    with all of ``tokens`` read; a short one yields nothing. Returns False if cancelled
    (``cancel``, checked between chunks; llama.cpp's abort callback stops one midway)."""
    sizer = ChunkSizer(len(tokens), n_batch, report)
    clock = time.perf_counter
    start = 0
    while start < len(tokens):
        if cancel.is_set():
            return False
        if tokens[start] < 0:
            done = _decode_image(ctx, mem, kept, tokens, start, n_batch, cancel, vision)
            if not done:
                return False
            start += done
            if sizer.reporting:
                yield PromptProgress(start, len(tokens))
            continue
        size = sizer.next_size()
        end = start
        while end < len(tokens) and end - start < size and tokens[end] >= 0:
            end += 1
        chunk = tokens[start:end]
        arr = (ll.llama_token * len(chunk))(*chunk)
        began = clock()
        rc = ll.llama_decode(ctx, ll.llama_batch_get_one(arr, len(chunk)))
        if rc == 2:
            return False
        if rc != 0:
            raise GenerationError(f"llama.cpp failed to evaluate the prompt (llama_decode returned {rc}); "
                                  "start a new conversation or lower --ctx.")
        kept.extend(chunk)
        start = end
        sizer.measured(len(chunk), clock() - began, len(tokens) - start)
        if sizer.reporting:
            yield PromptProgress(start, len(tokens))
    return True


def decode_all(reading: Generator[object, None, bool]) -> bool:
    """A ``read_prompt`` run to its end, its progress unsaid (a prefill): False if cancelled."""
    while True:
        try:
            next(reading)
        except StopIteration as end:
            return bool(end.value)


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
