"""Zero-shot tasks inside runs and studies: ``train.eval_tasks``, RUN/tasks.json, the report.

A tiny real study (3 arms x 2 seeds, 3 steps each, context 64 so that the tasks fit) scores two
tasks at the end of every run. The report's numbers are checked against a recomputation by
hand from the run folders' tasks.json files (statistics.mean/stdev, scipy's t quantile and
paired t-test), the stored accuracies against their own counts, and the scored weights
against a fresh ``moelab eval --tasks`` of the final checkpoint. That an untrained model is at
chance is tests/test_tasks.py::test_untrained_model_scores_at_chance.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from moelab.cli import main
from moelab.config import load_config
from moelab.errors import ConfigError

pytestmark = pytest.mark.slow

TASKS = ("ending", "agreement")  # the order of moelab.tasks.TASK_NAMES
TINY_TASKS = [
    "model.vocab_size=512", "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
    "model.n_kv_heads=2", "model.max_seq_len=64", "model.d_ff=64", "model.moe.d_expert=32",
    "train.batch_size=8", "train.max_tokens=1536", "train.eval_interval=3", "train.eval_windows=4",
    "train.log_interval=3", "train.logging.progress=false", "data.max_train_stories=300",
    "train.eval_tasks=[ending, agreement]",
]
ARMS = ("moe", "dense_active", "dense_total")
SEEDS = (0, 1)


def _sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """The trained study; tests that change it work on a copy."""
    folder = tmp_path_factory.mktemp("study-tasks") / "tiny"
    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest sets it
        patch.setenv("MOELAB_CACHE", str(tmp_path_factory.getbasetemp() / "moelab-cache"))
        assert main(["study", "demo", "--seeds", "2", "--out", str(folder),
                     *_sets(TINY_TASKS)]) == 0
    return folder


def _tasks_json(study: Path, arm: str, seed: int) -> dict:
    return json.loads((study / f"runs/{arm}/seed{seed}/tasks.json").read_text())["tasks"]


def _t_interval(values: list[float]) -> tuple[float, float]:
    half = scipy_stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return statistics.mean(values) - half, statistics.mean(values) + half


def test_every_run_scores_its_tasks_on_its_final_step(study):
    for arm in ARMS:
        for seed in SEEDS:
            summary = json.loads((study / f"runs/{arm}/seed{seed}/summary.json").read_text())
            tasks = _tasks_json(study, arm, seed)
            assert list(tasks) == list(TASKS)
            for name, entry in tasks.items():
                assert entry["step"] == summary["steps"] == 3
                assert entry["accuracy"] == entry["correct"] / entry["items"]
                assert entry["items"] == {"ending": 233, "agreement": 286}[name]
                assert entry["chance"] == {"ending": 0.25, "agreement": 0.5}[name]


def test_tasks_json_scores_the_final_weights(study, tmp_path):
    """``moelab eval --tasks`` loads the final checkpoint from disk and scores it afresh."""
    run = tmp_path / "run"
    shutil.copytree(study / "runs/moe/seed1", run)
    assert main(["eval", str(run), "--tasks", ",".join(TASKS)]) == 0
    again = json.loads((run / "zero_shot.json").read_text())["tasks"]
    assert again == _tasks_json(study, "moe", 1)


def test_results_and_report_equal_a_recomputation_from_tasks_json(study):
    results = json.loads((study / "results.json").read_text())
    zero_shot = results["zero_shot"]
    report = (study / "report.md").read_text()
    assert list(zero_shot) == list(TASKS)
    for task in TASKS:
        accuracy = {arm: [_tasks_json(study, arm, s)[task]["correct"]
                          / _tasks_json(study, arm, s)[task]["items"] for s in SEEDS]
                    for arm in ARMS}
        for arm in ARMS:
            stored = zero_shot[task]["arms"][arm]
            mean, std = statistics.mean(accuracy[arm]), statistics.stdev(accuracy[arm])
            low, high = _t_interval(accuracy[arm])
            assert stored["accuracy"] == {"mean": pytest.approx(mean, abs=1e-12),
                                          "std": pytest.approx(std, abs=1e-12), "n": 2}
            assert (stored["ci_low"], stored["ci_high"]) == pytest.approx((low, high), abs=1e-12)
            chance = {"ending": 0.25, "agreement": 0.5}[task]
            assert stored["chance"] == chance
            assert (f"| {task} | {arm} | {mean:.4f} ± {std:.4f} (n=2) | [{low:.4f}, {high:.4f}] "
                    f"| {chance:.4f} |") in report
        for criterion in ("active", "total"):
            dense = accuracy[f"dense_{criterion}"]
            stored = zero_shot[task]["comparisons"][criterion]
            differences = [m - d for m, d in zip(accuracy["moe"], dense)]
            assert stored["difference"] == pytest.approx(statistics.mean(differences), abs=1e-12)
            assert [d["diff"] for d in stored["differences"]] == pytest.approx(differences,
                                                                              abs=1e-12)
            assert stored["n_pairs"] == 2
            if len(set(differences)) == 1:  # no spread: nothing to test
                assert stored["p_value"] is None and stored["outcome"] == "not testable"
                continue
            p_value = scipy_stats.ttest_rel(accuracy["moe"], dense).pvalue
            low, high = _t_interval(differences)
            assert stored["p_value"] == pytest.approx(p_value, rel=1e-9)
            assert (stored["ci_low"], stored["ci_high"]) == pytest.approx((low, high), abs=1e-12)
            # Holm over the family of every task's and criterion's test (tests/test_stats.py
            # checks holm by hand): never below the raw p, at most the raw p times the count.
            tests = int(stored["adjustment"].removeprefix("Holm, ").removesuffix(" tests"))
            assert p_value <= stored["p_adjusted"] <= min(1.0, tests * p_value) + 1e-12
            outcome = ("not significant" if stored["p_adjusted"] >= 0.05
                       else "MoE better" if statistics.mean(differences) > 0 else "dense better")
            assert stored["verdict"] == f"{outcome} (paired t, n=2)"
            assert (f"| {statistics.mean(differences):+.4f} | [{low:.4f}, {high:.4f}] "
                    f"| {p_value:.4f} | {stored['p_adjusted']:.4f} | 2 | {outcome} (paired t, "
                    "n=2) |") in report
    assert "`tasks.json`); `moelab report DIR` rebuilds this file" in report


def test_without_tasks_json_the_report_has_no_section(study, tmp_path):
    folder = tmp_path / study.name
    shutil.copytree(study, folder)
    for path in (folder / "runs").rglob("tasks.json"):
        path.unlink()
    assert main(["report", str(folder)]) == 0
    report = (folder / "report.md").read_text()
    assert "Zero-shot" not in report and "tasks.json" not in report
    assert "zero_shot" not in json.loads((folder / "results.json").read_text())
    # Everything else is what the study with the tasks reported.
    with_tasks = (study / "report.md").read_text()
    start, end = with_tasks.index("## Zero-shot tasks"), with_tasks.index("## Validation loss")
    assert report == (with_tasks[:start] + with_tasks[end:]).replace(", `tasks.json`", "")


def test_a_corrupt_tasks_json_is_one_line(study, tmp_path, capsys):
    folder = tmp_path / study.name
    shutil.copytree(study, folder)
    (folder / "runs/moe/seed0/tasks.json").write_text('{"tasks": {"ending": 3}}')
    capsys.readouterr()
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "runs/moe/seed0/tasks.json is corrupt" in err and err.count("\n") == 1


# --------------------------------------------------------------------------------------------
# One run: resume, and the setting's bad values
# --------------------------------------------------------------------------------------------

ONE_RUN = TINY_TASKS + ["train.eval_tasks=[agreement]"]  # the demo's MoE arm


def test_a_run_killed_before_its_summary_scores_the_tasks_on_resume(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "demo", "--out", str(run), *_sets(ONE_RUN)]) == 0
    first = (run / "tasks.json").read_text()
    # Killed after the final checkpoint, before tasks.json and summary.json were written.
    (run / "tasks.json").unlink()
    (run / "summary.json").unlink()
    assert main(["train", "demo", "--out", str(run), "--resume", *_sets(ONE_RUN)]) == 0
    assert (run / "tasks.json").read_text() == first and (run / "summary.json").is_file()
    # Resuming a complete run returns its summary and scores nothing again.
    (run / "tasks.json").unlink()
    assert main(["train", "demo", "--out", str(run), "--resume", *_sets(ONE_RUN)]) == 0
    assert not (run / "tasks.json").exists()


@pytest.mark.parametrize("value, message", [
    ("[lambada]", "train.eval_tasks=['lambada'] is invalid: allowed a list of distinct names "
                  "from last_word, ending, agreement"),
    ("[ending, ending]", "train.eval_tasks=['ending', 'ending'] is invalid"),
    ("{a: 1}", "train.eval_tasks={'a': 1} is invalid: expected a list"),
])
def test_bad_task_settings_are_refused(value, message):
    with pytest.raises(ConfigError) as error:
        load_config("demo", [f"train.eval_tasks={value}"])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_context_too_short_for_a_task_is_refused_before_training(tmp_path, capsys):
    run = tmp_path / "run"
    capsys.readouterr()
    assert main(["train", "demo", "--out", str(run), *_sets(ONE_RUN),
                 "--set", "model.max_seq_len=16"]) == 2
    err = capsys.readouterr().err
    assert ("train.eval_tasks: task 'agreement' needs model.max_seq_len >= " in err
            and "the run has 16" in err and err.count("\n") == 1)
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()


@pytest.mark.slow
def test_a_sweep_tabulates_the_tasks_its_runs_scored(tmp_path):
    """results.csv carries each run's accuracy from its tasks.json; the report a table of them."""
    import csv
    from dataclasses import replace

    from moelab.sweep.grid import load_grid
    from moelab.sweep.commands import run_sweep

    micro = load_grid("micro")
    grid = replace(micro, overrides=[*micro.overrides, "model.max_seq_len=64",
                                     "train.eval_tasks=[agreement]"])
    run_sweep(grid, tmp_path, bootstrap_replicates=0, log=lambda _: None)
    with open(tmp_path / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    for row in rows:
        scored = json.loads((tmp_path / row["run"] / "tasks.json").read_text())["tasks"]
        assert set(scored) == {"agreement"}
        assert float(row["zero_shot_agreement"]) == scored["agreement"]["accuracy"]
        assert "zero_shot_ending" not in row  # a column only for the tasks the runs scored
    report = (tmp_path / "report.md").read_text()
    assert "## Zero-shot tasks" in report and "agreement (chance 0.5000)" in report


def test_the_terminal_summary_prints_each_task_beside_the_loss_table(study, tmp_path, capsys):
    folder = tmp_path / study.name
    shutil.copytree(study, folder)
    capsys.readouterr()
    assert main(["report", str(folder)]) == 0
    out = capsys.readouterr().out
    results = json.loads((folder / "results.json").read_text())["zero_shot"]
    for task, result in results.items():
        moe = result["arms"]["moe"]["accuracy"]
        line = next(l for l in out.splitlines() if l.startswith(f"zero-shot {task} "))
        assert f"(chance {result['arms']['moe']['chance']:.4f})" in line
        assert f"moe {moe['mean']:.4f} ± {moe['std']:.4f}" in line
        for criterion, c in result["comparisons"].items():
            assert f"    matched {criterion}: moe - {c['dense_arm']} {c['difference']:+.4f}" in out
