"""Modules import only what lies below them: checked in a fresh interpreter, so that what an
earlier test imported cannot hide an upward import."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def modules_loaded_by(modules: str) -> set[str]:
    code = f"import sys, {modules}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    return set(done.stdout.split())


@pytest.mark.parametrize("modules, above", [
    ("moelab.runs.launchers.local, moelab.runs.launchers.ray, moelab.runs.launchers.slurm",
     "moelab.cli"),
    ("moelab.tasks", "moelab.train"),
    ("moelab.train", "moelab.runs"),
])
def test_a_layer_does_not_import_the_layers_above_it(modules, above):
    loaded = modules_loaded_by(modules)
    assert set(modules.split(", ")) <= loaded
    assert not {name for name in loaded if name == above or name.startswith(above + ".")}
