"""The engine's settings in one shape (``EngineSettings``, and ``LlamaCppOptions``: the
same plus what only the local runtime knows), and the local engine's knobs that are not
sampling parameters: the KV-cache type, speculative decoding by prompt lookup, and what to
say when GPU layers are asked of a build that cannot offload.

One name a setting: each ``EngineSettings`` field is named as its config key
(``context_size``, ``gpu_layers``, ``threads``, ``speculative`` ...), and the config's
settings table (``SETTINGS`` in engine/settings/config.py) gives each its flag (``--ctx``,
``--n-gpu-layers``, ``--draft`` ...), variable, range and check. The config, the CLI
(``app/options.py``), the chat's reloads and the backends all pass settings by these names.

Adding an engine setting takes:

1. its field in ``Config`` (engine/settings/config.py), with its help, variable, flag, range or check;
2. the field of the same name, type and default in ``EngineSettings`` below
   (tests/test_engine_knobs.py checks that the two agree);
3. its use where llama.cpp takes it (``LlamaCppBackend.load`` in engine/llama/llamacpp.py), or the
   openai backend (``make_remote_backend`` in app/backends.py).

A command-line flag for it is a typer option in app/options.py and a parameter of the
commands in app/cli.py that passes it on by the setting's name.

Light on purpose (no llama_cpp import): the config, the CLI and the TUI use the
names and checks here; ``engine/llama/llamacpp.py`` maps them onto llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError

# CPU weight repacking: the setting only (what it does to a load is engine/llama/repack.py's).
REPACK_MODES = ("auto", "on", "off")
DEFAULT_REPACK = "auto"
_ALIASES = {"true": "on", "yes": "on", "1": "on", "false": "off", "no": "off", "0": "off"}


def check_repack(value: object) -> str:
    """``value`` as auto, on or off (true/false/yes/no/1/0 too), or a one-line error."""
    name = str(value).strip().lower() if isinstance(value, (str, bool)) else None
    if name is not None:
        name = _ALIASES.get(name, name)
    if name not in REPACK_MODES:
        raise InvalidParameterError(f"repack must be one of {', '.join(REPACK_MODES)} (got {value!r}).")
    return name


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
            return (f"the prompt is {_human_bytes(n_bytes)}, more than a {context_size:,}-token context can hold "
                    f"(at most about {_human_bytes(limit)} of text): shorten it, or raise --ctx.")
        return None
    if n_bytes > MAX_PROMPT_BYTES:
        return (f"the prompt is {_human_bytes(n_bytes)}; vibechat sends at most {_human_bytes(MAX_PROMPT_BYTES)}: "
                "shorten it.")
    return None


def _human_bytes(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB"


def round_context(n_ctx: int) -> int:
    """The context llama.cpp allocates for ``n_ctx`` tokens: the next multiple of ``CONTEXT_STEP``."""
    return -(-n_ctx // CONTEXT_STEP) * CONTEXT_STEP


def context_rounding_notice(asked: int, used: int) -> str | None:
    """What to tell a user who asked for ``asked`` tokens of context and got ``used``."""
    if used == asked:
        return None
    return f"context {asked} rounded up to {used} (llama.cpp allocates it in steps of {CONTEXT_STEP})"


# KV-cache element types: name -> bytes per element (ggml block size / elements per block).
KV_CACHE_TYPES: dict[str, float] = {
    "f16": 2.0,
    "q8_0": 34 / 32,  # 32 int8 values + one f16 scale
    "q4_0": 18 / 32,  # 32 4-bit values + one f16 scale
}
DEFAULT_KV_CACHE_TYPE = "f16"

# Speculative decoding: "off", or drafts looked up in the prompt and the reply so far, either
# "auto" (the draft length adapts to what pays on this machine, and drafting turns itself off
# when it does not: engine/llama/speculative.py) or "prompt-lookup" (always draft_tokens drafts).
SPECULATIVE_MODES = ("off", "auto", "prompt-lookup")
DEFAULT_DRAFT_TOKENS = 10  # as llama-cpp-python's LlamaPromptLookupDecoding(num_pred_tokens=10)
MAX_DRAFT_TOKENS = 1024
DRAFT_NGRAM = 2  # ... and its max_ngram_size=2
# Verifying k drafted tokens asks llama.cpp for (k + 1) rows of logits, n_vocab floats each.
MAX_DRAFT_LOGITS_BYTES = 1 << 30


# How a local model is prompted (engine/turns/chat_template.py choose_template): "auto" decides from
# the GGUF (its chat template; a base model, or none: the completion frame); "completion" is
# the few-shot frame for base models; "template" the GGUF's own chat template (even where its
# metadata says base); or one of the built-in turn formats.
COMPLETION = "completion"  # also ModelInfo.chat_format for a model prompted this way
PROMPT_FORMATS = ("auto", COMPLETION, "template", "gemma", "chatml", "llama3")
DEFAULT_PROMPT_FORMAT = "auto"


def check_prompt_format(value: object) -> str:
    """``value`` as a known prompt format (any case), or a one-line error listing them."""
    name = str(value).strip().lower() if isinstance(value, str) else None
    if name not in PROMPT_FORMATS:
        raise InvalidParameterError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)} (got {value!r}).")
    return name


def check_kv_cache_type(value: object) -> str:
    """``value`` as a known KV-cache type name (any case), or a one-line error listing them."""
    name = str(value).strip().lower() if isinstance(value, str) else None
    if name not in KV_CACHE_TYPES:
        raise InvalidParameterError(
            f"kv_cache_type must be one of {', '.join(KV_CACHE_TYPES)} (got {value!r})."
        )
    return name


def check_speculative(value: object) -> str:
    """``value`` as a known speculative mode ('none' means 'off'), or a one-line error."""
    name = str(value).strip().lower() if isinstance(value, str) else None
    if name in ("none", "no", "false", ""):
        name = "off"
    if name not in SPECULATIVE_MODES:
        raise InvalidParameterError(
            f"speculative must be one of {', '.join(SPECULATIVE_MODES)} (got {value!r})."
        )
    return name


def check_draft_tokens(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DRAFT_TOKENS:
        raise InvalidParameterError(f"draft_tokens must be a whole number between 1 and {MAX_DRAFT_TOKENS} "
                                    f"(got {value!r}).")
    return value


def kv_cache_bytes(n_ctx: int, n_layers: int, n_embd_k_gqa: int, n_embd_v_gqa: int, cache_type: str) -> int:
    """The KV cache's size: ``n_ctx`` cells of K and V for every layer."""
    return int(n_ctx * n_layers * (n_embd_k_gqa + n_embd_v_gqa) * KV_CACHE_TYPES[cache_type])


def draft_logits_bytes(draft_tokens: int, n_vocab: int) -> int:
    """The logits one verification batch needs: the last token and each draft, float32."""
    return (draft_tokens + 1) * n_vocab * 4


def check_draft_logits(draft_tokens: int, n_vocab: int) -> None:
    """Refuse a draft length whose logits buffer would be absurd (one line, naming the flag)."""
    need = draft_logits_bytes(draft_tokens, n_vocab)
    if need > MAX_DRAFT_LOGITS_BYTES:
        most = MAX_DRAFT_LOGITS_BYTES // (n_vocab * 4) - 1
        raise InvalidParameterError(
            f"--draft-tokens {draft_tokens} would need {need / (1 << 20):,.0f} MiB of logits per verification "
            f"({draft_tokens + 1} positions x {n_vocab:,} vocabulary x 4 bytes; the limit is "
            f"{MAX_DRAFT_LOGITS_BYTES >> 20:,} MiB): use --draft-tokens {most} or fewer (draft_tokens in the config)."
        )


def llama_cpp_version() -> str:
    """The installed llama-cpp-python's version ('' if unknown), without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return ""


def gpu_unavailable_message(n_gpu_layers: int, version: str | None = None, asked_by: str | None = None) -> str:
    """One line: GPU layers were asked for, this build cannot offload, how to rebuild it.
    ``asked_by``: where the request came from (default: the flag, the config key, the variable)."""
    version = llama_cpp_version() if version is None else version
    pin = f"llama-cpp-python=={version}" if version else "llama-cpp-python"
    asked = "all layers" if n_gpu_layers < 0 else f"{n_gpu_layers} layer" + ("" if n_gpu_layers == 1 else "s")
    asked_by = asked_by or f"--n-gpu-layers {n_gpu_layers}, gpu_layers in the config or VIBECHAT_GPU_LAYERS"
    return (
        f"GPU offload of {asked} was asked for ({asked_by}) but this llama-cpp-python build is CPU-only: "
        "rebuild it for CUDA with "
        f"CMAKE_ARGS=\"-DGGML_CUDA=on\" pip install --force-reinstall --no-cache-dir {pin} "
        f"(or CMAKE_ARGS=\"-DGGML_CUDA=on\" python3 dev.py chat), for Metal with CMAKE_ARGS=\"-DGGML_METAL=on\", "
        "or use --n-gpu-layers 0 for the CPU."
    )


def human_mib(n_bytes: int) -> str:
    mib = n_bytes / (1 << 20)
    if mib >= 1024:
        return f"{mib / 1024:.1f} GiB"
    return f"{mib:.0f} MiB" if mib >= 10 else f"{mib:.1f} MiB"


@dataclass
class EngineSettings:
    """The engine settings: each field is the config key of that name, with its type and
    default (``Config`` in engine/settings/config.py, whose ``SETTINGS`` table gives its flag and
    variable). ``None`` means "choose like llama.cpp would" (or, for ``backend``: llama,
    or openai when ``base_url`` is set)."""

    model: str | None = None  # a .gguf path, a local model name or a Hub reference; a server's model id
    context_size: int | None = None  # default: trained context, capped at 8192
    gpu_layers: int | None = None  # default: all when the build can offload, else 0
    threads: int | None = None  # default: physical performance cores
    kv_cache_type: str = DEFAULT_KV_CACHE_TYPE  # "f16", "q8_0" or "q4_0", for K and V
    speculative: str = "off"  # "auto" / "prompt-lookup": draft tokens from the prompt and reply so far
    draft_tokens: int = DEFAULT_DRAFT_TOKENS  # most tokens drafted per step
    draft_model: str | None = None  # a model reference that drafts instead of prompt lookup
    # llama.cpp's CPU weight repacking (extra buffer types): "auto" turns it off where its AMX
    # kernel crashes (engine/llama/repack.py), "on" / "off" force it.
    repack: str = DEFAULT_REPACK
    # How the model is prompted: "auto" (its chat template; a base model: the completion frame),
    # "completion", "template" or a built-in turn format (PROMPT_FORMATS).
    prompt_format: str = DEFAULT_PROMPT_FORMAT
    backend: str | None = None  # "llama" or "openai"
    base_url: str | None = None  # the openai backend's server
    api_key_env: str | None = None  # the variable holding its API key
    timeout: int | None = None  # seconds to wait for it

    @classmethod
    def from_config(cls, config: Any) -> "EngineSettings":
        """The engine settings of an effective ``Config`` (flags already applied)."""
        return cls(**{name: getattr(config, name) for name in ENGINE_SETTING_KEYS})

    def as_dict(self) -> dict[str, Any]:
        """The settings by config key (a ``LlamaCppOptions``' runtime fields left out)."""
        return {name: getattr(self, name) for name in ENGINE_SETTING_KEYS}

    @property
    def remote(self) -> bool:
        return self.backend == "openai" or (self.backend is None and bool(self.base_url))


ENGINE_SETTING_KEYS: tuple[str, ...] = tuple(f.name for f in fields(EngineSettings))


@dataclass(kw_only=True)
class LlamaCppOptions(EngineSettings):
    """How ``LlamaCppBackend`` (engine/llama/llamacpp.py) loads a model: the engine settings, by
    their config names, and what only the runtime knows (the resolved file, whether to fall
    back to the CPU, llama.cpp's own defaults). Here, not beside the backend, so that the
    chat's process, whose engine runs in a worker process (engine/llama/worker.py), never loads
    libllama."""

    model_path: Path  # the file ``model`` resolved to
    draft_model_path: Path | None = None  # the file ``draft_model`` resolved to
    # GPU layers asked for (gpu_layers != 0) on a build that cannot offload: False raises
    # GpuOffloadUnavailableError; True loads on the CPU and says so in ModelInfo.notices.
    cpu_fallback: bool = False
    flash_attn: bool | None = None  # default: auto (llama.cpp decides per device)
    n_batch: int = 2048
    n_ubatch: int = 512

    @classmethod
    def of(cls, settings: EngineSettings, model_path: Path, **runtime: Any) -> "LlamaCppOptions":
        """``settings`` for the model at ``model_path`` (``runtime``: cpu_fallback ...)."""
        return cls(**settings.as_dict(), model_path=model_path, **runtime)
