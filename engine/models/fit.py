"""Whether a model of a given size fits this machine's memory: free RAM, and free VRAM when
this llama.cpp build offloads to a GPU. Read when asked (``memory_fit()``), never at import
time. Light on purpose: the chat's process (the downloader's list) asks it, and that
process never loads libllama (the model lives in the engine process): whether the build
offloads is read from the backend libraries it installed, not asked of libllama.

Imports inside functions are deliberate: the llama.cpp options load only when a fit is estimated
(start-up time)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

from .. import system

# The memory a model needs, over its file size: weights plus a modest context.
OVERHEAD = 1.1
# ggml's GPU backends, each built as its own library beside libllama (libggml-cuda.so,
# ggml-metal.dylib, ggml-vulkan.dll, ...) when llama-cpp-python is built for it; RPC
# offloads to another machine's GPU. The CPU build has only ggml-base and ggml-cpu.
GPU_BACKEND_LIBRARY = re.compile(
    r"^(lib)?ggml-(cuda|metal|vulkan|hip|rocm|sycl|opencl|musa|cann|kompute|webgpu|rpc)[.-]",
    re.IGNORECASE,
)
# Files looked at in a library folder: its listing is outside data, so it is bounded.
MAX_LIBRARY_FILES = 1000


def memory_fit() -> Callable[[int], str]:
    """A function telling, for a model size in bytes, whether it fits in free RAM (and VRAM
    when this build offloads to a GPU): "yes (GPU)", "yes", "RAM only", "no" or "?". The
    free memory is measured once, here: the function can be applied to many sizes."""
    ram = system.available_memory()
    vram = system.gpu_free_memory() if build_offloads() else None

    def fit(size: int) -> str:
        need = int(size * OVERHEAD)
        if vram is not None:
            if need <= vram:
                return "yes (GPU)"
            return "RAM only" if ram is not None and need <= ram else "no"
        if ram is None:
            return "?"
        return "yes" if need <= ram else "no"

    return fit


def build_offloads(folder: Path | None = None) -> bool:
    """Whether the installed llama.cpp build can offload to a GPU, from the libraries in
    ``folder`` (default: where llama-cpp-python loads libllama from: ``LLAMA_CPP_LIB_PATH``,
    else its package's lib/), without loading any of them: what
    ``llama_supports_gpu_offload()`` answers, short of a GPU build on a machine without the
    GPU (then ``gpu_free_memory`` finds none, and RAM decides). False without a build."""
    if folder is None:
        folder = _library_folder()
        if folder is None:
            return False
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_LIBRARY_FILES:
                    break
                if GPU_BACKEND_LIBRARY.match(entry.name):
                    return True
    except OSError:
        pass
    return False


def _library_folder() -> Path | None:
    """llama-cpp-python's library folder, found without importing the package (its
    ``__init__`` loads libllama)."""
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    if override:
        return Path(override)

    try:
        spec = find_spec("llama_cpp")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "lib"


def weights_to_load(backend: object) -> int | None:
    """Bytes of weights a local backend loads: its model file, its draft model's and its
    projector's, or None (a server, or a backend that does not say)."""

    from ..settings.knobs import LlamaCppOptions

    options = getattr(backend, "options", None)
    if not isinstance(options, LlamaCppOptions):
        return None
    try:
        return sum(
            Path(p).stat().st_size
            for p in (options.model_path, options.draft_model_path, options.mmproj_path)
            if p is not None
        )
    except OSError:
        return None
