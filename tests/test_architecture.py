"""The import rule of docs/architecture.md, checked on the source: every package imports only
the packages below it, no module imports the package root, and no modules import each other in
a circle, counting the imports inside functions too (a function-local import hides an arrow,
it does not remove it)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import moelab

SRC = Path(moelab.__file__).parent

LAYERS = (
    ("errors", "presets", "version"),
    ("fileio", "codec"),
    ("config",),
    ("report",),
    ("stats",),
    ("scaling",),
    ("accounting", "precision", "numerics"),
    ("linear_cross_entropy", "moe", "data"),
    ("model",),
    ("tasks",),
    ("train",),
    ("runs",),
    ("study", "sweep"),
    ("findings",),
    ("cli",),
    ("__main__",),
)
"""Bottom to top. A package may import those of lower rows; packages of one row are siblings
and import neither each other nor anything above."""
RANK = {package: rank for rank, row in enumerate(LAYERS) for package in row}
TORCH_FREE = ("errors", "fileio", "codec", "config", "report", "scaling", "stats")
"""Importable without torch: the law maths runs where no torch is installed."""


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imported_modules(path: Path, module: str) -> set[str]:
    """Every moelab module ``path`` imports, anywhere in the file."""
    tree = ast.parse(path.read_text("utf-8"))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("moelab"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")[: len(module.split(".")) - node.level + is_package]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("moelab"):
                found.add(target)
                # ``from moelab.x import y`` may name a submodule y: count it when it is one
                found.update(f"{target}.{alias.name}" for alias in node.names
                             if _is_module(f"{target}.{alias.name}"))
    return found


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (SRC / relative).with_suffix(".py").is_file() or (SRC / relative / "__init__.py").is_file()


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for path in sorted(SRC.rglob("*.py")):
        module = module_name(path)
        graph[module] = {name for name in imported_modules(path, module) if _is_module(name)
                         and name != module}
    return graph


def test_every_package_has_a_layer():
    packages = {package_of(module) for module in import_graph()} - {""}
    assert packages <= set(RANK), f"packages without a layer: {sorted(packages - set(RANK))}"


def test_packages_import_only_the_layers_below():
    wrong = []
    for module, imports in import_graph().items():
        source = package_of(module)
        for target in imports:
            destination = package_of(target)
            if module == "moelab":  # the package root may offer shortcuts to anything
                continue
            if destination == "":
                wrong.append(f"{module} imports the package root")
            elif destination != source and RANK[destination] >= RANK[source]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "arrows up or sideways:\n" + "\n".join(sorted(wrong))


def test_no_import_circles():
    graph = import_graph()
    circles = [sorted(component) for component in strongly_connected(graph) if len(component) > 1]
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    components.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def test_the_graph_check_sees_a_circle_and_an_upward_arrow():
    graph = {"moelab.a.x": {"moelab.a.y"}, "moelab.a.y": {"moelab.a.x"}, "moelab.a.z": set()}
    assert sorted(map(sorted, strongly_connected(graph))) == [["moelab.a.x", "moelab.a.y"],
                                                             ["moelab.a.z"]]
    loop = SRC / "train" / "loop.py"
    assert "moelab.train.loop" in import_graph()
    assert imported_modules(loop, "moelab.train.loop") >= {"moelab.model"}


@pytest.mark.slow
def test_the_torch_free_layers_import_without_torch():
    modules = [module for module in import_graph() if package_of(module) in TORCH_FREE]
    code = ("import importlib, sys\n"
            f"for name in {modules!r}: importlib.import_module(name)\n"
            "print('torch' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False", "importing the torch-free layers imports torch"
