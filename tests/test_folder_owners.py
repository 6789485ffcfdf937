"""Every writing command owns its folder, and records name no machine's folders.

A compare rerun into its finished folder with one side changed would skip that side's finished
runs and report them under the new label; a compare into a study folder would train into the
study. Both are refused on one line, exit 2, the folder's files unchanged. Committed records
hold no absolute path of the machine they ran on.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from moelab.cli import main
from moelab.fileio import FOLDER_RECORD, LOCK_NAME, folder_kind, portable_command
from one_line_errors import refused_on_one_line
from tiny_overrides import TINY_MOE_RUN

REPO = Path(__file__).resolve().parents[1]
TINY = TINY_MOE_RUN + ["train.max_tokens=256", "train.eval_interval=1"]


def _sets(flag: str, overrides: list[str]) -> list[str]:
    return [arg for override in overrides for arg in (flag, override)]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != LOCK_NAME}


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> tuple[Path, list[str]]:
    out = tmp_path_factory.mktemp("owners") / "lr"
    args = ["compare", "demo", "demo", *_sets("--set", TINY), *_sets("--set-b", ["train.lr=0.03"]),
            "--seeds", "7,8", "--out", str(out)]
    assert main(args) == 0
    return out, args


@pytest.mark.slow
def test_a_compare_rerun_with_one_side_changed_is_refused(compared, capsys):
    out, args = compared
    before = _files(out)
    changed = [arg if arg != "train.lr=0.03" else "train.lr=0.05" for arg in args]
    refused_on_one_line(capsys, changed, "B/seed7", "train.lr=0.03", "0.05", "another --out")
    assert _files(out) == before  # configs and compare.json as they were
    assert main(args) == 0  # the same comparison again is fine (its runs are skipped)


def test_a_compare_into_a_study_folder_is_refused_and_the_study_kept(tmp_path, capsys):
    study = tmp_path / "study"
    assert main(["study", "demo", "--seeds", "2", "--out", str(study), "--list-runs"]) == 0
    before = _files(study)
    refused_on_one_line(capsys, ["compare", "demo", "demo", "--seeds", "1", "--out", str(study)],
                        str(study), "holds no compare", "output of moelab study")
    assert _files(study) == before


@pytest.mark.parametrize("record", [{"kind": "compare"}, {"kind": "run"}])
def test_an_edited_or_copied_owner_record_does_not_hand_over_a_study_folder(tmp_path, capsys,
                                                                             record):
    study = tmp_path / "study"
    assert main(["study", "demo", "--seeds", "2", "--out", str(study), "--list-runs"]) == 0
    (study / FOLDER_RECORD).write_text(json.dumps(record))  # a record copied from elsewhere
    before = _files(study)
    refused_on_one_line(capsys, ["compare", "demo", "demo", "--seeds", "1", "--out", str(study)],
                        str(study), "output of moelab study", "plan.json")
    refused_on_one_line(capsys, ["train", "demo", "--out", str(study)], "output of moelab study")
    assert _files(study) == before


@pytest.mark.slow
def test_a_study_into_a_compare_folder_is_refused(compared, capsys):
    out, _ = compared
    before = _files(out)
    refused_on_one_line(capsys, ["study", "demo", "--seeds", "1", "--out", str(out), "--list-runs"],
                        "holds no study", "output of moelab compare")
    refused_on_one_line(capsys, ["sweep-sparsity", "micro", "--out", str(out), "--list-runs"],
                        "holds no sweep-sparsity", "output of moelab compare")
    refused_on_one_line(capsys, ["pool", str(out), str(out), "--out", str(out)])
    assert _files(out) == before


@pytest.mark.slow
def test_the_owner_is_recorded_and_older_folders_are_told_by_their_files(compared, tmp_path):
    out, _ = compared
    assert json.loads((out / FOLDER_RECORD).read_text()) == {"kind": "compare"}
    older = tmp_path / "older"
    older.mkdir()
    (older / "grid.json").write_text("{}")
    assert folder_kind(older) == "sweep-sparsity"
    (older / "plan.json").write_text(json.dumps({"kind": "ablation"}))
    assert folder_kind(older) == "ablation"
    assert folder_kind(tmp_path / "missing") is None


def test_train_or_prepare_data_into_a_study_folder_is_refused(tmp_path, capsys):
    study = tmp_path / "study"
    assert main(["study", "demo", "--seeds", "1", "--out", str(study), "--list-runs"]) == 0
    before = _files(study)
    refused_on_one_line(capsys, ["train", "demo", "--out", str(study)], "output of moelab study")
    refused_on_one_line(capsys, ["prepare-data", "--out", str(study)], "output of moelab study")
    assert _files(study) == before


# --------------------------------------------------------------------------------------------
# Records that travel
# --------------------------------------------------------------------------------------------

RECORD_FOLDERS = ("experiments/results", "tests/fixtures", "src/moelab/presets")
RECORD_SUFFIXES = (".json", ".csv", ".yaml", ".yml", ".jsonl", ".md", ".txt")
ABSOLUTE_PATH = re.compile(r"""(?:^|[\s="'(`,\[])(/[A-Za-z][\w.+-]*/[\w.+/-]*)""")
HOME_PATH = re.compile(r"/(?:home|Users|root|work)/[\w.-]+/")


def _tracked(*folders: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", *folders], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    return [REPO / name for name in listed if name]


@pytest.mark.slow
def test_no_committed_record_holds_an_absolute_path():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    found = []
    for path in _tracked(*RECORD_FOLDERS):
        if path.suffix in RECORD_SUFFIXES and path.is_file():
            for match in ABSOLUTE_PATH.finditer(path.read_text("utf-8", errors="replace")):
                found.append(f"{path.relative_to(REPO)}: {match.group(1)}")
    assert not found, found


@pytest.mark.slow
def test_no_tracked_file_names_a_home_folder():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    found = []
    for path in _tracked():
        if path.is_file() and path.suffix not in (".png", ".xz", ".pdf", ".safetensors"):
            text = path.read_text("utf-8", errors="replace")
            found += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in HOME_PATH.finditer(text)]
    assert not found, found


def test_a_recorded_command_is_relative_to_the_repository_or_names_its_out_folder(tmp_path):
    inside = REPO / "experiments" / "results" / "x"
    command = portable_command(["--jobs", "2", "--out", str(tmp_path / "runs" / "wsd"),
                                f"--table={inside}", "relative/path"], REPO)
    assert command == "--jobs 2 --out wsd --table=experiments/results/x relative/path"
