"""Reading the files vibechat is given, bounded and by type.

Every file vibechat reads comes from outside (a schema, a grammar, a prompts file, the
config, a model's metadata, a JSON file another tool wrote): it may be a named pipe that
never ends or never opens, ``/dev/zero`` behind a symlink, a directory, or gigabytes that
``stat`` says are 0 bytes (``/proc``). :func:`read_file` is the one way in:

- the file is opened without blocking (a FIFO with no writer opens at once) and its type
  is checked on the open descriptor (``fstat``: no race with a rename): anything but a
  regular file is refused at once with what it is (:func:`open_regular`, also for callers
  that read a file as a stream: a prompts file, an attachment);
- the read is capped by counting the bytes read, never by the size ``stat`` reports.

Errors are :class:`~vibechat.engine.errors.VibechatError` subclasses whose ``reason`` is a
phrase the caller puts after the file's name (``"is a named pipe (FIFO), not a file"``).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from .errors import VibechatError
from .sizes import human_bytes

_CHUNK = 1 << 20


class UnreadableFile(VibechatError):
    """A file that cannot be read as one: ``reason`` completes "<path> ...", the message
    is the path and the reason."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.path = str(path)
        self.reason = reason


class NotARegularFile(UnreadableFile):
    """A FIFO, a device, a directory or a socket where a file was expected; ``kind`` says
    which, in words (``kind_of``)."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(path, f"is {kind}, not a file")
        self.kind = kind


class FileTooLarge(UnreadableFile):
    """More bytes than the caller's bound: read no further."""


def kind_of(mode: int) -> str | None:
    """What a non-regular file is, in words (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(path: str | os.PathLike[str]) -> None:
    """Raise :class:`NotARegularFile` when ``path`` exists and is not a regular file (a
    FIFO, a device, a directory): for files another library opens (SQLite, llama.cpp),
    where opening a FIFO would block. A missing file passes (the caller creates it)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError:
        # The caller's own open reports it.
        return
    kind = kind_of(mode)
    if kind is not None:
        raise NotARegularFile(path, kind)


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading in binary, when it is a regular file.

    The open does not block (a FIFO with no writer opens at once) and the type is checked on
    the open descriptor (``fstat``: the path may have been swapped since any earlier check);
    the descriptor is then made blocking again (reads of a regular file are plain reads).
    Raises ``FileNotFoundError``, :class:`NotARegularFile` (a FIFO, a device, a directory, a
    socket), or ``OSError`` (a permission, an I/O error)."""
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_CLOEXEC", 0)
        | getattr(os, "O_BINARY", 0)
    )
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise NotARegularFile(path, "a directory") from None
    except OSError as exc:
        # A socket: open() refuses it.
        if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):
            check_regular(path)
        raise
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None:
            raise NotARegularFile(path, kind)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The file's bytes, at most ``limit`` of them.

    Raises ``FileNotFoundError`` when there is no file (callers often treat that as
    "not set"), :class:`NotARegularFile`, :class:`FileTooLarge`, or ``OSError`` (a
    permission, an I/O error)."""
    with open_regular(path) as file:
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = file.read(min(_CHUNK, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise FileTooLarge(path, f"is larger than {human_limit(limit)}")
        return b"".join(chunks)


def read_file_text(path: str | os.PathLike[str], limit: int) -> str:
    """:func:`read_file`, decoded as UTF-8 (``UnicodeDecodeError`` when it is not)."""
    return read_file(path, limit).decode("utf-8")


def human_limit(limit: int) -> str:
    """A limit in words: the one byte formatter (sizes.py)."""

    return human_bytes(limit)


def write_private(
    path: Path, parts: Iterable[bytes | memoryview], temp: Path, *, sync: bool = False
) -> None:
    """Write ``parts`` to ``temp`` (created new, 0600, never through a symlink), then rename it
    over ``path``: a reader sees the old file or the whole new one, and a FIFO or a file under
    the name is replaced, never written through. Any failure (a full disk: OSError ENOSPC)
    removes the temp file and raises; ``sync``: the bytes reach the disk before the rename."""
    flags = (
        os.O_WRONLY
        | os.O_CREAT
        | os.O_EXCL
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_CLOEXEC", 0)
        | getattr(os, "O_BINARY", 0)
    )
    fd = os.open(temp, flags, 0o600)
    try:
        try:
            for part in parts:
                view = memoryview(part).cast("B")
                while view.nbytes:
                    view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
