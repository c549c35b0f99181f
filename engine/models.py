"""Turn what the user typed after ``--model`` into a GGUF file path.

Accepted: nothing / ``starter`` (the bundled starter model), a path to a .gguf
file, or the name of a model in vibechat's models directory (file name with or
without ``.gguf``, case-insensitive).
"""

from __future__ import annotations

from pathlib import Path

from .errors import ModelFileError
from .paths import models_dir
from .starter import STARTER_NAME, starter_model_path


def local_models() -> list[Path]:
    root = models_dir()
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.gguf") if p.is_file())


def resolve_model(ref: str | None) -> Path:
    """The file to load for ``ref``; raises ``ModelFileError`` with a hint when unknown."""
    if ref is None or not ref.strip() or ref.strip().lower() == STARTER_NAME:
        return starter_model_path()
    ref = ref.strip()
    path = Path(ref).expanduser()
    looks_like_path = path.suffix.lower() == ".gguf" or "/" in ref or "\\" in ref or ref.startswith(".")
    if path.exists() or looks_like_path:
        return path  # inspect_gguf() explains a missing or bad file
    wanted = ref.lower().removesuffix(".gguf")
    matches = [p for p in local_models() if p.stem.lower() == wanted]
    if not matches:
        matches = [p for p in local_models() if wanted in p.stem.lower()]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        names = ", ".join(p.stem for p in matches[:5])
        raise ModelFileError(f"model name {ref!r} is ambiguous ({names}): give more of the name or a path.")
    raise ModelFileError(
        f"no local model named {ref!r}: pass a path to a .gguf file, 'starter', or a name from "
        f"{models_dir()}."
    )
