"""scaling/ is the torch-free law maths at the bottom of the house: importing all of it loads
neither torch nor any moelab package above it, and no module of it names one."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

SCALING = Path(__file__).resolve().parents[1] / "src" / "moelab" / "scaling"
ABOVE = ("moelab.runs", "moelab.study", "moelab.train", "moelab.sweep", "moelab.cli")


def scaling_modules() -> list[str]:
    return sorted(f"moelab.scaling.{path.stem}" for path in SCALING.glob("*.py")
                  if path.stem != "__init__")


def imported_names(path: Path) -> set[str]:
    """Every module an import statement of ``path`` names, at any depth (function bodies too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_importing_every_scaling_module_loads_no_torch_and_nothing_above():
    code = ("import importlib, json, sys\n"
            f"for name in {scaling_modules()!r}:\n"
            "    importlib.import_module(name)\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert "torch" not in loaded
    assert [name for name in loaded if name.startswith(ABOVE)] == []


def test_no_scaling_module_imports_torch_or_a_package_above_it():
    assert len(scaling_modules()) >= 10  # the glob found the package
    for path in SCALING.glob("*.py"):
        for name in imported_names(path):
            assert name.split(".")[0] != "torch", (path.name, name)
            assert not name.startswith(ABOVE), (path.name, name)
