"""The kept copies of attachments: one private file per distinct content, by its SHA-256.

A conversation's attachments must outlive the files the user pointed at (moved, edited,
deleted) so that a reopened conversation shows them and sends them again. So what reading
kept (a scaled image, a file's text) is written once under ``data_dir/attachments``, named
by the digest of its bytes: attaching the same picture twice, or to two conversations,
keeps one copy. The folder is the user's alone (0700, files 0600): attachments are as
private as the history that names them.

A copy is written to a temporary file and renamed into place, so a full disk or a crash
never leaves a half-written copy under a digest's name (a reader would take it for the
real one). The history (engine/chat) stores only the digest and what was known about the
file; ``reopen`` turns a row back into an ``Attachment``, and a copy that has gone missing
is said so on the attachment instead of failing the whole conversation.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import time
from pathlib import Path

from ..errors import VibechatError
from ..files import UnreadableFile, read_file, write_private
from ..paths import data_dir
from ..sanitize import sanitize
from ..turns.attachments import FILE_TEXT_LIMIT, Attachment, AttachmentKind

# What a kept copy's type is named on disk (the engine process and a remote request read the
# type back from the history's mime, never from the name).
MIME_EXT = {"image/png": "png", "image/jpeg": "jpg", "text/plain": "txt"}

# A note for an attachment whose kept copy is gone (deleted by hand, a restored backup):
# the conversation still opens and says so.
MISSING_NOTE = "its kept copy is missing"

# A file's kept text is at most FILE_TEXT_LIMIT characters of UTF-8: at most 4 bytes each.
_TEXT_BYTES = FILE_TEXT_LIMIT * 4 + 4

_DIGEST = re.compile(r"[0-9a-f]{64}")

# prune() leaves copies younger than this: a prompt's attachment is kept before the prompt's
# row is written, so a copy may be unreferenced for a moment while another process saves it.
PRUNE_GRACE_S = 3600.0


class AttachmentError(VibechatError):
    """An attachment could not be read or kept; ``str()`` is one line: the problem and the fix."""


class AttachmentStore:
    """The kept copies under ``root`` (``default()``: ``data_dir/attachments``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def default(cls) -> AttachmentStore:
        return cls(data_dir() / "attachments")

    def path_of(self, digest: str, mime: str) -> Path:
        """Where the copy of ``digest`` (of type ``mime``) lies; ``ValueError`` for a digest that is
        not 64 lowercase hex digits (a history row is outside data: never a path of its own)."""
        if not _DIGEST.fullmatch(digest):
            raise ValueError(f"not an attachment digest: {digest[:80]!r}")
        return self.root / f"{digest}.{MIME_EXT.get(mime, 'bin')}"

    def put(self, data: bytes, ext: str) -> tuple[str, Path]:
        """Keep ``data`` (once per distinct content) and return its digest and the copy's path.

        Raises ``AttachmentError`` (one line) when the folder cannot be made or written, or the
        disk is full; no partial file is left under any name."""
        if not re.fullmatch(r"[a-z0-9]{1,8}", ext):
            raise ValueError(f"not a file extension: {ext[:20]!r}")
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / f"{digest}.{ext}"
        try:
            self._make_root()
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISREG(st.st_mode) and st.st_size == len(data):
                # In use again: prune()'s grace counts from now.
                os.utime(path)
                return digest, path
            self._write(path, data)
        except OSError as exc:
            raise AttachmentError(self._failure(exc)) from None
        return digest, path

    def reopen(
        self,
        kind: AttachmentKind,
        name: str,
        digest: str,
        mime: str,
        size: int,
        width: int = 0,
        height: int = 0,
        note: str = "",
    ) -> Attachment:
        """An attachment as the history describes it, with its kept copy's path (and a file's text,
        read back bounded). A missing or unreadable copy gives an Attachment whose ``path`` is ""
        and whose note says the copy is missing: the conversation still opens."""
        missing = Attachment(
            kind=kind,
            name=name,
            digest=digest,
            mime=mime,
            size=size,
            path="",
            width=width,
            height=height,
            note=MISSING_NOTE,
        )
        try:
            path = self.path_of(digest, mime)
        except ValueError:
            return missing
        text = ""
        try:
            if kind == "file":
                text = _kept_text(read_file(path, _TEXT_BYTES))
            elif not stat.S_ISREG(os.stat(path).st_mode):
                return missing
        except (OSError, UnreadableFile):
            return missing
        return Attachment(
            kind=kind,
            name=name,
            digest=digest,
            mime=mime,
            size=size,
            path=str(path),
            width=width,
            height=height,
            text=text,
            note=note,
        )

    def prune(self, keep: set[str], *, grace_s: float = PRUNE_GRACE_S) -> int:
        """Remove the copies whose digest is not in ``keep`` (the digests some message still names)
        and that are older than ``grace_s``; returns how many went. Leftover temporary files of an
        interrupted write go too. Errors are ignored: pruning is tidying, never needed."""
        removed = 0
        cutoff = time.time() - grace_s
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return 0
        for entry in entries:
            digest = entry.name.split(".", 1)[0]
            temporary = entry.name.startswith(".tmp-")
            if not temporary and (not _DIGEST.fullmatch(digest) or digest in keep):
                continue
            try:
                if (
                    not entry.is_file(follow_symlinks=False)
                    or entry.stat(follow_symlinks=False).st_mtime > cutoff
                ):
                    continue
                os.unlink(entry.path)
            except OSError:
                continue
            removed += not temporary
        return removed

    def _make_root(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if stat.S_IMODE(os.stat(self.root).st_mode) != 0o700:
            os.chmod(self.root, 0o700)

    def _write(self, path: Path, data: bytes) -> None:
        """Write to a private temporary file beside ``path``, then rename it into place."""
        write_private(
            path, (data,), self.root / f".tmp-{os.getpid()}-{time.monotonic_ns()}", sync=True
        )

    def _failure(self, exc: OSError) -> str:
        where = sanitize(str(self.root))
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return (
                f"no space left to keep the attachment under {where}: "
                "free some space and attach it again"
            )
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return f"cannot write the attachments folder {where}: check its permissions"
        reason = sanitize(exc.strerror or type(exc).__name__)
        return (
            f"cannot keep the attachment under {where} ({reason}): "
            "check that folder and attach it again"
        )


def _kept_text(data: bytes) -> str:
    """A kept file's text: UTF-8 as reading wrote it, checked again (the folder is on disk, where
    anything may have changed it): bounded, sanitised."""
    text = sanitize(data.decode("utf-8", errors="replace"))
    return text[:FILE_TEXT_LIMIT]
