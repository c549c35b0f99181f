"""engine/ stays headless: it never imports textual or rich (directly or through app/)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"
FORBIDDEN = {"textual", "rich", "typer"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (
            isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "app"
        ):
            names.add("vibechat.app")
    return names


def test_engine_sources_import_no_ui_library():
    offenders = []
    for path in sorted(ENGINE.rglob("*.py")):
        for name in _imports(path):
            top = name.split(".")[0]
            if top in FORBIDDEN or name.startswith("vibechat.app"):
                offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_importing_every_engine_module_loads_no_ui_library():
    modules = sorted(
        f"vibechat.engine.{p.stem}" for p in ENGINE.glob("*.py") if p.stem != "__init__"
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'textual', 'rich', 'typer'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_cli_help_imports_neither_llama_cpp_nor_textual():
    code = (
        "import sys\n"
        "from vibechat.app.commands.cli import cli\n"
        "try:\n"
        "    cli(['run', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'llama_cpp', "
        "'textual', 'numpy', 'mcp'})\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "--prompt" in out.stdout
    assert "HEAVY=\n" in out.stdout


def test_no_bare_top_level_packages_installed():
    code = (
        "import importlib.util\n"
        "print([n for n in ('app', 'engine', 'themes') if importlib.util.find_spec(n)])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    )
    assert out.stdout.strip() == "[]"
