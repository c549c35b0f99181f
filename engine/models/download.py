"""Downloading a model's files from the Hub: resumable, verified, honest about space.

Each file is written to ``<name>.part`` beside its final place, with a small
``<name>.part.json`` that records which file version it holds (the LFS sha256
and size). Whatever stops a download (Ctrl-C, a crash, a dropped connection, a
full disk), the next attempt asks for the rest with an HTTP ``Range`` request,
across restarts too. A dropped connection is retried a few times on the spot.

A finished file is hashed (incrementally, while it arrives) and must match the
Hub's LFS sha256: a mismatch deletes it and says so. Only then is it renamed to
its final name; the caller registers the model after every file is in place, so
a model is never listed half-downloaded.

A listing may give no size (a mirror whose listing leaves sizes out: size 0 here). The
size is then learnt from the answer (``Content-Range``, ``Content-Length``) or the file
is read to its end, never beyond the free disk space (less ``SPARE_BYTES``); what can be
checked still is (the sha256 when the listing has one, the learnt size), and a file
checked by neither must at least be a whole GGUF file (``inspect_gguf``: its header and
its tensors' data all there). A server that sends more than the size it announced is
stopped at that size. An error answer is read up to ``MAX_ERROR_BODY`` bytes.

Imports inside functions are deliberate: huggingface_hub and its HTTP client load only when a
file is downloaded (start-up time).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import DownloadCancelled, DownloadError, HubError, ModelFileError
from ..files import read_file
from ..json_bounds import bounded_loads
from ..settings.refs import QuantOption, RepoFile, is_safe_repo_path, show_name
from .hub import Hub, explain, is_transient, raise_for_status, short

log = logging.getLogger("vibechat.download")

CHUNK = 1 << 20
# On-the-spot retries of a dropped connection within one attempt.
RETRIES = 4
# Free space kept beyond the download itself.
SPARE_BYTES = 64 << 20
READ_TIMEOUT = 60.0


@dataclass(frozen=True)
class Progress:
    """Where a download stands; ``speed`` in bytes/s over the last seconds."""

    done: int
    total: int
    speed: float
    file: str
    # 1-based.
    file_index: int
    file_count: int
    # Bytes that were already there when this attempt started.
    resumed_from: int = 0

    @property
    def eta(self) -> float | None:
        if self.speed <= 0:
            return None
        return max(0.0, (self.total - self.done) / self.speed)

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


# What the callback returns is ignored.
ProgressCallback = Callable[[Progress], object]


def part_paths(final: Path) -> tuple[Path, Path]:
    return final.with_name(final.name + ".part"), final.with_name(final.name + ".part.json")


def downloaded_bytes(final: Path, file: RepoFile) -> int:
    """Bytes of ``file`` already at ``final`` or in its ``.part`` (0 when another version is
    there)."""
    part, meta = part_paths(final)
    if _finished(final, file):
        return final.stat().st_size
    if not part.exists() or _part_version(meta) != _version(file):
        return 0
    size = part.stat().st_size
    return min(size, file.size) if file.size else size


def _finished(final: Path, file: RepoFile) -> bool:
    """``final`` holds the file (it gets that name only once verified): its size when the
    listing gave one, else it is there with no part file beside it."""
    if not final.exists():
        return False
    if file.size:
        return final.stat().st_size == file.size
    return not part_paths(final)[0].exists()


def _version(file: RepoFile) -> dict[str, object]:
    return {"path": file.path, "size": file.size, "sha256": file.sha256}


def _part_version(meta: Path) -> dict[str, object] | None:
    try:
        data = bounded_loads(read_file(meta, 1 << 16))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_free_space(directory: Path, needed: int, what: str) -> None:
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed + SPARE_BYTES > free:
        raise DownloadError(
            f"not enough disk space for {what}: it needs {_gb(needed)} more and {probe} has "
            f"{_gb(free)} free; free some space or point VIBECHAT_MODELS_DIR at a bigger disk."
        )


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


class Downloader:
    """Downloads the files of one quantization of a repo into ``dest`` (a folder)."""

    def __init__(
        self,
        hub: Hub,
        *,
        cancel: threading.Event | None = None,
        on_progress: ProgressCallback | None = None,
        retries: int = RETRIES,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.hub = hub
        self.cancel = cancel or threading.Event()
        self.on_progress = on_progress
        self.retries = retries
        self._sleep = sleep

    def download(self, repo: str, revision: str, option: QuantOption, dest: Path) -> list[Path]:
        """The final paths of ``option``'s files under ``dest``, downloading what is missing."""
        for f in option.files:
            # group_quants drops these already; this stops a caller that did not.
            if not is_safe_repo_path(f.path):
                raise DownloadError(
                    f"{show_name(f.path)} is not a name vibechat saves a file under "
                    "(control characters, characters unsafe in a file name, or a path "
                    "outside the repo): download it by hand and pass its path."
                )
        finals = [dest / f.path for f in option.files]
        have = sum(downloaded_bytes(p, f) for p, f in zip(finals, option.files, strict=True))
        check_free_space(dest, option.size - have, f"{repo} {option.label}")
        total = option.size
        done_before = 0
        for index, (final, file) in enumerate(zip(finals, option.files, strict=True), start=1):
            self._file(repo, revision, file, final, index, len(finals), done_before, total, have)
            done_before += file.size
        return finals

    def _file(
        self,
        repo: str,
        revision: str,
        file: RepoFile,
        final: Path,
        index: int,
        count: int,
        done_before: int,
        total: int,
        resumed: int,
    ) -> None:
        if _finished(final, file) and not part_paths(final)[0].exists():
            # Finished earlier (verified before it got its final name).
            return
        final.parent.mkdir(parents=True, exist_ok=True)
        state = _Part.open(final, file)
        # The listing gave no size: never more than the disk can take.
        if not file.size:
            state.budget = max(0, _free_bytes(final.parent) - SPARE_BYTES) + state.offset
        url = self.hub.file_url(repo, file.path, revision)
        meter = _Meter()

        def report(done: int, force: bool = False) -> None:
            if self.on_progress is not None and (force or meter.due()):
                # A size learnt while downloading (the listing had none) joins the total.
                learnt = (state.expected or done) - file.size if not file.size else 0
                self.on_progress(
                    Progress(
                        done_before + done,
                        total + learnt,
                        meter.speed(),
                        file.path,
                        index,
                        count,
                        resumed,
                    )
                )

        failures = 0
        while not state.complete():
            try:
                self._fetch(url, state, file, meter, report)
                continue
            except DownloadCancelled:
                raise
            except Exception as exc:
                if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise DownloadError(
                        f"the disk filled up while downloading {file.path} ({_gb(state.offset)} of "
                        f"{_gb(file.size)} kept in {state.path}): free some space and run the same "
                        "command again to resume."
                    ) from None
                if not is_transient(exc):
                    message = explain(exc, repo, self.hub.endpoint, bool(self.hub.token), revision)
                    if message is not None:
                        raise HubError(message) from None
                    # Not an HTTP error: the part file could not be written.
                    if isinstance(exc, OSError):
                        raise DownloadError(
                            f"could not write {state.path} ({exc.strerror or exc}): check "
                            "the models folder's permissions."
                        ) from None
                    raise
                failures += 1
                state.sync()
                log.info(
                    "download of %s interrupted at %d bytes (%s)",
                    file.path,
                    state.offset,
                    short(exc),
                )
                if failures > self.retries:
                    status = getattr(getattr(exc, "response", None), "status_code", None)
                    reason = f"HTTP {status}" if status else "the connection dropped"
                    of = f" of {_gb(state.expected)}" if state.expected else ""
                    raise DownloadError(
                        f"downloading {file.path} kept failing ({reason}; {_gb(state.offset)}{of} "
                        "kept): run the same command again to resume."
                    ) from None
                self._sleep(min(0.5 * 2 ** (failures - 1), 8.0))
        report(state.offset, force=True)
        state.finish(final, file)

    def _fetch(
        self, url: str, state: _Part, file: RepoFile, meter: _Meter, report: Callable[[int], None]
    ) -> None:
        """One HTTP request for the bytes from ``state.offset`` on, appended to the part file."""
        import httpx2
        from huggingface_hub.utils import get_session

        headers = self.hub.headers()
        # Range offsets count the file's own bytes, not those of a compressed answer.
        headers["Accept-Encoding"] = "identity"
        if state.offset:
            headers["Range"] = f"bytes={state.offset}-"
        timeout = httpx2.Timeout(READ_TIMEOUT, connect=20.0)
        with get_session().stream(
            "GET", url, headers=headers, follow_redirects=True, timeout=timeout
        ) as r:
            if r.status_code == 416:
                # Nothing left to send: the part is complete (verified next).
                state.expected = (
                    state.expected or _range_total(r.headers.get("Content-Range")) or state.offset
                )
                state.ended = True
                return
            if r.status_code >= 400:
                # Reads at most MAX_ERROR_BODY bytes of the error.
                raise_for_status(r)
            if state.offset and r.status_code == 200:
                # The server ignored the Range.
                state.restart()
            if state.expected is None:
                state.learn(r, file)
            limit = state.expected if state.expected is not None else state.budget
            with state.path.open("ab") as fh:
                # Written as it arrives: a dropped connection loses nothing read.
                for chunk in r.iter_raw():
                    if self.cancel.is_set():
                        of = f" of {_gb(state.expected)}" if state.expected else ""
                        raise DownloadCancelled(
                            f"download of {file.path} stopped at {_gb(state.offset)}{of}: "
                            "run the same command again to resume."
                        )
                    # More than announced: stop reading here.
                    if state.offset + len(chunk) > limit:
                        state.overrun = True
                        return
                    fh.write(chunk)
                    state.add(chunk)
                    meter.add(len(chunk))
                    report(state.offset)
        if state.expected is None:
            # No size anywhere: the end of the answer is the end of the file.
            state.ended = True
        elif state.offset < state.expected:
            raise httpx2.RemoteProtocolError(
                f"the server sent {state.offset} of {state.expected} bytes"
            )


def _free_bytes(directory: Path) -> int:
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def _range_total(header: str | None) -> int | None:
    """The whole length in a ``Content-Range`` header (``bytes 0-9/1234``, ``bytes */1234``)."""
    if not header or "/" not in header:
        return None
    total = header.rsplit("/", 1)[1].strip()
    return int(total) if total.isdigit() and len(total) <= 18 else None


class _Part:
    """A ``.part`` file being filled, its running sha256, and the version record beside it.
    ``expected``: the file's size (the listing's, or learnt from an answer; None while
    unknown); ``ended``: an answer with no size ran to its end; ``budget``: the most bytes
    written while the size is unknown."""

    def __init__(self, path: Path, meta: Path) -> None:
        self.path = path
        self.meta = meta
        self.hasher = hashlib.sha256()
        self.offset = 0
        self.expected: int | None = None
        self.ended = False
        self.overrun = False
        self.budget = 0

    @classmethod
    def open(cls, final: Path, file: RepoFile) -> _Part:
        part, meta = part_paths(final)
        state = cls(part, meta)
        state.expected = file.size or None
        if _part_version(meta) != _version(file):
            # Another version of the file, or no record: start over.
            part.unlink(missing_ok=True)
            meta.write_text(json.dumps(_version(file)), encoding="utf-8")
        elif file.size and part.exists() and part.stat().st_size > file.size:
            part.unlink()
        # Resuming: the hash covers what is already there.
        state._load()
        return state

    def complete(self) -> bool:
        """Nothing more to read: the size is reached, the server sent more (``overrun``) or
        has nothing more to send (``ended``: a 416, or the end of an answer with no size);
        ``finish`` then checks what arrived."""
        if self.overrun or self.ended:
            return True
        return self.expected is not None and self.offset >= self.expected

    def learn(self, response, file: RepoFile) -> None:
        """The file's size from an answer, when the listing gave none: ``Content-Range``'s
        total, else ``Content-Length`` (plus the offset asked from), else the Hub's
        ``X-Linked-Size``; checked against the free disk space."""
        headers = response.headers
        total = _range_total(headers.get("Content-Range")) if response.status_code == 206 else None
        length = headers.get("Content-Length", "")
        if (
            total is None
            and response.status_code == 200
            and not headers.get("Content-Encoding")
            and length.isdigit()
            and len(length) <= 18
        ):
            total = int(length)
        linked = headers.get("X-Linked-Size", "")
        if total is None and linked.isdigit() and len(linked) <= 18:
            total = int(linked)
        if total is None or total <= 0:
            return
        if total > self.budget:
            raise DownloadError(
                f"not enough disk space for {file.path}: the server says it has {_gb(total)} and "
                f"{self.path.parent} has {_gb(max(0, self.budget - self.offset))} free beyond "
                "what is kept; free some space or point VIBECHAT_MODELS_DIR at a bigger disk."
            )
        self.expected = total

    def _load(self) -> None:
        self.hasher = hashlib.sha256()
        self.offset = 0
        if self.path.exists():
            with self.path.open("rb") as fh:
                for block in iter(lambda: fh.read(CHUNK), b""):
                    self.add(block)

    def add(self, chunk: bytes) -> None:
        self.hasher.update(chunk)
        self.offset += len(chunk)

    def restart(self) -> None:
        self.path.unlink(missing_ok=True)
        self.hasher = hashlib.sha256()
        self.offset = 0

    def sync(self) -> None:
        """After a failed request: what reached the disk is what counts."""
        on_disk = self.path.stat().st_size if self.path.exists() else 0
        if on_disk != self.offset:
            self._load()

    def finish(self, final: Path, file: RepoFile) -> None:
        """Verify size and sha256, then give the file its final name (a mismatch deletes it).
        Without either (a listing with no sizes or hashes), it must be a whole GGUF file."""
        size = self.path.stat().st_size if self.path.exists() else 0
        digest = self.hasher.hexdigest()
        if self.overrun:
            self._discard()
            if self.expected is None:
                raise DownloadError(
                    f"{file.path} kept coming past {_gb(size)}, more than the free disk space, and "
                    "the listing gave no size, so it was deleted: free some space, or check "
                    "HF_ENDPOINT (a Hub mirror should list file sizes)."
                )
            raise DownloadError(
                f"{file.path} arrived with more than the {self.expected:,} bytes announced, so "
                "it was deleted: download it again; if it fails again, the mirror serves a "
                "damaged file."
            )
        if size == 0:
            self._discard()
            raise DownloadError(
                f"{file.path} arrived empty (0 bytes), so it was deleted: download it again; "
                "if it fails again, check HF_ENDPOINT."
            )
        if self.expected is not None and size != self.expected:
            self._discard()
            raise DownloadError(
                f"{file.path} arrived with {size:,} bytes instead of {self.expected:,}, so it "
                "was deleted: download it again."
            )
        if not file.sha256 and not file.size:
            self._check_gguf(file)
        if file.sha256 and digest != file.sha256.lower():
            self._discard()
            raise DownloadError(
                f"{file.path} failed its checksum (sha256 {digest[:12]}… instead of "
                f"{file.sha256[:12]}…), so it was deleted: download it again; if it fails again, "
                "the mirror serves a damaged file."
            )
        os.replace(self.path, final)
        self.meta.unlink(missing_ok=True)

    def _check_gguf(self, file: RepoFile) -> None:
        """Neither a size nor a sha256 from the listing: at least a whole GGUF file."""
        from .gguf import inspect_gguf

        try:
            inspect_gguf(self.path)
        except ModelFileError as exc:
            self._discard()
            detail = str(exc).replace(str(self.path), "it", 1)
            raise DownloadError(
                f"{file.path} arrived but is not a whole GGUF file ({detail.rstrip('.')}), so it "
                "was deleted; the listing gave no size or sha256 to check it against: download "
                "it again, or check HF_ENDPOINT."
            ) from None

    def _discard(self) -> None:
        self.path.unlink(missing_ok=True)
        self.meta.unlink(missing_ok=True)


class _Meter:
    """Download speed over a sliding window, and a throttle for progress reports."""

    WINDOW = 3.0

    def __init__(self) -> None:
        self._samples: list[tuple[float, int]] = [(time.monotonic(), 0)]
        self._bytes = 0
        self._last_report = 0.0

    def add(self, n: int) -> None:
        self._bytes += n
        now = time.monotonic()
        self._samples.append((now, self._bytes))
        while len(self._samples) > 2 and now - self._samples[0][0] > self.WINDOW:
            self._samples.pop(0)

    def speed(self) -> float:
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last_report >= 0.1:
            self._last_report = now
            return True
        return False
