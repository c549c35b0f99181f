"""LlamaCppBackend on the real starter model (Gemma 3 270M, Q4_K_M)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from conftest import same_start, worker_threads
from vibechat.engine.errors import ContextOverflowError
from vibechat.engine.llama.llamacpp import LlamaCppBackend
from vibechat.engine.settings.knobs import LlamaCppOptions
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage, ContextTrimmed, GenerationDone, TextDelta

pytestmark = pytest.mark.model

GREEDY = SamplingParams(temperature=0, max_tokens=24)
HELLO = [ChatMessage("user", "Write a list of three fruits.")]


@pytest.fixture
def rambling(gemma_backend):
    """The starter in Gemma's turn format, with an empty KV cache (conftest's ``gemma_backend``)."""
    yield gemma_backend


def collect(backend, messages, params):
    deltas, done, trimmed = [], None, []
    for event in backend.stream_chat(messages, params):
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        elif isinstance(event, GenerationDone):
            done = event
        elif isinstance(event, ContextTrimmed):
            trimmed.append(event)
    assert done is not None
    return deltas, done, trimmed


def test_describe_reports_the_starter_model(backend):
    info = backend.describe()
    assert info.architecture == "gemma3"
    assert info.quantization == "Q4_K_M"
    assert info.trained_context == 32768
    assert info.context_size == 4096
    assert info.n_layers == 18
    assert info.gpu_layers == 0 and info.gpu_offload_supported is False
    # no template in the GGUF, nothing says it was tuned to chat: a base model, prompted as one
    assert info.chat_format == "completion"
    assert info.n_threads >= 1


def test_default_context_is_trained_length_capped_at_8192(starter_path):
    b = LlamaCppBackend(
        LlamaCppOptions(threads=worker_threads(), model_path=starter_path, repack="off")
    )
    try:
        assert b.load().context_size == 8192
    finally:
        b.close()


def test_streaming_yields_many_deltas_that_join_to_the_text(rambling):
    deltas, done, _ = collect(rambling, HELLO, SamplingParams(temperature=0, max_tokens=40))
    assert len(deltas) > 10
    assert "".join(deltas) == done.text
    assert done.stats.completion_tokens == 40
    assert done.stats.finish_reason == "length"
    assert done.stats.prompt_tokens == done.stats.prompt_tokens_evaluated > 5
    assert done.stats.decode_tokens_per_s > 0 and done.stats.ttft_ms > 0


def test_each_text_delta_carries_the_reply_tokens_so_far(rambling):
    """The status bar's live count: every TextDelta says how many tokens the reply has so far."""
    counts, done = [], None
    for event in rambling.stream_chat(HELLO, SamplingParams(temperature=0, max_tokens=40)):
        if isinstance(event, TextDelta):
            counts.append(event.tokens)
        elif isinstance(event, GenerationDone):
            done = event
    assert done is not None and len(counts) > 10
    assert counts == sorted(counts) and counts[0] >= 1
    assert counts[-1] == done.stats.completion_tokens


def test_greedy_is_deterministic(backend):
    _, first, _ = collect(backend, HELLO, GREEDY)
    backend.reset()
    _, second, _ = collect(backend, HELLO, GREEDY)
    assert first.text == second.text and first.text.strip()


def test_same_seed_reproduces_a_sampled_reply(backend):
    params = SamplingParams(
        temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=1234, max_tokens=32
    )
    _, first, _ = collect(backend, HELLO, params)
    backend.reset()
    _, second, _ = collect(backend, HELLO, params)
    assert first.text == second.text
    assert first.stats.seed == 1234
    others = set()
    for seed in (1, 2, 3):
        backend.reset()
        others.add(collect(backend, HELLO, params.replace(seed=seed))[1].text)
    assert len(others | {first.text}) > 1  # the seed really changes the draw


def test_every_sampling_parameter_is_accepted_and_changes_the_draw(rambling):
    base = SamplingParams(temperature=0, max_tokens=40)
    _, plain, _ = collect(rambling, HELLO, base)
    rambling.reset()
    _, penalised, _ = collect(rambling, HELLO, base.replace(repeat_penalty=1.8))
    assert penalised.stats.completion_tokens > 0
    assert penalised.text != plain.text  # the repetition penalty reaches the sampler
    rambling.reset()
    params = SamplingParams(
        temperature=0.7, top_k=20, top_p=0.9, min_p=0.1, repeat_penalty=1.1, seed=5, max_tokens=12
    )
    _, done, _ = collect(rambling, HELLO, params)
    assert done.params == params and done.stats.completion_tokens > 0


def test_random_seed_is_drawn_and_reported(backend):
    _, done, _ = collect(backend, HELLO, SamplingParams(max_tokens=4))
    assert isinstance(done.stats.seed, int)


def test_max_tokens_is_honoured(rambling):
    _, done, _ = collect(rambling, HELLO, SamplingParams(temperature=0, max_tokens=7))
    assert done.stats.completion_tokens == 7
    assert done.stats.finish_reason == "length"


def test_stop_string_is_honoured(rambling):
    _, free, _ = collect(rambling, HELLO, SamplingParams(temperature=0, max_tokens=40))
    # Stop on a piece of what greedy decoding is known to produce.
    word = free.text.strip().split()[1]
    cut = free.text.index(word)
    rambling.reset()
    _, done, _ = collect(rambling, HELLO, SamplingParams(temperature=0, max_tokens=40, stop=[word]))
    assert done.text == free.text[:cut]
    assert done.stats.finish_reason == "stop"


def test_deltas_never_split_utf8(backend):
    messages = [ChatMessage("user", "Répète: 日本語のテキスト 😀🎉 ünïcödé — ok")]
    deltas, done, _ = collect(backend, messages, SamplingParams(temperature=0, max_tokens=60))
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == done.text


def test_turn_two_evaluates_only_new_tokens_and_reset_evaluates_all(backend):
    _, first, _ = collect(backend, HELLO, GREEDY)
    turn2 = HELLO + [
        ChatMessage("assistant", first.text),
        ChatMessage("user", "And three vegetables?"),
    ]
    _, second, _ = collect(backend, turn2, GREEDY)
    new_turn_tokens = (
        backend.count_tokens(turn2)
        - backend.count_tokens(HELLO[:1])
        - first.stats.completion_tokens
    )
    assert second.stats.prompt_tokens == backend.count_tokens(turn2)
    assert second.stats.prompt_tokens_evaluated <= new_turn_tokens + 4
    assert second.stats.prompt_tokens_evaluated < second.stats.prompt_tokens / 2
    backend.reset()
    _, third, _ = collect(backend, turn2, GREEDY)
    assert third.stats.prompt_tokens_evaluated == third.stats.prompt_tokens


def test_prefill_rebuilds_the_cache_for_an_opened_conversation(backend):
    greedy = SamplingParams(temperature=0, max_tokens=8)
    history = [
        ChatMessage("system", "You are terse."),
        ChatMessage("user", "Name a colour."),
        ChatMessage("assistant", "Blue."),
        ChatMessage("user", "Name a fruit."),
        ChatMessage("assistant", "Apple."),
    ]
    cached = backend.prefill(history)
    assert cached == backend.count_tokens(history)
    # A question whose first word has a clear lead: a near tie (an animal: "Dog" 20.93, "A" 20.92)
    # may part between batch shapes, whatever the cache.
    turn = history + [ChatMessage("user", "What is the capital of France?")]
    done = [e for e in backend.stream_chat(turn, greedy) if isinstance(e, GenerationDone)][0]
    # Only the new prompt (and the few tokens of the turn markers) is evaluated.
    assert done.stats.prompt_tokens_evaluated < done.stats.prompt_tokens - cached // 2
    backend.reset()
    cold = [e for e in backend.stream_chat(turn, greedy) if isinstance(e, GenerationDone)][0]
    assert cold.stats.prompt_tokens_evaluated == cold.stats.prompt_tokens
    assert same_start(cold.text, done.text)  # the rebuilt cache gives the same reply


def test_cancel_mid_stream_then_a_new_request_works(rambling):
    params = SamplingParams(temperature=0, max_tokens=500)
    seen = 0
    stream = rambling.stream_chat(HELLO, params)
    done = None
    for event in stream:
        if isinstance(event, TextDelta):
            seen += 1
            if seen == 5:
                rambling.cancel()
        elif isinstance(event, GenerationDone):
            done = event
    assert done.stats.finish_reason == "cancelled"
    assert 5 <= done.stats.completion_tokens < 20
    _, after, _ = collect(rambling, HELLO, GREEDY)
    assert after.stats.finish_reason == "length" and after.text


def test_closing_the_stream_early_leaves_the_backend_usable(rambling):
    stream = rambling.stream_chat(HELLO, SamplingParams(temperature=0, max_tokens=200))
    for _ in range(3):
        next(stream)
    stream.close()
    _, done, _ = collect(rambling, HELLO, GREEDY)
    assert done.stats.completion_tokens == 24


def test_cancel_during_a_long_prompt_evaluation(rambling):
    long_text = " ".join(f"word{i}" for i in range(700))
    messages = [ChatMessage("user", long_text)]
    stream = rambling.stream_chat(messages, GREEDY)
    # Cancel from another thread while llama_decode works through the prompt.
    timer = threading.Timer(0.05, rambling.cancel)
    timer.start()
    events = list(stream)
    timer.join()
    done = events[-1]
    assert isinstance(done, GenerationDone)
    assert done.stats.finish_reason == "cancelled"
    assert done.stats.completion_tokens == 0
    _, after, _ = collect(rambling, HELLO, GREEDY)
    assert after.stats.finish_reason == "length"


def test_oversize_single_message_is_a_clear_error(backend):
    huge = [ChatMessage("user", "lorem ipsum " * 4000)]
    with pytest.raises(ContextOverflowError) as info:
        list(backend.stream_chat(huge, GREEDY))
    message = str(info.value)
    assert "context holds 4,096" in message and "--ctx" in message and "\n" not in message
    _, after, _ = collect(backend, HELLO, GREEDY)  # still usable
    assert after.text


@pytest.fixture(scope="module")
def small_backend(starter_path):
    b = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(), model_path=starter_path, context_size=1024, repack="off"
        )
    )
    b.load()
    yield b
    b.close()


def test_long_conversation_drops_oldest_turns_but_keeps_system(small_backend):
    backend = small_backend
    system = ChatMessage("system", "You are terse.")
    turns = []
    for i in range(12):
        turns += [
            ChatMessage("user", f"Question {i}: " + "tell me more " * 20),
            ChatMessage("assistant", "Answer " + "blah " * 40),
        ]
    messages = [system, *turns, ChatMessage("user", "Last question?")]
    assert backend.count_tokens(messages) > 1024
    _, done, trimmed = collect(backend, messages, GREEDY)
    assert trimmed and trimmed[0].dropped_messages == done.stats.dropped_messages > 0
    assert done.stats.dropped_messages % 2 == 0  # whole turns
    kept = [system, *messages[1 + done.stats.dropped_messages :]]
    assert done.stats.prompt_tokens == backend.count_tokens(kept)
    assert done.stats.prompt_tokens + GREEDY.max_tokens <= 1024
    assert "Last question?" in backend._prompt.template.render(kept)


def test_count_tokens_matches_generation(backend):
    _, done, _ = collect(backend, HELLO, SamplingParams(temperature=0, max_tokens=1))
    assert backend.count_tokens(HELLO) == done.stats.prompt_tokens


def test_llama_logs_go_to_python_logging_and_fds_stay_put(starter_path, tmp_path):
    """Loading never redirects fd 1/2 (a TUI draws there) and llama.cpp never writes to them."""
    script = tmp_path / "load.py"
    script.write_text(
        "import logging, os, sys\n"
        "from pathlib import Path\n"
        "records = []\n"
        "class H(logging.Handler):\n"
        "    def emit(self, r): records.append(r.getMessage())\n"
        "logging.getLogger('vibechat').addHandler(H()); "
        "logging.getLogger('vibechat').setLevel(logging.DEBUG)\n"
        "from vibechat.engine.llama.llamacpp import LlamaCppBackend\n"
        "from vibechat.engine.settings.knobs import LlamaCppOptions\n"
        "marks = []\n"
        "def progress(p):\n"
        "    if not marks:\n"
        "        os.write(2, b'FD2-OPEN-DURING-LOAD'); os.write(1, "
        "b'FD1-OPEN-DURING-LOAD'); marks.append(p)\n"
        f"b = LlamaCppBackend(LlamaCppOptions(model_path=Path({str(starter_path)!r}), "
        "context_size=512,\n"
        "                                     repack='off'))\n"
        "b.load(on_progress=progress); b.close()\n"
        "print('RECORDS', len(records), any('llama_model_loader' in r or 'load_tensors' "
        "in r for r in records))\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "FD2-OPEN-DURING-LOAD"  # nothing else: llama.cpp's log went to logging
    assert out.stdout.startswith("FD1-OPEN-DURING-LOAD")
    assert "RECORDS" in out.stdout and out.stdout.strip().endswith("True")


def test_bad_file_never_reaches_llama_cpp(tmp_path):
    from vibechat.engine.errors import ModelFileError

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 20)
    with pytest.raises(ModelFileError):
        LlamaCppBackend(
            LlamaCppOptions(threads=worker_threads(), model_path=bad, repack="off")
        ).load()


def test_a_model_larger_than_the_memory_available_is_refused_before_loading(
    starter_path, monkeypatch
):
    from vibechat.engine.errors import ModelLoadError
    from vibechat.engine.llama import memory_checks

    monkeypatch.setattr(memory_checks, "available_memory", lambda: 100_000_000)
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(), model_path=starter_path, gpu_layers=0, repack="off"
        )
    )
    with pytest.raises(
        ModelLoadError,
        match=r"needs about 0.3 GB of memory but 0.1 GB is available: "
        r"choose a smaller quantization",
    ):
        backend.load()
    monkeypatch.setattr(
        memory_checks, "available_memory", lambda: None
    )  # an OS that does not say: no check
    assert backend.load().architecture == "gemma3"
    backend.close()


def _force_token_at(monkeypatch, token: int, call: int):
    """Make the sampler's ``call``-th draw (1-based) return ``token``; every other draw is
    the real sampler's. The base starter model never picks a turn token itself (its
    logit is about -20), but an instruct model does, so this stands in for one."""
    import llama_cpp

    real = llama_cpp.llama_sampler_sample
    calls = {"n": 0}

    def sample(chain, ctx, idx):
        calls["n"] += 1
        return token if calls["n"] == call else real(chain, ctx, idx)

    monkeypatch.setattr(llama_cpp, "llama_sampler_sample", sample)
    return lambda: monkeypatch.setattr(llama_cpp, "llama_sampler_sample", real)


def _token_id(backend, text: str) -> int:
    ids = backend._prompt.tokenize(text, add_special=False)
    assert len(ids) == 1, ids
    return ids[0]


@pytest.mark.parametrize("speculative", [False, True])
def test_a_new_turn_token_ends_the_reply_without_its_role_word(rambling, monkeypatch, speculative):
    """Gemma's <start_of_turn> is no end-of-generation token in the vocabulary: without a
    stop on it the reply went on with the next turn's role word ("...user\\n...")."""
    greedy = SamplingParams(temperature=0, max_tokens=30)
    messages = [ChatMessage("user", "Hello")]
    if speculative:  # drafts verified in a batch: the same _Emitter ends the reply
        import dataclasses

        monkeypatch.setattr(
            rambling,
            "_info",
            dataclasses.replace(rambling.describe(), speculative="prompt-lookup", draft_tokens=4),
        )
        from vibechat.engine.llama.speculative import FixedDraft

        monkeypatch.setattr(
            rambling, "_policy", FixedDraft(4)
        )  # the loop of engine/llama/drafting.py
    _, free, _ = collect(rambling, messages, greedy)
    rambling.reset()
    unforce = _force_token_at(monkeypatch, _token_id(rambling, "<start_of_turn>"), call=3)
    deltas, done, _ = collect(rambling, messages, greedy)
    # What came before the forced token, nothing after it (no "user" role word, no marker).
    assert done.text and free.text.startswith(done.text) and len(done.text) < len(free.text)
    assert "".join(deltas) == done.text
    assert "user" not in done.text and "<start_of_turn>" not in done.text
    assert done.stats.finish_reason == "stop"
    assert done.stats.completion_tokens < free.stats.completion_tokens
    if not speculative:
        assert done.stats.completion_tokens == 2
    unforce()
    rambling.reset()
    _, after, _ = collect(rambling, messages, greedy)
    assert after.text == free.text  # the rambling is unchanged


def test_turn_tokens_of_the_format_end_generation(rambling):
    stops = rambling._prompt.turn_stops
    assert _token_id(rambling, "<start_of_turn>") in stops
    assert _token_id(rambling, "<end_of_turn>") in stops


def test_run_json_text_has_no_turn_marker_or_role_word(rambling, monkeypatch):
    import io

    from vibechat.app.commands.run import execute
    from vibechat.app.commands.run_request import RunRequest

    for json_output in (True, False):
        rambling.reset()
        unforce = _force_token_at(monkeypatch, _token_id(rambling, "<start_of_turn>"), call=3)
        out, err = io.StringIO(), io.StringIO()
        request = RunRequest(
            "Hello", None, SamplingParams(temperature=0, max_tokens=30), json_output=json_output
        )
        assert execute(rambling, request, out, err) == 0
        if json_output:
            obj = json.loads(out.getvalue())
            text = obj["text"]
            assert obj["finish_reason"] == "stop" and obj["stats"]["completion_tokens"] == 2
        else:
            text = out.getvalue()
        assert "<start_of_turn>" not in text and "user" not in text and "model" not in text
        unforce()


@pytest.mark.parametrize(
    ("asked", "used", "notice"),
    [
        (512, 512, None),
        (300, 512, "context 300 rounded up to 512 (llama.cpp allocates it in steps of 256)"),
        (257, 512, "context 257 rounded up to 512 (llama.cpp allocates it in steps of 256)"),
    ],
)
def test_context_size_is_what_llama_cpp_allocates_and_rounding_is_said(
    starter_path, asked, used, notice
):
    b = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(), model_path=starter_path, context_size=asked, repack="off"
        )
    )
    try:
        info = b.load()
        assert info.context_size == used
        assert ll_n_ctx(b) == used
        assert info.notices == ((notice,) if notice else ())
    finally:
        b.close()


def ll_n_ctx(backend) -> int:
    import llama_cpp

    return int(llama_cpp.llama_n_ctx(backend._ctx))
