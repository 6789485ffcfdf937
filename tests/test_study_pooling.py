"""Pooling studies of one design (``moelab pool``): the pooled estimate against scipy on the
concatenated per-seed losses, read straight from the files; designs that differ and seeds in two
studies refused in one line."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from moelab.cli import main
from moelab.study.pooling import pool, read_source

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "experiments" / "results" / "studies"
HOUSE_STUDY = Path(__file__).parent / "fixtures" / "house" / "study"


def per_seed_losses(results_path: Path, arm: str) -> dict[int, float]:
    """{seed: best val loss} of one arm, straight from a results.json."""
    runs = json.loads(results_path.read_text())["arms"][arm]["runs"]
    return {run["seed"]: run["best_val_loss"] for run in runs}


def test_the_pooled_demo_equals_ttest_rel_on_the_concatenated_seeds(tmp_path, capsys):
    sources = [STUDIES / "demo-seeds0-5.json", STUDIES / "demo-seeds617-622.json"]
    assert main(["pool", *map(str, sources), "--out", str(tmp_path / "pooled")]) == 0
    pooled = json.loads((tmp_path / "pooled" / "pooled.json").read_text())
    assert pooled["seeds"] == [*range(6), *range(617, 623)]
    (budget,) = pooled["budgets"]
    raw = {}
    for criterion in ("active", "total"):
        moe, dense = {}, {}
        for source in sources:
            moe.update(per_seed_losses(source, "moe"))
            dense.update(per_seed_losses(source, f"dense_{criterion}"))
        seeds = sorted(moe)
        reference = scipy_stats.ttest_rel([dense[s] for s in seeds], [moe[s] for s in seeds])
        interval = reference.confidence_interval(0.95)
        differences = [dense[s] - moe[s] for s in seeds]
        gap = budget["gaps"][criterion]
        assert gap["paired"]["n_pairs"] == 12 and gap["test"] == "paired"
        assert gap["gap"] == pytest.approx(sum(differences) / 12, abs=1e-12)
        assert gap["p_value"] == pytest.approx(reference.pvalue, rel=1e-9)
        assert (gap["ci_low"], gap["ci_high"]) == pytest.approx((interval.low, interval.high),
                                                                rel=1e-9)
        assert [d["diff"] for d in gap["paired"]["differences"]] == pytest.approx(differences)
        raw[criterion] = reference.pvalue
    # Holm over the 2 tests: the smaller p doubled, the larger one at least that.
    low, high = sorted(raw, key=raw.get)
    gaps = budget["gaps"]
    assert gaps[low]["p_adjusted"] == pytest.approx(2 * raw[low], rel=1e-12)
    assert gaps[high]["p_adjusted"] == pytest.approx(max(2 * raw[low], raw[high]), rel=1e-12)
    assert gaps[low]["adjustment"] == "Holm, 2 tests"
    report = (tmp_path / "pooled" / "pooled.md").read_text()
    assert "2 studies, 12 seeds" in report and "p (Holm, 2 tests)" in report
    assert f"{gaps['active']['gap']:+.4f}" in capsys.readouterr().out


def _changed_copy(source: Path, tmp_path: Path, change) -> Path:
    results = json.loads(source.read_text())
    change(results)
    copy = tmp_path / f"changed-{source.name}"
    copy.write_text(json.dumps(results))
    return copy


def _refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_a_design_that_differs_is_refused_in_one_line_naming_it(tmp_path, capsys):
    first, second = STUDIES / "demo-seeds0-5.json", STUDIES / "demo-seeds617-622.json"

    def wider_dense_total(results):
        results["arms"]["dense_total"]["model"]["d_ff"] = 640

    changed = _changed_copy(second, tmp_path, wider_dense_total)
    out = tmp_path / "out"
    line = _refused(["pool", str(first), str(changed), "--out", str(out)], capsys)
    assert line.endswith("their designs differ in arms.dense_total.model.d_ff: 512 vs 640")
    assert not (out / "pooled.json").exists()

    def longer(results):
        for run in results["arms"]["moe"]["runs"]:
            run["tokens"] = 819200

    line = _refused(["pool", str(first), str(_changed_copy(second, tmp_path, longer))], capsys)
    assert line.endswith("arms.moe.tokens: 409600 vs 819200")
    line = _refused(["pool", str(first), str(STUDIES / "cpu-budgets.json")], capsys)
    assert "budgets: [null] vs [409600, 819200, 1638400, 3276800]" in line


def test_seeds_in_two_studies_are_refused(capsys):
    line = _refused(["pool", str(STUDIES / "demo-seeds0-5.json"),
                     str(STUDIES / "demo-seeds0-5-cpu2.json")], capsys)
    assert "both have seeds 0, 1, 2, 3, 4, 5" in line


def test_bad_sources_are_one_line_errors(tmp_path, capsys):
    demo = str(STUDIES / "demo-seeds0-5.json")
    assert "does not exist" in _refused(["pool", demo, str(tmp_path / "nothing")], capsys)
    (tmp_path / "bad.json").write_text("{")
    assert "is not valid JSON" in _refused(["pool", demo, str(tmp_path / "bad.json")], capsys)
    assert "kind 'ablation'" in _refused(
        ["pool", demo, str(STUDIES / "demo-ladder-seeds0-2.json")], capsys)
    assert "2 or more" in _refused(["pool", demo], capsys)
    study = tmp_path / "study"
    shutil.copytree(HOUSE_STUDY, study)
    before = {p: p.read_bytes() for p in study.rglob("*") if p.is_file()}
    assert "is a study folder" in _refused(
        ["pool", demo, str(STUDIES / "demo-seeds617-622.json"), "--out", str(study)], capsys)
    assert {p: p.read_bytes() for p in study.rglob("*") if p.is_file()} == before  # untouched
    (tmp_path / "file").write_text("x")
    assert "is a file" in _refused(
        ["pool", demo, str(STUDIES / "demo-seeds617-622.json"), "--out", str(tmp_path / "file")],
        capsys)


def _renamed_seeds(folder: Path, into: Path, offset: int, lr: str = "0.01") -> Path:
    """A copy of a study folder whose runs are seeds + offset (folder names and configs), with
    train.lr set to ``lr``."""
    copy = into / folder.name
    shutil.copytree(folder, copy)
    for run in sorted((copy / "runs").glob("*/seed*")):
        seed = int(run.name.removeprefix("seed"))
        config = run / "config.yaml"
        text = config.read_text().replace(f"  seed: {seed}\n", f"  seed: {seed + offset}\n")
        config.write_text(text.replace("  lr: 0.01\n", f"  lr: {lr}\n"))
        run.rename(run.with_name(f"seed{seed + offset}"))
    return copy


def test_study_folders_pool_and_their_train_config_is_compared(tmp_path, capsys):
    first = _renamed_seeds(HOUSE_STUDY, tmp_path / "a", 0)
    second = _renamed_seeds(HOUSE_STUDY, tmp_path / "b", 10)
    pooled = pool([read_source(first), read_source(second)])
    gap = pooled.gaps[None]["active"]
    moe, dense = [], []
    for folder in (first, second):
        for seed_dir in sorted((folder / "runs" / "moe").iterdir()):
            moe.append(json.loads((seed_dir / "summary.json").read_text())["best_val_loss"])
            dense_dir = folder / "runs" / "dense_active" / seed_dir.name
            dense.append(json.loads((dense_dir / "summary.json").read_text())["best_val_loss"])
    assert pooled.seeds == [0, 1, 10, 11]
    assert gap.p_value == pytest.approx(scipy_stats.ttest_rel(dense, moe).pvalue, rel=1e-9)
    # A folder pools with a results.json of the same design (the fixture's own).
    mixed = pool([read_source(HOUSE_STUDY / "results.json"), read_source(second)])
    assert mixed.gaps[None]["total"].paired.n_pairs == 4
    assert not math.isnan(mixed.gaps[None]["total"].p_value)
    other_lr = _renamed_seeds(HOUSE_STUDY, tmp_path / "c", 20, lr="0.02")
    line = _refused(["pool", str(first), str(other_lr)], capsys)
    assert line.endswith("their designs differ in train.lr: 0.01 vs 0.02")
