"""Every name is imported from the module that defines it (issue 26, point 1).

When engine/ moved into rooms, the modules that were split kept importing their parts' names
"for the importers" (``knobs`` for choices.py and limits.py, ``history`` for records.py and
database.py, ``openai_backend`` for options.py, ``chat_template`` for prompt_format.py,
``config`` for table.py and the config's checks and docs). A reader looking for
``round_context`` then finds it in two places and cannot tell which one is its home, and the
layering that tests/test_import_graph.py checks is blurred: an import of ``knobs`` may really
be one of ``limits``. So, read from the sources with ``ast`` (nothing imported):

- an engine module uses every name it imports from another vibechat module (an import it
  does not use is only there for others: a re-export);
- no file of the project (app/, engine/, tests/, bench/) imports an engine name from a
  module that only imported it: each import names the module that defines the name; the
  one-line imports of the scripts that tests run in a child Python (a string) count too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_import_graph import ROOT, _modules

ENGINE = "vibechat.engine"
SOURCES = ("app", "engine", "tests", "bench")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# A one-line import in a script held in a string: "from vibechat.engine.x import a, b as c".
SCRIPT_IMPORT = re.compile(
    r"^[ \t]*from[ \t]+(vibechat\.[\w.]+)[ \t]+import[ \t]+([\w, \t]+)$", re.MULTILINE
)


def _module_of(path: Path, modules: dict[str, Path]) -> str | None:
    return next((name for name, file in modules.items() if file == path), None)


def _base(node: ast.ImportFrom, importer: str | None, path: Path) -> str | None:
    """The module ``node`` imports from, absolute (None: a relative import outside the package)."""
    if not node.level:
        return node.module or ""
    if importer is None:
        return None
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    parts = package.split(".")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imported_names(modules: dict[str, Path]) -> dict[str, dict[str, tuple[str, str, int]]]:
    """For each module: the names its top-level ``from vibechat... import`` statements bind,
    each with the module and name it came from and the line."""
    found: dict[str, dict[str, tuple[str, str, int]]] = {}
    for name, path in modules.items():
        bound: dict[str, tuple[str, str, int]] = {}
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ImportFrom):
                base = _base(node, name, path)
                if base in modules:
                    for alias in node.names:
                        if f"{base}.{alias.name}" not in modules:  # a name, not a submodule
                            bound[alias.asname or alias.name] = (base, alias.name, node.lineno)
        found[name] = bound
    return found


def _home(module: str, name: str, imported: dict[str, dict[str, tuple[str, str, int]]]) -> str:
    """The module that defines ``name`` as ``module`` has it (following imports; bounded)."""
    for _ in range(len(imported)):
        if name not in imported.get(module, {}):
            return module
        module, name, _line = imported[module][name]
    raise AssertionError(f"an import loop for {name}")


def _used(tree: ast.Module) -> set[str]:
    """The names a module reads: in code, and in annotations written as strings."""
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    for node in ast.walk(tree):
        annotations = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            annotations = [
                a.annotation for a in (*node.args.args, *node.args.kwonlyargs) if a.annotation
            ]
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        for annotation in annotations:
            for part in ast.walk(annotation) if annotation is not None else ():
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    used.update(IDENTIFIER.findall(part.value))
    return used


def test_the_checks_see_a_reexport():
    """The helpers on a module made up here: an unused import is seen, and followed home."""
    tree = ast.parse(
        "from .limits import CONTEXT_STEP, round_context\n\ndef f(x: 'Thing') -> int:\n"
        "    return CONTEXT_STEP\n"
    )
    assert {"CONTEXT_STEP", "Thing"} <= _used(tree) and "round_context" not in _used(tree)
    imported = {
        "a.knobs": {"round_context": ("a.limits", "round_context", 1)},
        "a.limits": {},
        "a.run": {"round_context": ("a.knobs", "round_context", 3)},
    }
    assert _home("a.run", "round_context", imported) == "a.limits"


def test_engine_modules_import_only_what_they_use():
    modules = _modules()
    imported = _imported_names(modules)
    unused = []
    for module, path in sorted(modules.items()):
        if not module.startswith(ENGINE + "."):
            continue
        used = _used(ast.parse(path.read_text(), str(path)))
        unused += [
            f"  {path.relative_to(ROOT)}:{line}: {name} (from {base})"
            for name, (base, _orig, line) in sorted(imported[module].items())
            if name not in used
        ]
    assert unused == [], (
        "imported but not used, i.e. re-exported: import these where they are defined "
        "instead:\n" + "\n".join(unused)
    )


def _imports_in(path: Path, importer: str | None) -> list[tuple[str | None, list[str], int]]:
    """(module, names, line) of each ``from ... import`` of the file, and of each one-line
    import in the scripts its strings hold."""
    found: list[tuple[str | None, list[str], int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            found.append(
                (_base(node, importer, path), [alias.name for alias in node.names], node.lineno)
            )
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "from vibechat." in node.value
        ):
            for match in SCRIPT_IMPORT.finditer(node.value):
                names = [part.split()[0] for part in match.group(2).split(",") if part.strip()]
                found.append((match.group(1), names, node.lineno))
    return found


def test_the_scripts_imports_are_read(tmp_path):
    made_up = tmp_path / "made_up.py"
    made_up.write_text(
        'from .x import y\nrun("""\nimport os\n    from vibechat.engine.chat.history '
        "import History, "
        'HistoryError as E\n""")\n'
    )
    assert _imports_in(made_up, None)[-1] == (
        "vibechat.engine.chat.history",
        ["History", "HistoryError"],
        2,
    )
    assert (
        len(_imports_in(made_up, None)) == 2
    )  # the relative import, outside the package, is None's


def test_every_engine_name_is_imported_from_its_home():
    modules = _modules()
    imported = _imported_names(modules)
    wrong = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            for base, names, line in _imports_in(path, _module_of(path, modules)):
                if base not in modules or not base.startswith(ENGINE):
                    continue
                for name in names:
                    if f"{base}.{name}" in modules:
                        continue
                    home = _home(base, name, imported)
                    if home != base:
                        wrong.append(
                            f"  {path.relative_to(ROOT)}:{line}: {name} from {base}: "
                            f"import it from {home}"
                        )
    assert wrong == [], "names imported from a module that only imports them:\n" + "\n".join(wrong)
