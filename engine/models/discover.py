"""Find GGUF models that other tools already put on this machine.

Three places are searched, read-only (nothing is copied, moved, written or hashed):

* the Hugging Face cache (``models--owner--name/snapshots/{commit}/...``, files are
  symlinks into ``../../blobs/{etag}``), also used by current llama.cpp;
* Ollama's models dir (``manifests/{host}/{namespace}/{model}/{tag}`` JSON manifests
  pointing at ``blobs/sha256-<hex>``, which are plain GGUF files);
* LM Studio's models dir (``{publisher}/{repo}/**/*.gguf``).

Every root is read from the environment at call time. A missing, unreadable or odd
folder or file is skipped (logged at debug level on ``vibechat.discover``), never
raised. Headers are read (``inspect_gguf`` maps only what it parses) only when a file
name names no quantization, and for Ollama blobs, which have no meaningful name.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from ..errors import ModelFileError
from ..files import UnreadableFile, read_file
from ..json_bounds import bounded_loads
from ..settings.refs import QuantOption, RepoFile, group_quants, quant_from_filename
from .gguf import GGUFInfo, inspect_gguf
from .local_model import SOURCES, LocalModel
from .projector import pick_projector

log = logging.getLogger("vibechat.discover")

# The Linux service install of Ollama keeps its models here (owned by the ollama user).
OLLAMA_SYSTEM_MODELS = Path("/usr/share/ollama/.ollama/models")
OLLAMA_REGISTRY = "registry.ollama.ai"
OLLAMA_MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
# The layer holding a vision model's mmproj GGUF.
OLLAMA_PROJECTOR_MEDIA_TYPE = "application/vnd.ollama.image.projector"

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
_MAX_DEPTH = 8  # folders below a repo / snapshot folder
_MAX_MANIFEST_BYTES = 1 << 20
_HEADER_CACHE: dict[tuple[str, int, int, int], GGUFInfo | None] = {}
_HEADER_CACHE_MAX = 512


# --- roots -------------------------------------------------------------------------------


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    if not value:
        return None
    return Path(os.path.expandvars(os.path.expanduser(value)))


def hf_hub_cache_dir() -> Path:
    """The hub cache dir, with huggingface_hub's precedence (``constants.py``):
    ``HF_HUB_CACHE``, the legacy ``HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``,
    ``$XDG_CACHE_HOME/huggingface/hub``, ``~/.cache/huggingface/hub``."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        path = _env_path(name)
        if path is not None:
            return path
    home = _env_path("HF_HOME")
    if home is None:
        xdg = _env_path("XDG_CACHE_HOME") or Path.home() / ".cache"
        home = xdg / "huggingface"
    return home / "hub"


def ollama_dirs() -> list[Path]:
    """``OLLAMA_MODELS`` (else ``~/.ollama/models``), then the Linux service install's
    folder when it exists and is readable."""
    dirs = [_env_path("OLLAMA_MODELS") or Path.home() / ".ollama" / "models"]
    system = OLLAMA_SYSTEM_MODELS
    try:
        if system.is_dir() and os.access(system, os.R_OK | os.X_OK):
            dirs.append(system)
    except OSError:
        pass
    return _unique_dirs(dirs)


def lmstudio_dirs() -> list[Path]:
    """LM Studio's models dir, and the one older versions used."""
    home = Path.home()
    return _unique_dirs([home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"])


def _unique_dirs(dirs: list[Path]) -> list[Path]:
    seen: set[str] = set()
    out = []
    for d in dirs:
        key = os.path.realpath(d)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


# --- all sources ---------------------------------------------------------------------------


def discover_models() -> list[LocalModel]:
    """Every model found in the HF cache, Ollama and LM Studio, sorted by source, then name."""
    found: list[LocalModel] = []
    sources = [
        (hf_cache_models, [hf_hub_cache_dir()]),
        (ollama_models, ollama_dirs()),
        (lmstudio_models, lmstudio_dirs()),
    ]
    for finder, roots in sources:
        names: set[str] = set()
        for root in roots:
            try:
                models = finder(root)
            except Exception:
                # A listing at start-up must never fail.
                log.debug("discover: %s failed on %s", finder.__name__, root, exc_info=True)
                continue
            # The first root wins a name both have.
            for model in models:
                if model.name not in names:
                    names.add(model.name)
                    found.append(model)
    return _sorted(found)


def _sorted(models: list[LocalModel]) -> list[LocalModel]:
    order = {source: i for i, source in enumerate(SOURCES)}
    return sorted(
        models, key=lambda m: (order.get(m.source, len(order)), m.name.casefold(), m.name)
    )


# --- Hugging Face cache --------------------------------------------------------------------


def hf_cache_models(root: Path) -> list[LocalModel]:
    """The GGUF models of every model repo in the hub cache ``root``, from the snapshot
    ``refs/main`` points at (else the newest one)."""
    root = Path(root)
    models: list[LocalModel] = []
    for entry in _scandir(root):
        if not entry.name.startswith("models--") or not _is_dir(entry):
            continue
        repo = entry.name.split("--", 1)[1].replace("--", "/")
        if not repo or repo.startswith("/") or repo.endswith("/"):
            log.debug("discover: odd cache folder %s", entry.path)
            continue
        try:
            models.extend(_hf_repo_models(Path(entry.path), repo))
        except (OSError, ValueError) as exc:
            log.debug("discover: skipping %s: %s", entry.path, exc)
    return _sorted(models)


def _hf_snapshot(repo_dir: Path) -> Path | None:
    snapshots = repo_dir / "snapshots"
    try:
        commit = (
            read_file(repo_dir / "refs" / "main", 4096).decode("utf-8", errors="replace").strip()
        )
    except (OSError, UnreadableFile):
        commit = ""
    if commit and "/" not in commit and "\\" not in commit and commit not in (".", ".."):
        candidate = snapshots / commit
        if candidate.is_dir():
            return candidate
        log.debug("discover: %s: refs/main names a missing snapshot %s", repo_dir, commit)
    newest: tuple[float, str] | None = None
    for entry in _scandir(snapshots):
        if entry.name.startswith(".") or not _is_dir(entry):
            continue
        try:
            key = (entry.stat().st_mtime, entry.name)
        except OSError:
            continue
        if newest is None or key > newest:
            newest = key
    return snapshots / newest[1] if newest else None


def _hf_repo_models(repo_dir: Path, repo: str) -> list[LocalModel]:
    snapshot = _hf_snapshot(repo_dir)
    if snapshot is None:
        return []
    listing: list[RepoFile] = []
    for rel, path, st in _walk_ggufs(snapshot):
        sha256 = None
        if os.path.islink(path):
            try:
                target = os.path.basename(os.readlink(path))
            except OSError as exc:
                log.debug("discover: skipping %s: %s", path, exc)
                continue
            if target.endswith(".incomplete") or os.path.realpath(path).endswith(".incomplete"):
                log.debug("discover: %s is an incomplete download", path)
                continue
            # The repo's blob is named by its etag: the LFS sha256 for model files. (It may
            # itself link on into a shared store named by another hash: not followed here.)
            sha256 = target if _HEX64.match(target) else None
        listing.append(RepoFile(rel, st.st_size, sha256))
    return [
        _local_model(
            f"{repo}:{option.label}",
            snapshot,
            option,
            "hf-cache",
            repo=repo,
            revision=snapshot.name,
            projector=_projector(snapshot, listing, option),
        )
        for option in group_quants(listing)
    ]


# --- Ollama ----------------------------------------------------------------------------------


def ollama_models(root: Path) -> list[LocalModel]:
    """One entry per manifest (tag) in Ollama's models dir ``root`` whose model layer is
    a GGUF blob that is there."""
    root = Path(root)
    models: list[LocalModel] = []
    for host in _subdirs(root / "manifests"):
        for namespace in _subdirs(host):
            for model in _subdirs(namespace):
                for tag in _scandir(model):
                    if tag.name.startswith("."):
                        continue
                    try:
                        found = _ollama_model(root, host.name, namespace.name, model.name, tag)
                    except (OSError, ValueError) as exc:
                        log.debug("discover: skipping manifest %s: %s", tag.path, exc)
                        continue
                    if found is not None:
                        models.append(found)
    return _sorted(models)


def _ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    if host == OLLAMA_REGISTRY:
        if namespace == "library":
            return f"ollama:{model}:{tag}"
        return f"ollama:{namespace}/{model}:{tag}"
    return f"ollama:{host}/{namespace}/{model}:{tag}"


def _ollama_model(
    root: Path, host: str, namespace: str, model: str, tag: os.DirEntry
) -> LocalModel | None:
    st = tag.stat()
    if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_MANIFEST_BYTES:
        log.debug("discover: %s is not a manifest", tag.path)
        return None
    manifest = bounded_loads(Path(tag.path).read_bytes())
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    blob = _ollama_blob(root, layers, OLLAMA_MODEL_MEDIA_TYPE)
    if blob is None:
        log.debug("discover: %s has no model layer", tag.path)
        return None
    hexdigest = blob.name[len("sha256-") :]
    info = _header(blob)
    if info is None:
        # Missing or not a GGUF file: _header logged why.
        return None
    quant = info.quantization if info.quantization != "unknown" else "?"
    repo = f"{namespace}/{model}" if host in ("hf.co", "huggingface.co") else None
    projector = _ollama_blob(root, layers, OLLAMA_PROJECTOR_MEDIA_TYPE)
    return LocalModel(
        name=_ollama_name(host, namespace, model, tag.name),
        path=blob,
        size=info.file_size,
        quant=quant,
        source="ollama",
        sha256=hexdigest,
        repo=repo,
        files=(blob,),
        projector=projector if projector and projector.exists() else None,
    )


def _ollama_blob(root: Path, layers: object, media_type: str) -> Path | None:
    """The blob of a manifest's first layer of ``media_type`` (it may not exist); None when the
    manifest has no such layer with a well-formed digest."""
    layer = next(
        (
            x
            for x in (layers if isinstance(layers, list) else [])
            if isinstance(x, dict) and x.get("mediaType") == media_type
        ),
        None,
    )
    digest = layer.get("digest") if layer else None
    match = _DIGEST.match(digest) if isinstance(digest, str) else None
    if match is None:
        return None
    hexdigest = match.group(1)
    blob = root / "blobs" / f"sha256-{hexdigest}"
    if not blob.exists():
        # The name blobs had before Ollama 0.1.x renamed them.
        legacy = root / "blobs" / f"sha256:{hexdigest}"
        blob = legacy if legacy.exists() else blob
    return blob


# --- LM Studio -------------------------------------------------------------------------------


def lmstudio_models(root: Path) -> list[LocalModel]:
    """The GGUF models in LM Studio's models dir ``root`` (``publisher/repo/**.gguf``),
    grouped into quantizations per repo folder."""
    root = Path(root)
    models: list[LocalModel] = []
    for publisher in _subdirs(root):
        for repo_dir in _subdirs(publisher):
            repo = f"{publisher.name}/{repo_dir.name}"
            try:
                listing = [RepoFile(rel, st.st_size) for rel, _, st in _walk_ggufs(repo_dir)]
                models.extend(
                    _local_model(
                        f"lmstudio:{repo}:{option.label}",
                        repo_dir,
                        option,
                        "lmstudio",
                        repo=repo,
                        projector=_projector(repo_dir, listing, option),
                    )
                    for option in group_quants(listing)
                )
            except (OSError, ValueError) as exc:
                log.debug("discover: skipping %s: %s", repo_dir, exc)
    return _sorted(models)


# --- helpers ---------------------------------------------------------------------------------


def _local_model(
    name: str,
    base: Path,
    option: QuantOption,
    source: str,
    *,
    repo: str | None = None,
    revision: str | None = None,
    projector: Path | None = None,
) -> LocalModel:
    files = tuple(base.joinpath(*PurePosixPath(f.path).parts) for f in option.files)
    return LocalModel(
        name=name,
        path=files[0],
        size=option.size,
        quant=_quant(files[0], option.first.path),
        source=source,
        sha256=option.first.sha256,
        repo=repo,
        files=files,
        revision=revision,
        projector=projector,
    )


def _projector(base: Path, listing: list[RepoFile], option: QuantOption) -> Path | None:
    """The projector lying in the same folder as ``option``'s model (by name: no file read),
    as ``--mmproj auto`` looks for it."""
    folder = PurePosixPath(option.first.path).parent
    beside = [f.path for f in listing if PurePosixPath(f.path).parent == folder]
    chosen = pick_projector(option.first.path, beside)
    return base.joinpath(*PurePosixPath(chosen).parts) if chosen is not None else None


def _quant(path: Path, rel: str) -> str:
    """From the file name, else from the GGUF header, else "?"."""
    quant = quant_from_filename(PurePosixPath(rel).name)
    if quant:
        return quant
    info = _header(path)
    if info is not None and info.quantization != "unknown":
        return info.quantization
    return "?"


def _header(path: Path) -> GGUFInfo | None:
    """``inspect_gguf(path)``, remembered per (file, size, mtime); None when it is missing
    or not a GGUF file."""
    try:
        st = os.stat(path)
    except OSError as exc:
        log.debug("discover: %s: %s", path, exc)
        return None
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key in _HEADER_CACHE:
        return _HEADER_CACHE[key]
    try:
        info: GGUFInfo | None = inspect_gguf(path)
    except ModelFileError as exc:
        log.debug("discover: %s", exc)
        info = None
    if len(_HEADER_CACHE) >= _HEADER_CACHE_MAX:
        _HEADER_CACHE.clear()
    _HEADER_CACHE[key] = info
    return info


def _scandir(path: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError as exc:
        if not isinstance(exc, FileNotFoundError):
            log.debug("discover: cannot list %s: %s", path, exc)
        return []


def _is_dir(entry: os.DirEntry) -> bool:
    """Whether ``entry`` is a folder, a symlink to one included; False when it cannot be told."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _subdirs(path: Path) -> Iterator[Path]:
    for entry in _scandir(path):
        if not entry.name.startswith(".") and _is_dir(entry):
            yield Path(entry.path)


def _walk_ggufs(top: Path) -> Iterator[tuple[str, Path, os.stat_result]]:
    """``(relative path with /, path, stat of the target)`` for every regular ``*.gguf``
    file under ``top``, in name order. Symlinked folders are followed, but each real folder
    is entered once (no loops) and at most ``_MAX_DEPTH`` deep; dangling links are skipped."""
    visited: set[tuple[int, int]] = set()

    def walk(folder: Path, prefix: tuple[str, ...]) -> Iterator[tuple[str, Path, os.stat_result]]:
        try:
            st = os.stat(folder)
        except OSError as exc:
            log.debug("discover: %s: %s", folder, exc)
            return
        if (st.st_dev, st.st_ino) in visited:
            log.debug("discover: %s was already visited (symlink loop?)", folder)
            return
        visited.add((st.st_dev, st.st_ino))
        for entry in _scandir(folder):
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            if _is_dir(entry):
                if len(prefix) < _MAX_DEPTH:
                    yield from walk(path, (*prefix, entry.name))
                continue
            if not entry.name.lower().endswith(".gguf"):
                continue
            try:
                # Follows the symlink to the blob; a dangling symlink is skipped.
                fst = entry.stat()
            except OSError as exc:
                log.debug("discover: skipping %s: %s", path, exc)
                continue
            if stat.S_ISREG(fst.st_mode):
                yield "/".join((*prefix, entry.name)), path, fst

    yield from walk(top, ())
