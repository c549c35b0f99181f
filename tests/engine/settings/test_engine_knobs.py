"""The local engine's knobs: the KV-cache type, prompt-lookup speculative decoding and GPU
layers on a build without offload. The parts that need llama.cpp run the real starter model."""

from __future__ import annotations

import pytest

from conftest import collect as collect_reply
from conftest import loaded_starter, same_start, worker_threads
from vibechat.engine.errors import GpuOffloadUnavailableError, InvalidParameterError, ModelLoadError
from vibechat.engine.llama.llamacpp import LlamaCppBackend
from vibechat.engine.settings.choices import (
    KV_CACHE_TYPES,
    check_draft_logits,
    check_kv_cache_type,
    check_speculative,
    draft_logits_bytes,
    kv_cache_bytes,
)
from vibechat.engine.settings.knobs import LlamaCppOptions, gpu_unavailable_message
from vibechat.engine.settings.limits import (
    CONTEXT_STEP,
    MAX_CONTEXT,
    context_rounding_notice,
    round_context,
)
from vibechat.engine.settings.params import SamplingParams
from vibechat.engine.turns.backend import ChatMessage, GenerationDone, TextDelta

# Three functions are enough: the starter echoes the request and copies the code back, so drafts
# start within a few tokens and every check below holds within the first 48 (a longer prompt only
# costs prompt evaluation on every fresh request).
CODE = "\n".join(
    f"def scale_{i}(value):\n    total = value * {i}\n    return total + {i}" for i in range(3)
)
REWRITE = [
    ChatMessage(
        "user", "Rewrite this code with value renamed to amount:\n\n```python\n" + CODE + "\n```"
    )
]


def collect(backend, messages, params):
    return collect_reply(backend, messages, params)


# ------------------------------------------------------------ without a model
def test_engine_settings_are_the_config_keys_of_the_same_name_type_and_default():
    """One shape, one name a setting: every EngineSettings field is the config key of that name."""
    import dataclasses

    from vibechat.engine.settings.knobs import ENGINE_SETTING_KEYS, EngineSettings
    from vibechat.engine.settings.table import SETTINGS_BY_KEY, Config

    config_fields = {f.name: f for f in dataclasses.fields(Config)}
    for f in dataclasses.fields(EngineSettings):
        assert f.name in SETTINGS_BY_KEY, f"{f.name} is no config key"
        assert (f.type, f.default) == (config_fields[f.name].type, config_fields[f.name].default), (
            f.name
        )
    assert ENGINE_SETTING_KEYS == tuple(f.name for f in dataclasses.fields(EngineSettings))
    assert EngineSettings.from_config(Config()) == EngineSettings()
    custom = Config(context_size=512, gpu_layers=0, threads=3, speculative="prompt-lookup")
    assert EngineSettings.from_config(custom).as_dict() == {
        k: getattr(custom, k) for k in ENGINE_SETTING_KEYS
    }


def test_each_engine_setting_is_declared_once_and_the_table_and_the_config_come_from_it():
    """Issue 26.4: EngineSettings' fields are the table's engine rows (their help, variable and
    flag live on the field), and Config is EngineSettings plus the chat's own settings: no
    field is written twice."""
    import dataclasses

    from vibechat.engine.settings.knobs import ENGINE_SETTING_KEYS, EngineSettings
    from vibechat.engine.settings.table import SETTINGS, Config

    assert issubclass(Config, EngineSettings)
    engine_rows = [s for s in SETTINGS if s.engine]
    assert tuple(s.key for s in engine_rows) == ENGINE_SETTING_KEYS
    for f, row in zip(dataclasses.fields(EngineSettings), engine_rows, strict=False):
        assert (row.help, row.env, row.flag, row.default) == (
            f.metadata["help"],
            f.metadata["env"],
            f.metadata["flag"],
            f.default,
        ), f.name
    own = [f.name for f in dataclasses.fields(Config) if f.name not in ENGINE_SETTING_KEYS]
    assert "system_prompt" in own and not set(own) & set(Config.__dataclass_fields__) - set(
        f.name for f in dataclasses.fields(Config)
    )


def test_one_byte_formatter_says_every_size():
    """Issue 26.1: one formatter (engine/sizes.py) for memory, limits, prompts and downloads."""
    from vibechat.app.progress import human_size
    from vibechat.engine.files import human_limit
    from vibechat.engine.settings.knobs import human_mib
    from vibechat.engine.settings.limits import prompt_too_large
    from vibechat.engine.sizes import human_bytes

    assert [
        human_bytes(n)
        for n in (700, 64 << 10, 16 << 20, 36 << 20, 5.5 * (1 << 20), 1.5 * (1 << 30))
    ] == ["700 bytes", "64 KiB", "16 MiB", "36 MiB", "5.5 MiB", "1.5 GiB"]
    assert [human_bytes(n, si=True) for n in (512, 253.1e6, 3e9)] == ["512 B", "253.1 MB", "3.0 GB"]
    for n in (700, 1 << 20, 48 << 20, 3 << 30):
        assert human_limit(n) == human_mib(n) == human_bytes(n) and human_size(n) == human_bytes(
            n, si=True
        )
    assert "the prompt is 17 MiB" in (prompt_too_large(17 << 20, None) or "")


def test_the_local_backends_options_are_the_settings_plus_the_runtime(tmp_path):
    from vibechat.engine.settings.knobs import EngineSettings

    settings = EngineSettings(model="tiny", context_size=512, gpu_layers=0, repack="off")
    options = LlamaCppOptions.of(settings, tmp_path / "tiny.gguf", cpu_fallback=True)
    assert isinstance(options, EngineSettings) and options.as_dict() == settings.as_dict()
    assert (options.model_path, options.cpu_fallback, options.flash_attn) == (
        tmp_path / "tiny.gguf",
        True,
        None,
    )


def test_each_engine_flag_is_the_one_the_settings_table_names():
    """The chat's and run's engine options pass each setting on by its config key, under the
    flag the config's table records; every engine setting with a flag has one."""
    import typer.main

    from vibechat.app.commands.cli import cli
    from vibechat.engine.settings.knobs import ENGINE_SETTING_KEYS
    from vibechat.engine.settings.table import SETTINGS_BY_KEY

    group = typer.main.get_command(cli)
    for command in (group, group.commands["run"]):  # type: ignore[attr-defined]
        given = {p.name: p.opts[0] for p in command.params if p.name in ENGINE_SETTING_KEYS}
        assert given == {
            k: SETTINGS_BY_KEY[k].flag for k in ENGINE_SETTING_KEYS if SETTINGS_BY_KEY[k].flag
        }


def test_kv_cache_type_names_and_a_bad_one_lists_the_choices():
    assert [check_kv_cache_type(n) for n in ("f16", "Q8_0", " q4_0 ")] == ["f16", "q8_0", "q4_0"]
    with pytest.raises(InvalidParameterError) as info:
        check_kv_cache_type("q5_1")
    assert str(info.value) == "kv_cache_type must be one of f16, q8_0, q4_0 (got 'q5_1')."
    assert (
        check_speculative("none") == "off" and check_speculative("Prompt-Lookup") == "prompt-lookup"
    )
    with pytest.raises(InvalidParameterError, match="one of off, auto, prompt-lookup"):
        check_speculative("medusa")


def test_kv_cache_bytes_is_cells_times_layers_times_k_and_v_width():
    # Gemma 3 270M at 8k: 18 layers, 1 KV head of 256 for K and for V.
    assert kv_cache_bytes(8192, 18, 256, 256, "f16") == 144 << 20
    assert kv_cache_bytes(8192, 18, 256, 256, "q8_0") == int((144 << 20) * 34 / 64)
    assert kv_cache_bytes(8192, 18, 256, 256, "q4_0") == int((144 << 20) * 18 / 64)
    assert list(KV_CACHE_TYPES) == ["f16", "q8_0", "q4_0"]


def test_an_absurd_draft_logits_buffer_is_refused_naming_the_flag():
    assert draft_logits_bytes(10, 262_144) == 11 * 262_144 * 4
    check_draft_logits(10, 262_144)  # 11 MiB: fine
    with pytest.raises(InvalidParameterError) as info:
        check_draft_logits(1024, 262_144)
    message = str(info.value)
    assert "--draft-tokens 1024" in message and "use --draft-tokens 1023 or fewer" in message
    assert "\n" not in message


def test_the_gpu_message_gives_the_rebuild_commands():
    message = gpu_unavailable_message(-1, "0.3.36")
    assert (
        'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir '
        "llama-cpp-python==0.3.36"
    ) in message
    assert 'CMAKE_ARGS="-DGGML_CUDA=on" python3 dev.py chat' in message
    assert "-DGGML_METAL=on" in message and "--n-gpu-layers 0" in message and "\n" not in message


# ---------------------------------------------------------- the KV-cache type
@pytest.mark.model
def test_each_kv_cache_type_loads_generates_and_reports_its_memory(starter_path):
    sizes = {}
    for kind in ("f16", "q8_0", "q4_0"):
        # Gemma's turn format: 8 tokens generated whatever the cache (the completion frame may end
        # sooner)
        backend = LlamaCppBackend(
            LlamaCppOptions(
                threads=worker_threads(),
                model_path=starter_path,
                context_size=2048,
                kv_cache_type=kind,
                repack="off",
                prompt_format="gemma",
            )
        )
        try:
            info = backend.load()
            assert info.kv_cache_type == kind
            # llama.cpp's own figure (its log prints MiB to 2 decimals, one line per cache) equals
            # the formula: this model keeps full-size caches for its sliding-window layers too.
            computed = backend._kv_cache_computed(info.context_size, kind)
            assert computed == kv_cache_bytes(2048, 18, 256, 256, kind)
            assert abs(info.kv_cache_bytes - computed) <= 0.01 * (1 << 20)
            sizes[kind] = info.kv_cache_bytes
            if kind == "f16":
                assert not info.flash_attn_forced
            else:  # a quantized V cache needs flash attention: turned on, and said so
                assert info.flash_attn is True and info.flash_attn_forced
            assert (
                info.kv_cache
                == {"f16": "KV f16 36 MiB", "q8_0": "KV q8_0 19 MiB", "q4_0": "KV q4_0 10 MiB"}[
                    kind
                ]
            )
            _, done = collect(
                backend,
                [ChatMessage("user", "Name three fruits.")],
                SamplingParams(temperature=0, max_tokens=8),
            )
            assert done.stats.completion_tokens == 8 and done.text.strip()
        finally:
            backend.close()
    assert sizes["q4_0"] < sizes["q8_0"] < sizes["f16"]


@pytest.mark.model
def test_an_unknown_kv_cache_type_fails_before_loading(starter_path):
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(), model_path=starter_path, kv_cache_type="q3", repack="off"
        )
    )
    with pytest.raises(
        InvalidParameterError, match=r"kv_cache_type must be one of f16, q8_0, q4_0 \(got 'q3'\)"
    ):
        backend.load()
    assert backend._model is None


@pytest.mark.model
def test_a_context_that_refuses_a_quantized_cache_names_the_setting_and_the_fix(starter_path):
    # Flash attention explicitly off: llama.cpp cannot make a quantized V cache.
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=512,
            kv_cache_type="q8_0",
            flash_attn=False,
            repack="off",
        )
    )
    with pytest.raises(ModelLoadError) as info:
        backend.load()
    message = str(info.value)
    assert "q8_0 KV cache" in message and "--kv-cache-type f16" in message and "\n" not in message


# ------------------------------------------------------------------ GPU layers
@pytest.mark.model
@pytest.mark.parametrize("layers", [-1, 5])
def test_gpu_layers_on_a_build_without_offload(starter_path, layers):
    import llama_cpp

    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python build can offload to a GPU")
    strict = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=512,
            gpu_layers=layers,
            repack="off",
        )
    )
    with pytest.raises(GpuOffloadUnavailableError) as info:
        strict.load()
    assert f"--n-gpu-layers {layers}" in str(info.value) and "-DGGML_CUDA=on" in str(info.value)
    assert strict._model is None
    fallback = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            context_size=512,
            gpu_layers=layers,
            cpu_fallback=True,
            repack="off",
        )
    )
    try:
        info = fallback.load()
        assert info.gpu_layers == 0 and info.device == "CPU (no GPU offload in this build)"
        assert len(info.notices) == 1 and info.notices[0].startswith(
            "Running on the CPU: GPU offload of"
        )
    finally:
        fallback.close()


# ------------------------------------------------------ speculative decoding
# Drafting is compared with plain decoding on the starter prompted in Gemma's turn format
# (prompt_format gemma), where it copies the code back for hundreds of tokens: in its own
# format, the completion frame, it answers this request with "Hello!" and stops.
@pytest.fixture(scope="module")
def drafting(starter_path):
    """Prompt lookup on, otherwise the settings of conftest's ``gemma_llama_backend``."""
    with loaded_starter(
        starter_path, speculative="prompt-lookup", prompt_format="gemma"
    ) as backend:
        info = backend.describe()
        assert info.speculative == "prompt-lookup" and info.draft_tokens == 10
        yield backend


@pytest.fixture
def spec(drafting):
    drafting.reset()
    yield drafting
    drafting.reset()


@pytest.fixture
def plain_backend(gemma_backend):
    """The settings of ``drafting`` with no drafting: conftest's ``gemma_backend``."""
    yield gemma_backend


@pytest.mark.model
def test_greedy_output_with_prompt_lookup_is_identical_to_without(plain_backend, spec):
    params = SamplingParams(temperature=0, max_tokens=48)
    _, plain = collect(plain_backend, REWRITE, params)
    spec_deltas, drafted = collect(spec, REWRITE, params)
    assert same_start(drafted.text, plain.text, 12) and "def scale_" in plain.text
    assert "".join(spec_deltas) == drafted.text
    assert drafted.stats.completion_tokens == plain.stats.completion_tokens == 48
    assert drafted.stats.finish_reason == plain.stats.finish_reason == "length"
    # The reply copies the prompt's code: most drafts are right.
    assert drafted.stats.drafted_tokens > 30
    assert drafted.stats.accepted_draft_tokens > drafted.stats.drafted_tokens // 2
    assert plain.stats.drafted_tokens == plain.stats.accepted_draft_tokens == 0
    # The KV cache holds exactly the tokens the backend believes it holds: the next turn
    # (which reuses it) answers as a fresh backend without drafting does.
    turn2 = REWRITE + [
        ChatMessage("assistant", drafted.text),
        ChatMessage("user", "Now rename total to result."),
    ]
    params = params.replace(max_tokens=20)
    _, spec2 = collect(spec, turn2, params)
    assert spec2.stats.prompt_tokens_evaluated < spec2.stats.prompt_tokens // 2
    plain_backend.reset()
    _, plain2 = collect(plain_backend, turn2, params)
    assert same_start(spec2.text, plain2.text)


@pytest.mark.model
def test_prompt_lookup_keeps_seeded_sampling_reproducible(plain_backend, spec):
    params = SamplingParams(
        temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, seed=7, max_tokens=24
    )
    _, plain = collect(plain_backend, REWRITE, params)
    _, drafted = collect(spec, REWRITE, params)
    assert same_start(drafted.text, plain.text, 5) and drafted.stats.drafted_tokens > 0


@pytest.mark.model
def test_prompt_lookup_honours_stop_strings_max_tokens_and_utf8(spec):
    # Drafted decoding is compared with itself: the same request takes the same batches, so on
    # one machine it gives the same text. Compared with plain decoding it may part at a near-tie
    # (batched kernels round differently; seen on an Intel AMX CPU), so that is not asserted.
    params = SamplingParams(temperature=0, max_tokens=48)
    free_deltas, free = collect(spec, REWRITE, params)
    assert free.stats.completion_tokens == 48 and free.stats.drafted_tokens > 0
    assert "".join(free_deltas) == free.text
    # A stop string from the second half of the reply itself (six characters, no blank at
    # either end) ends the reply at its first occurrence.
    text = free.text
    word = next(
        text[i : i + 6]
        for i in range(len(text) // 2, len(text) - 6)
        if text[i : i + 6].strip() == text[i : i + 6]
    )
    expected = text[: text.index(word)]
    assert expected
    spec.reset()
    deltas, stopped = collect(spec, REWRITE, params.replace(stop=(word,)))
    assert stopped.text == "".join(deltas) == expected
    assert stopped.stats.finish_reason == "stop" and stopped.stats.completion_tokens < 48

    for n in (1, 7, 33):  # the limit falls inside a draft: exactly n tokens, no more
        spec.reset()
        _, short = collect(spec, REWRITE, params.replace(max_tokens=n))
        assert short.stats.completion_tokens == n and short.stats.finish_reason == "length"
        assert short.text.strip()
        if n == 1:  # sampled from the prompt's logits, before any draft: the same token
            assert free.text.startswith(short.text)

    text = "Répète trois fois: 日本語のテキスト 😀🎉 ünïcödé. 日本語のテキスト 😀🎉 ünïcödé. "
    spec.reset()
    spec_deltas, drafted = collect(spec, [ChatMessage("user", text)], params.replace(max_tokens=40))
    assert all("\ufffd" not in d for d in spec_deltas)  # no character split between deltas
    assert "".join(spec_deltas) == drafted.text


@pytest.mark.model
def test_cancel_while_drafting_then_the_next_request_is_right(plain_backend, spec):
    params = SamplingParams(temperature=0, max_tokens=300)
    seen = 0
    done = None
    for event in spec.stream_chat(REWRITE, params):
        if isinstance(event, TextDelta):
            seen += 1
            if seen == 12:
                spec.cancel()
        elif isinstance(event, GenerationDone):
            done = event
    assert done.stats.finish_reason == "cancelled" and done.stats.completion_tokens < 100
    _, after = collect(spec, REWRITE, params.replace(max_tokens=24))
    _, plain = collect(plain_backend, REWRITE, params.replace(max_tokens=24))
    assert same_start(after.text, plain.text) and after.stats.finish_reason == "length"


@pytest.mark.model
def test_a_draft_length_with_an_absurd_logits_buffer_is_refused(starter_path):
    backend = LlamaCppBackend(
        LlamaCppOptions(
            threads=worker_threads(),
            model_path=starter_path,
            speculative="prompt-lookup",
            draft_tokens=1024,
            repack="off",
        )
    )
    with pytest.raises(
        InvalidParameterError, match=r"--draft-tokens 1024 would need 1,025 MiB of logits"
    ):
        backend.load()
    assert backend._model is None and backend._ctx is None


def test_context_sizes_round_up_to_llama_cpps_step():
    assert CONTEXT_STEP == 256 and MAX_CONTEXT % CONTEXT_STEP == 0
    assert [round_context(n) for n in (1, 255, 256, 257, 300, 512, 513, MAX_CONTEXT)] == [
        256,
        256,
        256,
        512,
        512,
        512,
        768,
        MAX_CONTEXT,
    ]
    assert context_rounding_notice(512, 512) is None
    assert (
        context_rounding_notice(300, 512)
        == "context 300 rounded up to 512 (llama.cpp allocates it in steps of 256)"
    )
