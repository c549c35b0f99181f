"""The import graph of the vibechat package has no cycles, and the TUI imports no CLI command.

The graph is built from the sources with ``ast``, not by importing anything, and it counts
every import statement wherever it stands: at module level, inside functions and methods
(the usual way to hide a cycle), inside ``try`` blocks and inside ``if TYPE_CHECKING:``
blocks. Annotation-only imports count too: a module that needs another's types to be
checked depends on it as surely as one that calls it, and a cycle made only of them still
says that a type lives at the wrong layer.

Edges: ``import vibechat.a.b`` and ``from vibechat.a import b`` (``b`` a submodule) import
``vibechat.a.b``; ``from vibechat.a.b import name`` (``name`` not a submodule) imports
``vibechat.a.b``; relative imports are resolved against the importing module's package.
The implicit import of the parent packages (``vibechat.a`` for ``vibechat.a.b``) is not an
edge: every package ``__init__`` would otherwise sit in a cycle with any submodule it
mentions, which says nothing about the layering.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Repository folder -> installed package (pyproject.toml, [tool.setuptools.package-dir]).
PACKAGE_DIRS = {"app": "vibechat.app", "engine": "vibechat.engine", "themes": "vibechat.themes"}

TUI = "vibechat.app.tui"
# The CLI's room: the Typer app and each command's module (app/commands/).
COMMAND_MODULE = re.compile(r"^vibechat\.app\.commands(\.[a-z_]+)?$")

Edge = tuple[str, str, str]  # (importer, imported, "file:line")


def _modules() -> dict[str, Path]:
    """Every module of the package, by its installed name."""
    found: dict[str, Path] = {}
    for folder, package in PACKAGE_DIRS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _edges(modules: dict[str, Path]) -> list[Edge]:
    edges: list[Edge] = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.append(submodule if submodule in modules else base)
            for target in targets:
                if target in modules and target != name:
                    edges.append((name, target, f"{where}:{node.lineno}"))
                elif target == name:
                    raise AssertionError(f"{where}:{node.lineno} imports its own module")
    return edges


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the strongly connected components of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _shortest_cycle(graph: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """The shortest path start -> ... -> start inside one component (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & within):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if succ not in previous:
                    previous[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def _graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], list[str]]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for importer, imported, line in _edges(modules):
        graph[importer].add(imported)
        if line not in where[importer, imported]:
            where[importer, imported].append(line)
    return graph, where


def _describe(path: list[str], where: dict[tuple[str, str], list[str]]) -> str:
    return "\n".join(
        f"    {a} -> {b}   ({', '.join(where[a, b])})" for a, b in zip(path, path[1:], strict=False)
    )


def test_the_graph_sees_the_package():
    graph, _ = _graph()
    assert {
        "vibechat.app.commands.cli",
        "vibechat.app.tui",
        "vibechat.app.tui.shell.app",
        "vibechat.engine.settings.config",
        "vibechat.themes",
    } <= set(graph)
    assert (
        "vibechat.engine.errors" in graph["vibechat.engine.settings.config"]
    )  # relative, module level
    assert "vibechat.app.tui" in graph["vibechat.app.commands.cli"]  # relative, inside a function
    assert (
        "vibechat.app.tui.shell.app" in graph["vibechat.app.tui"]
    )  # inside TYPE_CHECKING and a function
    assert (
        "vibechat.engine.llama.loading" in graph["vibechat.engine.llama.llamacpp"]
    )  # from . import loading
    assert (
        "vibechat.engine.turns.backend" in graph["vibechat.engine.llama.worker"]
    )  # absolute (vibechat.engine...)


def test_tarjan_finds_every_cycle():
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    components = sorted(c for c in _strongly_connected(graph) if len(c) > 1)
    assert components == [["a", "b", "c"], ["d", "e"]]
    assert _shortest_cycle(graph, "b", {"a", "b", "c"}) == ["b", "c", "a", "b"]


def test_no_import_cycles():
    graph, where = _graph()
    cycles = [component for component in _strongly_connected(graph) if len(component) > 1]
    report = []
    for component in cycles:
        members = set(component)
        lines = [f"  cycle of {len(component)} modules: {', '.join(component)}"]
        # One concrete loop through each member not yet shown, so every edge to cut is visible.
        shown: set[str] = set()
        for member in component:
            if member in shown:
                continue
            loop = _shortest_cycle(graph, member, members)
            shown.update(loop)
            lines.append(_describe(loop, where))
        report.append("\n".join(lines))
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(report)


def test_the_tui_imports_no_cli_command_module():
    """The chat UI is one front end and the CLI commands another: code both need lives in a
    neutral module (or in the engine), never in a command module the TUI reaches into,
    directly or through another module."""
    graph, where = _graph()
    offenders = []
    for module in sorted(graph):
        if module != TUI and not module.startswith(TUI + "."):
            continue
        previous = {module: module}
        frontier = [module]
        while frontier:  # breadth first: the shortest chain to each module it loads
            following = []
            for node in frontier:
                for imported in sorted(graph[node]):
                    if imported in previous:
                        continue
                    previous[imported] = node
                    if COMMAND_MODULE.match(imported):
                        chain = [imported]
                        while chain[-1] != module:
                            chain.append(previous[chain[-1]])
                        offenders.append(
                            f"  {module} imports {imported}:\n" + _describe(chain[::-1], where)
                        )
                    else:
                        following.append(imported)
            frontier = following
    assert offenders == [], "the TUI imports CLI command modules:\n" + "\n".join(offenders)


# The engine's rooms (engine/<room>/, each __init__ says what lives there and what it imports)
# and which rooms each may import. "base" is engine/'s own modules (errors, files, sanitize,
# paths, system): every room may use them, and they use no room. A room not listed for another
# is out of bounds, whether the import stands at module level, in a function or under
# TYPE_CHECKING. docs/ARCHITECTURE.md draws the same table.
ENGINE = "vibechat.engine"
ROOM_MAY_IMPORT: dict[str, set[str]] = {
    "base": set(),
    "settings": {"base"},
    "turns": {"base", "settings"},
    "models": {"base", "settings"},
    "remote": {"base", "settings", "turns"},
    "attach": {"base", "settings", "turns"},
    "chat": {"base", "settings", "turns", "tools", "attach"},
    "llama": {"base", "settings", "turns", "models"},
    "tools": {"base", "settings", "turns"},
}


def _room(module: str) -> str | None:
    """The engine room of a module, "base" for engine/'s own modules, None outside the engine."""
    if module != ENGINE and not module.startswith(ENGINE + "."):
        return None
    parts = module[len(ENGINE) + 1 :].split(".") if module != ENGINE else []
    if len(parts) >= 2 or (parts and (ROOT / "engine" / parts[0]).is_dir()):
        return parts[0]
    return "base"


def test_every_engine_module_lives_in_a_known_room():
    graph, _ = _graph()
    rooms = {room for room in map(_room, graph) if room is not None}
    assert rooms == set(ROOM_MAY_IMPORT), (
        f"rooms on disk {sorted(rooms)} vs the table {sorted(ROOM_MAY_IMPORT)}"
    )
    for folder in sorted(
        p for p in (ROOT / "engine").iterdir() if p.is_dir() and p.name != "__pycache__"
    ):
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
        assert doc and "Imports" in doc, (
            f"engine/{folder.name}/__init__.py must say what lives there and what it imports"
        )


def test_engine_rooms_import_only_the_rooms_below_them():
    graph, where = _graph()
    offenders = []
    for importer in sorted(graph):
        mine = _room(importer)
        if mine is None:
            continue
        for imported in sorted(graph[importer]):
            theirs = _room(imported)
            if theirs is None:
                offenders.append(
                    f"  {importer} -> {imported} (the engine imports the app)"
                    f"   ({', '.join(where[importer, imported])})"
                )
            elif theirs != mine and theirs not in ROOM_MAY_IMPORT[mine]:
                offenders.append(
                    f"  {importer} ({mine}) -> {imported} ({theirs})"
                    f"   ({', '.join(where[importer, imported])})"
                )
    assert not offenders, "imports across the engine's layers:\n" + "\n".join(offenders)


def test_every_package_folder_is_installed():
    """A room missing from pyproject's package lists works in the editable checkout and is absent
    from a wheel (``pip install .``): engine/tools/ was, once."""
    import tomlkit  # a dependency; tomllib is Python 3.11+

    setuptools = tomlkit.parse((ROOT / "pyproject.toml").read_text()).unwrap()["tool"]["setuptools"]
    folders = {
        str(p.parent.relative_to(ROOT))
        for folder in PACKAGE_DIRS
        for p in (ROOT / folder).rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    listed = set(setuptools["packages"])
    mapped = setuptools["package-dir"]
    for folder in sorted(folders):
        package = "vibechat." + folder.replace("/", ".")
        assert package in listed, f"{folder}/ is not in pyproject's [tool.setuptools] packages"
        assert mapped.get(package) == folder, (
            f"{folder}/ is not in pyproject's [tool.setuptools.package-dir]"
        )


def test_app_shared_modules_import_no_command():
    """app/'s shared modules (config, backends, run plans, progress, reports) serve the chat and
    the CLI alike: none imports the CLI's room."""
    graph, where = _graph()
    offenders = [
        f"  {importer} -> {imported}   ({', '.join(where[importer, imported])})"
        for importer in sorted(graph)
        if importer.startswith("vibechat.app.")
        and not COMMAND_MODULE.match(importer)
        and not importer.startswith(TUI)
        for imported in sorted(graph[importer])
        if COMMAND_MODULE.match(imported)
    ]
    assert not offenders, "app/'s shared modules import the CLI's room:\n" + "\n".join(offenders)


# The TUI's rooms (app/tui/<room>/, each __init__ says what lives there and what it imports) and
# which rooms each may import, as for the engine: "base" is app/tui's own modules (outside text,
# the chat's state, layout helpers). Widgets, the conversation and screens never import
# controllers or the shell; docs/ARCHITECTURE.md draws the same table.
TUI_ROOM_MAY_IMPORT: dict[str, set[str]] = {
    "base": set(),
    "widgets": {"base"},
    "conversation": {"base", "widgets"},
    "screens": {"base", "widgets"},
    "controllers": {"base", "widgets", "conversation", "screens"},
    "shell": {"base", "widgets", "conversation", "screens", "controllers"},
}


def _tui_room(module: str) -> str | None:
    """The TUI room of a module ("base" for app/tui's own modules), None outside the TUI; the
    package itself (``create_app``) is the shell's."""
    if module == TUI:
        return "shell"
    if not module.startswith(TUI + "."):
        return None
    parts = module[len(TUI) + 1 :].split(".")
    return parts[0] if len(parts) >= 2 or (ROOT / "app" / "tui" / parts[0]).is_dir() else "base"


def test_every_tui_module_lives_in_a_known_room():
    graph, _ = _graph()
    rooms = {room for room in map(_tui_room, graph) if room is not None}
    assert rooms == set(TUI_ROOM_MAY_IMPORT), (
        f"rooms on disk {sorted(rooms)} vs the table {sorted(TUI_ROOM_MAY_IMPORT)}"
    )
    for folder in sorted(
        p for p in (ROOT / "app" / "tui").iterdir() if p.is_dir() and p.name != "__pycache__"
    ):
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
        assert doc and "Imports" in doc or "May import" in (doc or ""), (
            f"app/tui/{folder.name}/__init__.py must say what lives there and what it imports"
        )


def test_tui_rooms_import_only_the_rooms_below_them():
    graph, where = _graph()
    offenders = []
    for importer in sorted(graph):
        mine = _tui_room(importer)
        if mine is None:
            continue
        for imported in sorted(graph[importer]):
            theirs = _tui_room(imported)
            if theirs is not None and theirs != mine and theirs not in TUI_ROOM_MAY_IMPORT[mine]:
                offenders.append(
                    f"  {importer} ({mine}) -> {imported} ({theirs})"
                    f"   ({', '.join(where[importer, imported])})"
                )
    assert not offenders, "imports across the TUI's layers:\n" + "\n".join(offenders)


def test_the_architecture_doc_draws_the_tables_the_tests_enforce():
    """docs/ARCHITECTURE.md's room tables list the same rooms and imports as the tables above."""
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    for prefix, table in (("engine/", ROOM_MAY_IMPORT), ("app/tui/", TUI_ROOM_MAY_IMPORT)):
        for room, may in table.items():
            label = f"base (`{prefix}*.py`)" if room == "base" else f"`{room}/`"
            rows = [line for line in doc.splitlines() if line.startswith(f"| {label} |")]
            assert rows, f"docs/ARCHITECTURE.md has no row for {prefix}{room}"
            cell = rows[0].split("|")[2].strip()
            listed = (
                set() if cell.startswith("nothing") else {w.strip(" `/") for w in cell.split(",")}
            )
            assert listed == may, (
                f"docs/ARCHITECTURE.md: {prefix}{room} may import {sorted(listed)}, the "
                f"test says {sorted(may)}"
            )
