"""Bounded inputs: YAML alias bombs and oversized values, metrics lines that are not events, a
torn last metrics line, outputs that would overwrite inputs, and three small refusals.

Every case is one stderr line and exit code 2 (or, for a torn tail, a report with a warning),
and leaves the files it was given as they were. The bombs run in a child process under a 2 GiB
address-space limit, so a bomb that expands shows as a MemoryError or a hang (the child's
timeout), not as a slow test. Reports read a copy of the pinned house study (no training);
resume, branch and generate share one tiny two-step run.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from moelab.cli import main
from moelab.config import load_config
from moelab.errors import MAX_SHOWN_CHARS, short_repr
from moelab.fileio import is_bookkeeping
from one_line_errors import refused_on_one_line
from tiny_overrides import TINY_MOE_RUN

HOUSE_STUDY = Path(__file__).parent / "fixtures" / "house" / "study"
SEED0 = Path("runs") / "moe" / "seed0"
MEMORY_LIMIT = 2 << 30
LONGEST_LINE = 400
"""No one-line error here needs more: the message, a temporary path or two, and an elided value."""


def alias_bomb(depth: int) -> str:
    """model.d_model as ``depth`` levels of nested aliases, nine wide: 9**depth leaves once
    expanded (at depth 9, 387 million) from about 50 bytes a level."""
    levels = ["&a0 [x, x, x, x, x, x, x, x, x]"] + [
        f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, depth)]
    return "model:\n  d_model: [" + ", ".join(levels) + "]\n"


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by its SHA-256 (the writer lock's file aside): what 'left as
    it was' is checked against."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not is_bookkeeping(p)}


def copy_house_study(destination: Path) -> Path:
    shutil.copytree(HOUSE_STUDY, destination)
    return destination


# --------------------------------------------------------------------------------------------
# Alias bombs and oversized values, in a child under a memory limit
# --------------------------------------------------------------------------------------------

CHILD = """
import contextlib, io, json, sys
from moelab.cli import main
results = []
for args in json.loads(sys.stdin.read()):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_bounded(commands: list[list[str]]) -> list[tuple[int, str]]:
    """(exit code, stderr) of each ``moelab`` command line, all run by one child process
    limited to ``MEMORY_LIMIT`` of address space (one interpreter start for them all)."""
    child = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(commands),
                           capture_output=True, text=True, timeout=300, preexec_fn=_limit_memory)
    assert child.returncode == 0, child.stderr[-2000:]
    return [tuple(result) for result in json.loads(child.stdout.splitlines()[-1])]


@pytest.mark.slow
def test_alias_bombs_and_huge_values_are_one_short_line_in_bounded_memory(tmp_path):
    """A bomb as a config file, a --set value, a run's config.yaml (eval and report) and a
    study's study.yaml, at three depths; a 100 KB and a 60 KB --set value."""
    cases = []  # (command line, texts its one line must contain)
    for depth in (3, 6, 9):
        bomb = alias_bomb(depth)
        config = tmp_path / f"bomb{depth}.yaml"
        config.write_text(bomb)
        study = copy_house_study(tmp_path / f"study{depth}")
        (study / SEED0 / "config.yaml").write_text(bomb)
        (study / "study.yaml").write_text(bomb)
        flow = bomb.split("d_model: ", 1)[1].strip()
        cases += [
            (["params", str(config)], [f"bomb{depth}.yaml' is not valid YAML at line 2",
                                       "aliases (*a0) are not allowed"]),
            (["params", "demo", "--set", f"model.d_model={flow}"],
             ["override 'model.d_model=", "aliases (*a0) are not allowed"]),
            (["eval", str(study / SEED0)], [str(study / SEED0 / "config.yaml"), "aliases"]),
            (["report", str(study)], [str(study / SEED0 / "config.yaml"), "aliases"]),
            (["study", "demo", "--out", str(study), "--seeds", "1"],
             [str(study / "study.yaml"), "aliases"]),
        ]
    before = {depth: fingerprint(tmp_path / f"study{depth}") for depth in (3, 6, 9)}
    cases += [
        (["params", "demo", "--set", "model.d_model=" + "7" * 100_000],
         ["is 100,000 characters long: allowed at most 65,536"]),
        (["params", "demo", "--set", "model.d_model=" + "x" * 60_000],
         ["model.d_model='xxx", "...", "' is invalid: expected a whole number"]),
        (["params", "demo", "--set", "train.schedule=" + "y" * 60_000],
         ["train.schedule='yyy", "' is invalid: allowed"]),
    ]
    results = run_bounded([args for args, _ in cases])
    for (args, expected), (code, err) in zip(cases, results):
        assert code == 2, (args[:2], err[-500:])
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err[:500]
        assert len(err) < LONGEST_LINE, err[:500]
        for text in expected:
            assert text in err, (text, err)
    for depth, files in before.items():
        assert fingerprint(tmp_path / f"study{depth}") == files  # nothing written or lost


def test_a_yaml_file_over_the_size_cap_is_refused_without_reading_it(tmp_path, capsys):
    big = tmp_path / "big.yaml"
    big.write_text("# a comment line\n" * 5000)  # 85,000 bytes of nothing but comments
    refused_on_one_line(capsys, ["params", str(big)],
                        "big.yaml' is invalid: it is larger than 65,536 bytes")


def test_nesting_past_the_depth_cap_names_the_line(tmp_path, capsys):
    deep = tmp_path / "deep.yaml"
    deep.write_text("model:\n  d_model: " + "[" * 40 + "]" * 40 + "\n")
    refused_on_one_line(capsys, ["params", str(deep)],
                        "deep.yaml' is not valid YAML at line 2: it nests too deeply")


def test_an_undefined_alias_in_a_set_value_is_still_text(capsys):
    """`*x` names no anchor: YAML cannot read it, so (as before aliases were refused) the
    value is the text itself, here a data source that does not exist."""
    refused_on_one_line(capsys, ["params", "demo", "--set", "model.d_model=*x"],
                        "model.d_model='*x' is invalid")


def test_short_repr_keeps_both_ends_within_the_limit():
    value = "head-" + "m" * 1000 + "-tail"
    shown = short_repr(value)
    assert len(shown) <= MAX_SHOWN_CHARS and shown.startswith("'head-") and shown.endswith("-tail'")
    assert short_repr([1, 2]) == "[1, 2]"  # short values are shown whole


# --------------------------------------------------------------------------------------------
# Metrics lines that are not events, and a torn last line, in a report
# --------------------------------------------------------------------------------------------

NOT_EVENTS = ['{"note": 1}', "42", '{"kind": "eval", "step": "abc", "val_loss": 3.0}',
              '{"kind": "train", "step": -1}', '{"kind": "eval", "step": 9, "val_loss": "low"}']


@pytest.mark.parametrize("line", NOT_EVENTS)
def test_a_report_refuses_a_metrics_line_that_is_not_an_event(tmp_path, capsys, line):
    study = copy_house_study(tmp_path / "study")
    metrics = study / SEED0 / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text("".join(lines[:2]) + line + "\n" + "".join(lines[2:]))
    before = fingerprint(study)
    err = refused_on_one_line(capsys, ["report", str(study)], f"{metrics} line 3 ",
                              "fix or remove that line")
    assert "delete" not in err  # a complete run is never to be deleted for a hand edit
    assert fingerprint(study) == before


def test_a_torn_last_metrics_line_reports_with_a_warning(tmp_path, capsys):
    study = copy_house_study(tmp_path / "study")
    metrics = study / SEED0 / "metrics.jsonl"
    with open(metrics, "a") as f:
        f.write('{"kind": "eval", "step": 7, "tok')  # a copy cut short mid-line
    capsys.readouterr()
    assert main(["report", str(study)]) == 0
    err = capsys.readouterr().err
    assert f"moelab: warning: {metrics} ends in a torn line" in err, err
    # the report is the pinned one: the torn line was skipped, nothing else changed
    assert (study / "results.csv").read_text() == (HOUSE_STUDY / "results.csv").read_text()


def test_a_damaged_complete_run_is_never_to_be_deleted(tmp_path, capsys):
    study = copy_house_study(tmp_path / "study")
    metrics = study / SEED0 / "metrics.jsonl"
    metrics.write_text("".join(line for line in metrics.read_text().splitlines(keepends=True)
                               if '"eval"' not in line))
    err = refused_on_one_line(capsys, ["report", str(study)], "has no eval events")
    assert "delete" not in err


# --------------------------------------------------------------------------------------------
# A tiny run: resume, branch and generate
# --------------------------------------------------------------------------------------------

TWO_STEPS = TINY_MOE_RUN + ["train.max_tokens=512", "train.sample_tokens=0",
                            "train.keep_checkpoints_at=[1]"]
SETS = [arg for item in TWO_STEPS for arg in ("--set", item)]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("bounds") / "run"
    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest sets it
        patch.setenv("MOELAB_CACHE", str(tmp_path_factory.getbasetemp() / "moelab-cache"))
        assert main(["train", "demo", "--out", str(run), *SETS]) == 0
    return run


@pytest.fixture
def killed_run(tiny_run, tmp_path) -> Path:
    """A copy of the tiny run as if killed after its last checkpoint."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "summary.json").unlink()
    return run


@pytest.mark.slow
@pytest.mark.parametrize("line", NOT_EVENTS[:3])
def test_resume_refuses_a_metrics_line_that_is_not_an_event(killed_run, capsys, line):
    metrics = killed_run / "metrics.jsonl"
    with open(metrics, "a") as f:
        f.write(line + "\n")
    before = fingerprint(killed_run)
    number = len(metrics.read_text().splitlines())
    refused_on_one_line(capsys, ["train", "demo", "--out", str(killed_run), "--resume", *SETS],
                        f"{metrics} line {number} ")
    assert fingerprint(killed_run) == before


@pytest.mark.slow
def test_resume_skips_a_torn_last_line(killed_run, capsys):
    metrics = killed_run / "metrics.jsonl"
    logged = metrics.read_text()
    with open(metrics, "a") as f:
        f.write('{"kind": "train", "st')
    assert main(["train", "demo", "--out", str(killed_run), "--resume", *SETS]) == 0
    assert metrics.read_text() == logged  # the torn line gone, every event kept


@pytest.mark.slow
def test_a_branch_refuses_a_source_line_that_is_not_an_event(tiny_run, tmp_path, capsys):
    source = tmp_path / "source"
    shutil.copytree(tiny_run, source)
    metrics = source / "metrics.jsonl"
    metrics.write_text('{"note": 1}\n' + metrics.read_text())
    refused_on_one_line(capsys, ["train", "demo", "--out", str(tmp_path / "branch"),
                                 "--branch-from", str(source), "--branch-step", "1", *SETS],
                        f"{metrics} line 1 ")
    assert not (tmp_path / "branch").exists()  # refused before the branch folder is made


@pytest.mark.slow
def test_generate_defaults_to_what_the_run_context_allows(tiny_run, capsys):
    capsys.readouterr()
    assert main(["generate", str(tiny_run), "--prompt", "Once", "--temperature", "0"]) == 0
    assert capsys.readouterr().out.strip()
    refused_on_one_line(capsys, ["generate", str(tiny_run), "--prompt", "Once",
                                 "--max-new-tokens", "33"], "--max-new-tokens 33 is invalid")


# --------------------------------------------------------------------------------------------
# Outputs that are inputs
# --------------------------------------------------------------------------------------------

FIT_ROWS = "N,D,loss\n" + "".join(f"{n:g},{d:g},{3 - 0.1 * i}\n" for i, (n, d) in enumerate(
    [(1e6, 1e8), (2e6, 3e8), (4e6, 1e9), (8e6, 2e8), (1e7, 5e8), (2e7, 2e9), (4e7, 4e9)]))


@pytest.mark.parametrize("alias", ["same", "symlink", "hardlink", "dotted"])
def test_fit_never_writes_over_its_csv(tmp_path, capsys, alias):
    csv = tmp_path / "d.csv"
    csv.write_text(FIT_ROWS)
    out = {"same": csv, "dotted": f"{tmp_path}/../{tmp_path.name}/d.csv",
           "symlink": tmp_path / "link.csv", "hardlink": tmp_path / "hard.csv"}[alias]
    if alias == "symlink":
        out.symlink_to(csv)
    if alias == "hardlink":
        os.link(csv, out)
    refused_on_one_line(capsys, ["fit", str(csv), "--out", str(out)],
                        f"--out {out} is invalid: it is the input {csv}")
    assert csv.read_text() == FIT_ROWS


@pytest.mark.slow
def test_other_commands_never_write_over_their_inputs(tiny_run, tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("model:\n  d_model: 64\n")
    text = tmp_path / "stories.txt"
    text.write_text("Once upon a time.\n<|endoftext|>\n" * 20)
    before = fingerprint(tiny_run)
    for args in (["throughput", str(config), "--out", str(config)],
                 ["train", str(config), "--out", str(config)],
                 ["prepare-data", "--source", str(text), "--out", str(text)],
                 ["finetune", str(tiny_run), "--data", str(text), "--out", str(tiny_run)]):
        refused_on_one_line(capsys, args, "is invalid: it is the input")
    assert config.read_text() == "model:\n  d_model: 64\n"
    assert text.read_text() == "Once upon a time.\n<|endoftext|>\n" * 20
    assert fingerprint(tiny_run) == before


def test_a_preset_name_is_no_input_file(tmp_path, monkeypatch):
    """`--source sample --out sample` writes a cache folder named sample: nothing to refuse."""
    monkeypatch.chdir(tmp_path)
    from moelab.fileio import refuse_overwriting_inputs
    refuse_overwriting_inputs("sample", "--out", ["sample", "demo", None])  # no error


# --------------------------------------------------------------------------------------------
# The smaller three
# --------------------------------------------------------------------------------------------


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path, capsys):
    csv = tmp_path / "twice.csv"
    csv.write_text("N,D,loss,loss\n" + "".join(
        f"{line.rstrip()},99\n" for line in FIT_ROWS.splitlines()[1:]))
    refused_on_one_line(capsys, ["fit", str(csv)], "twice.csv: the header names 'loss' more "
                                                    "than once")


def test_a_single_value_is_a_list_of_one():
    one = load_config("demo", ["train.keep_checkpoints_at=5"]).train.keep_checkpoints_at
    assert one == load_config("demo", ["train.keep_checkpoints_at=5,"]).train.keep_checkpoints_at
    assert one == [5]
