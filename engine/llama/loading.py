"""Loading a GGUF into llama.cpp for ``LlamaCppBackend.load()``, in named steps: the request
checked before anything is loaded (``check_request``), the GPU layers, the weights' memory, the
weight-repacking decision (``repack_choice``), the model (``load_model``), drafting's checks on
it, the context's parameters and its memory (``context_params``, ``check_kv_fits``), the context
(``create_context``); and what llama.cpp's own log lines say about the result (layers offloaded,
the KV cache's size, flash attention). The backend strings them together and keeps what they make.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp as ll

from ..errors import GpuOffloadUnavailableError, LoadCancelled, ModelFileError, ModelLoadError
from ..models.gguf import GGUFInfo, inspect_gguf
from ..models.starter import starter_model_path
from ..paths import cache_dir
from ..settings.choices import (
    check_draft_logits,
    check_draft_tokens,
    check_kv_cache_type,
    check_repack,
    check_speculative,
    kv_cache_bytes,
)
from ..settings.knobs import LlamaCppOptions, gpu_unavailable_message
from ..settings.limits import round_context
from ..turns.backend import ModelInfo
from . import repack as _repack
from .memory_checks import check_context_memory, check_memory
from .vision import check_projector

log = logging.getLogger("vibechat.llama_cpp")

# The sequences a context holds: a reply, or two at once (engine/llama/pairing.py).
SEQUENCES = 2

DEFAULT_MAX_CONTEXT = 8192

# llama.cpp's ggml_type ids for the KV-cache types in knobs.KV_CACHE_TYPES
_GGML_TYPES = {"f16": ll.GGML_TYPE_F16, "q8_0": ll.GGML_TYPE_Q8_0, "q4_0": ll.GGML_TYPE_Q4_0}


@dataclasses.dataclass(frozen=True)
class LoadRequest:
    """The options' knob values, checked, and the model files' headers, read: all before
    anything is loaded (a typo or a bad file costs no time)."""

    kv_type: str
    # Off, auto or prompt-lookup (a draft model turns "off" into "auto").
    speculative: str
    # 0 when not drafting.
    draft_tokens: int
    gguf: GGUFInfo
    draft_gguf: GGUFInfo | None

    @property
    def weights(self) -> int:
        """The bytes of weights in memory: the model's, and the draft model's beside them."""
        return self.gguf.file_size + (
            self.draft_gguf.file_size if self.draft_gguf is not None else 0
        )


def check_request(opts: LlamaCppOptions) -> LoadRequest:
    kv_type = check_kv_cache_type(opts.kv_cache_type)
    speculative = check_speculative(opts.speculative)
    if opts.draft_model_path is not None and speculative == "off":
        speculative = "auto"
    draft_tokens = check_draft_tokens(opts.draft_tokens) if speculative != "off" else 0
    check_repack(opts.repack)
    # Raises ModelFileError before llama.cpp sees a bad file.
    gguf = inspect_gguf(opts.model_path)
    draft_gguf = inspect_gguf(opts.draft_model_path) if opts.draft_model_path is not None else None
    # Its header now; whether it fits the model once that is loaded.
    if opts.mmproj_path is not None:
        check_projector(opts.mmproj_path)
    return LoadRequest(kv_type, speculative, draft_tokens, gguf, draft_gguf)


def gpu_layers(opts: LlamaCppOptions, offload: bool, notices: list[str]) -> int:
    """The layers to offload (-1: all): the options' own, or all where this build can offload.
    Asking for GPU layers from a build that cannot is refused, or noted with --cpu-fallback."""
    if opts.gpu_layers is None:
        return -1 if offload else 0
    if opts.gpu_layers != 0 and not offload:
        message = gpu_unavailable_message(opts.gpu_layers, getattr(ll, "__version__", None))
        if not opts.cpu_fallback:
            raise GpuOffloadUnavailableError(message)
        log.warning("%s", message)
        notices.append("Running on the CPU: " + message)
    return opts.gpu_layers


def check_weights_fit(request: LoadRequest) -> None:
    """The weights (the draft model's beside the model's) must fit in RAM (a CPU load)."""
    gguf, draft = request.gguf, request.draft_gguf
    if draft is None:
        check_memory(gguf.file_size, gguf.path.name)
    else:
        check_memory(request.weights, f"{gguf.path.name} with {draft.path.name}")


def repack_choice(
    setting: str, model_path: Path, cancelled: threading.Event
) -> _repack.RepackChoice:
    """Whether to load with llama.cpp's extra buffer types (engine/llama/repack.py): on unless this
    build's AMX kernel may crash on this CPU; then a one-time probe (cached) decides. The
    probe runs the starter model (small and the same everywhere; unpacked first if need be),
    else the model being loaded."""

    info = _repack.system_info()

    def verdict() -> tuple[_repack.ProbeVerdict | None, bool]:
        try:
            probe_model = starter_model_path()
        except ModelFileError:
            # Its package is missing, or the cache is not writable.
            probe_model = model_path
        key = _repack.probe_key(info, getattr(ll, "__version__", ""))
        return _repack.probe_verdict(
            probe_model, cache_dir() / _repack.VERDICT_FILE, key, cancelled=cancelled.is_set
        )

    return _repack.decide_repack(setting, info, _repack.cpu_flags(), verdict)


def model_params(
    n_gpu_layers: int,
    extra_buffers: bool,
    on_progress: Callable[[float], object] | None,
    cancelled: threading.Event,
) -> tuple[Any, Any]:
    """llama.cpp's model parameters, and the progress callback they point at (keep it referenced
    while the model loads: C holds the pointer). The callback reports the load's progress and
    stops the load once ``cancelled`` is set (llama.cpp checks it between tensors)."""
    mparams = ll.llama_model_default_params()
    mparams.n_gpu_layers = n_gpu_layers
    mparams.use_extra_bufts = extra_buffers

    def _progress(value: float, _user: ctypes.c_void_p) -> bool:
        if on_progress is not None:
            try:
                on_progress(float(value))
            except Exception:  # noqa: BLE001
                pass
        return not cancelled.is_set()

    progress_cb = ll.llama_progress_callback(_progress)
    mparams.progress_callback = progress_cb
    return mparams, progress_cb


def load_model(
    gguf: GGUFInfo, mparams: Any, captured: list[tuple[int, str]], cancelled: threading.Event
) -> Any:
    """The model (a ``llama_model_p``), or a one-line error in llama.cpp's own words."""
    model = ll.llama_model_load_from_file(str(gguf.path).encode("utf-8"), mparams)
    if not model and cancelled.is_set():
        raise LoadCancelled(f"loading {gguf.path.name} was cancelled.")
    if not model:
        raise ModelLoadError(
            f"llama.cpp could not load {gguf.path}: "
            f"{last_error(captured) or 'unsupported or corrupt model'}; "
            "try another file or a newer vibechat."
        )
    return model


def check_drafting(model: Any, mode: str, draft_tokens: int, notices: list[str]) -> tuple[str, int]:
    """Whether prompt-lookup drafting (``mode``: auto or prompt-lookup) can run on ``model``:
    refuses a draft length whose
    logits would be absurd (frees the model first), turns it off for models whose
    memory cannot drop rejected tokens."""
    n_vocab = int(ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(model)))
    try:
        check_draft_logits(draft_tokens, n_vocab)
    except Exception:
        ll.llama_model_free(model)
        raise
    if ll.llama_model_is_recurrent(model) or ll.llama_model_is_hybrid(model):
        notices.append(
            "Prompt-lookup drafting is off: this model's recurrent state cannot drop "
            "rejected draft tokens."
        )
        return "off", 0
    return mode, draft_tokens


def context_size(opts: LlamaCppOptions, trained: int) -> int:
    """The context to create: the options' size, else the model's own up to DEFAULT_MAX_CONTEXT,
    rounded up here as llama.cpp would (every size and message after it is the real one)."""
    return round_context(
        opts.context_size or min(trained or DEFAULT_MAX_CONTEXT, DEFAULT_MAX_CONTEXT)
    )


def context_params(
    opts: LlamaCppOptions, n_ctx: int, n_threads: int, kv_type: str
) -> tuple[Any, bool | None, bool]:
    """llama.cpp's context parameters, the flash attention asked for (None: llama.cpp's choice),
    and whether the KV cache's type forced it on."""
    cparams = ll.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = min(opts.n_batch, n_ctx)
    cparams.n_ubatch = min(opts.n_ubatch, cparams.n_batch)
    cparams.n_threads = n_threads
    cparams.n_threads_batch = n_threads
    cparams.no_perf = False
    # Two sequences (engine/llama/pairing.py: two replies at once) in one unified KV cache: both
    # share its n_ctx cells (a shared prefix is the same cells), so it costs no memory; a split
    # cache would give each sequence half the context.
    cparams.n_seq_max = SEQUENCES
    cparams.kv_unified = True
    cparams.type_k = cparams.type_v = _GGML_TYPES[kv_type]
    flash_attn = opts.flash_attn
    forced = False
    if kv_type != "f16" and flash_attn is None:
        # llama.cpp cannot create a quantized V cache without flash attention.
        flash_attn = forced = True
        log.info("flash attention turned on: the %s V cache needs it", kv_type)
    cparams.flash_attn_type = (
        ll.LLAMA_FLASH_ATTN_TYPE_AUTO
        if flash_attn is None
        else ll.LLAMA_FLASH_ATTN_TYPE_ENABLED
        if flash_attn
        else ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    return cparams, flash_attn, forced


def log_loaded(info: ModelInfo, repack: str) -> None:
    """The log's line for a model loaded (``repack``: the repacking, in words)."""
    log.info(
        "loaded %s (%s, %s) ctx=%d threads=%d template=%s (%s) kv=%s (%s bytes) "
        "speculative=%s repack=%s",
        info.path,
        info.architecture,
        info.quantization,
        info.context_size,
        info.n_threads,
        info.chat_format,
        info.chat_format_reason,
        info.kv_cache_type,
        info.kv_cache_bytes,
        info.speculative,
        repack,
    )


def check_kv_fits(model: Any, request: LoadRequest, n_ctx: int, asked: bool) -> None:
    """The KV cache is in RAM too (a CPU load): will it fit beside the weights? Frees the model
    when it will not. ``asked``: the size came from --ctx / the config."""
    needed = kv_cache_computed(model, n_ctx, request.kv_type, request.gguf.architecture)
    try:
        check_context_memory(needed, request.weights, n_ctx, request.kv_type, asked)
    except ModelLoadError:
        ll.llama_model_free(model)
        raise


def create_context(
    model: Any, cparams: Any, request: LoadRequest, captured: list[tuple[int, str]]
) -> Any:
    """The context (a ``llama_context_p``); frees the model and says why when llama.cpp cannot."""
    ctx = ll.llama_init_from_model(model, cparams)
    if ctx:
        return ctx
    ll.llama_model_free(model)
    n_ctx, kv_type, name = int(cparams.n_ctx), request.kv_type, request.gguf.path.name
    reason = last_error(captured) or "not enough memory?"
    if kv_type != "f16":
        raise ModelLoadError(
            f"llama.cpp could not create a {n_ctx:,}-token context with a {kv_type} KV cache for "
            f"{name} ({reason}): a quantized V cache needs flash attention on this device; "
            "use --kv-cache-type f16 (kv_cache_type in the config)."
        )
    raise ModelLoadError(
        f"llama.cpp could not create a {n_ctx:,}-token context for {name} "
        f"({reason}): try a smaller --ctx."
    )


def free_model(ctx: Any, model: Any) -> None:
    """Free a context, then the model it was made from: the main model's and a draft model's
    (either may be None: never made, or freed already). The caller drops its references."""
    if ctx is not None:
        ll.llama_free(ctx)
    if model is not None:
        ll.llama_model_free(model)


def kv_cache_computed(model: Any, n_ctx: int, kv_type: str, arch: str) -> int | None:
    """n_ctx x layers x (K + V width) x bytes per element, from the model's shape (before the
    context exists, and when llama.cpp's log did not say)."""
    n_head = int(ll.llama_model_n_head(model))
    n_head_kv = int(ll.llama_model_n_head_kv(model))
    n_embd = int(ll.llama_model_n_embd(model))
    if not n_head or not n_head_kv:
        return None
    head_k = meta_int(model, f"{arch}.attention.key_length") or n_embd // n_head
    head_v = meta_int(model, f"{arch}.attention.value_length") or n_embd // n_head
    return kv_cache_bytes(
        n_ctx, int(ll.llama_model_n_layer(model)), head_k * n_head_kv, head_v * n_head_kv, kv_type
    )


def meta_int(model: Any, key: str) -> int | None:
    buf = ctypes.create_string_buffer(64)
    n = ll.llama_model_meta_val_str(model, key.encode("utf-8"), buf, len(buf))
    try:
        return int(buf.value) if n > 0 else None
    except ValueError:
        return None


# ------------------------------------------------------ what llama.cpp's log said
def last_error(captured: list[tuple[int, str]]) -> str:
    errors = [line.strip() for level, line in captured if level >= logging.ERROR]
    return errors[-1] if errors else ""


def offloaded_layers(
    captured: list[tuple[int, str]], requested: int, n_layers: int, offload: bool
) -> int:
    for _level, line in captured:
        match = re.search(r"offloaded (\d+)/(\d+) layers to GPU", line)
        if match:
            return int(match.group(1))
    if not offload or requested == 0:
        return 0
    return n_layers if requested < 0 else min(requested, n_layers)


_KV_SIZE = re.compile(r"llama_kv_cache: size =\s*([0-9.]+) MiB")


def kv_cache_logged(captured: list[tuple[int, str]]) -> int | None:
    """The KV cache's size from llama.cpp's own lines ("llama_kv_cache: size = 24.00 MiB ...";
    one per cache: models with sliding-window layers have two)."""
    sizes = [float(m.group(1)) for _level, line in captured for m in [_KV_SIZE.search(line)] if m]
    return round(sum(sizes) * (1 << 20)) if sizes else None


def flash_attn_state(captured: list[tuple[int, str]], requested: bool | None) -> bool | None:
    if requested is not None:
        return requested
    state = None
    for _level, line in captured:
        lower = line.lower()
        if "flash attention" in lower or "flash_attn" in lower:
            if "enabled" in lower:
                state = True
            elif "disabled" in lower:
                state = False
    return state
