"""The chat TUI. ``create_app`` is the one factory the CLI and the tests use; the
backend is injected."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vibechat.engine.backend import Backend
    from vibechat.engine.params import SamplingParams

    from ..options import EngineChoice
    from ..settings import Settings
    from .app import VibechatApp


def create_app(backend: "Backend", *, params: "SamplingParams | None" = None, system: str | None = None,
               settings: "Settings | None" = None, blink: bool = True) -> "VibechatApp":
    from .app import VibechatApp

    return VibechatApp(backend, params=params, system=system, settings=settings, blink=blink)


def freeze_startup_objects() -> None:
    """Move everything alive after start-up (modules, Textual, llama.cpp bindings) out of
    the garbage collector's sight: full collections then scan only what the chat creates,
    which keeps their pauses (tens of ms, felt as stutter while a reply streams) short."""
    import gc

    gc.collect()
    gc.freeze()


def run_tui(engine: "EngineChoice", params: "SamplingParams", system: str | None) -> None:
    from ..backends import make_backend

    backend = make_backend(engine)  # a bad --model fails here, before the screen opens
    app = create_app(backend, params=params, system=system)
    freeze_startup_objects()
    try:
        app.run()
    finally:
        backend.close()
