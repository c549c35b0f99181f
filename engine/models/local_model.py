"""``LocalModel``: one GGUF model on this machine that vibechat can load, wherever it was
found. The record the model sources share (``store``: vibechat's own downloads;
``discover``: other tools' folders) and ``models`` gathers: it sits below all three."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Where a local model comes from ("file": opened by path, see opened.py). Only vibechat's own
# downloads can be removed.
SOURCES = ("vibechat", "starter", "hf-cache", "ollama", "lmstudio", "file")


@dataclass(frozen=True)
class LocalModel:
    """A GGUF model on this machine that vibechat can load."""

    # What --model, `models rm` and `models info` accept.
    name: str
    # The file to load (the first shard of a split model).
    path: Path
    # Bytes, every shard included.
    size: int
    # "Q4_K_M" ... ("?" when neither the name nor the header says).
    quant: str
    # One of SOURCES.
    source: str
    # Of the file (the first shard), when known.
    sha256: str | None = None
    # Hugging Face repo id, when known.
    repo: str | None = None
    # Every shard, in order (empty: just ``path``).
    files: tuple[Path, ...] = ()
    # The repo commit it was downloaded from.
    revision: str | None = None
    # ISO 8601 UTC, when vibechat downloaded it.
    added: str | None = None
    # The vision projector (mmproj) pulled with it or lying beside it.
    projector: Path | None = None

    @property
    def read_only(self) -> bool:
        """Found in another tool's folder (or bundled): vibechat never deletes it."""
        return self.source != "vibechat"

    @property
    def all_files(self) -> tuple[Path, ...]:
        return self.files or (self.path,)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "path": str(self.path),
            "size": self.size,
            "quant": self.quant,
            "sha256": self.sha256,
            "source": self.source,
            "repo": self.repo,
            "files": [str(f) for f in self.all_files],
            "revision": self.revision,
            "added": self.added,
            "projector": str(self.projector) if self.projector is not None else None,
        }
