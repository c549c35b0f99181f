"""Local models (everything vibechat can load on this machine) and what the user
typed after ``--model`` turned into a GGUF file path.

Accepted: nothing / ``starter`` (the bundled starter model), a path to a .gguf
file, the name of a local model (``vibechat models list``), or a Hugging Face
reference (``owner/repo``, ``owner/repo:QUANT``, ``owner/repo/file.gguf``) that has
a local copy; one without raises ``ModelNotDownloadedError`` so the caller can
offer to download it.

The sources are ``store`` (vibechat's own downloads) and ``discover`` (other tools'
folders); the ``LocalModel`` record they share lives below them, in ``local_model``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .errors import ModelNotDownloadedError, ModelRefError
from .local_model import LocalModel
from .refs import DEFAULT_QUANTS, parse_hub_ref
from .starter import STARTER_NAME, starter_installed_path, starter_model_path, starter_sha256

log = logging.getLogger("vibechat.models")
STARTER_SIZE = 253_000_000  # shown before the starter model is first unpacked


def starter_model() -> LocalModel | None:
    """The bundled starter model, listed whether or not it has been unpacked yet."""
    path = starter_installed_path()
    if path is None:
        return None
    size = path.stat().st_size if path.exists() else STARTER_SIZE
    return LocalModel(name=STARTER_NAME, path=path, size=size, quant="Q4_K_M", source="starter",
                      sha256=starter_sha256(), repo=None)


def all_models(*, discover: bool = True) -> list[LocalModel]:
    """Every model vibechat can load: the starter, its own downloads, then (read-only)
    those of the Hugging Face cache, Ollama and LM Studio."""
    from .store import store_models

    models = [m for m in (starter_model(),) if m is not None] + store_models()
    if discover:
        from .discover import discover_models

        try:
            models += discover_models()
        except Exception:  # noqa: BLE001 - another tool's odd folder must not break ours
            log.warning("could not look for other tools' models", exc_info=True)
    return models


def find_model(name: str, models: list[LocalModel] | None = None) -> LocalModel:
    """The local model ``name`` means: an exact name, a Hub reference with a local copy,
    or a unique part of a name. Raises ``ModelRefError`` (``ModelNotDownloadedError``
    for a Hub reference that is not on this machine yet)."""
    models = all_models() if models is None else models
    key = name.strip().lower()
    for model in models:  # vibechat's own first: the list is in that order
        if model.name.lower() == key:
            return model
    hub = parse_hub_ref(name)
    if hub is not None:
        copies = [m for m in models if m.repo and m.repo.lower() == hub.repo.lower()]
        if hub.file:
            copies = [m for m in copies if m.path.as_posix().lower().endswith("/" + hub.file.lower())]
        if copies:
            if hub.file or not hub.quant:
                return pick_local_default(copies)
            wanted = hub.quant.upper().replace("-", "_")
            for model in copies:
                if model.quant.upper() == wanted or model.name.upper().endswith(":" + wanted):
                    return model
        raise ModelNotDownloadedError(
            f"{name} is not on this machine yet: run 'vibechat models pull {name}'.", hub)
    partial = [m for m in models if key in m.name.lower()]
    names = sorted({m.name for m in partial})
    if len(names) == 1:
        return partial[0]
    if names:
        shown = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
        raise ModelRefError(f"model name {name!r} is ambiguous ({shown}): give more of the name.")
    raise ModelRefError(f"no local model named {name!r}: see 'vibechat models list', pass a .gguf path, "
                        "or download one with 'vibechat models pull owner/repo'.")


def pick_local_default(models: list[LocalModel]) -> LocalModel:
    for quant in DEFAULT_QUANTS:
        for model in models:
            if model.quant.upper() == quant:
                return model
    return models[0]


def resolve_model(ref: str | None) -> Path:
    """The file to load for ``ref`` (what follows ``--model``)."""
    if ref is None or not ref.strip() or ref.strip().lower() == STARTER_NAME:
        return starter_model_path()
    ref = ref.strip()
    path = Path(ref).expanduser()
    if path.exists():
        return path
    if parse_hub_ref(ref) is None and (path.suffix.lower() == ".gguf" or ref.startswith((".", "/", "~", "\\"))):
        return path  # inspect_gguf() explains the missing file
    model = find_model(ref)
    return starter_model_path() if model.source == "starter" else model.path
