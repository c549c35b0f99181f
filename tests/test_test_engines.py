"""The suite's own rule for the engines it builds: each runs the pytest-xdist worker's share of
the cores (conftest.py ``worker_threads``). An engine left at llama.cpp's default spins a thread
for every core while the other workers' engines do the same: on two cores one token's
llama_decode then stalled for seconds, and a stop was taken for a hang (docs/PERFORMANCE.md,
"The test suite's time")."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def names_threads(call: ast.Call) -> bool:
    for keyword in call.keywords:
        if keyword.arg == "threads":
            return True
        if keyword.arg is None and isinstance(
            keyword.value, ast.Dict
        ):  # **{"threads": ..., **changes}
            if any(
                isinstance(key, ast.Constant) and key.value == "threads"
                for key in keyword.value.keys
            ):
                return True
    return False


def test_every_engine_a_test_builds_names_its_threads():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "LlamaCppOptions"
                and not names_threads(node)
            ):
                offenders.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert offenders == [], f"LlamaCppOptions without threads=worker_threads(): {offenders}"
