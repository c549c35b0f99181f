"""Build the backend the user asked for. The CLI and the TUI both come through here;
tests inject their own backend instead.

Imports inside functions are deliberate: each backend (llama.cpp in this process or an engine
process, a remote server) and the model resolution load only when a chat or run builds one, so a
command that needs none starts fast."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from vibechat.engine.errors import ModelNotDownloadedError, VibechatError
from vibechat.engine.settings.knobs import EngineSettings, LlamaCppOptions
from vibechat.engine.settings.table import SETTINGS_BY_KEY
from vibechat.engine.turns.backend import Backend, ModelInfo

from .options import check_engine_numbers

if TYPE_CHECKING:
    from vibechat.engine.llama.worker_ahead import EngineAhead


def model_path(ref: str | None, pull: Callable[[str], object] | None = None) -> Path:
    """The file ``ref`` names; a Hub reference not on this machine yet is downloaded first
    with ``pull`` (as ``ollama run`` does), or reported when there is none."""
    from vibechat.engine.models.resolve import resolve_model

    try:
        return resolve_model(ref)
    except ModelNotDownloadedError as exc:
        if pull is None:
            raise
        pull(str(exc.ref))
        return resolve_model(ref)


def make_backend(
    engine: EngineSettings,
    pull: Callable[[str], object] | None = None,
    *,
    cpu_fallback: bool = False,
    worker: bool = False,
    kv_snapshots: bool = True,
    ahead: EngineAhead | None = None,
) -> Backend:
    """A not-yet-loaded backend for ``engine`` (call ``load()`` in a worker).

    ``worker``: a local model runs in a child process (engine/llama/worker.py: the chat survives
    llama.cpp ending its process); else in this one (``vibechat run``, ``--prompts-file``).
    ``ahead``: that child, started before ``engine`` was known (the chat's); the caller ends it
    when the backend is not a local model's.

    ``cpu_fallback``: GPU layers asked for on a build that cannot offload load on the CPU
    with a notice (the chat) instead of failing the load (``vibechat run``).

    ``kv_snapshots`` False: a local model takes and uses no KV snapshot, and leaves those on
    disk (``--prompts-file``); the setting's 0 turns them off for good and deletes them."""

    check_engine_numbers(engine.as_dict())
    if engine.remote:
        return make_remote_backend(engine)

    # Each text setting with fixed choices in its canonical form ("Q8_0" -> "q8_0",
    # "none" -> "off").
    checked = {
        key: SETTINGS_BY_KEY[key].check(value)
        for key, value in engine.as_dict().items()
        if SETTINGS_BY_KEY[key].check is not None
    }
    draft = model_path(engine.draft_model, pull) if engine.draft_model else None
    model = model_path(engine.model, pull)
    projector = projector_path(checked.get("mmproj", "auto"), model)
    options = LlamaCppOptions.of(
        replace(engine, **checked),
        model,
        cpu_fallback=cpu_fallback,
        draft_model_path=draft,
        mmproj_path=projector,
        kv_snapshots=kv_snapshots,
    )
    if worker:
        from vibechat.engine.llama.worker import WorkerBackend
        from vibechat.engine.models.resolve import check_model_path

        # A model that is not there is one line before the chat's screen opens, not a notice
        # inside it (the engine process reads the header, as it loads).
        check_model_path(model)

        return WorkerBackend(options, ahead)
    # Loads libllama: only where the model runs here; its bindings alone, as the engine process
    # imports them (llama-cpp-python's high-level half, and numpy with it, only on first use).
    from vibechat.engine.llama.worker_child import import_bindings_only

    import_bindings_only()
    from vibechat.engine.llama.llamacpp import LlamaCppBackend

    return LlamaCppBackend(options)


def projector_path(mmproj: str | None, model: Path) -> Path | None:
    """The projector file the ``mmproj`` setting means for the model at ``model``: a file given
    is checked (a missing, non-GGUF or non-projector file is one line, as a bad model path is);
    "auto" is the one pulled with the model or found beside it, None when there is none (the
    model is then text only, silently); "off" is None. A projector given as the model itself
    is refused here, before anything loads."""
    from vibechat.engine.models.projector import (
        check_projector,
        find_projector,
        refuse_projector_as_model,
    )

    refuse_projector_as_model(model)
    value = mmproj or "auto"
    if value == "off":
        return None
    if value == "auto":
        from vibechat.engine.models.resolve import known_projector

        return find_projector(model, known_projector(model))
    return check_projector(Path(value), given_as=SETTINGS_BY_KEY["mmproj"].flag or "--mmproj")


def make_remote_backend(engine: EngineSettings) -> Backend:
    """An OpenAI-compatible server's backend; the API key comes from the environment
    (never from a flag or the config file, so it stays out of shell history and files)."""
    from vibechat.engine.remote.openai_backend import make_openai_backend

    if not engine.base_url:
        raise VibechatError(
            "the openai backend needs the server's address: pass --base-url URL "
            "(e.g. http://127.0.0.1:8080/v1), or set base_url in the config file."
        )
    return make_openai_backend(
        engine.base_url, engine.model, api_key_env=engine.api_key_env, timeout=engine.timeout
    )


def same_server(
    engine: EngineSettings, info: ModelInfo, model: str | None = None
) -> Backend | None:
    """A second backend to the server model ``info`` describes (or to the same server's
    ``model``), with its own connection (a comparison's side B on the chat's server: the two
    requests run in parallel); None when ``info`` is a local model. The server's address is the
    chat's as given (``engine``'s, with what the shown one leaves out), else the one ``info``
    names; the API key comes from the environment as the chat's did."""
    from vibechat.engine.remote.options import api_root

    if not info.server:
        return None
    root = (engine.base_url if engine.remote else None) or api_root(info)
    if root is None:
        return None
    return make_remote_backend(
        replace(engine, backend="openai", base_url=root, model=model or info.name)
    )
