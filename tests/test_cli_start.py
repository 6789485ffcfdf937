"""The command line starts without its heavy dependencies: ``--help`` (of moelab and of every
command), ``--version`` and argument errors import neither torch, scipy nor matplotlib
(docs/architecture.md, cli). A behaviour test, in a fresh interpreter: what a start imports,
never how long it takes (``benchmarks/cli_start.py`` measures that)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from moelab.cli import build_parser

HEAVY = ("torch", "scipy", "matplotlib")

PROBE = r"""
import contextlib, io, json, sys
from moelab.cli import main
codes = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            codes.append(main(argv))
        except SystemExit as exc:
            codes.append(exc.code)
print(json.dumps({"codes": codes, "heavy": sorted(m for m in %r if m in sys.modules)}))
""" % (HEAVY,)


def command_paths(parser=None, prefix=()) -> list[tuple[str, ...]]:
    """Every command and sub-command, as the words that name it (``("sweep", "run")``)."""
    parser = parser or build_parser()
    paths = []
    for action in parser._actions:
        for name, sub in getattr(action, "choices", None).items() if isinstance(
                getattr(action, "choices", None), dict) else ():
            paths.append((*prefix, name))
            paths.extend(command_paths(sub, (*prefix, name)))
    return paths


def probe(argvs: list[list[str]]) -> dict:
    """Run ``main(argv)`` for each argv in one fresh interpreter: their exit codes, and which
    heavy modules were imported by the end."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argvs)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_command_list_is_found():
    paths = command_paths()
    assert {("train",), ("study",), ("sweep-sparsity",), ("fit",)} <= set(paths)


@pytest.mark.slow
def test_help_version_and_every_commands_help_import_nothing_heavy():
    argvs = [["--help"], ["--version"], *[[*path, "--help"] for path in command_paths()]]
    result = probe(argvs)
    assert result["codes"] == [0] * len(argvs)
    assert result["heavy"] == []


@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    [],  # no command: the help, exit 2
    ["no-such-command"],
    ["train"],  # CONFIG missing
    ["train", "demo", "--no-such-flag"],
    ["study", "demo", "--jobs", "0"],
    ["study", "demo", "--budgets", "lots"],
    ["sweep-sparsity", "cpu", "--bootstrap", "-1"],
])
def test_an_argument_error_exits_2_without_anything_heavy(argv):
    result = probe([argv])
    assert result["codes"] == [2]
    assert result["heavy"] == []


@pytest.mark.slow
def test_the_probe_sees_a_heavy_import():
    """The probe can fail: a command that trains imports torch, and the probe says so."""
    result = probe([["params", "demo"]])
    assert result["codes"] == [0]
    assert "torch" not in result["heavy"]  # counting parameters needs no torch either
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", PROBE.replace("from moelab.cli import main",
                                                              "import torch\nfrom moelab.cli import main"),
                          json.dumps([["--version"]])], env=env, capture_output=True, text=True,
                         check=True)
    assert "torch" in json.loads(out.stdout.strip().splitlines()[-1])["heavy"]
