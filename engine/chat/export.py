"""An exported conversation written to a file whole or not at all (see ``write_export``).
The text is the conversation's Markdown or JSON (records.py), made by the caller."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def write_export(path: Path, text: str, *, overwrite: bool = False) -> None:
    """Write an exported conversation to ``path`` whole or not at all: into a temporary
    file beside it, flushed to disk, then renamed over it, so a full disk or a file-size
    limit leaves the old file as it was (or no file), never a partial one. Without
    ``overwrite`` an existing file is kept (FileExistsError), checked at the rename itself
    (a hard link), so a file that appears meanwhile is not replaced either. OSError on
    failure, the temporary file removed."""
    folder = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        # A replaced file keeps its mode; a new one stays private (mkstemp's 0600), like the
        # history it comes from.
        try:
            os.chmod(tmp, path.stat().st_mode & 0o777)
        except OSError:
            pass
        if overwrite:
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError:
            # A filesystem without hard links: the check, then the rename.
            if path.exists() or path.is_symlink():
                raise FileExistsError(errno.EEXIST, "File exists", str(path)) from None
            os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
