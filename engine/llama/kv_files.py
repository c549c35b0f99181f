"""KV snapshot files (engine/llama/kv_snapshots.py keeps the snapshots): where they are, their
layout, reading one back with every check before its bytes reach llama.cpp, writing one so that
a half file never stands under a real name, and what ``vibechat history cache`` shows and clears.

Layout: ``MAGIC``, a 4-byte little-endian length, a JSON header (format, key digest and fields,
token count, payload size, the tokens' and the payload's CRC-32, and ``bound``: a SHA-256 of the
key, the tokens and the payload together), the tokens (int32 LE), the payload
(``llama_state_seq_get_data``'s bytes). The disk index reads the header and the tokens only,
never a payload. A snapshot is used only for the exact tokens it was taken for: the file's name
ends in a digest of its tokens (checked when its header is read) and ``bound`` ties the state
to the tokens (checked before the state is restored), so tokens swapped for another
conversation's, the CRCs recomputed, are refused. Files are 0600 in a 0700 folder; a FIFO, a link or
anything else that is
not a regular file under a snapshot's name is never opened for reading, and is replaced (not
written through) by a new snapshot of that name.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import json
import os
import stat
import struct
import sys
import threading
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..files import write_private
from ..json_bounds import bounded_loads
from ..paths import cache_dir

# Version 2: the name's token digest and the header's ``bound`` (files of version 1 are refused,
# then pruned).
FORMAT_VERSION = 2
MAGIC = b"VCKVSNP1"
SUFFIX = ".kvs"
FOLDER = "kv-snapshots"
# A JSON header claiming more is corrupt.
MAX_HEADER_BYTES = 16 << 10
# More than any context vibechat creates (engine/settings/limits.py).
MAX_TOKENS = 1 << 21


def snapshot_folder() -> Path:
    """Where snapshots go (read at each use: the cache dir may change under tests)."""

    return cache_dir() / FOLDER


def token_bytes(tokens: Sequence[int]) -> bytes:
    arr = array.array("i", tokens)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def tokens_digest(tokens: bytes) -> str:
    """The digest of a token list that a snapshot's file name ends in."""
    return hashlib.sha256(tokens).hexdigest()[:24]


def file_name(key: str, tokens: bytes) -> str:
    """A snapshot's file name: its key's digest and its tokens' (one conversation, one file)."""
    return f"{key[:16]}-{tokens_digest(tokens)}{SUFFIX}"


def binding(key: str, tokens: bytes, payload: Any) -> str:
    """The SHA-256 that ties a state to the key and the exact tokens it was taken for."""
    h = hashlib.sha256(key.encode("ascii", "replace"))
    h.update(struct.pack("<Q", len(tokens)))
    h.update(tokens)
    h.update(payload)
    return h.hexdigest()


def tokens_of(data: bytes) -> list[int]:
    arr = array.array("i")
    arr.frombytes(data)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tolist()


@dataclasses.dataclass
class Snapshot:
    """One snapshot: its tokens (int32 LE bytes) and its state bytes (any buffer: a ctypes
    array from ``llama_state_seq_get_data``, or a bytearray read from a file)."""

    tokens: bytes
    data: Any

    @property
    def n_tokens(self) -> int:
        return len(self.tokens) // 4

    def tokens_list(self) -> list[int]:
        return tokens_of(self.tokens)

    @property
    def size(self) -> int:
        return memoryview(self.data).nbytes


@dataclasses.dataclass
class DiskEntry:
    path: Path
    tokens: bytes
    key: str
    key_info: dict[str, Any]
    payload_at: int
    payload_bytes: int
    payload_crc: int
    file_bytes: int
    mtime: float
    # binding(key, tokens, payload), checked by read_payload.
    bound: str = ""


class SnapshotError(Exception):
    """A snapshot file that cannot be used; the message says why in a few words."""


def _read_exact(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    left = n
    while left > 0:
        chunk = os.read(fd, min(left, 8 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    """``path`` opened for reading if it is a regular file (not a FIFO, whose open would block,
    nor a link); raises SnapshotError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise SnapshotError("it is gone") from None
    except OSError as exc:
        raise SnapshotError(f"it cannot be opened ({exc.strerror or exc})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise SnapshotError("it is not a regular file")
    return fd, st


def read_header(path: Path) -> DiskEntry:
    """A snapshot file's header and tokens (never its payload), checked: SnapshotError says
    what is wrong."""
    fd, st = _open_regular(path)
    try:
        head = _read_exact(fd, len(MAGIC) + 4)
        if len(head) < len(MAGIC) + 4 or head[: len(MAGIC)] != MAGIC:
            raise SnapshotError("it is no vibechat KV snapshot (or one of another format)")
        (hlen,) = struct.unpack("<I", head[len(MAGIC) :])
        if hlen > MAX_HEADER_BYTES:
            raise SnapshotError("its header is corrupt")
        raw = _read_exact(fd, hlen)
        try:
            header = bounded_loads(raw.decode("utf-8"))
            n_tokens = int(header["n_tokens"])
            payload_bytes = int(header["payload_bytes"])
            key, key_info = str(header["key"]), dict(header["key_info"])
            tokens_crc, payload_crc = int(header["tokens_crc32"]), int(header["payload_crc32"])
            fmt = int(header["format"])
            bound = str(header.get("bound", ""))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise SnapshotError("its header is corrupt") from None
        if fmt != FORMAT_VERSION:
            raise SnapshotError(f"it is of format {fmt} (this vibechat reads {FORMAT_VERSION})")
        if not 0 < n_tokens <= MAX_TOKENS or payload_bytes <= 0:
            raise SnapshotError("its header is corrupt")
        payload_at = len(MAGIC) + 4 + hlen + 4 * n_tokens
        if st.st_size != payload_at + payload_bytes:
            raise SnapshotError(
                f"it is truncated ({st.st_size:,} bytes, its header says "
                f"{payload_at + payload_bytes:,})"
            )
        tokens = _read_exact(fd, 4 * n_tokens)
        if len(tokens) != 4 * n_tokens or zlib.crc32(tokens) != tokens_crc:
            raise SnapshotError("its tokens are corrupt (checksum)")
        if path.name != file_name(key, tokens):
            raise SnapshotError(
                "its tokens are not those it was taken for (its name's digest differs)"
            )
        return DiskEntry(
            path,
            tokens,
            key,
            key_info,
            payload_at,
            payload_bytes,
            payload_crc,
            st.st_size,
            st.st_mtime,
            bound,
        )
    except OSError as exc:
        raise SnapshotError(f"it cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_payload(entry: DiskEntry) -> bytearray:
    """The state bytes of ``entry``'s file, checked against its header (size, checksum)."""
    fd, st = _open_regular(entry.path)
    try:
        if st.st_size != entry.file_bytes:
            raise SnapshotError("it changed since it was indexed")
        os.lseek(fd, entry.payload_at, os.SEEK_SET)
        data = bytearray(entry.payload_bytes)
        view = memoryview(data)
        got = 0
        while got < entry.payload_bytes:
            n = os.readv(fd, [view[got:]])
            if n <= 0:
                break
            got += n
        if got != entry.payload_bytes:
            raise SnapshotError("it is truncated")
        if zlib.crc32(data) != entry.payload_crc:
            raise SnapshotError("its state is corrupt (checksum)")
        if binding(entry.key, entry.tokens, data) != entry.bound:
            raise SnapshotError("its state was not taken for these tokens (digest)")
        return data
    except OSError as exc:
        raise SnapshotError(f"it cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def write_file(folder: Path, key: str, key_info: dict[str, Any], snapshot: Snapshot) -> Path:
    """Write ``snapshot`` as ``folder/file_name(...)`` (0600), made under the key ``key`` (its
    digest; ``key_info``: its fields): to a temp file, then renamed over the name."""
    payload = memoryview(snapshot.data).cast("B")
    name = file_name(key, snapshot.tokens)
    header = json.dumps(
        {
            "format": FORMAT_VERSION,
            "key": key,
            "key_info": key_info,
            "n_tokens": snapshot.n_tokens,
            "payload_bytes": payload.nbytes,
            "tokens_crc32": zlib.crc32(snapshot.tokens),
            "payload_crc32": zlib.crc32(payload),
            "bound": binding(key, snapshot.tokens, payload),
            "written": time.time(),
        }
    ).encode("utf-8")
    temp = folder / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    target = folder / name
    write_private(
        target, (MAGIC, struct.pack("<I", len(header)), header, snapshot.tokens, payload), temp
    )
    return target


def ensure_folder(folder: Path) -> None:
    """The snapshot folder, private (0700); raises OSError when it cannot be made."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.stat(folder, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{folder} is not a folder")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(folder, 0o700)


@dataclasses.dataclass
class CacheSummary:
    """What ``vibechat history cache`` shows."""

    folder: Path
    files: int
    bytes: int


def summary(folder: Path | None = None) -> CacheSummary:
    """The snapshot files in the folder and the bytes they hold (no header read)."""
    folder = folder or snapshot_folder()
    files = held = 0
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith(SUFFIX) and entry.is_file(follow_symlinks=False):
                    files += 1
                    held += entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return CacheSummary(folder, files, held)


@dataclasses.dataclass
class Removal:
    """What a prune or a clear deleted, and what it could not (name, why): said, never hidden."""

    files: int = 0
    bytes: int = 0
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def remove(self, path: str, size: int, counted: bool = True) -> None:
        """Delete ``path``; a failure is kept with its reason (a directory under a snapshot's
        name, a read-only folder, an immutable file)."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.failed.append((os.path.basename(path), exc.strerror or str(exc)))
            return
        if counted:
            self.files += 1
            self.bytes += size


def _entries(folder: Path) -> list[tuple[float, int, str, bool]]:
    """(mtime, size, path, is a regular file) of each snapshot (``*.kvs``) in ``folder``."""
    out: list[tuple[float, int, str, bool]] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith(SUFFIX):
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    out.append((st.st_mtime, st.st_size, entry.path, stat.S_ISREG(st.st_mode)))
    except OSError:
        pass
    return out


def prune(folder: Path, limit: int) -> Removal:
    """Delete the least recently used snapshots until those left hold at most ``limit`` bytes
    (the ``kv_snapshot_cache_mib`` bound, lowered since they were written)."""
    done = Removal()
    files = sorted(e for e in _entries(folder) if e[3])
    held = sum(e[1] for e in files)
    for _mtime, size, path, _regular in files:
        if held <= limit:
            break
        before = len(done.failed)
        done.remove(path, size)
        if len(done.failed) == before:
            held -= size
    return done


def clear(folder: Path | None = None) -> Removal:
    """Delete every snapshot (and leftover temp file): what went, and what could not."""
    folder = folder or snapshot_folder()
    done = Removal()
    for _mtime, size, path, _regular in _entries(folder):
        done.remove(path, size)
    try:
        with os.scandir(folder) as entries:
            temps = [entry.path for entry in entries if entry.name.endswith(".tmp")]
    except OSError:
        temps = []
    for path in temps:
        done.remove(path, 0, counted=False)
    return done
