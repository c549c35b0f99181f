"""Imports inside functions are a choice a module states once: a module of app/, engine/ or
themes/ that imports inside a function (start-up time: Textual, llama-cpp-python,
huggingface_hub, the MCP SDK, Jinja2 and tomlkit are heavy; or a module that exists on one
platform only) says so in its docstring, in one paragraph that begins "Imports inside
functions are deliberate:". An import with no such reason belongs at the top."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTE = "Imports inside functions are deliberate:"


def imports_inside_functions(tree: ast.Module) -> list[int]:
    """The lines of the imports inside a function (one under ``if TYPE_CHECKING`` is none)."""
    lines: list[int] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                if in_function:
                    lines.append(child.lineno)
            elif isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING":
                continue
            else:
                visit(
                    child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                )

    visit(tree, False)
    return lines


def modules() -> list[Path]:
    return sorted(
        path for folder in ("app", "engine", "themes") for path in (ROOT / folder).rglob("*.py")
    )


def test_the_walk_sees_imports_inside_functions_and_nothing_else():
    tree = ast.parse(
        "import os\nif TYPE_CHECKING:\n    import x\n"
        "def f():\n    import json\n    class A:\n        def g(self):\n"
        "            from a import b\n"
    )
    assert imports_inside_functions(tree) == [5, 8]


def test_every_module_that_imports_inside_functions_says_why_once():
    unsaid, twice = [], []
    for path in modules():
        tree = ast.parse(path.read_text(), str(path))
        if not imports_inside_functions(tree):
            continue
        said = (ast.get_docstring(tree) or "").count(NOTE)
        (unsaid if said == 0 else twice if said > 1 else []).append(str(path.relative_to(ROOT)))
    assert not unsaid, (
        f"modules importing inside functions without saying why (add a paragraph "
        f"'{NOTE} ...' to the docstring, or move the imports to the top): {unsaid}"
    )
    assert not twice, f"modules saying it more than once: {twice}"


def test_no_module_says_it_imports_inside_functions_when_it_does_not():
    stale = [
        str(path.relative_to(ROOT))
        for path in modules()
        if NOTE in (ast.get_docstring(ast.parse(path.read_text())) or "")
        and not imports_inside_functions(ast.parse(path.read_text()))
    ]
    assert not stale, (
        f"modules whose docstring speaks of imports inside functions they no longer have: {stale}"
    )
