"""Guards of the seam between the manager and the task families, read from the source (AST), not from a run.

- the engine imports no gaptui, Textual or TinyDB (it runs in workers and on cluster nodes without them);
- ``engine/tasks/`` (the seam) imports no family, and the built-in families are found through the registry only;
- generic gaptui (everything but ``gaptui/families/``, the families' own commands) imports no family internals
  and names no built-in family;
- no import cycles in ``engine/`` or ``gaptui/``, counting the imports inside functions and the packages an
  import loads (``engine.tasks.form`` runs ``engine/tasks/__init__.py`` first) too;
- no module over 600 lines and no function over 80 lines in ``engine/`` or ``gaptui/``;
- importing every engine module loads no Textual and no TinyDB.
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT

FAMILY_PACKAGES = ("engine.alignment", "engine.gape", "engine.properties", "engine.brec")
BUILTIN_NAMES = ("alignment", "gape", "properties", "brec")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources(*packages: str) -> dict[str, Path]:
    return {_module(p): p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every absolute import of ``path``, in functions too, but not under TYPE_CHECKING."""

    def visit(node: ast.AST) -> Iterator[tuple[int, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                yield from ((child.lineno, alias.name) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                yield child.lineno, child.module
                yield from ((child.lineno, f"{child.module}.{alias.name}") for alias in child.names)
            yield from visit(child)

    yield from visit(ast.parse(path.read_text(), str(path)))


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_engine_imports_no_gaptui_textual_or_tinydb() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in _sources("engine").values()
        for line, name in _imports(path)
        if _within(name, ("gaptui", "textual", "tinydb", "textual_plotext"))
    ]
    assert not bad, "\n".join(bad)


def test_the_seam_imports_no_family() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for module, path in _sources("engine").items()
        if _within(module, ("engine.tasks",))
        for line, name in _imports(path)
        if _within(name, FAMILY_PACKAGES)
    ]
    assert not bad, "\n".join(bad)


def test_generic_gaptui_imports_no_family_internals_and_names_no_family() -> None:
    bad = []
    for module, path in _sources("gaptui").items():
        if _within(module, ("gaptui.families",)):
            continue
        rel = path.relative_to(ROOT)
        bad += [f"{rel}:{line} imports {name}" for line, name in _imports(path) if _within(name, FAMILY_PACKAGES)]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in BUILTIN_NAMES:
                bad.append(f"{rel}:{node.lineno} names the family {node.value!r}")
    assert not bad, "\n".join(bad)


def _loaded(name: str, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that importing ``name`` runs: it and every package above it."""
    parts = name.split(".")
    return {m for m in (".".join(parts[: i + 1]) for i in range(len(parts))) if m in modules}


def test_no_import_cycles_in_the_engine_or_gaptui() -> None:
    modules = _sources("engine", "gaptui")
    graph = {  # a module's own packages are loaded before it, so they are no edge of it
        module: {m for _, name in _imports(path) for m in _loaded(name, modules) if not _within(module, (m,))}
        for module, path in modules.items()
    }
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as cycle:
        raise AssertionError("import cycle: " + " -> ".join(cycle.args[1])) from None


def test_no_function_is_longer_than_80_lines() -> None:
    long = []
    for path in _sources("engine", "gaptui").values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} has {lines} lines")
    assert not long, "\n".join(long)


def test_no_module_is_longer_than_600_lines() -> None:
    long = [
        f"{path.relative_to(ROOT)} has {lines} lines"
        for path in _sources("engine", "gaptui").values()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, "\n".join(long) + "\n(split by concept: a package of modules, each one idea)"


@pytest.mark.e2e
def test_importing_every_engine_module_loads_no_textual_or_tinydb() -> None:
    modules = sorted(m for m in _sources("engine") if not m.endswith("__main__"))
    code = (
        f"import importlib, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'tinydb', 'gaptui'))\n"
        "assert not bad, bad\n"
    )
    env = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
