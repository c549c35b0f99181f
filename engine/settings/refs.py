"""Model references and GGUF file choice, the way users of llama.cpp and Ollama know them.

A reference is one of:

* ``owner/repo``: a Hugging Face repo; its default quantization is chosen like
  llama.cpp does (Q4_K_M, else Q8_0, else the first model file);
* ``owner/repo:Q5_K_M``: a quantization of that repo (case-insensitive);
* ``owner/repo/path/file.gguf``: one exact file of a repo;
* a path to a local ``.gguf`` file, or the name of a local model.

A repo listing is grouped into quantizations: a split model
(``...-00001-of-00003.gguf``) is one entry, and files that are not chat models
(``mmproj-*`` vision projectors, imatrix data) are left out. Only plain relative
``.gguf`` paths are accepted from a listing: a name with ``..``, an absolute path or
a backslash is dropped, so a hostile listing cannot write outside the models dir. So is
a name that would put something unsafe into a path on disk: a control character (an
escape sequence in a file name reaches every terminal that lists the folder), any other
character that is not printable (bidi overrides, lone surrogates), characters Windows
refuses in a name (``< > : " | ? *``), markup brackets (``[ ]``), or a name longer than
file systems allow (``MAX_NAME_BYTES`` a folder or file, ``MAX_PATH`` in all).

Pure Python: no network, no files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..errors import ModelRefError

DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")
# One file or folder name, in UTF-8 (NAME_MAX on Linux and macOS).
MAX_NAME_BYTES = 255
MAX_PATH = 1024  # characters of a path inside a repo
# Characters of a repo's owner or name (the Hub's own limit).
MAX_REPO_PART = 96
_UNSAFE_CHARS = frozenset('\\<>:"|?*[]')
_SHARD = re.compile(r"^(?P<base>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_REPO_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_REPO = re.compile(rf"^(?P<repo>{_REPO_PART}/{_REPO_PART})(?::(?P<quant>[A-Za-z0-9._-]+))?$")
_REPO_FILE = re.compile(
    rf"^(?P<repo>{_REPO_PART}/{_REPO_PART})/(?P<file>.+\.gguf)$", re.IGNORECASE | re.DOTALL
)
_REPO_ID = re.compile(rf"{_REPO_PART}/{_REPO_PART}")


@dataclass(frozen=True)
class RepoFile:
    """One file of a repo listing."""

    path: str  # relative, with forward slashes
    size: int
    # The LFS sha256, when the Hub gives one.
    sha256: str | None = None


@dataclass(frozen=True)
class QuantOption:
    """A loadable model in a repo: one quantization, one file or all shards of a split one."""

    # "Q4_K_M", or the file name when it names no quantization.
    label: str
    # Shards in order; the first is the one to load.
    files: tuple[RepoFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def first(self) -> RepoFile:
        return self.files[0]


@dataclass(frozen=True)
class HubRef:
    repo: str
    quant: str | None = None  # wanted quantization, as typed
    file: str | None = None  # an exact file of the repo

    def __str__(self) -> str:
        if self.file:
            return f"{self.repo}/{self.file}"
        return f"{self.repo}:{self.quant}" if self.quant else self.repo


def is_safe_repo_path(path: object) -> bool:
    """A plain relative path inside the repo that is safe to create on disk: no ``..``, no
    absolute path, no backslash, only printable characters that file systems and
    terminals take as they are (see the module doc), names of a length disks allow."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH or path.startswith("/"):
        return False
    if not path.isprintable() or any(ch in _UNSAFE_CHARS for ch in path):
        return False
    return all(
        part not in ("..", ".", "")
        and part == part.strip()
        and not part.endswith(".")
        and len(part.encode("utf-8")) <= MAX_NAME_BYTES
        for part in path.split("/")
    )


def is_repo_id(text: object) -> bool:
    """``owner/name`` the way the Hub spells repo ids (letters, digits, ``. _ -``)."""
    return (
        isinstance(text, str)
        and len(text) <= 2 * MAX_REPO_PART + 1
        and _REPO_ID.fullmatch(text) is not None
    )


def refused_files(files: list[RepoFile]) -> list[str]:
    """The model files (``.gguf`` by name) of a listing left out for an unsafe path."""
    return [
        f.path
        for f in files
        if isinstance(f.path, str)
        and f.path.lower().endswith(".gguf")
        and not is_safe_repo_path(f.path)
    ]


def show_name(name: object, limit: int = 120) -> str:
    """A name from outside, quoted for a message: control and other unprintable characters
    escaped (``\\x1b``), at most ``limit`` characters."""
    text = str(name)
    shown = ascii(text[:limit]) if not text[:limit].isprintable() else repr(text[:limit])
    return shown + ("…" if len(text) > limit else "")


def is_model_file(path: str) -> bool:
    """A chat-model GGUF: ends in .gguf, and is neither a vision projector nor imatrix data."""
    name = PurePosixPath(path).name.lower()
    if not name.endswith(".gguf"):
        return False
    # mmproj-*, *-mmproj-*, Model.mmproj-Q8_0.gguf
    return not ("mmproj" in name or "imatrix" in name)


def parse_hub_ref(text: str) -> HubRef | None:
    """``owner/repo``, ``owner/repo:QUANT`` or ``owner/repo/file.gguf``; None for anything else."""
    text = text.strip()
    for prefix in ("hf://", "hf:", "huggingface.co/", "https://huggingface.co/"):
        if text.lower().startswith(prefix):
            text = text[len(prefix) :]
            break
    match = _REPO_FILE.match(text)
    if match:
        file = match.group("file")
        if not is_safe_repo_path(file):
            if any(part in ("..", ".", "") for part in file.split("/")) or file.startswith("/"):
                raise ModelRefError(
                    f"{show_name(text)} names a file outside the repo: use a plain path like "
                    "owner/repo/model-Q4_K_M.gguf."
                )
            raise ModelRefError(
                f"{show_name(text)} names a file vibechat does not save: its name has control "
                'characters, characters unsafe in a file name ([ ] \\ < > : " | ? *) or is too '
                "long; download it by hand and pass its path."
            )
        return HubRef(match.group("repo"), file=file)
    match = _REPO.match(text)
    if match:
        return HubRef(match.group("repo"), quant=match.group("quant"))
    return None


def group_quants(files: list[RepoFile]) -> list[QuantOption]:
    """The repo's loadable models, one entry per quantization (split models whole),
    in listing order; unsafe paths and non-model files are left out."""
    shards: dict[tuple[str, str], dict[int, RepoFile]] = {}
    counts: dict[tuple[str, str], int] = {}
    order: list[tuple[str, object]] = []
    for f in files:
        if not is_safe_repo_path(f.path) or not is_model_file(f.path):
            continue
        parent = str(PurePosixPath(f.path).parent)
        match = _SHARD.match(PurePosixPath(f.path).name)
        if match:
            key = (parent, match.group("base"))
            if key not in shards:
                shards[key] = {}
                counts[key] = int(match.group("count"))
                order.append(("split", key))
            shards[key][int(match.group("index"))] = f
        else:
            order.append(("single", f))
    options: list[QuantOption] = []
    for kind, item in order:
        if kind == "single":
            assert isinstance(item, RepoFile)
            options.append(QuantOption(_label(item.path), (item,)))
        else:
            key = item  # type: ignore[assignment]
            parts = shards[key]  # type: ignore[index]
            if sorted(parts) != list(range(1, counts[key] + 1)):  # type: ignore[index]
                # An incomplete split model cannot load.
                continue
            ordered = tuple(parts[i] for i in sorted(parts))
            options.append(QuantOption(_label(ordered[0].path), ordered))
    return _disambiguate(options)


def _label(path: str) -> str:
    name = PurePosixPath(path).name
    return quant_from_filename(name) or re.sub(r"(?i)(-\d{5}-of-\d{5})?\.gguf$", "", name)


def _disambiguate(options: list[QuantOption]) -> list[QuantOption]:
    """Two entries with one label (the same quant in two folders) are told apart by path."""
    seen: dict[str, int] = {}
    for option in options:
        seen[option.label.upper()] = seen.get(option.label.upper(), 0) + 1
    return [
        o if seen[o.label.upper()] == 1 else QuantOption(o.first.path, o.files) for o in options
    ]


def pick_quant(
    options: list[QuantOption], wanted: str | None, repo: str = "the repo"
) -> QuantOption:
    """The option for ``wanted`` (case-insensitive), or the default: Q4_K_M, else Q8_0,
    else the first. Raises ``ModelRefError`` naming what there is."""
    if not options:
        raise ModelRefError(
            f"{repo} has no GGUF model files: pick a repo with .gguf files "
            "(vibechat models search NAME)."
        )
    if wanted:
        key = wanted.upper().replace("-", "_")
        for option in options:
            if option.label.upper().replace("-", "_") == key:
                return option
        available = ", ".join(o.label for o in options[:40]) + (" …" if len(options) > 40 else "")
        raise ModelRefError(f"{repo} has no {wanted} file: choose one of {available}.")
    for default in DEFAULT_QUANTS:
        for option in options:
            if option.label.upper() == default:
                return option
    return options[0]


def pick_file(options: list[QuantOption], file: str, repo: str = "the repo") -> QuantOption:
    """The option that contains ``file`` (the first shard of a split model also picks it whole)."""
    for option in options:
        if any(f.path == file for f in option.files):
            return option
    raise ModelRefError(
        f"{repo} has no model file {show_name(file)}: run 'vibechat models search {repo}' "
        "to see its files."
    )


_QUANT_IN_NAME = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|MXFP4(?:_MOE)?|TQ\d_\d)(?![A-Za-z0-9])",
    re.IGNORECASE,
)


def quant_from_filename(name: str) -> str | None:
    """The quantization named in a GGUF file name (``...-Q4_K_M.gguf`` -> ``Q4_K_M``)."""
    stem = name[:-5] if name.lower().endswith(".gguf") else name
    matches = _QUANT_IN_NAME.findall(stem)
    return matches[-1].upper() if matches else None
