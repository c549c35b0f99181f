"""The engine's settings in one shape, declared once: ``EngineSettings``, each field a row of the
settings table (its help, variable, flag, range or check in the field's metadata: ``doc()``);
``Config`` (engine/settings/table.py) is these and the chat's own settings, and ``SETTINGS``
there flattens both into the table that the config file, ``VIBECHAT_*`` variables, the flags
(app/options.py), ``config show`` and the settings table of docs/USAGE.md come from.
``LlamaCppOptions`` is the same plus what only the local runtime knows.

Adding an engine setting takes:

1. its field below, with its help, variable, flag (and the flag's line), range or check: the
   config key, the variable, the flag of both commands and its row in the docs follow;
2. its use where llama.cpp takes it (``LlamaCppBackend.load`` in engine/llama/llamacpp.py), or the
   openai backend (``make_remote_backend`` in app/backends.py).

The values a setting may take and their checks are in choices.py, the context's rounding and
the prompt's limits in limits.py: import them from there.

Light on purpose (no llama_cpp import): the config, the CLI and the TUI use the
names and checks here; ``engine/llama/llamacpp.py`` maps them onto llama.cpp.

Imports inside functions are deliberate: importlib.metadata loads only when the installed
llama-cpp-python's version is asked for (start-up time).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError
from ..sizes import human_bytes
from .choices import (
    BACKENDS,
    CONTEXT_POLICIES,
    DEFAULT_CONTEXT_POLICY,
    DEFAULT_DRAFT_TOKENS,
    DEFAULT_KV_CACHE_TYPE,
    DEFAULT_PROMPT_FORMAT,
    DEFAULT_REPACK,
    MAX_DRAFT_TOKENS,
    check_context_policy,
    check_kv_cache_type,
    check_prompt_format,
    check_repack,
    check_speculative,
)
from .limits import CONTEXT_STEP, MAX_CONTEXT
from .setting import ENGINE, REMOTE, doc
from .think_switch import DEFAULT_THINK_BUDGET_MESSAGE, check_think_budget_message

# The KV snapshots' disk cache (an 8k-token starter chat: ~150 MB).
DEFAULT_KV_SNAPSHOT_MIB = 2048


@functools.cache
def llama_cpp_version() -> str:
    """The installed llama-cpp-python's version ('' if unknown), without importing it; read once
    a process (the metadata scan costs ~20 ms, and the chat asks as its model becomes ready)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return ""


def gpu_unavailable_message(
    gpu_layers: int, version: str | None = None, asked_by: str | None = None
) -> str:
    """One line: GPU layers were asked for, this build cannot offload, how to rebuild it.
    ``asked_by``: where the request came from (default: the flag, the config key, the variable,
    as the settings table names them)."""
    version = llama_cpp_version() if version is None else version
    pin = f"llama-cpp-python=={version}" if version else "llama-cpp-python"
    asked = (
        "all layers" if gpu_layers < 0 else f"{gpu_layers} layer" + ("" if gpu_layers == 1 else "s")
    )
    row = EngineSettings.__dataclass_fields__["gpu_layers"].metadata
    asked_by = asked_by or f"{row['flag']} {gpu_layers}, gpu_layers in the config or {row['env']}"
    return (
        f"GPU offload of {asked} was asked for ({asked_by}) but this llama-cpp-python build is "
        "CPU-only: rebuild it for CUDA with "
        f'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall --no-cache-dir {pin} '
        f'(or CMAKE_ARGS="-DGGML_CUDA=on" python3 dev.py chat), for Metal with '
        'CMAKE_ARGS="-DGGML_METAL=on", '
        f"or use {row['flag']} 0 for the CPU."
    )


def human_mib(n_bytes: int) -> str:
    """A memory size in words (the one formatter: engine/sizes.py)."""
    return human_bytes(n_bytes)


def check_mmproj(value: object) -> str:
    """``mmproj``'s value: "auto", "off" ("none" says it too) or a file's path (checked when the
    model loads: app/backends.py). Raises ``InvalidParameterError`` for anything else."""
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise InvalidParameterError(
            f"mmproj must be a projector file's path, auto or off (got {value!r})"
        )
    text = str(value).strip()
    word = text.lower()
    return "off" if word == "none" else word if word in ("auto", "off") else text


@dataclass(frozen=True)
class EngineSettings:
    """The engine settings: each field is the config key of that name, declared here once, with
    its type, default and row of the settings table. ``None`` means "choose like llama.cpp
    would" (or, for ``backend``: llama, or openai when ``base_url`` is set)."""

    model: str | None = field(
        default=None,
        metadata=doc(
            "The model to open: a .gguf path, a name from 'vibechat models list', or a "
            "Hugging Face reference (owner/repo, owner/repo:QUANT); with the openai "
            "backend, the server's model id.",
            kind="text",
            example='"bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"',
            unset="the bundled starter model",
            env="VIBECHAT_MODEL",
            flag="--model",
            short="-m",
            metavar="MODEL",
            flag_help=(
                "A .gguf path or a local model name (default: the bundled starter model); with "
                "--backend openai, the server's model id."
            ),
            group=ENGINE,
        ),
    )
    context_size: int | None = field(
        default=None,
        metadata=doc(
            f"Context window in tokens; a size that is no multiple of {CONTEXT_STEP} is rounded up "
            f"to one (llama.cpp allocates the context in steps of {CONTEXT_STEP}).",
            kind="whole number",
            example="4096",
            unset="the model's, at most 8192",
            env="VIBECHAT_CONTEXT_SIZE",
            flag="--ctx",
            minimum=CONTEXT_STEP,
            maximum=MAX_CONTEXT,
            metavar="TOKENS",
            flag_help=(
                f"Context size in tokens, {CONTEXT_STEP}-{MAX_CONTEXT}, rounded up to a multiple "
                f"of {CONTEXT_STEP} (default: the model's, at most 8192)."
            ),
            group=ENGINE,
        ),
    )
    context_policy: str = field(
        default=DEFAULT_CONTEXT_POLICY,
        metadata=doc(
            "What a prompt that would overflow the context does: trim (the oldest messages are "
            "left out; the chat marks where), compact (the model first summarises the "
            "conversation into a new branch, the original kept) or stop (the prompt is refused, "
            "with the choices). The system prompt and pinned messages are never left out.",
            kind="text",
            example='"compact"',
            env="VIBECHAT_CONTEXT_POLICY",
            flag="--context-policy",
            metavar="POLICY",
            flag_help="A prompt that would overflow the context: trim, compact or stop.",
            choices=CONTEXT_POLICIES,
            check=check_context_policy,
            group=ENGINE,
        ),
    )
    gpu_layers: int | None = field(
        default=None,
        metadata=doc(
            "Layers to offload to the GPU: -1 all, 0 none (CPU only).",
            kind="whole number",
            example="0",
            unset="all, if the build can offload",
            env="VIBECHAT_GPU_LAYERS",
            flag="--n-gpu-layers",
            minimum=-1,
            metavar="N",
            flag_help=(
                "Layers to offload to the GPU (default: all when the build supports it; -1 = all)."
            ),
            group=ENGINE,
        ),
    )
    threads: int | None = field(
        default=None,
        metadata=doc(
            "CPU threads for generation.",
            kind="whole number",
            example="4",
            unset="the physical performance cores",
            env="VIBECHAT_THREADS",
            flag="--threads",
            minimum=1,
            maximum=1024,
            metavar="N",
            flag_help="CPU threads (default: physical performance cores).",
            group=ENGINE,
        ),
    )
    kv_cache_type: str = field(
        default=DEFAULT_KV_CACHE_TYPE,
        metadata=doc(
            "KV-cache type for keys and values: f16, q8_0 (about half the memory) or q4_0 (about "
            "a quarter); a quantized cache turns flash attention on.",
            kind="text",
            example='"q8_0"',
            env="VIBECHAT_KV_CACHE_TYPE",
            flag="--kv-cache-type",
            check=check_kv_cache_type,
            metavar="TYPE",
            flag_help=(
                "KV-cache type: f16 (default), q8_0 or q4_0 "
                "(less memory; turns flash attention on)."
            ),
            group=ENGINE,
        ),
    )
    speculative: str = field(
        default="off",
        metadata=doc(
            "Speculative decoding: off; auto (drafts tokens by finding the last words earlier in "
            "the prompt or reply, as many as pay on this machine, none when drafting does not "
            "pay); or prompt-lookup (always draft_tokens drafts). Helps when the reply repeats "
            "the prompt, e.g. editing code.",
            kind="text",
            example='"auto"',
            env="VIBECHAT_SPECULATIVE",
            flag="--draft",
            check=check_speculative,
            metavar="MODE",
            flag_help=(
                "Speculative decoding: off (default), auto (drafts from the prompt and reply, "
                "only as much as pays) or prompt-lookup (always --draft-tokens drafts)."
            ),
            group=ENGINE,
        ),
    )
    draft_tokens: int = field(
        default=DEFAULT_DRAFT_TOKENS,
        metadata=doc(
            "Most tokens drafted per step with speculative decoding (auto adapts below it).",
            kind="whole number",
            example="10",
            env="VIBECHAT_DRAFT_TOKENS",
            flag="--draft-tokens",
            minimum=1,
            maximum=MAX_DRAFT_TOKENS,
            metavar="N",
            flag_help="Most tokens drafted per step with --draft auto|prompt-lookup (default 10).",
            group=ENGINE,
        ),
    )
    draft_model: str | None = field(
        default=None,
        metadata=doc(
            "A small model that drafts tokens for the model to check (speculative "
            "decoding): any model reference --model takes. It must share the model's "
            "vocabulary (same family); it turns drafting on (auto, unless speculative says "
            "prompt-lookup for a fixed draft length).",
            kind="text",
            example='"unsloth/gemma-3-270m-it-GGUF:Q4_K_M"',
            unset="none: drafts come from prompt lookup",
            env="VIBECHAT_DRAFT_MODEL",
            flag="--draft-model",
            metavar="REF",
            flag_help=(
                "A small model of the same family that drafts tokens for the model to check (any "
                "--model reference); drafting is auto with it, or the --draft mode given."
            ),
            group=ENGINE,
        ),
    )
    mmproj: str = field(
        default="auto",
        metadata=doc(
            "The multimodal projector a vision model sees images through (llama.cpp's mmproj "
            "GGUF): a file; auto (a *mmproj*.gguf beside the model file, the one whose name "
            "matches the model's best, f16 before bf16 before q8_0; 'vibechat models pull' "
            "fetches it from the model's Hub repo with the model); or off (text only).",
            kind="text",
            example='"~/models/mmproj-gemma-3-4b-it-f16.gguf"',
            env="VIBECHAT_MMPROJ",
            flag="--mmproj",
            check=check_mmproj,
            metavar="FILE",
            flag_help=(
                "The vision model's projector GGUF: a file, auto "
                "(default: one beside the model) or off."
            ),
            group=ENGINE,
        ),
    )
    # llama.cpp's CPU weight repacking (extra buffer types): "auto" turns it off where its AMX
    # kernel crashes (engine/llama/repack.py), "on" / "off" force it.
    repack: str = field(
        default=DEFAULT_REPACK,
        metadata=doc(
            "llama.cpp's CPU weight repacking (its extra buffer types: interleaved quant blocks, "
            "Intel AMX tiles; about 30% faster decoding): auto (on, except where this llama.cpp "
            "build's AMX kernel crashes: on a CPU with AMX a one-time probe decides), on, or off.",
            kind="text",
            example='"off"',
            env="VIBECHAT_REPACK",
            flag="--repack",
            check=check_repack,
            metavar="MODE",
            flag_help=(
                "CPU weight repacking: auto (default: on, except where llama.cpp's AMX kernel "
                "crashes: see --version), on or off."
            ),
            group=ENGINE,
        ),
    )
    prompt_format: str = field(
        default=DEFAULT_PROMPT_FORMAT,
        metadata=doc(
            "How a local model is prompted: auto (its GGUF's chat template; a base model, or a "
            "GGUF with no template and no sign of chat tuning in its name, as a completion "
            "model: a short example conversation, then the chat as User:/Assistant: lines), "
            "completion, template (the GGUF's own, even for a base model) or a built-in turn "
            "format: gemma, chatml, llama3.",
            kind="text",
            example='"completion"',
            env="VIBECHAT_PROMPT_FORMAT",
            flag="--prompt-format",
            check=check_prompt_format,
            metavar="FORMAT",
            flag_help=(
                "How a local model is prompted: auto (its chat template; a base model as a "
                "completion model), completion, template, gemma, chatml or llama3."
            ),
            group=ENGINE,
        ),
    )
    think_budget_message: str = field(
        default=DEFAULT_THINK_BUDGET_MESSAGE,
        metadata=doc(
            "What the local engine puts into a reply's thinking, on a line of its own, when it "
            "reaches its thinking budget (think_budget), before the model's own end of "
            "thinking; the answer begins after it (as llama.cpp's --reasoning-budget-message); "
            "empty: the end of thinking alone.",
            kind="text",
            example='"Time is up; answering now."',
            env="VIBECHAT_THINK_BUDGET_MESSAGE",
            flag="--think-budget-message",
            check=check_think_budget_message,
            metavar="TEXT",
            flag_help=(
                "The phrase put into a reply's thinking when it reaches --think-budget, before "
                "the end of thinking."
            ),
            group=ENGINE,
        ),
    )
    kv_snapshot_cache_mib: int = field(
        default=DEFAULT_KV_SNAPSHOT_MIB,
        metadata=doc(
            "MiB of disk for KV snapshots: after a reply a local model's conversation state is "
            "kept (in memory and under the cache folder), so reopening the conversation, "
            "--continue or another branch evaluates only the new tokens; least recently used go "
            "first; 0 turns snapshots off. 'vibechat history cache' shows and clears them.",
            kind="whole number",
            example="4096",
            env="VIBECHAT_KV_SNAPSHOT_CACHE_MIB",
            minimum=0,
            maximum=1 << 20,
        ),
    )
    backend: str | None = field(
        default=None,
        metadata=doc(
            "Where replies come from: llama (GGUF files through llama.cpp, on this machine) "
            "or openai (a server with an OpenAI-compatible API at base_url: llama-server, "
            "vLLM, Ollama, LM Studio, ...).",
            kind="text",
            example='"openai"',
            unset="llama; openai when base_url is set",
            env="VIBECHAT_BACKEND",
            flag="--backend",
            choices=BACKENDS,
            metavar="NAME",
            flag_help=(
                "llama (GGUF files through llama.cpp, the default) or openai "
                "(an OpenAI-compatible server)."
            ),
            group=REMOTE,
        ),
    )
    base_url: str | None = field(
        default=None,
        metadata=doc(
            "The openai backend's server: its API root, such as http://127.0.0.1:8080/v1 "
            "(a bare host gets /v1).",
            kind="url",
            example='"http://127.0.0.1:8080/v1"',
            unset="none",
            env="VIBECHAT_BASE_URL",
            flag="--base-url",
            metavar="URL",
            flag_help=(
                "The server's API root, e.g. http://127.0.0.1:8080/v1 (implies --backend openai)."
            ),
            group=REMOTE,
        ),
    )
    api_key_env: str | None = field(
        default=None,
        metadata=doc(
            "The environment variable that holds the server's API key "
            "(the key itself never goes in this file).",
            kind="variable name",
            example='"MY_SERVER_KEY"',
            unset="VIBECHAT_API_KEY, else OPENAI_API_KEY (https only)",
            flag="--api-key-env",
            metavar="VAR",
            flag_help=(
                "The environment variable holding the server's API key (default: "
                "VIBECHAT_API_KEY, else OPENAI_API_KEY for https servers)."
            ),
            group=REMOTE,
        ),
    )
    timeout: int | None = field(
        default=None,
        metadata=doc(
            "Seconds to wait for the openai backend's server "
            "(to connect: at most 10) before giving up.",
            kind="whole number",
            example="600",
            unset="300",
            env="VIBECHAT_TIMEOUT",
            minimum=1,
            maximum=86400,
        ),
    )

    @classmethod
    def from_config(cls, config: Any) -> EngineSettings:
        """The engine settings of an effective ``Config`` (flags already applied)."""
        return cls(**{name: getattr(config, name) for name in ENGINE_SETTING_KEYS})

    def as_dict(self) -> dict[str, Any]:
        """The settings by config key (a ``LlamaCppOptions``' runtime fields left out)."""
        return {name: getattr(self, name) for name in ENGINE_SETTING_KEYS}

    @property
    def remote(self) -> bool:
        return self.backend == "openai" or (self.backend is None and bool(self.base_url))


ENGINE_SETTING_KEYS: tuple[str, ...] = tuple(f.name for f in fields(EngineSettings))


@dataclass(frozen=True, kw_only=True)
class LlamaCppOptions(EngineSettings):
    """How ``LlamaCppBackend`` (engine/llama/llamacpp.py) loads a model: the engine settings, by
    their config names, and what only the runtime knows (the resolved file, whether to fall
    back to the CPU, llama.cpp's own defaults). Here, not beside the backend, so that the
    chat's process, whose engine runs in a worker process (engine/llama/worker.py), never loads
    libllama."""

    # The files ``model`` and ``draft_model`` resolved to.
    model_path: Path
    draft_model_path: Path | None = None
    # The multimodal projector the model sees images through (None: text only).
    mmproj_path: Path | None = None
    # GPU layers asked for (gpu_layers != 0) on a build that cannot offload: False raises
    # GpuOffloadUnavailableError; True loads on the CPU and says so in ModelInfo.notices.
    cpu_fallback: bool = False
    # False: this run takes and uses no KV snapshot and leaves those on disk alone (a
    # --prompts-file batch); kv_snapshot_cache_mib = 0, the user's off, deletes them too.
    kv_snapshots: bool = True
    # Default: auto (llama.cpp decides per device).
    flash_attn: bool | None = None
    n_batch: int = 2048
    n_ubatch: int = 512

    @classmethod
    def of(cls, settings: EngineSettings, model_path: Path, **runtime: Any) -> LlamaCppOptions:
        """``settings`` for the model at ``model_path`` (``runtime``: cpu_fallback ...)."""
        return cls(**settings.as_dict(), model_path=model_path, **runtime)
