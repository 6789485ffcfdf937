"""Every form of an override goes through the same checks, a command exits 0 only when it did
all it was asked, ordinary use gives no traceback and no hang, and the inputs spreadsheets and
shells produce are read as meant or refused on one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moelab.cli import main
from moelab.config import load_config
from moelab.errors import ConfigError, MoelabError
from moelab.scaling.table import MAX_CSV_ROWS, read_csv_rows
from moelab.sweep.analyses.partial_results import partial_results_text
from moelab.tasks import TASK_NAMES, parse_task_names
from moelab.train.events import read_events
from one_line_errors import refused_on_one_line
from sweep_rows import results_table
from tiny_overrides import TINY_MOE_RUN

REPO = Path(__file__).resolve().parents[1]
TINY = TINY_MOE_RUN + ["train.max_tokens=256", "train.eval_interval=1"]


def _sets(overrides: list[str]) -> list[str]:
    return [arg for override in overrides for arg in ("--set", override)]


@pytest.fixture(scope="module")
def source_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("source") / "run"
    assert main(["train", "demo", "--out", str(run), *_sets(TINY)]) == 0
    return run


# -- one validation path for every override form ---------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("override, changed", [
    ("train={max_tokens: 512}", "train.init_from"),
    ("data={source: sample, cache_dir: ELSEWHERE}", "data.cache_dir"),
    ("data.cache_dir=ELSEWHERE", "data.cache_dir"),
    ("model={d_model: 64}", "model"),
])
def test_a_whole_section_override_of_a_finetune_is_checked_as_a_dotted_key_is(
        source_run, tmp_path, capsys, override, changed):
    elsewhere = tmp_path / "elsewhere"
    out = tmp_path / "tuned"
    refused_on_one_line(capsys, ["finetune", str(source_run), "--data", "adaptation", "--out",
                                 str(out), "--set", override.replace("ELSEWHERE", str(elsewhere))],
                        "invalid in a finetune", f"changes {changed}")
    assert not elsewhere.exists() and not out.exists()


# -- no silent success ------------------------------------------------------------------------

def test_a_sweep_whose_finetune_data_is_no_corpus_is_refused_before_training(tmp_path, capsys):
    no_corpus = tmp_path / "notes"
    no_corpus.mkdir()
    out = tmp_path / "sweep"
    refused_on_one_line(capsys, ["sweep-sparsity", "micro", "--out", str(out), "--set",
                                 f"finetune={{data: {no_corpus}, steps: 2, lr: 0.001}}"],
                        "finetune.data=", "no train.txt")
    assert not out.exists()


def _sweep_folder(tmp_path: Path, runs: int, finetunes: int) -> Path:
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "plan.json").write_text(json.dumps({
        "kind": "sweep-sparsity", "runs": [{"name": f"r{i}"} for i in range(runs)],
        "finetunes": [{"name": f"finetune/r{i}"} for i in range(finetunes)]}))
    return folder


def test_a_sweep_report_missing_a_finetune_says_it_is_partial(tmp_path):
    folder = _sweep_folder(tmp_path, runs=3, finetunes=3)
    rows = [{"run": "r0", "finetune_val_loss": "2.5"}, {"run": "r1", "finetune_val_loss": "2.4"},
            {"run": "r2", "finetune_val_loss": ""}]
    plan = json.loads((folder / "plan.json").read_text())
    text = partial_results_text(results_table(rows).rows, plan)
    assert "partial" in text and "3 of 3 planned runs" in text
    assert "2 of 3 planned finetunes" in text
    complete = [dict(row, finetune_val_loss="2.3") for row in rows]
    assert partial_results_text(results_table(complete).rows, plan) == ""


@pytest.mark.slow
def test_a_compare_with_a_failed_side_run_exits_incomplete(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "demo", "demo", *_sets(TINY), "--set-b", "train.lr=0.03",
            "--seeds", "2", "--out", str(out)]
    assert main(args) == 0
    failing = out / "runs" / "B" / "seed1"
    shutil.rmtree(failing)
    failing.mkdir()
    (failing / "notes.txt").write_text("someone's file: the run refuses this folder")
    capsys.readouterr()
    assert main(args) == 3
    err = capsys.readouterr().err
    assert "incomplete" in err and "B/seed1" in err and "Traceback" not in err
    assert json.loads((out / "compare.json").read_text())["missing_runs"] == ["B/seed1"]


# -- ordinary use: no traceback, no hang ------------------------------------------------------

def test_prepare_data_of_a_file_without_out_uses_the_cache_root(tmp_path, capsys):
    text = tmp_path / "stories.txt"
    text.write_text("".join(f"Story {i} about a cat and a dog.\n<|endoftext|>\n"
                            for i in range(200)))
    assert main(["prepare-data", "--source", str(text), "--vocab-size", "300", "--json",
                 "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["splits"]["train"]["stories"] > 0


@pytest.mark.slow
def test_a_sweep_refit_on_a_folder_without_grid_json_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "moelab", "report", str(tmp_path),
                           "--bootstrap", "16"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "grid.json" in done.stderr


@pytest.mark.slow
def test_wandb_online_with_an_unreachable_server_fails_in_bounded_time(tmp_path):
    pytest.importorskip("wandb")
    env = {**os.environ, "WANDB_MODE": "online", "WANDB_BASE_URL": "http://127.0.0.1:9",
           "WANDB_API_KEY": "a" * 40, "WANDB_INIT_TIMEOUT": "3", "HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR",
                 "WANDB_SILENT"):
        env.pop(name, None)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "moelab", "train", "demo", "--out",
                           str(tmp_path / "run"), *_sets(TINY + ["train.logging.wandb=true"])],
                          capture_output=True, text=True, timeout=240, env=env)
    assert time.monotonic() - started < 200
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "W&B did not start in 3 s" in done.stderr


# -- input hygiene ----------------------------------------------------------------------------

def test_a_spreadsheet_csv_with_a_byte_order_mark_is_read_by_its_first_column(tmp_path):
    table = tmp_path / "points.csv"
    table.write_bytes("\ufeffN,D,loss\n1e6,2e7,3.5\n2e6,4e7,3.2\n".encode("utf-8"))
    header, rows = read_csv_rows(table)
    assert header == ["N", "D", "loss"] and rows[0]["N"] == "1e6"


def test_a_csv_row_longer_than_its_header_is_refused_naming_its_line(tmp_path, capsys):
    table = tmp_path / "points.csv"
    table.write_text("N,D,loss\n1e6,2e7,3.5\n2e6,4e7,3.2,9\n")
    refused_on_one_line(capsys, ["fit", str(table)], "line 3", "4 cells", "header's 3")


def test_a_fit_of_too_many_rows_is_refused_at_once_with_the_limit(tmp_path, capsys):
    table = tmp_path / "points.csv"
    table.write_text("N,D,loss\n" + "1e6,2e7,3.5\n" * (MAX_CSV_ROWS + 1))
    started = time.monotonic()
    refused_on_one_line(capsys, ["fit", str(table)], f"{MAX_CSV_ROWS:,}")
    assert time.monotonic() - started < 30


def test_a_deeply_nested_file_is_named_in_its_error(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    refused_on_one_line(capsys, ["pool", str(deep), str(deep)], str(deep))


def test_a_deeply_nested_line_is_named_by_its_file_and_line(tmp_path, capsys):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"kind": "train", "step": 1, "tokens": 8}\n' + "[" * 100_000 + "\n")
    with pytest.raises(MoelabError, match=f"{metrics} line 2 is not valid JSON"):
        read_events(metrics)
    stories = tmp_path / "stories.jsonl"
    stories.write_text('{"text": "a story"}\n' + "[" * 100_000 + "\n")
    refused_on_one_line(capsys, ["prepare-data", "--source", str(stories), "--out",
                                 str(tmp_path / "cache")], f"{stories} line 2")


def test_all_twice_names_every_task_once():
    assert parse_task_names("all,all") == list(TASK_NAMES)
    assert parse_task_names(" all , all,") == list(TASK_NAMES)


def test_an_undecodable_out_path_is_refused_before_anything_is_written(tmp_path, capsys):
    out = str(tmp_path) + "/cache-\udcff"
    refused_on_one_line(capsys, ["prepare-data", "--out", out], "--out", "not UTF-8")
    assert list(tmp_path.iterdir()) == []


def test_a_newline_in_a_wandb_name_is_refused():
    with pytest.raises(ConfigError, match="wandb_name=.* is invalid"):
        load_config("demo", ['train.logging.wandb_name="a\\nb"'])
    with pytest.raises(ConfigError, match="wandb_tags=.* is invalid"):
        load_config("demo", ['train.logging.wandb_tags=["a\\tb"]'])


def test_a_source_file_too_large_to_read_whole_is_refused_with_the_limit(tmp_path, capsys):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(20 * 10**9)  # sparse: 20 GB to stat, nothing on disk
    started = time.monotonic()
    refused_on_one_line(capsys, ["prepare-data", "--source", str(big), "--out",
                                 str(tmp_path / "cache")], "big.txt", "20.0 GB", "4 GiB")
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_wandb_keeps_its_files_in_the_run_and_a_corrupt_record_is_refused_on_resume(tmp_path):
    pytest.importorskip("wandb")
    home = tmp_path / "home"
    env = {**os.environ, "WANDB_MODE": "offline", "HOME": str(home),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config"),
           "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR",
                 "WANDB_ARTIFACT_DIR", "WANDB_SILENT", "WANDB_PROJECT", "WANDB_RUN_ID"):
        env.pop(name, None)
    run = tmp_path / "run"

    def train(resume: bool) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "moelab", "train", "demo", "--out", str(run),
                               *_sets(TINY_MOE_RUN + ["train.logging.wandb=true", "train.eval_interval=1",
                                                      "train.max_tokens=256"]),
                               *(["--resume"] if resume else [])],
                              capture_output=True, text=True, timeout=300, env=env)

    done = train(resume=False)
    assert done.returncode == 0, done.stderr
    wandb_files = [p for p in home.rglob("*") if "wandb" in p.name.lower()] if home.exists() else []
    assert wandb_files == []
    assert any((run / "wandb").rglob("*.wandb"))
    (run / "wandb.json").write_text("{not json")
    (run / "summary.json").unlink()  # killed after its last checkpoint: --resume goes on
    done = train(resume=True)
    assert done.returncode == 2, done.stderr
    assert "wandb.json is corrupt" in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_sweep_whose_finetunes_all_fail_exits_incomplete_and_its_report_says_so(
        tmp_path, capsys):
    corpus = tmp_path / "short"  # a corpus, but its validation split is too short to score
    corpus.mkdir()
    (corpus / "train.txt").write_text("".join(f"A story number {i} about a cat.\n<|endoftext|>\n"
                                              for i in range(40)))
    (corpus / "valid.txt").write_text("A cat.\n")
    out = tmp_path / "sweep"
    capsys.readouterr()
    code = main(["sweep-sparsity", "micro", "--out", str(out), "--bootstrap", "0", "--set",
                 f"finetune={{data: {corpus}, steps: 2, lr: 0.003}}"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "0 of 4 planned finetunes" in err and "Traceback" not in err
    planned = json.loads((out / "plan.json").read_text())["runs"]
    failures = json.loads((out / "failures.json").read_text())
    assert sorted(failures) == sorted(f"finetune/{run['name']}" for run in planned)
    report = (out / "report.md").read_text()
    assert "**This report is partial**" in report and "0 of 4 planned finetunes" in report
