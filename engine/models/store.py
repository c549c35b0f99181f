"""vibechat's own models: downloaded into ``models_dir()``, one folder per repo.

Layout: ``<models_dir>/<owner>/<repo>/<file>.gguf`` (split models keep every shard
side by side, as llama.cpp needs), plus ``registry.json``, which remembers where
each model came from: repo, commit, sha256, date. The files on disk are the
truth: a GGUF dropped into the folder by hand is listed too (without a sha256),
an entry whose file is gone is not, and a ``.part`` file (an unfinished
download) never is. A vision model's projector (``mmproj*.gguf``) is pulled with it into the
repo's folder and recorded in its entry (``mmproj``); it is never listed as a model, only as
the ``projector`` of the models beside it, and goes with the last of them.

Why our own folder rather than the Hugging Face cache: the cache stores blobs
behind symlinks (awkward on Windows, and to find again by hand), other tools
prune it (``hf cache delete``), and its downloads cannot resume across restarts.
Models already in the cache are still found and used, read-only (see
``discover``), so nothing is downloaded twice.

Imports inside functions are deliberate: filelock loads only when the store is written (start-up
time).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from ..errors import ModelStoreError
from ..files import UnreadableFile, read_file
from ..json_bounds import bounded_loads
from ..settings.config import models_dir
from ..settings.refs import (
    HubRef,
    QuantOption,
    RepoFile,
    group_quants,
    is_safe_repo_path,
    quant_from_filename,
)
from .download import Downloader, Progress, ProgressCallback
from .gguf import header_quant
from .hub import Hub, RepoListing
from .local_model import LocalModel
from .projector import is_projector_name, pick_projector
from .starter import PACKAGE as STARTER_PACKAGE

log = logging.getLogger("vibechat.store")

REGISTRY = "registry.json"


def registry_path() -> Path:
    return models_dir() / REGISTRY


def _lock():
    from filelock import FileLock

    root = models_dir()
    root.mkdir(parents=True, exist_ok=True)
    return FileLock(str(root / ".registry.lock"), timeout=30)


# A few hundred bytes per model: this is thousands of times more.
MAX_REGISTRY_BYTES = 64 << 20


def read_registry() -> dict[str, dict]:
    """Entries keyed by the first file's path relative to the models dir."""
    path = registry_path()
    try:
        data = bounded_loads(read_file(path, MAX_REGISTRY_BYTES))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, UnreadableFile) as exc:
        raise ModelStoreError(
            f"{path} cannot be read ({exc}): move it away and vibechat starts a new one "
            "(the model files stay listed)."
        ) from None
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise ModelStoreError(
            f"{path} is not a vibechat model registry: move it away and vibechat starts a new one."
        )
    return {k: v for k, v in models.items() if isinstance(v, dict)}


def _write_registry(models: dict[str, dict]) -> None:
    path = registry_path()
    tmp = path.with_name(REGISTRY + f".tmp-{os.getpid()}")
    tmp.write_text(
        json.dumps({"version": 1, "models": models}, indent=2, sort_keys=True) + "\n",
        encoding="utf-8",
    )
    os.replace(tmp, path)


def _safe_registry() -> dict[str, dict]:
    try:
        return read_registry()
    except ModelStoreError as exc:
        log.warning("%s", exc)
        return {}


def store_models() -> list[LocalModel]:
    """Every complete model in the models dir, by name."""
    root = models_dir()
    if not root.is_dir():
        return []
    registry = _safe_registry()
    folders: dict[str, list[RepoFile]] = {}
    # By folder: the projectors lying there.
    projectors: dict[Path, list[Path]] = {}
    for path in sorted(root.rglob("*.gguf")):
        if not path.is_file():
            continue
        if is_projector_name(path.name):
            projectors.setdefault(path.parent, []).append(path)
            continue
        rel = path.relative_to(root).as_posix()
        parts = rel.split("/")
        folder = "/".join(parts[:2]) if len(parts) > 2 else ""
        inner = "/".join(parts[2:]) if folder else rel
        folders.setdefault(folder, []).append(RepoFile(inner, path.stat().st_size))
    found: list[LocalModel] = []
    for folder, files in folders.items():
        for option in group_quants(files):
            first_rel = f"{folder}/{option.first.path}" if folder else option.first.path
            entry = registry.get(first_rel, {})
            repo = entry.get("repo") or (folder or None)
            quant = (
                quant_from_filename(PurePosixPath(option.first.path).name)
                or entry.get("quant")
                or header_quant(root / first_rel)
            )
            name = f"{repo}:{option.label}" if repo else PurePosixPath(option.first.path).stem
            files_abs = tuple(
                root / (f"{folder}/{f.path}" if folder else f.path) for f in option.files
            )
            found.append(
                LocalModel(
                    name=name,
                    path=files_abs[0],
                    size=option.size,
                    quant=quant,
                    source="vibechat",
                    sha256=entry.get("sha256"),
                    repo=repo,
                    files=files_abs if len(files_abs) > 1 else (),
                    revision=entry.get("revision"),
                    added=entry.get("added"),
                    projector=_projector(
                        root, entry, files_abs[0], projectors.get(files_abs[0].parent, [])
                    ),
                )
            )
    return sorted(found, key=lambda m: m.name.lower())


def _projector(root: Path, entry: dict, model: Path, beside: list[Path]) -> Path | None:
    """A model's projector: the one recorded when it was pulled, if it is still there, else the
    best match among those beside it (by name: reading no file)."""
    recorded = entry.get("mmproj")
    if isinstance(recorded, str) and is_safe_repo_path(recorded) and is_projector_name(recorded):
        path = root / recorded
        if path.is_file():
            return path
    chosen = pick_projector(model.name, [str(p) for p in beside])
    return Path(chosen) if chosen is not None else None


def recorded_projector(model_path: Path) -> Path | None:
    """The projector pulled with the model at ``model_path`` (one of vibechat's own: its
    registry says), when it is still there; None for any other model."""
    root = models_dir()
    try:
        rel = Path(model_path).resolve().relative_to(root.resolve()).as_posix()
    except (OSError, ValueError):
        return None
    recorded = _safe_registry().get(rel, {}).get("mmproj")
    if (
        not isinstance(recorded, str)
        or not is_safe_repo_path(recorded)
        or not is_projector_name(recorded)
    ):
        return None
    path = root / recorded
    return path if path.is_file() else None


def model_folder(repo: str) -> Path:
    return models_dir().joinpath(*repo.split("/"))


def register(
    repo: str, revision: str, option: QuantOption, projector: RepoFile | None = None
) -> LocalModel:
    """Record a completely downloaded (and verified) model, and the projector downloaded with
    it (``projector``: a vision model's mmproj file); returns it as listed."""
    first_rel = f"{repo}/{option.first.path}"
    with _lock():
        models = _safe_registry()
        models[first_rel] = {
            "repo": repo,
            "revision": revision,
            "quant": option.label,
            "sha256": option.first.sha256,
            "files": [f"{repo}/{f.path}" for f in option.files],
            "sha256s": [f.sha256 for f in option.files],
            "added": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        }
        if projector is not None:
            models[first_rel].update(
                {"mmproj": f"{repo}/{projector.path}", "mmproj_sha256": projector.sha256}
            )
        _write_registry(models)
    for model in store_models():
        if model.path == models_dir() / first_rel:
            return model
    raise ModelStoreError(
        f"{first_rel} was downloaded but is not in {models_dir()}: download it again."
    )


def check_removable(model: LocalModel) -> None:
    """Raise ``ModelStoreError`` saying why, for a model vibechat must not delete."""
    if model.source == "starter":
        copy = (
            f" Its unpacked copy, {model.path}, may be deleted; it is unpacked again when next "
            "used."
            if model.path.exists()
            else ""
        )
        raise ModelStoreError(
            f"{model.name} is the model bundled with vibechat (the {STARTER_PACKAGE} package), "
            f"used when no other is chosen: it cannot be removed.{copy}"
        )
    if model.read_only:
        raise ModelStoreError(
            f"{model.name} is not vibechat's to delete ({_owner(model.source)}): "
            f"{_remove_with(model)}."
        )


def remove(model: LocalModel) -> None:
    """Delete one of vibechat's models (its files, unfinished parts, registry entry)."""
    check_removable(model)
    root = models_dir()
    with _lock():
        models = _safe_registry()
        for path in model.all_files:
            for victim in (path, *_parts(path)):
                try:
                    victim.unlink(missing_ok=True)
                except OSError as exc:
                    raise ModelStoreError(
                        f"could not delete {victim} ({exc.strerror or exc}): check its permissions."
                    ) from None
            models.pop(path.relative_to(root).as_posix(), None)
        _write_registry(models)
        _remove_unused_projector(model)
    folder = model.path.parent
    while folder != root and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def _remove_unused_projector(model: LocalModel) -> None:
    """Delete the projector of a model just removed, unless another of vibechat's models (another
    quantization of the repo) uses it still. Called with the registry locked."""
    projector = model.projector
    if projector is None or not projector.is_relative_to(models_dir()):
        return
    if any(other.projector == projector for other in store_models()):
        return
    for victim in (projector, *_parts(projector)):
        try:
            victim.unlink(missing_ok=True)
        except OSError as exc:
            raise ModelStoreError(
                f"could not delete {victim} ({exc.strerror or exc}): check its permissions."
            ) from None


def _parts(path: Path) -> tuple[Path, Path]:
    return path.with_name(path.name + ".part"), path.with_name(path.name + ".part.json")


def _owner(source: str) -> str:
    return {
        "hf-cache": "it lives in the Hugging Face cache",
        "ollama": "it belongs to Ollama",
        "lmstudio": "it belongs to LM Studio",
        "file": "it is your own file, opened by its path",
    }.get(source, source)


def _remove_with(model: LocalModel) -> str:
    """How to remove a model another tool owns, with that tool."""
    if model.source == "hf-cache":
        return (
            f"remove it with 'hf cache rm model/{model.repo}'"
            if model.repo
            else "remove it with 'hf cache rm'"
        )
    if model.source == "ollama":
        return f"remove it with 'ollama rm {model.name.removeprefix('ollama:')}'"
    if model.source == "lmstudio":
        return f"remove it in LM Studio (My Models), or delete {model.path} yourself"
    return f"delete {model.path} yourself"


def pull(
    ref: HubRef,
    *,
    hub: Hub | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    on_listing: Callable[[RepoListing, QuantOption], None] | None = None,
    cancel: threading.Event | None = None,
    revision: str | None = None,
) -> LocalModel:
    """Download what ``ref`` names into the models dir (resuming a previous attempt) and
    register it. ``on_listing`` hears which files were chosen before the download starts."""
    hub = hub or Hub()
    listing = hub.listing(ref.repo, revision)
    option = listing.choose(ref)
    if on_listing is not None:
        on_listing(listing, option)
    return fetch(listing, option, hub=hub, on_progress=on_progress, cancel=cancel)


def fetch(
    listing: RepoListing,
    option: QuantOption,
    *,
    hub: Hub | None = None,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> LocalModel:
    """Download ``option``'s files from ``listing``'s repo, and its projector when the repo holds
    one (``RepoListing.projector_for``: a vision model is pulled with it, as ``llama-cli -hf``
    does), in one download (one progress, one free-space check), then register the model."""
    projector = listing.projector_for(option)
    files = option.files + (
        (projector,) if projector is not None and projector not in option.files else ()
    )
    Downloader(hub or Hub(), cancel=cancel, on_progress=on_progress).download(
        listing.repo, listing.revision, QuantOption(option.label, files), model_folder(listing.repo)
    )
    return register(listing.repo, listing.revision, option, projector)
