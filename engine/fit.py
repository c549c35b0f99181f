"""Whether a model of a given size fits this machine's memory: free RAM, and free VRAM when
this llama.cpp build offloads to a GPU. Read when asked (``memory_fit()``), never at import
time; llama.cpp is imported only to ask whether it offloads."""

from __future__ import annotations

from collections.abc import Callable

from . import system

OVERHEAD = 1.1  # weights plus a modest context


def memory_fit() -> Callable[[int], str]:
    """A function telling, for a model size in bytes, whether it fits in free RAM (and VRAM
    when this build offloads to a GPU): "yes (GPU)", "yes", "RAM only", "no" or "?". The
    free memory is measured once, here: the function can be applied to many sizes."""
    ram = system.available_memory()
    vram = None
    try:
        from .llamacpp import gpu_offload_supported

        if gpu_offload_supported():
            vram = system.gpu_free_memory()
    except Exception:  # noqa: BLE001 - no llama.cpp build: judge by RAM alone
        pass

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


def weights_to_load(backend: object) -> int | None:
    """Bytes of weights a local backend loads: its model file and its draft model's, or None
    (a server, or a backend that does not say)."""
    from pathlib import Path

    from .knobs import LlamaCppOptions

    options = getattr(backend, "options", None)
    if not isinstance(options, LlamaCppOptions):
        return None
    try:
        return sum(Path(p).stat().st_size for p in (options.model_path, options.draft_model_path) if p is not None)
    except OSError:
        return None
