"""KV snapshots: the KV state of sequence 0 kept after a reply, so that reopening a conversation
(``vibechat run --continue``, the chat's Ctrl+B, a restart, another branch) restores it instead
of evaluating the whole conversation again (issue 27).

A snapshot is the token list the KV cache held and the bytes of ``llama_state_seq_get_data``
for them. ``SnapshotStore`` keeps the recent ones in this process's memory (``MEMORY_BYTES``)
and writes each to ``cache_dir()/kv-snapshots/`` from a background thread, bounded by the
``kv_snapshot_cache_mib`` setting, least recently used first out. Given a prompt's tokens,
``best()`` finds the snapshot with the longest common token prefix (memory first, then disk);
the backend restores it and evaluates only the rest (engine/llama/kv_cache.py).

A snapshot is only valid for the same ``SnapshotKey`` (the model file, the context, the KV
cache's types and layout, the llama.cpp build): files made under another key are never
restored. Every file is checked before its bytes reach llama.cpp (magic, format, key, sizes,
checksums); whatever is wrong with one (gone, stale, corrupt, truncated, a FIFO, unreadable)
costs one log line and the prompt is evaluated as before. A file is written to a temp name
and renamed, so a half file never stands under a real name; files are 0600 in a 0700 folder.

The files themselves (their layout, their checks) are kv_files.py's.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .kv_files import (
    FORMAT_VERSION,
    MAX_HEADER_BYTES,
    SUFFIX,
    DiskEntry,
    Snapshot,
    SnapshotError,
    ensure_folder,
    file_name,
    prune,
    read_header,
    read_payload,
    snapshot_folder,
    token_bytes,
    write_file,
)

log = logging.getLogger("vibechat.kv_snapshots")

# Below this many tokens a snapshot is not worth its write: evaluating them takes well under a
# second. Tests lower it.
MIN_TOKENS = 256
# A restore pays when the snapshot shares this many more tokens than the live cache already does.
RESTORE_MARGIN = 16
# The recent snapshots kept in this process.
MEMORY_BYTES = 256 << 20
# The disk index: at most this many files looked at, this much read of their headers and
# tokens in one scan.
MAX_FILES = 256
MAX_INDEX_BYTES = 64 << 20
# A temp file this old was left by a process that ended mid-write.
TEMP_STALE_S = 600.0
# Snapshots waiting for the disk at most; an older waiting one is dropped.
WRITE_QUEUE = 4


@dataclasses.dataclass(frozen=True)
class SnapshotKey:
    """What makes a snapshot valid for a loaded model: a state saved under another key is
    never restored (another model file, or the same path rewritten; another context size,
    cache type or layout; another llama.cpp build, whose state format may differ)."""

    model_path: str
    model_size: int
    model_mtime_ns: int
    n_ctx: int
    type_k: str
    type_v: str
    # As used: it decides whether V is stored transposed.
    flash_attn: bool | None
    swa_full: bool
    n_seq_max: int
    kv_unified: bool
    offload_kqv: bool
    n_gpu_layers: int
    llama_cpp_version: str
    format: int = FORMAT_VERSION

    @classmethod
    def for_model(cls, model_path: Path, **fields: Any) -> SnapshotKey:
        resolved = model_path.resolve()
        st = resolved.stat()
        return cls(
            model_path=str(resolved), model_size=st.st_size, model_mtime_ns=st.st_mtime_ns, **fields
        )

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def digest(self) -> str:
        text = json.dumps(self.as_dict(), sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]

    def differences(self, other: dict[str, Any]) -> str:
        """What differs from ``other`` (a file's key), in words: "n_ctx 2048 (now 4096)"."""
        mine = self.as_dict()
        diff = [
            f"{name} {other.get(name)!r} (now {value!r})"
            for name, value in mine.items()
            if other.get(name) != value
        ]
        return ", ".join(diff[:3]) or "another key"


def common_prefix(a: bytes, b: bytes) -> int:
    """The common prefix of two token lists as int32 bytes, in tokens (a binary search over
    ``bytes`` comparisons: memcmp, not a Python loop over thousands of tokens)."""
    lo, hi = 0, min(len(a), len(b)) // 4
    if a[: 4 * hi] == b[: 4 * hi]:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[: 4 * mid] == b[: 4 * mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclasses.dataclass
class Match:
    """The best snapshot for a prompt: ``common`` tokens of it shared with the prompt. Its
    ``source`` is "memory" (``snapshot`` set) or "disk" (``entry`` set)."""

    common: int
    source: str
    snapshot: Snapshot | None = None
    entry: DiskEntry | None = None


class SnapshotStore:
    """The snapshots of one loaded model (``key``): the recent ones in memory, all on disk
    up to ``disk_bytes`` (0: no snapshots at all). ``best``/``load`` run on the engine's
    thread; ``keep`` hands the disk write to a background thread; ``close`` waits for it."""

    def __init__(
        self,
        key: SnapshotKey,
        disk_bytes: int,
        folder: Callable[[], Path] = snapshot_folder,
        memory_bytes: int | None = None,
        restorable: Callable[[int, int], bool] | None = None,
    ) -> None:
        self.key = key
        # Whether a snapshot of n tokens can be restored and continued after its first k
        # (None: always). A sliding-window model's state keeps only the window's cells of those
        # layers (llama.cpp writes no more), so a long one continues only from its end; a
        # recurrent state cannot be cut at all (engine/llama/kv_state.py).
        self.restorable = restorable
        self.digest = key.digest
        self.disk_bytes = max(0, disk_bytes)
        self.memory_bytes = MEMORY_BYTES if memory_bytes is None else memory_bytes
        self._folder = folder
        # The snapshots kept in memory, oldest first.
        self._memory: collections.OrderedDict[bytes, Snapshot] = collections.OrderedDict()
        # A file's name -> its (inode, size) when its header was read, and its entry (None: a bad
        # file).
        self._index: dict[str, tuple[tuple[int, int], DiskEntry | None]] = {}
        # The index, between the engine's thread and the writer.
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        self._queue: queue.Queue[tuple[str, Snapshot, Path] | None] = queue.Queue()
        self._pending: collections.deque[str] = collections.deque()
        self._writer: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.disk_bytes > 0

    # ------------------------------------------------------------------ logging
    def _note(
        self, message: str, *args: Any, level: int = logging.WARNING, once: str | None = None
    ) -> None:
        """One log line; with ``once``, only the first time for that reason in this process."""
        if once is not None:
            if once in self._logged:
                return
            self._logged.add(once)
        log.log(level, message, *args)

    def prune(self) -> None:
        """Keep the folder within the bound now (it may have been lowered since the files were
        written): the least recently used go first. What cannot be deleted is one log line."""
        if not self.enabled:
            return
        done = prune(self._folder(), self.disk_bytes)
        if done.files:
            log.info(
                "KV snapshots: %d deleted (%d bytes) to keep within kv_snapshot_cache_mib",
                done.files,
                done.bytes,
            )
        for name, why in done.failed[:3]:
            self._note("KV snapshot %s could not be deleted: %s", name, why, once=f"del:{name}")

    # ---------------------------------------------------------------- matching
    def best(self, tokens: Sequence[int], at_most: int | None = None) -> Match | None:
        """The snapshot sharing the longest token prefix with ``tokens`` (capped at ``at_most``):
        memory first, then disk (a tie goes to memory); None when none shares a token. A
        longer match under another key is said in the log (it is not used)."""
        if not self.enabled:
            return None
        want = token_bytes(tokens)
        cap = len(tokens) if at_most is None else at_most
        found: Match | None = None
        for snap in reversed(self._memory.values()):
            common = min(common_prefix(snap.tokens, want), cap)
            if not self._usable(snap.n_tokens, common):
                continue
            if common > 0 and (found is None or common > found.common):
                found = Match(common, "memory", snapshot=snap)
        stale: tuple[int, DiskEntry] | None = None
        for entry in self._scan():
            common = min(common_prefix(entry.tokens, want), cap)
            if entry.key != self.digest:
                if common > (stale[0] if stale else 0):
                    stale = (common, entry)
                continue
            if not self._usable(len(entry.tokens) // 4, common):
                continue
            if common > 0 and (found is None or common > found.common):
                found = Match(common, "disk", entry=entry)
        if stale is not None and stale[0] > (found.common if found else 0) + RESTORE_MARGIN:
            self._note(
                "KV snapshot %s shares %d tokens with this prompt but was made with other settings "
                "(%s): not used",
                stale[1].path.name,
                stale[0],
                self.key.differences(stale[1].key_info),
                level=logging.INFO,
            )
        return found

    def _usable(self, n_tokens: int, common: int) -> bool:
        return self.restorable is None or self.restorable(n_tokens, common)

    def load(self, match: Match) -> Snapshot | None:
        """The snapshot of ``match``, its file read and checked (None, with one log line, when
        it cannot be used: the prompt is then evaluated)."""
        if match.snapshot is not None:
            self._memory.move_to_end(match.snapshot.tokens)
            return match.snapshot
        entry = match.entry
        assert entry is not None
        try:
            data = read_payload(entry)
        except SnapshotError as exc:
            self._note("KV snapshot %s not used: %s; evaluating the prompt", entry.path.name, exc)
            self._forget(entry.path.name)
            return None
        try:
            # Its last use: the least recently used go first.
            os.utime(entry.path)
        except OSError:
            pass
        snap = Snapshot(entry.tokens, data)
        self._remember(snap)
        return snap

    # ------------------------------------------------------------------ keeping
    def worth(self, n_tokens: int) -> bool:
        """Whether a state of ``n_tokens`` tokens is worth taking."""
        return self.enabled and n_tokens >= MIN_TOKENS

    def keep(self, tokens: Sequence[int], data: Any) -> None:
        """Keep the state ``data`` of ``tokens``: in memory now, on disk soon (the writer
        thread). A kept snapshot whose tokens are a prefix of these goes (one conversation
        leaves one file); if a kept one already holds these tokens and more, nothing is added."""
        if not self.worth(len(tokens)):
            return
        tb = token_bytes(tokens)
        for old in list(self._memory):
            if old == tb or self.restorable is None and old.startswith(tb):
                self._memory.move_to_end(old)
                # A longer one has these: restoring it and trimming gives this state.
                return
            if tb.startswith(old) and self.restorable is None:
                # (where a restore cannot be trimmed, the shorter one stays in memory: another
                # branch forks there; on disk one conversation still leaves one file)
                del self._memory[old]
        snap = Snapshot(tb, data)
        self._remember(snap)
        name = file_name(self.digest, tb)
        self._start_writer()
        with self._lock:
            self._pending.append(name)
            # The disk is slower than the replies: drop the oldest.
            while len(self._pending) > WRITE_QUEUE:
                self._pending.popleft()
        self._queue.put((name, snap, self._folder()))

    def _remember(self, snap: Snapshot) -> None:
        if snap.size > self.memory_bytes:
            return
        self._memory[snap.tokens] = snap
        self._memory.move_to_end(snap.tokens)
        held = sum(s.size for s in self._memory.values())
        while held > self.memory_bytes and self._memory:
            _, gone = self._memory.popitem(last=False)
            held -= gone.size

    def _start_writer(self) -> None:
        if self._writer is None or not self._writer.is_alive():
            self._writer = threading.Thread(
                target=self._write_loop, daemon=True, name="vibechat-kv-snapshots"
            )
            self._writer.start()

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                name, snap, folder = item
                with self._lock:
                    due = name in self._pending
                    if due:
                        self._pending.remove(name)
                if due:
                    self._write(folder, name, snap)
            except Exception:
                # A snapshot is an optimisation: never fails the engine.
                log.exception("writing a KV snapshot failed")
            finally:
                self._queue.task_done()

    def _write(self, folder: Path, name: str, snap: Snapshot) -> None:
        size = snap.size + 4 * snap.n_tokens + MAX_HEADER_BYTES
        if size > self.disk_bytes:
            self._note(
                "KV snapshot of %d tokens (%d MiB) not written: the cache holds at most %d MiB "
                "(kv_snapshot_cache_mib)",
                snap.n_tokens,
                size >> 20,
                self.disk_bytes >> 20,
                level=logging.INFO,
                once="too-large",
            )
            return
        try:
            ensure_folder(folder)
            self._make_room(folder, size, snap.tokens)
            path = write_file(folder, self.digest, self.key.as_dict(), snap)
        except OSError as exc:
            self._note(
                "KV snapshots are not written to %s: %s",
                folder,
                exc.strerror or exc,
                once=f"write:{folder}:{getattr(exc, 'errno', None)}",
            )
            return
        log.debug("KV snapshot of %d tokens written to %s (%d bytes)", snap.n_tokens, path, size)

    def _make_room(self, folder: Path, size: int, tokens: bytes) -> None:
        """Delete this key's snapshots that the new one (``tokens``) extends, then the least
        recently used files (any key) until ``size`` more bytes fit the bound."""
        entries = self._scan(folder)
        for entry in entries:
            if entry.key == self.digest and tokens.startswith(entry.tokens):
                self._delete(entry.path)
        files: list[tuple[float, int, Path]] = []
        try:
            with os.scandir(folder) as it:
                for item in it:
                    if item.name.endswith(SUFFIX) and item.is_file(follow_symlinks=False):
                        st = item.stat(follow_symlinks=False)
                        files.append((st.st_mtime, st.st_size, Path(item.path)))
        except OSError:
            return
        files.sort()
        held = sum(f[1] for f in files)
        for _mtime, fsize, path in files:
            if held + size <= self.disk_bytes:
                break
            self._delete(path)
            held -= fsize

    def _delete(self, path: Path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self._note(
                "KV snapshot %s could not be deleted: %s",
                path,
                exc.strerror or exc,
                once=f"del:{path}",
            )
        self._forget(path.name)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._index.pop(name, None)

    # ------------------------------------------------------------------- index
    def _scan(self, folder: Path | None = None) -> list[DiskEntry]:
        """The snapshot files' headers, bounded (``MAX_FILES``, ``MAX_INDEX_BYTES``): a file's
        header is read once (files are never changed in place: a new one is a new inode)."""
        folder = folder or self._folder()
        try:
            with os.scandir(folder) as it:
                items = list(it)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self._note(
                "KV snapshots in %s cannot be read: %s",
                folder,
                exc.strerror or exc,
                once=f"scan:{folder}",
            )
            return []
        now = time.time()
        found: list[tuple[float, os.DirEntry[str]]] = []
        for item in items:
            if item.name.endswith(".tmp"):
                # A write that never finished (its process ended).
                try:
                    if now - item.stat(follow_symlinks=False).st_mtime > TEMP_STALE_S:
                        os.unlink(item.path)
                except OSError:
                    pass
                continue
            if not item.name.endswith(SUFFIX):
                continue
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                self._note(
                    "KV snapshot %s not used: it is not a regular file",
                    item.name,
                    once=f"kind:{item.path}",
                )
                continue
            found.append((st.st_mtime, item))
        # The most recently used first: those are kept under the bound.
        found.sort(key=lambda pair: -pair[0])
        entries: list[DiskEntry] = []
        budget = MAX_INDEX_BYTES
        seen: set[str] = set()
        for _mtime, item in found[:MAX_FILES]:
            seen.add(item.name)
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue
            sig = (st.st_ino, st.st_size)
            with self._lock:
                cached = self._index.get(item.name)
            if cached is not None and cached[0] == sig:
                if cached[1] is not None:
                    entries.append(cached[1])
                continue
            if budget <= 0:
                self._note(
                    "KV snapshot index: read limit reached, older snapshots not looked at",
                    level=logging.INFO,
                    once="budget",
                )
                break
            try:
                entry: DiskEntry | None = read_header(Path(item.path))
            except SnapshotError as exc:
                self._note(
                    "KV snapshot %s not used: %s", item.name, exc, once=f"bad:{item.path}:{sig}"
                )
                entry = None
            budget -= 4 * (entry.tokens.__len__() // 4 if entry else 0) + MAX_HEADER_BYTES
            with self._lock:
                self._index[item.name] = (sig, entry)
            if entry is not None:
                entries.append(entry)
        with self._lock:
            for name in [n for n in self._index if n not in seen]:
                del self._index[name]
        return entries

    # ------------------------------------------------------------------- closing
    def flush(self, timeout: float = 30.0) -> bool:
        """Wait for the writes handed over so far (True when they are done)."""
        if self._writer is None:
            return True
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)
        return not self._queue.unfinished_tasks

    def close(self, timeout: float = 30.0) -> None:
        """Finish the writes (``vibechat run`` leaves its snapshot behind), stop the writer,
        drop the memory."""
        self.flush(timeout)
        if self._writer is not None and self._writer.is_alive():
            self._queue.put(None)
        self._memory.clear()
