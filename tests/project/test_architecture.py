"""The shape of the package (docs/architecture.md): imports that never go round in a circle, counting
imports made only for type checkers and imports inside functions; folders of at most 15 modules;
modules of at most 700 lines.

An import that has to point back up the layers is listed in ``TIES`` with its reason (none is: a
module below the run names it through ``protocols.py``); each is a type hint or an import inside a
function, never one made when the module loads, and the list may only shrink: a tie that no
longer exists must leave it. ``LONG`` lists the modules over the line limit, to be split along
their seams (none is).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fuzeguard"
MAX_MODULES = 15
MAX_LINES = 700

# Imports that point up the layers: (importing module, imported module) -> why it stays for now.
# None is left: a module below the run names it through ``protocols.py``.
TIES: dict[tuple[str, str], str] = {}
# Modules over MAX_LINES, to be split along their seams.
LONG: set[str] = set()


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules: set[str]) -> dict[str, str]:
    """Every fuzeguard module ``name`` imports, with how: ``load`` (when it loads), ``type``
    (under ``TYPE_CHECKING``) or ``deferred`` (inside a function or class body)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, str] = {}

    def add(target: str, how: str) -> None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            rank = ("type", "deferred", "load")
            if found.get(target) is None or rank.index(how) > rank.index(found[target]):
                found[target] = how

    def visit(node: ast.AST, how: str) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                visit(child, "type")
            for child in node.orelse:
                visit(child, how)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            how = "type" if how == "type" else "deferred"
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, how)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                add(full if full in modules else base, how)
        for child in ast.iter_child_nodes(node):
            visit(child, how)

    visit(ast.parse(path.read_text(encoding="utf-8")), "load")
    return found


def _graph() -> dict[str, dict[str, str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph``, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            found = visit(name)
            if found:
                return found
    return None


def test_no_import_circle_counting_type_hints_and_imports_inside_functions() -> None:
    graph = {name: set(targets) - {b for a, b in TIES if a == name} for name, targets in _graph().items()}
    cycle = _cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_reports_a_circle_through_a_type_hint(tmp_path: Path) -> None:
    """The check above can fail: a module that names the run in a type hint only, under
    ``TYPE_CHECKING``, is read as importing it, and closes a circle with the run's own import."""
    hint = tmp_path / "hint.py"
    hint.write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                    "    from fuzeguard._private.runs.run import Run\n", encoding="utf-8")
    run = "fuzeguard._private.runs.run"
    assert _imports("fuzeguard._private.hint", hint, {run}) == {run: "type"}
    assert _cycle({run: {"fuzeguard._private.hint"}, "fuzeguard._private.hint": {run}}) is not None
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_every_listed_tie_exists_and_is_a_type_hint_or_an_import_inside_a_function() -> None:
    graph = _graph()
    for (importer, imported), why in TIES.items():
        how = graph[importer].get(imported)
        assert how is not None, f"{importer} no longer imports {imported}: remove the tie ({why})"
        assert how in ("type", "deferred"), f"{importer} imports {imported} when it loads ({why})"


def test_no_folder_of_the_package_holds_more_than_15_modules() -> None:
    """A folder is one room with one job; its ``__init__`` is the room itself, not counted."""
    crowded = {
        str(folder.relative_to(PACKAGE.parent)): count
        for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir())]
        if (count := sum(1 for f in folder.glob("*.py") if f.name != "__init__.py")) > MAX_MODULES
    }
    assert crowded == {}


def test_no_module_is_over_700_lines() -> None:
    lines = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
             for p in PACKAGE.rglob("*.py")}
    assert {path for path, n in lines.items() if n > MAX_LINES} == LONG
