"""Build the backend the user asked for. The CLI and the TUI both come through here;
tests inject their own backend instead."""

from __future__ import annotations

from vibechat.engine.backend import Backend

from .options import EngineChoice, check_engine_numbers


def make_backend(engine: EngineChoice) -> Backend:
    """A not-yet-loaded backend for ``engine`` (call ``load()`` in a worker)."""
    from vibechat.engine.llamacpp import LlamaCppBackend, LlamaCppOptions
    from vibechat.engine.models import resolve_model

    check_engine_numbers(engine)
    options = LlamaCppOptions(
        model_path=resolve_model(engine.model),
        n_ctx=engine.ctx,
        n_gpu_layers=engine.n_gpu_layers,
        n_threads=engine.threads,
    )
    return LlamaCppBackend(options)
