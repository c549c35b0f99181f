"""Local models (everything vibechat can load on this machine) and what the user
typed after ``--model`` turned into a GGUF file path.

Accepted: nothing / ``starter`` (the bundled starter model), a path to a .gguf
file, the name of a local model (``vibechat models list``), or a Hugging Face
reference (``owner/repo``, ``owner/repo:QUANT``, ``owner/repo/file.gguf``) that has
a local copy; one without raises ``ModelNotDownloadedError`` so the caller can
offer to download it.

The sources are ``store`` (vibechat's own downloads), ``discover`` (other tools'
folders) and ``opened`` (files the user opened by path in the chat); the ``LocalModel``
record they share lives below them, in ``local_model``.

Imports inside functions are deliberate: the config, the model store and discovery load only
when a model is resolved (start-up time).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from ..errors import ModelFileError, ModelNotDownloadedError, ModelRefError
from ..settings.refs import DEFAULT_QUANTS, parse_hub_ref
from .gguf import GGUFInfo, inspect_gguf
from .local_model import LocalModel
from .projector import PROJECTOR_ARCHITECTURE
from .starter import STARTER_NAME, starter_installed_path, starter_model_path, starter_sha256

log = logging.getLogger("vibechat.models")
# Bytes, shown before the starter model is first unpacked.
STARTER_SIZE = 253_000_000


def starter_model() -> LocalModel | None:
    """The bundled starter model, listed whether or not it has been unpacked yet."""
    path = starter_installed_path()
    if path is None:
        return None
    size = path.stat().st_size if path.exists() else STARTER_SIZE
    return LocalModel(
        name=STARTER_NAME,
        path=path,
        size=size,
        quant="Q4_K_M",
        source="starter",
        sha256=starter_sha256(),
        repo=None,
    )


def all_models(*, discover: bool = True) -> list[LocalModel]:
    """Every model vibechat can load: the starter, its own downloads, then (read-only)
    those of the Hugging Face cache, Ollama and LM Studio, and the files opened by path."""
    from .store import store_models

    models = [m for m in (starter_model(),) if m is not None] + store_models()
    if discover:
        from .discover import discover_models

        try:
            models += discover_models()
        except Exception:
            # Another tool's odd folder must not break ours.
            log.warning("could not look for other tools' models", exc_info=True)
    return models + _opened_elsewhere(models)


def _opened_elsewhere(models: list[LocalModel]) -> list[LocalModel]:
    """The files the user opened by path (``opened``), but for those listed already under
    another name (a file of vibechat's own folder, of the HF cache...)."""
    from .opened import opened_models

    known = {os.path.realpath(m.path) for m in models}
    return [m for m in opened_models() if os.path.realpath(m.path) not in known]


def find_model(name: str, models: list[LocalModel] | None = None) -> LocalModel:
    """The local model ``name`` means: an exact name, a Hub reference with a local copy,
    or a unique part of a name. Raises ``ModelRefError`` (``ModelNotDownloadedError``
    for a Hub reference that is not on this machine yet)."""
    models = all_models() if models is None else models
    key = name.strip().lower()
    # vibechat's own first: the list is in that order.
    for model in models:
        if model.name.lower() == key:
            return model
    hub = parse_hub_ref(name)
    if hub is not None:
        copies = [m for m in models if m.repo and m.repo.lower() == hub.repo.lower()]
        if hub.file:
            copies = [
                m for m in copies if m.path.as_posix().lower().endswith("/" + hub.file.lower())
            ]
        if copies:
            if hub.file or not hub.quant:
                return pick_local_default(copies)
            wanted = hub.quant.upper().replace("-", "_")
            for model in copies:
                if model.quant.upper() == wanted or model.name.upper().endswith(":" + wanted):
                    return model
        raise ModelNotDownloadedError(
            f"{name} is not on this machine yet: run 'vibechat models pull {name}'.", hub
        )
    partial = [m for m in models if key in m.name.lower()]
    names = sorted({m.name for m in partial})
    if len(names) == 1:
        return partial[0]
    if names:
        shown = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
        raise ModelRefError(f"model name {name!r} is ambiguous ({shown}): give more of the name.")
    raise ModelRefError(
        f"no local model named {name!r}: see 'vibechat models list', pass a .gguf path, "
        "or download one with 'vibechat models pull owner/repo'."
    )


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
    path = path_ref(ref)
    if path is not None:
        # inspect_gguf() explains a missing file.
        return path
    model = find_model(ref)
    return starter_model_path() if model.source == "starter" else model.path


def path_ref(ref: str) -> Path | None:
    """The path ``ref`` names when it is one rather than a model name or a Hub reference:
    something that exists there, or that looks like a path (``./``, ``/``, ``~``, a name
    ending in ``.gguf`` that is no ``owner/repo/file.gguf``). None: a name or a reference."""
    ref = ref.strip()
    if not ref:
        return None
    path = Path(ref).expanduser()
    try:
        if path.exists():
            return path
    except OSError:
        # A name too long to be a path, say.
        return None
    if parse_hub_ref(ref) is None and (
        path.suffix.lower() == ".gguf" or ref.startswith((".", "/", "~", "\\"))
    ):
        return path
    return None


def known_projector(model_path: Path) -> Path | None:
    """The projector recorded with the model at ``model_path``: the one vibechat pulled with it
    (its registry), or the projector layer of the Ollama manifest whose model blob it is (an
    Ollama blob has no name to find a projector beside it by). None for any other file."""
    from ..settings.config import models_dir

    real = os.path.realpath(model_path)
    # Only a file of vibechat's own folder or an Ollama blob is looked up, so that opening any other
    # model imports neither the store (the Hub client with it) nor the other tools' finders.
    if Path(real).is_relative_to(os.path.realpath(models_dir())):
        from .store import recorded_projector

        return recorded_projector(Path(real))
    if os.path.basename(os.path.dirname(real)) != "blobs" or not os.path.basename(real).startswith(
        "sha256"
    ):
        return None
    from .discover import ollama_dirs, ollama_models

    for root in ollama_dirs():
        if os.path.dirname(real) != os.path.realpath(root / "blobs"):
            continue
        for model in ollama_models(root):
            if os.path.realpath(model.path) == real and model.projector is not None:
                return model.projector
    return None


def check_model_path(path: Path) -> Path:
    """``path``, expanded, if something that may be a model is there (a file or a folder,
    whose header ``check_model_file`` reads); else one line (``ModelFileError``) for a missing
    path, one that cannot be read, or a FIFO or device (never opened: a FIFO would block the
    reader forever). A stat, no read: the chat calls it before its screen opens."""
    path = Path(path).expanduser()
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ModelFileError(
            f"{path} does not exist: check the path, or see 'vibechat models list'."
        ) from None
    except OSError as exc:
        raise ModelFileError(
            f"{path} cannot be read ({exc.strerror or exc}): check its permissions."
        ) from None
    if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device or socket"
        raise ModelFileError(f"{path} is {kind}, not a model file: pass a .gguf file.")
    return path


def check_model_file(path: Path) -> GGUFInfo:
    """``path``'s GGUF header, checked: raises ``ModelFileError`` with one line for a
    missing file, a folder, something that is not a plain file (a FIFO would block the
    reader forever: it is never opened), or a file that is not a usable GGUF."""

    path = check_model_path(path)
    # A folder, an empty file, an impostor, a corrupt header: each gets its own line.
    header = inspect_gguf(path)
    if header.architecture == PROJECTOR_ARCHITECTURE:
        raise ModelFileError(
            f"{path} is a vision projector (mmproj), not a chat model: open the model it belongs "
            "to; its projector is found beside it (or give it with --mmproj)."
        )
    return header


def file_model(path: Path) -> LocalModel:
    """A GGUF file given by its path, checked (``check_model_file``), as a ``LocalModel``:
    the one already listed for that file (by any name), else a ``file:NAME`` one."""
    from .opened import SOURCE, opened_name

    path = Path(os.path.abspath(Path(path).expanduser()))
    header = check_model_file(path)
    real = os.path.realpath(path)
    for model in all_models():
        if os.path.realpath(model.path) == real:
            return model
    quant = header.quantization if header.quantization != "unknown" else "?"
    return LocalModel(
        name=opened_name(path), path=path, size=header.file_size, quant=quant, source=SOURCE
    )


def local_model(ref: str) -> LocalModel:
    """What ``/load`` names: a .gguf path (``file_model``) or a local model's name, a Hub
    reference with a local copy (``find_model``). Raises ``VibechatError`` with one line."""
    path = path_ref(ref)
    return file_model(path) if path is not None else find_model(ref)
