"""A long prompt says how far its reading came (``PromptProgress``, issue 46 point 5): on the
real starter, in this process and through the engine process, and a cancel meanwhile stops
the reading. Asserted by the mechanism (the events' order and figures), never by their
number or timing, which depend on the CPU. Where the chunks fall depends on the prompt alone,
never on time or on whether progress is said (a seed's reply stays the same)."""

from __future__ import annotations

import pytest

from conftest import worker_threads
from vibechat.engine.llama import prompt_eval
from vibechat.engine.llama.prompt_eval import LONG_PROMPT, PROBE_TOKENS, chunk_ends, decode_all
from vibechat.engine.llama.worker import WorkerBackend
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import (
    ChatMessage,
    GenerationDone,
    PromptProgress,
    TextDelta,
    ThinkingDelta,
)

# About 680 tokens, a sentence said again and again: the probe (PROBE_TOKENS) and then one batch
# of hundreds of tokens (n_batch is 2,048), the shape of any prompt over LONG_PROMPT. A longer one
# proves nothing more and costs each test seconds of prompt evaluation.
LONG = [
    ChatMessage("user", "Summarise this: " + "The quick brown fox jumps over the lazy dog. " * 60)
]
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
    first_words = next(
        (i for i, e in enumerate(events) if isinstance(e, (TextDelta, ThinkingDelta))), len(events)
    )
    assert events.index(progress[-1]) < first_words


@pytest.mark.model
def test_a_long_prompt_says_how_far_its_reading_came_and_a_short_one_says_nothing(backend):
    assert_reading_said(events_of(backend, LONG))
    backend.reset()
    assert not any(isinstance(e, PromptProgress) for e in events_of(backend, SHORT))


@pytest.mark.model
def test_the_reading_progress_crosses_the_engine_process(starter_path):
    worker = WorkerBackend(
        LlamaCppOptions(
            model_path=starter_path, context_size=4096, repack="off", threads=worker_threads()
        )
    )
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
    assert (
        isinstance(done, GenerationDone) and done.finish_reason == "cancelled" and done.text == ""
    )
    assert not any(isinstance(e, TextDelta) for e in events)
    # The cache holds what was read: the next reply reads only the rest, and answers.
    again = events_of(backend, LONG)[-1]
    assert (
        again.finish_reason != "cancelled"
        and 0 < again.stats.prompt_tokens_evaluated < again.stats.prompt_tokens
    )


def test_where_the_chunks_fall_depends_on_the_tokens_alone():
    long = list(range(1, 1201))
    ends, start = [], 0
    while start < len(long):
        start = chunk_ends(long, start, 512)
        ends.append(start)
    assert ends == [PROBE_TOKENS, PROBE_TOKENS + 512, PROBE_TOKENS + 1024, 1200]
    short = list(range(1, LONG_PROMPT + 1))
    assert chunk_ends(short, 0, 64) == 64  # a short prompt: n_batch chunks, no probe
    with_image = list(range(1, 40)) + [-5, -5] + list(range(1, 400))
    assert (
        chunk_ends(with_image, 0, 512) == PROBE_TOKENS
        and chunk_ends(with_image, PROBE_TOKENS, 512) == 39
    )


@pytest.mark.model
def test_a_reply_and_a_prefill_read_a_prompt_in_the_same_chunks(backend, monkeypatch):
    """Saying the progress changes nothing in how the prompt is evaluated: the same batches reach
    llama.cpp whether the reading is reported (a reply) or not (a prefill), however long each
    took."""
    sizes: list[int] = []
    decode = prompt_eval._decode_text

    def recording(ctx, chunk):
        sizes.append(len(chunk))
        return decode(ctx, chunk)

    monkeypatch.setattr(prompt_eval, "_decode_text", recording)
    backend.load()
    tokens = backend._prompt.tokens(LONG)  # what a reply evaluates
    backend.reset()
    said = list(backend._reading(tokens, report=True))
    reported, sizes[:] = list(sizes), []
    backend.reset()
    assert decode_all(backend._reading(tokens))
    assert said and said[-1].read == len(tokens) > LONG_PROMPT
    assert reported == sizes and sum(sizes) == len(tokens) and sizes[0] == PROBE_TOKENS


def test_within_a_batch_the_reading_is_estimated_from_the_graph_nodes_computed(monkeypatch):
    """While one batch is decoded (in a thread of its own), how far it came is said from the
    abort callback's count, the probe having counted the nodes of one decode: a figure inside the
    batch, before the batch ends. A stand-in decode (a unit test: no model) computes half its
    nodes, then waits until the test has seen that figure, so nothing here depends on time."""
    import threading

    nodes, batch = 100, 128
    ticks = prompt_eval.AbortTicks(threading.Event())
    release = threading.Event()

    def decode(_ctx, chunk):
        if len(chunk) == PROBE_TOKENS:
            ticks.count += nodes  # the probe: one whole decode
            return 0
        ticks.count += nodes // 2
        release.wait(60)
        ticks.count += nodes - nodes // 2
        return 0

    monkeypatch.setattr(prompt_eval, "_decode_text", decode)
    tokens = list(range(1, PROBE_TOKENS + batch + 1))
    reading = prompt_eval.read_prompt(None, None, [], tokens, batch, ticks, None, report=True)
    said = [next(reading).read]
    assert said == [PROBE_TOKENS]  # after the probe
    said.append(next(reading).read)  # within the batch: half of it
    assert said[-1] == PROBE_TOKENS + batch // 2
    release.set()
    said += [event.read for event in reading]
    assert said[-1] == len(tokens) and said == sorted(set(said))
