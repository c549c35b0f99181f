"""A long prompt says how far its reading came (``PromptProgress``, issue 46 point 5): on the
real starter, in this process and through the engine process, and a cancel meanwhile stops
the reading. Asserted by the mechanism (the events' order and figures), never by their
number or timing, which depend on the CPU; the chunk sizing itself is unit-tested with a
clock of the test's own."""

from __future__ import annotations

import pytest

from conftest import worker_threads
from vibechat.engine.llama.prompt_eval import CHUNK_S, LONG_PROMPT, MIN_CHUNK, PROBE_TOKENS, ChunkSizer
from vibechat.engine.llama.worker import WorkerBackend
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage, GenerationDone, PromptProgress, TextDelta, ThinkingDelta

# About 1,500 tokens: a sentence said again and again.
LONG = [ChatMessage("user", "Summarise this: " + "The quick brown fox jumps over the lazy dog. " * 150)]
SHORT = [ChatMessage("user", "Name a fruit.")]
FEW = SamplingParams(temperature=0, max_tokens=4)


def events_of(backend, messages) -> list:
    return list(backend.stream_chat(messages, FEW))


def assert_reading_said(events: list) -> None:
    """At least one ``PromptProgress``, before any of the reply, its ``read`` growing to its
    ``total`` (the tokens evaluated: the prompt, less what the cache held)."""
    done = events[-1]
    assert isinstance(done, GenerationDone) and done.finish_reason != "cancelled"
    progress = [e for e in events if isinstance(e, PromptProgress)]
    assert progress, "no PromptProgress for a long prompt"
    reads = [p.read for p in progress]
    assert reads == sorted(set(reads)) and reads[0] > 0
    assert {p.total for p in progress} == {done.stats.prompt_tokens_evaluated}
    assert progress[-1].read == progress[-1].total > LONG_PROMPT
    first_words = next((i for i, e in enumerate(events) if isinstance(e, (TextDelta, ThinkingDelta))), len(events))
    assert events.index(progress[-1]) < first_words


@pytest.mark.model
def test_a_long_prompt_says_how_far_its_reading_came_and_a_short_one_says_nothing(backend):
    assert_reading_said(events_of(backend, LONG))
    backend.reset()
    assert not any(isinstance(e, PromptProgress) for e in events_of(backend, SHORT))


@pytest.mark.model
def test_the_reading_progress_crosses_the_engine_process(starter_path):
    worker = WorkerBackend(LlamaCppOptions(model_path=starter_path, context_size=4096, repack="off",
                                           threads=worker_threads()))
    try:
        assert_reading_said(events_of(worker, LONG))
    finally:
        worker.close()


@pytest.mark.model
def test_a_cancel_while_the_prompt_is_read_stops_the_reading(backend):
    events = []
    for event in backend.stream_chat(LONG, FEW):
        events.append(event)
        if isinstance(event, PromptProgress):
            backend.cancel()  # as Esc does, from the first figure on
    progress = [e for e in events if isinstance(e, PromptProgress)]
    done = events[-1]
    assert len(progress) == 1 and progress[0].read < progress[0].total  # no further chunk was read
    assert isinstance(done, GenerationDone) and done.finish_reason == "cancelled" and done.text == ""
    assert not any(isinstance(e, TextDelta) for e in events)
    # The cache holds what was read: the next reply reads only the rest, and answers.
    again = events_of(backend, LONG)[-1]
    assert again.finish_reason != "cancelled" and 0 < again.stats.prompt_tokens_evaluated < again.stats.prompt_tokens


def test_chunks_are_sized_to_the_measured_rate_only_for_a_prompt_that_takes_a_while():
    sizer = ChunkSizer(LONG_PROMPT, 512, report=True)
    assert sizer.next_size() == 512  # short: read as ever, nothing said
    sizer = ChunkSizer(2000, 512, report=False)
    assert sizer.next_size() == 512  # a prefill says nothing
    sizer = ChunkSizer(2000, 512, report=True)
    assert sizer.next_size() == PROBE_TOKENS
    sizer.measured(PROBE_TOKENS, PROBE_TOKENS / 100_000, 2000 - PROBE_TOKENS)  # fast: the rest in a blink
    assert not sizer.reporting and sizer.next_size() == 512
    sizer = ChunkSizer(2000, 512, report=True)
    sizer.measured(PROBE_TOKENS, 0.0625, 2000 - PROBE_TOKENS)  # 512 tokens/s: ~4 s to go
    assert sizer.reporting and sizer.next_size() == 64  # 102 tokens' worth, as a power of two
    sizer.measured(64, 64 / 600, 1500)  # 120 tokens' worth: the same shape
    assert sizer.next_size() == 64
    sizer.measured(64, 64 / 1300, 1400)  # 260 tokens' worth
    assert sizer.next_size() == 256 and 256 <= 1300 * CHUNK_S
    sizer.measured(100, 100 / 20_000, 1000)  # faster now: never more than n_batch
    assert sizer.next_size() == 512
    sizer.measured(100, 100 / 50, 900)  # slower: never fewer than MIN_CHUNK
    assert sizer.next_size() == MIN_CHUNK
