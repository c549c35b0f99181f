"""``LocalModel``: one GGUF model on this machine that vibechat can load, wherever it was
found. The record the model sources share (``store``: vibechat's own downloads;
``discover``: other tools' folders) and ``models`` gathers: it sits below all three."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Where a local model comes from. Only vibechat's own downloads can be removed.
SOURCES = (
    "vibechat",
    "starter",
    "hf-cache",
    "ollama",
    "lmstudio",
    "file",
)  # file: opened by path (opened.py)


@dataclass(frozen=True)
class LocalModel:
    """A GGUF model on this machine that vibechat can load."""

    name: str  # what --model, `models rm` and `models info` accept
    path: Path  # the file to load (the first shard of a split model)
    size: int  # bytes, every shard included
    quant: str  # "Q4_K_M" ... ("?" when neither the name nor the header says)
    source: str  # one of SOURCES
    sha256: str | None = None  # of the file (the first shard), when known
    repo: str | None = None  # Hugging Face repo id, when known
    files: tuple[Path, ...] = ()  # every shard, in order (empty: just ``path``)
    revision: str | None = None  # the repo commit it was downloaded from
    added: str | None = None  # ISO 8601 UTC, when vibechat downloaded it
    projector: Path | None = None  # the vision projector (mmproj) pulled with it or lying beside it

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
