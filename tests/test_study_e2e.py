"""A tiny real study from the CLI: 3 arms x 2 seeds, a few steps each, on the bundled sample."""

from __future__ import annotations

import json
import shlex
import shutil
import statistics
from pathlib import Path

import pytest
import yaml
from PIL import Image

from moelab.cli import main
from moelab.errors import EXIT_INCOMPLETE

pytestmark = pytest.mark.slow

TINY = [
    "model.vocab_size=320", "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
    "model.n_kv_heads=2", "model.max_seq_len=32", "model.d_ff=64", "model.moe.d_expert=32",
    "train.batch_size=8", "train.max_tokens=1536", "train.eval_interval=3", "train.eval_windows=4",
    "train.log_interval=3", "train.logging.progress=false", "data.max_train_stories=300",
]
ARMS = ("moe", "dense_active", "dense_total")


def study_argv(folder: Path, seeds: int = 2) -> list[str]:
    argv = ["study", "demo", "--seeds", str(seeds), "--out", str(folder)]
    for item in TINY:
        argv += ["--set", item]
    return argv


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """The trained study, shared by every test of this file: read it, never change it (a test
    that reruns, deletes or adds runs works on ``private_copy``), so each test holds in any order."""
    folder = tmp_path_factory.mktemp("study") / "tiny"
    assert main(study_argv(folder)) == 0
    return folder


def private_copy(study: Path, tmp_path: Path) -> Path:
    """A copy of the study for one test to change, under the same folder name (results.json
    records the name)."""
    copy = tmp_path / study.name
    shutil.copytree(study, copy)
    return copy


def summaries(folder: Path) -> dict[str, dict]:
    return {f"{arm}/seed{seed}": json.loads((folder / f"runs/{arm}/seed{seed}/summary.json").read_text())
            for arm in ARMS for seed in (0, 1)}


def flat(tree, prefix=""):
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in flat(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


def test_every_output_is_written(study):
    for name in ("study.yaml", "plan.json", "results.json", "results.csv", "report.md"):
        assert (study / name).is_file(), name
    for run in summaries(study).values():
        assert run["status"] == "complete" and run["steps"] == 6
    report = (study / "report.md").read_text()
    named = [line.split("](")[1].rstrip(")") for line in report.splitlines() if line.startswith("![")]
    assert {"figures/val_loss.png", "figures/gaps.png", "figures/routing.png"} <= set(named)
    for relative in named:
        with Image.open(study / relative) as image:
            assert image.format == "PNG"
            image.verify()


def test_arms_differ_only_in_the_ffn(study):
    configs = {arm: flat(yaml.safe_load((study / f"runs/{arm}/seed0/config.yaml").read_text()))
               for arm in ARMS}
    for dense in ("dense_active", "dense_total"):
        differing = {k for k in configs["moe"].keys() | configs[dense].keys()
                     if configs["moe"].get(k, "absent") != configs[dense].get(k, "absent")}
        assert "model.moe" in differing
        assert all(k == "model.d_ff" or k.startswith("model.moe") for k in differing), differing
        assert configs[dense]["model.moe"] is None
    seed1 = flat(yaml.safe_load((study / "runs/moe/seed1/config.yaml").read_text()))
    assert {k for k in seed1 if seed1[k] != configs["moe"][k]} == {"train.seed"}


def test_results_are_the_statistics_of_the_summaries(study):
    results = json.loads((study / "results.json").read_text())
    runs = summaries(study)
    for arm in ARMS:
        losses = [runs[f"{arm}/seed{s}"]["best_val_loss"] for s in (0, 1)]
        stats = results["arms"][arm]["best_val_loss"]
        assert stats["n"] == 2
        assert stats["mean"] == pytest.approx(statistics.mean(losses), abs=1e-12)
        assert stats["std"] == pytest.approx(statistics.stdev(losses), abs=1e-12)
        assert results["arms"][arm]["active_params"] == runs[f"{arm}/seed0"]["active_params"]
    gap = results["gaps"]["active"]
    moe = statistics.mean(runs[f"moe/seed{s}"]["best_val_loss"] for s in (0, 1))
    dense = statistics.mean(runs[f"dense_active/seed{s}"]["best_val_loss"] for s in (0, 1))
    assert gap["gap"] == pytest.approx(dense - moe, abs=1e-12)


def test_gaps_are_paired_by_seed_with_welch_beside(study):
    from scipy import stats as scipy_stats

    results = json.loads((study / "results.json").read_text())
    runs = summaries(study)
    for criterion, gap in results["gaps"].items():
        moe = [runs[f"moe/seed{s}"]["best_val_loss"] for s in (0, 1)]
        dense = [runs[f"dense_{criterion}/seed{s}"]["best_val_loss"] for s in (0, 1)]
        assert gap["test"] == "paired" and gap["verdict"].endswith("(paired t, n=2)")
        assert gap["paired"]["n_pairs"] == 2
        assert [d["diff"] for d in gap["paired"]["differences"]] == pytest.approx(
            [d - m for d, m in zip(dense, moe)], abs=1e-12)
        paired = scipy_stats.ttest_rel(dense, moe)
        assert gap["paired"]["p_value"] == pytest.approx(paired.pvalue, rel=1e-9)
        welch = scipy_stats.ttest_ind(dense, moe, equal_var=False)
        assert gap["welch"]["p_value"] == pytest.approx(welch.pvalue, rel=1e-9)
        assert gap["welch"]["df"] == pytest.approx(welch.df, rel=1e-9)
        assert gap["min_detectable_gap"] > 0 and gap["seeds_needed"][1]["gap"] == 0.02


def test_report_command_rebuilds_identical_numbers(study, tmp_path):
    folder = private_copy(study, tmp_path)
    before = (folder / "results.json").read_text()
    (folder / "results.json").unlink()
    assert main(["report", str(folder)]) == 0
    assert (folder / "results.json").read_text() == before


def test_listed_commands_train_runs_the_study_then_skips(study, tmp_path, capsys):
    folder = private_copy(study, tmp_path)
    capsys.readouterr()
    assert main(study_argv(folder, seeds=3) + ["--list-runs"]) == 0
    commands = capsys.readouterr().out.splitlines()
    assert [c.split("--out ")[1].split()[0][len(str(folder)) + 1:] for c in commands] == [
        "runs/moe/seed2", "runs/dense_active/seed2", "runs/dense_total/seed2"]
    assert main(shlex.split(commands[0])[1:]) == 0  # as a cluster job would run it
    assert main(study_argv(folder, seeds=3)) == 0
    assert "9 runs planned, 7 already complete, 2 to train" in capsys.readouterr().out


def test_rerun_skips_finished_runs_and_redoes_torn_ones(study, tmp_path, capsys):
    folder = private_copy(study, tmp_path)
    before = summaries(folder)
    mtimes = {name: (folder / f"runs/{name}/summary.json").stat().st_mtime_ns for name in before}
    # moe/seed1 died after its last checkpoint; dense_active/seed0 died before any checkpoint.
    (folder / "runs/moe/seed1/summary.json").unlink()
    (folder / "runs/dense_active/seed0/summary.json").unlink()
    shutil.rmtree(folder / "runs/dense_active/seed0/checkpoints")
    capsys.readouterr()
    assert main(study_argv(folder, seeds=2)) == 0
    out = capsys.readouterr().out
    assert "6 runs planned, 4 already complete, 2 to train" in out
    assert "moe/seed1: resuming from its checkpoint" in out
    assert "dense_active/seed0: training" in out
    after = summaries(folder)
    for name, mtime in mtimes.items():
        if name not in ("moe/seed1", "dense_active/seed0"):
            assert (folder / f"runs/{name}/summary.json").stat().st_mtime_ns == mtime
    # Retrained from scratch with the same seed on CPU: the same numbers (reproducibility).
    assert after["dense_active/seed0"]["best_val_loss"] == before["dense_active/seed0"]["best_val_loss"]
    assert after["moe/seed1"]["best_val_loss"] == before["moe/seed1"]["best_val_loss"]


def test_parallel_jobs_train_the_same_runs_and_record_a_failing_one(study, tmp_path, monkeypatch, capsys):
    import torch

    # Children with the thread count of this process, which trained the sequential study:
    # then a run's numbers depend only on its config and seed.
    monkeypatch.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))
    parallel = tmp_path / "parallel"
    # A torn run of another config, with its checkpoint: that run's `moelab train --resume`
    # must refuse it (a folder without a checkpoint would just start afresh).
    (parallel / "runs/moe").mkdir(parents=True)
    shutil.copytree(study / "runs/dense_active/seed0", parallel / "runs/moe/seed0")
    (parallel / "runs/moe/seed0/summary.json").unlink()
    capsys.readouterr()
    # It did not do all it was asked: exit 3, the report and stderr say which run is missing.
    assert main(study_argv(parallel) + ["--jobs", "2"]) == EXIT_INCOMPLETE
    out, err = capsys.readouterr()
    assert "incomplete: 1 planned runs are not complete" in err
    assert "6 runs planned, 0 already complete, 6 to train, 2 at a time" in out

    failures = json.loads((parallel / "failures.json").read_text())
    assert list(failures) == ["moe/seed0"] and "cannot resume" in failures["moe/seed0"]
    assert "FAILED moe/seed0" in out  # printed with the results
    sequential = summaries(study)
    for name, summary in sequential.items():
        if name != "moe/seed0":
            got = json.loads((parallel / f"runs/{name}/summary.json").read_text())
            assert got["best_val_loss"] == summary["best_val_loss"], name
