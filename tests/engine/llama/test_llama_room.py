"""engine/llama/'s parts talk through what they hand each other, not through each other's
private attributes: the drafting loop is handed a ``DecodeTarget`` (the context, its memory,
the tokens the KV cache holds, the cancel flag), the ``Emitter`` a token's bytes and the
vocabulary, instead of reaching into ``LlamaCppBackend``'s ``_ctx``/``_mem``/``_tokens``.
The loops themselves are proven on the real model (test_llamacpp_backend.py,
test_speculative_model.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOM = Path(__file__).resolve().parents[3] / "engine" / "llama"
# Private by name, public by documentation: os._exit ends a process without cleanup.
ALLOWED = {"os._exit"}


def private_reads(path: Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls``: another object's private attribute."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        text = ast.unparse(node)
        if text not in ALLOWED:
            found.append(f"{path.name}:{node.lineno}: {text}")
    return found


def test_no_module_of_the_llama_room_reads_another_objects_private_attributes():
    files = sorted(ROOM.glob("*.py"))
    assert any(path.name == "drafting.py" for path in files)
    reads = [read for path in files for read in private_reads(path)]
    assert reads == []
