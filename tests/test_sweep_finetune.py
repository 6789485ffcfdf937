"""Sweeps fine-tune their runs (a grid's ``finetune`` recipe): each run's finetune is a separate
``moelab finetune`` of that run, bit for bit; results.csv and the report carry its before/after
loss; the analysis's paired, cluster-robust equal-loss slope, its paired differences within
cells and Holm's adjustment match hand computations.

References: a second, separate ``moelab finetune`` of the same run with the overrides plan.json
recorded (val losses equal, the final weights' sha256 equal), the finetune's own files read
back by hand, numpy's lstsq with the CR1 cluster sandwich written out here, t intervals and
scipy's one-sample t test of paired differences, Holm's first step by hand.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import shutil

import numpy as np
import pytest
import scipy.stats

from moelab.codec import to_json
from moelab.cli import main
from moelab.errors import MoelabError
from moelab.runs.launchers.commands import train_commands
from moelab.sweep.commands import run_sweep
from moelab.sweep.analyses.finetune import finetune_analysis, finetune_analysis_text
from moelab.sweep.grid import FinetuneRecipe, load_grid
from moelab.sweep.plan import plan_sweep_folder
from moelab.train.checkpoint import MODEL_FILE, latest_checkpoint
from moelab.train.run_folder import RunFolder
from sweep_rows import results_table

RECIPE = FinetuneRecipe(steps=3, lr=0.003)  # micro: batch 4 x context 32 = 128 tokens a step


def micro_with_finetune():
    return dataclasses.replace(load_grid("micro"), finetune=RECIPE).validate()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "micro-sweep"
    with pytest.MonkeyPatch.context() as patch:  # the session's cache, as conftest sets it
        patch.setenv("MOELAB_CACHE", str(tmp_path_factory.getbasetemp() / "moelab-cache"))
        # Two jobs: the runs and their finetunes train in child processes, as --jobs 2 does.
        run_sweep(micro_with_finetune(), out, bootstrap_replicates=0, jobs=2,
                  log=lambda _: None)
    return out


def _weights_sha256(run_dir) -> str:
    folder = latest_checkpoint(RunFolder(run_dir).checkpoints_dir)
    return hashlib.sha256((folder / MODEL_FILE).read_bytes()).hexdigest()


@pytest.mark.slow
def test_a_sweep_finetune_is_a_separate_moelab_finetune_bit_for_bit(sweep, tmp_path):
    plan = json.loads((sweep / "plan.json").read_text())
    assert len(plan["finetunes"]) == len(plan["runs"]) == 4
    record = plan["finetunes"][1]["finetune"]
    assert record["data"] == "adaptation"
    assert "train.max_tokens=384" in record["overrides"]  # 3 steps x 128 tokens
    assert "train.lr=0.003" in record["overrides"]
    source = sweep / "runs" / record["source"]
    sets = [arg for item in record["overrides"] for arg in ("--set", item)]
    assert main(["finetune", str(source), "--data", "adaptation", "--out",
                 str(tmp_path / "separate"), *sets]) == 0
    swept = sweep / plan["finetunes"][1]["run_dir"]
    assert swept == sweep / "runs" / "finetune" / record["source"]
    for name in ("final_val_loss", "best_val_loss", "tokens"):
        assert (RunFolder(swept).read_summary()[name]
                == RunFolder(tmp_path / "separate").read_summary()[name])
    reference = json.loads((swept / "finetune.json").read_text())
    separate = json.loads((tmp_path / "separate" / "finetune.json").read_text())
    assert reference["source_val_loss"] == separate["source_val_loss"]
    assert _weights_sha256(swept) == _weights_sha256(tmp_path / "separate")
    assert _weights_sha256(swept) != _weights_sha256(source)  # it did train


@pytest.mark.slow
def test_results_csv_carries_each_finetune_before_and_after(sweep):
    with open(sweep / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4
    for row in rows:
        finetune_dir = sweep / "runs" / "finetune" / row["run"].removeprefix("runs/")
        before = json.loads((finetune_dir / "finetune.json").read_text())["source_val_loss"]
        after = json.loads((finetune_dir / "summary.json").read_text())["final_val_loss"]
        assert float(row["finetune_source_val_loss"]) == pytest.approx(before, rel=1e-12)
        assert float(row["finetune_val_loss"]) == pytest.approx(after, rel=1e-12)
        assert float(row["finetune_gain"]) == pytest.approx(before - after, rel=1e-9)
        assert after < before  # three steps on the new text already lower its loss


@pytest.mark.slow
def test_the_report_section_is_rebuilt_from_files(sweep, capsys):
    report = (sweep / "report.md").read_text()
    assert "## Fine-tuning against sparsity" in report
    analysis = json.loads((sweep / "finetune.json").read_text())
    assert analysis["runs"] == 4 and analysis["basis"] == "tokens"
    saved = {name: (sweep / name).read_text() for name in ("report.md", "finetune.json",
                                                           "results.csv")}
    for name in saved:
        (sweep / name).unlink()
    assert main(["report", str(sweep)]) == 0
    for name, text in saved.items():
        assert (sweep / name).read_text() == text, name


@pytest.mark.slow
def test_a_report_with_a_finetune_folder_missing_says_it_is_partial(sweep, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(sweep, copy)
    gone = sorted((copy / "runs" / "finetune").rglob("summary.json"))[0].parent
    shutil.rmtree(gone)
    capsys.readouterr()
    assert main(["report", str(copy)]) == 3
    assert "3 of 4 planned finetunes" in capsys.readouterr().err
    report = (copy / "report.md").read_text()
    assert "**This report is partial**" in report
    assert "4 of 4 planned runs and 3 of 4 planned finetunes" in report
    assert json.loads((copy / "finetune.json").read_text())["runs"] == 3


def test_finetunes_are_planned_after_their_runs_and_listed_as_finetune_commands(tmp_path):
    _, specs = plan_sweep_folder(micro_with_finetune(), tmp_path)
    assert [spec.finetune is not None for spec in specs] == [False] * 4 + [True] * 4
    commands = train_commands(tmp_path, specs)
    assert [c.split()[1] for c in commands] == ["train"] * 4 + ["finetune"] * 4
    assert f"{tmp_path / 'runs' / specs[0].name} --data adaptation" in commands[4]
    # A grid without the recipe plans no finetunes, and grid.json has no finetune key.
    _, plain = plan_sweep_folder(load_grid("micro"), tmp_path / "plain")
    assert all(spec.finetune is None for spec in plain)
    assert "finetune" not in json.loads((tmp_path / "plain" / "grid.json").read_text())


def test_a_recipe_may_be_added_to_a_sweep_folder_but_not_changed(tmp_path):
    plan_sweep_folder(load_grid("micro"), tmp_path)
    plan_sweep_folder(micro_with_finetune(), tmp_path)  # the runs stay valid: finetunes added
    assert json.loads((tmp_path / "grid.json").read_text())["finetune"]["lr"] == 0.003
    changed = dataclasses.replace(micro_with_finetune(),
                                  finetune=dataclasses.replace(RECIPE, lr=0.01))
    for grid in (changed, load_grid("micro")):
        with pytest.raises(MoelabError, match="already holds another sweep grid"):
            plan_sweep_folder(grid, tmp_path)


# --------------------------------------------------------------------------------------------
# The analysis on synthetic tables
# --------------------------------------------------------------------------------------------

HEADER = ["size", "budget", "C_budget", "S", "seed", "final_val_loss", "finetune_source_val_loss",
          "finetune_val_loss", "finetune_gain"]


def synthetic_rows(per_sparsity: float, seed: int = 0) -> list[dict]:
    """2 FLOPs budgets x 2 sizes x 4 sparsities x 3 seeds; fine-tuned loss = 2 + 0.8 (L - 3)
    + per_sparsity S + noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for budget in (1e12, 3e12):
        for size, size_loss in (("a", 3.2), ("b", 3.0)):
            for sparsity in (0.0, 0.5, 0.75, 0.875):
                for run_seed in (1, 2, 3):
                    loss = size_loss - 0.1 * np.log10(budget / 1e12) - 0.05 * sparsity \
                        + rng.normal(0, 0.01)
                    tuned = 2 + 0.8 * (loss - 3) + per_sparsity * sparsity + rng.normal(0, 0.01)
                    before = tuned + 0.5 + rng.normal(0, 0.01)
                    rows.append({"size": size, "budget": f"C{budget:g}", "C_budget": f"{budget:g}",
                                 "S": str(sparsity), "seed": str(run_seed),
                                 "final_val_loss": str(loss),
                                 "finetune_source_val_loss": str(before),
                                 "finetune_val_loss": str(tuned),
                                 "finetune_gain": str(before - tuned)})
    return rows


def equal_loss_fit(rows: list[dict]) -> dict:
    """The finetune_val_loss fit at equal pretraining loss of ``rows`` as results.csv."""
    return to_json(finetune_analysis(results_table(rows, HEADER)))["metrics"][
        "finetune_val_loss"]["equal_loss"]


def _pairs_by_hand(rows):
    """(size, budget, S, seed) -> sparse minus the same cell's dense of that seed, by hand."""
    dense = {(r["size"], r["budget"], r["seed"]): r for r in rows if r["S"] == "0.0"}
    return {(r["size"], r["budget"], r["S"], r["seed"]):
            {k: float(r[k]) - float(dense[r["size"], r["budget"], r["seed"]][k])
             for k in ("final_val_loss", "finetune_val_loss", "finetune_gain")}
            for r in rows if r["S"] != "0.0"}


def test_the_equal_loss_slope_is_paired_within_cells_with_errors_clustered_by_size_and_seed():
    rows = synthetic_rows(per_sparsity=-0.2)
    fit = equal_loss_fit(rows)
    pairs = _pairs_by_hand(rows)
    keys = sorted(pairs)
    x = np.array([[pairs[k]["final_val_loss"], float(k[2])] for k in keys])
    y = np.array([pairs[k]["finetune_val_loss"] for k in keys])
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    residual = y - x @ beta
    clusters = sorted({(k[0], k[3]) for k in keys})  # 2 sizes x 3 seeds
    scores = [sum(x[i] * residual[i] for i, k in enumerate(keys) if (k[0], k[3]) == c)
              for c in clusters]
    bread = np.linalg.inv(x.T @ x)
    g, n = len(clusters), len(y)
    covariance = bread @ sum(np.outer(s, s) for s in scores) @ bread * g / (g - 1) * (n - 1) / (n - 2)
    se = np.sqrt(covariance[1, 1])
    half = scipy.stats.t.ppf(0.975, g - 1) * se
    assert (g, n) == (6, 36)
    assert fit["sparsity"]["value"] == pytest.approx(beta[1], rel=1e-9)
    assert fit["sparsity"]["df"] == 5
    assert fit["sparsity"]["ci"] == pytest.approx([beta[1] - half, beta[1] + half], rel=1e-9)
    assert fit["sparsity"]["p"] == pytest.approx(2 * scipy.stats.t.sf(abs(beta[1] / se), 5))
    assert fit["loss"]["value"] == pytest.approx(beta[0], rel=1e-9)
    assert fit["sparsity"]["ci"][0] < -0.2 < fit["sparsity"]["ci"][1]
    analysis = to_json(finetune_analysis(results_table(rows, HEADER)))
    assert analysis["metrics"]["finetune_val_loss"]["separates"]
    assert (analysis["pairs"], analysis["clusters"]) == (36, 6)


def test_a_shared_size_offset_does_not_enter_the_paired_effect():
    # Size a fine-tunes 0.3 nats worse at every S, dense included: a between-cell difference
    # that a pooled fit over runs could read as an effect; within cells it cancels exactly.
    rows = synthetic_rows(per_sparsity=0.0, seed=5)
    shifted = [dict(r, finetune_val_loss=str(float(r["finetune_val_loss"]) + 0.3))
               if r["size"] == "a" else r for r in rows]
    before, after = equal_loss_fit(rows), equal_loss_fit(shifted)
    assert after["sparsity"]["value"] == pytest.approx(before["sparsity"]["value"], abs=1e-12)


def test_no_effect_is_said_in_words_with_the_minimum_detectable_difference():
    record = finetune_analysis(results_table(synthetic_rows(per_sparsity=0.0, seed=3), HEADER))
    result = to_json(record)["metrics"]["finetune_val_loss"]
    assert not result["separates"]
    se, df = result["equal_loss"]["sparsity"]["se"], result["equal_loss"]["sparsity"]["df"]
    mdd = result["equal_loss"]["sparsity"]["mdd"]
    # The exact power of the two-sided 5 % t-test at that effect, written out: 0.8. The
    # shortcut (t_0.975 + t_0.80) se falls short of it.
    critical = scipy.stats.t.ppf(0.975, df)
    power = (scipy.stats.nct.sf(critical, df, mdd / se)
             + scipy.stats.nct.cdf(-critical, df, mdd / se))
    assert power == pytest.approx(0.8, abs=1e-6)
    assert mdd > (critical + scipy.stats.t.ppf(0.8, df)) * se
    text = finetune_analysis_text(record)
    assert "nothing separates the sparsities" in text and f"{mdd:.3f}" in text


def test_cells_pair_each_sparse_run_with_its_own_cells_dense_run_and_holm_covers_every_test():
    rows = synthetic_rows(per_sparsity=-0.2)
    analysis = to_json(finetune_analysis(results_table(rows, HEADER)))
    assert analysis_basis(rows) == "flops"
    # 2 budgets x 2 sizes x 3 sparse S x 2 metrics + the 2 equal-loss slopes
    assert len(analysis["cells"]) == 12 and analysis["tests"] == 26
    cell = next(c for c in analysis["cells"]
                if (c["budget"], c["size"], c["sparsity"]) == ("C3e+12", "a", 0.75))
    pairs = _pairs_by_hand(rows)
    differences = np.array([pairs["a", "C3e+12", "0.75", s]["finetune_val_loss"] for s in "123"])
    half = scipy.stats.t.ppf(0.975, 2) * differences.std(ddof=1) / np.sqrt(3)
    paired = cell["finetune_val_loss"]["minus_dense"]
    assert paired["pairs"] == 3 and paired["value"] == pytest.approx(differences.mean())
    assert paired["ci"] == pytest.approx([differences.mean() - half, differences.mean() + half])
    assert paired["p"] == pytest.approx(scipy.stats.ttest_1samp(differences, 0.0).pvalue)
    raw = [analysis["metrics"][m]["equal_loss"]["sparsity"]["p"]
           for m in ("finetune_val_loss", "finetune_gain")]
    raw += [c[m]["minus_dense"]["p"] for c in analysis["cells"]
            for m in ("finetune_val_loss", "finetune_gain")]
    smallest = min(range(26), key=raw.__getitem__)  # Holm's first step: 26 x the smallest p
    adjusted = ([analysis["metrics"][m]["equal_loss"]["sparsity"]["p_holm"]
                 for m in ("finetune_val_loss", "finetune_gain")]
                + [c[m]["minus_dense"]["p_holm"] for c in analysis["cells"]
                   for m in ("finetune_val_loss", "finetune_gain")])
    assert adjusted[smallest] == pytest.approx(min(1.0, 26 * raw[smallest]))
    assert all(a >= p for a, p in zip(adjusted, raw))


def analysis_basis(rows) -> str:
    return finetune_analysis(results_table(rows, HEADER)).basis


def test_no_finetune_columns_no_analysis():
    rows = [{k: v for k, v in row.items() if not k.startswith("finetune")}
            for row in synthetic_rows(0.0)]
    assert finetune_analysis(results_table(rows, HEADER[:6])) is None


def test_the_stored_finetune_json_reads_back_as_written_and_renders_its_report_section():
    """The file an earlier moelab wrote as a hand-built dict reads into typed records, writes
    back key for key, and renders the section its stored report.md holds."""
    from pathlib import Path

    from moelab.codec import from_json
    from moelab.sweep.analyses.finetune import FinetuneRecord

    folder = Path(__file__).resolve().parents[1] / "experiments" / "results" / "sweeps" / "cpu-finetune"
    stored = json.loads((folder / "finetune.json").read_text())
    record = from_json(FinetuneRecord, stored)
    assert json.dumps(to_json(record), indent=2) == json.dumps(stored, indent=2)
    assert finetune_analysis_text(record).strip() in (folder / "report.md").read_text()
    older = from_json(FinetuneRecord, {"runs": 3, "metrics": {}})
    assert "from an older analysis" in finetune_analysis_text(older)


def test_a_recipe_takes_every_source_moelab_finetune_takes(tmp_path, monkeypatch):
    """hf:NAME streams a hub dataset (moelab finetune --data reads it as data.source does), so a
    recipe naming one is a plan, not an error; an unknown name is refused with today's list."""
    FinetuneRecipe(steps=3, lr=0.003, data="hf:HuggingFaceFW/fineweb-edu").validate("grid")
    with pytest.raises(MoelabError, match=r"finetune.data='nope' is invalid: .*hf:NAME, "
                                          r"adaptation, a folder with train.txt"):
        monkeypatch.chdir(tmp_path)  # no ./nope
        FinetuneRecipe(steps=3, lr=0.003, data="nope").validate("grid")
