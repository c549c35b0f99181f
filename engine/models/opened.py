"""GGUF files the user opened by path in the chat (F3's "Open a file", ``/load PATH``, a
path typed into the downloader), remembered so that they are listed next time: in the
model picker and in ``vibechat models list``, as ``file:NAME`` models (source ``file``).

The user's own files, used in place: vibechat never copies, moves or deletes them (a
``file`` model is read-only, as another tool's are). What is remembered is only where
they are, in ``opened-models.json`` in the data dir, written privately (0600: the paths
can say things about the user's folders). An entry whose file is gone is pruned when the
list is next read; the list keeps the ``MAX_ENTRIES`` most recently opened files.

Headless and without side effects at import time; a missing or unreadable list is an
empty one (logged), never an error: remembering is a convenience.

Imports inside functions are deliberate: filelock loads only when the registry is written
(start-up time).
"""

from __future__ import annotations

import json
import logging
import os
import stat
from datetime import datetime, timezone
from pathlib import Path

from ..json_bounds import bounded_loads
from ..paths import data_dir
from ..settings.refs import quant_from_filename
from .gguf import header_quant
from .local_model import LocalModel

log = logging.getLogger("vibechat.opened")

FILE_NAME = "opened-models.json"
# LocalModel.source of a remembered file, and its name: file:<the file name without .gguf>.
SOURCE = "file"
PREFIX = "file:"
# The most recently opened files kept.
MAX_ENTRIES = 64
# A list bigger than this is not ours: ignored.
MAX_BYTES = 1 << 20
MAX_PATH = 4096  # characters in a remembered path at most


def list_path() -> Path:
    return data_dir() / FILE_NAME


def _lock():
    from filelock import FileLock

    root = data_dir()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return FileLock(str(root / f".{FILE_NAME}.lock"), timeout=30)


def _read() -> list[dict[str, str]]:
    """The entries, most recently opened first (bad ones left out)."""
    path = list_path()
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning(
            "%s cannot be read (%s): the files opened earlier are not listed.",
            path,
            exc.strerror or exc,
        )
        return []
    try:
        if len(raw) > MAX_BYTES:
            raise ValueError("too big")
        data = bounded_loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        log.warning(
            "%s is not a list of opened files (%s): it is started again when a file is next "
            "opened.",
            path,
            exc,
        )
        return []
    files = data.get("files") if isinstance(data, dict) else None
    entries = []
    for entry in (files if isinstance(files, list) else [])[:MAX_ENTRIES]:
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("path"), str)
            and 0 < len(entry["path"]) <= MAX_PATH
            and os.path.isabs(entry["path"])
        ):
            entries.append({"path": entry["path"], "opened": str(entry.get("opened") or "")})
    return entries


def _write(entries: list[dict[str, str]]) -> None:
    """Replace the list atomically; the file is readable by the user alone."""
    path = list_path()
    tmp = path.with_name(f"{FILE_NAME}.tmp-{os.getpid()}")
    text = json.dumps({"version": 1, "files": entries[:MAX_ENTRIES]}, indent=2) + "\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def remember(path: Path) -> None:
    """Put ``path`` (a GGUF file that loaded) first in the list (the list keeps the most
    recently opened). Never raises: a list that cannot be written is logged (the model is
    loaded either way)."""
    key = os.path.abspath(os.path.expanduser(path))
    if len(key) > MAX_PATH:
        return
    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    try:
        with _lock():
            entries = _read()
            # first opened: kept when it is opened again (it orders names that clash: stable)
            first = next((e["opened"] for e in entries if e["path"] == key and e["opened"]), now)
            others = [e for e in entries if e["path"] != key and _is_file(e["path"])]
            _write([{"path": key, "opened": first}, *others])
    except Exception as exc:  # noqa: BLE001 - remembering is a convenience; the load has happened
        log.warning("could not remember %s in %s: %s", key, list_path(), exc)


def forget(path: Path) -> bool:
    """Take ``path`` off the list (its file stays); whether it was on it."""
    key = os.path.abspath(os.path.expanduser(path))
    with _lock():
        entries = _read()
        kept = [e for e in entries if e["path"] != key]
        if len(kept) != len(entries):
            _write(kept)
            return True
    return False


def opened_name(path: Path) -> str:
    """``file:<file name without .gguf>``: what ``--model``, ``/load`` and the lists call it."""
    name = Path(path).name
    return PREFIX + (name[:-5] if name.lower().endswith(".gguf") else name)


def opened_models() -> list[LocalModel]:
    """The remembered files that are still there, by name. Entries whose file is gone are
    pruned from the list. Two files with the same name are told apart by ``~2``, ``~3``."""
    try:
        entries = _read()
    except Exception:
        # A listing must never fail over this list.
        log.warning("could not read %s", list_path(), exc_info=True)
        return []
    present = [e for e in entries if _is_file(e["path"])]
    if len(present) != len(entries):
        try:
            with _lock():
                _write([e for e in _read() if _is_file(e["path"])])
        except Exception as exc:  # noqa: BLE001
            log.warning("could not prune %s: %s", list_path(), exc)
    models: list[LocalModel] = []
    seen: dict[str, int] = {}
    # The first opened keeps the plain name.
    for entry in sorted(present, key=lambda e: e["opened"]):
        path = Path(entry["path"])
        name = opened_name(path)
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}~{seen[name]}"
        try:
            size = path.stat().st_size
        except OSError:
            continue
        quant = quant_from_filename(path.name) or header_quant(path)
        models.append(
            LocalModel(
                name=name,
                path=path,
                size=size,
                quant=quant if quant != "unknown" else "?",
                source=SOURCE,
                added=entry["opened"] or None,
            )
        )
    return sorted(models, key=lambda m: m.name.casefold())
