"""The study layer without training: arms, plan, runner, results, report (a fake trainer).

The fake trainer writes run folders in the training engine's format with numbers that depend
on the arm and seed, so results can be checked against values computed here independently.
"""

from __future__ import annotations

import csv
import io
import json
import shlex
import statistics
from pathlib import Path

import pytest
import yaml
from PIL import Image
from scipy import stats as scipy_stats

from moelab.accounting import count_params
from moelab.cli import main
from moelab.config import load_config, to_dict
from moelab.errors import ConfigError, MoelabError
from moelab.study import commands as study_commands
from moelab.study.arms import ladder_arms, study_arms
from moelab.study.settings import StudySettings, load_study
from tiny_overrides import TINY_MOE_RUN

ARM_OFFSET = {"moe": 0.0, "dense_active": 0.08, "dense_total": -0.02, "dense_flops": 0.07,
              "moe_compute": 0.0,
              "naive_top1": 0.3, "top1_lb": 0.1, "top2_lb": 0.01, "top2_lb_z": 0.0,
              "top2_global_lb_z": -0.01, "top2_bias_z": -0.005}
# Noise of odd seeds that only the dense arms have: without it every per-seed difference would
# be the same constant, and the paired test would have no spread to test against.
ARM_ODD_SEED_NOISE = {"dense_active": 0.002, "dense_total": 0.001}


class FakeTrain:
    """Stands in for moelab.train.train: records calls, writes a run folder, may fail."""

    def __init__(self, fail_arm: str | None = None, fail_runs: tuple[str, ...] = ()):
        self.calls: list[tuple[str, bool]] = []
        self.fail_arm = fail_arm
        self.fail_runs = fail_runs
        """Runs that fail, as ``arm/seedN``."""

    def __call__(self, config, run_dir, *, resume=False):
        run_dir = Path(run_dir)
        arm = run_dir.parent.name
        self.calls.append((run_dir.as_posix(), resume))
        if arm == self.fail_arm or f"{arm}/{run_dir.name}" in self.fail_runs:
            raise MoelabError(f"train.seed={config.train.seed} is invalid: fake failure")
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(config)))
        final = fake_loss(arm, config.train.seed, config.train.max_tokens)
        is_moe = config.model.moe is not None
        routing = [{"busiest_fraction": 0.3 + 0.1 * layer, "routing_entropy": 0.9,
                    "mean_log_z": 1.0, "usage_variance_scaled": 0.1, "load_entropy": 1.3,
                    "effective_experts": 3.7, "mean_z_sq": 1.1,
                    "dead_experts": 1 if layer == 0 else 0}
                   for layer in range(config.model.n_layers)] if is_moe else []
        with open(run_dir / "metrics.jsonl", "w") as f:
            for step in (1, 2, 3):
                f.write(json.dumps({"kind": "train", "step": step, "tokens": step * 100, "loss": 9.0}) + "\n")
                f.write(json.dumps({"kind": "eval", "step": step, "tokens": step * 100,
                                    "val_loss": final + (3 - step) * 0.5, "routing": routing}) + "\n")
        counts = count_params(config.model)
        (run_dir / "summary.json").write_text(json.dumps({
            "status": "complete", "best_val_loss": final, "best_val_bpb": final / 2,
            "best_val_step": 3, "final_val_loss": final, "final_val_bpb": final / 2,
            "active_params": counts.active, "total_params": counts.total,
            "non_embedding_params": counts.non_embedding, "flops_per_token_6n": 6 * counts.active,
            "tokens": config.train.max_tokens, "steps": 3, "wall_time_s": 2.0,
            "tokens_per_s": 1000.0 + config.train.seed, "seed": config.train.seed,
            "routing": routing, "collapse": False,
        }))
        return json.loads((run_dir / "summary.json").read_text())


def fake_loss(arm: str, seed: int, tokens: int) -> float:
    shared_noise = 0.003 * ((seed * 7) % 5)  # 0, 0.006, 0.012 for seeds 0, 1, 2
    own_noise = ARM_ODD_SEED_NOISE.get(arm, 0.0) * (seed % 2)
    return 2.0 + ARM_OFFSET[arm] + shared_noise + own_noise + 1e5 / tokens


@pytest.fixture
def demo():
    return load_study("demo", ["train.max_tokens=1000000"])


def _flatten(tree, prefix=""):
    if isinstance(tree, dict):
        out = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def _differing_keys(a, b):
    flat_a, flat_b = _flatten(to_dict(a)), _flatten(to_dict(b))
    return {k for k in flat_a.keys() | flat_b.keys() if flat_a.get(k, "absent") != flat_b.get(k, "absent")}


# --------------------------------------------------------------------------------------------
# Arms and settings
# --------------------------------------------------------------------------------------------


def test_arms_differ_only_in_the_ffn(demo):
    config, _ = demo
    arms = {arm.name: arm for arm in study_arms(config, ["active", "total"])}
    assert list(arms) == ["moe", "dense_active", "dense_total"]
    for name in ("dense_active", "dense_total"):
        differing = _differing_keys(arms["moe"].config, arms[name].config)
        assert all(k == "model.d_ff" or k.startswith("model.moe") for k in differing), differing
        assert arms[name].config.model.moe is None
    moe_counts = count_params(config.model)
    # Hand check of the matcher's intent: within one d_ff step (32) of 3 * d_model params/layer.
    per_step = 3 * config.model.d_model * 32 * config.model.n_layers
    assert abs(count_params(arms["dense_active"].config.model).total - moe_counts.active) <= per_step / 2
    assert abs(count_params(arms["dense_total"].config.model).total - moe_counts.total) <= per_step / 2


def test_ladder_rungs_differ_only_in_routing(demo):
    config, _ = demo
    rungs = {arm.name: arm.config.model.moe for arm in ladder_arms(config)}
    assert [(m.top_k, m.lb_coef, m.z_coef, m.lb_scope, m.balance) for m in rungs.values()] == [
        (1, 0.0, 0.0, "micro_batch", "aux_loss"), (1, 0.01, 0.0, "micro_batch", "aux_loss"),
        (2, 0.01, 0.0, "micro_batch", "aux_loss"), (2, 0.01, 0.001, "micro_batch", "aux_loss"),
        (2, 0.01, 0.001, "global_batch", "aux_loss"), (2, 0.0, 0.001, "micro_batch", "bias")]
    # The bias rung trains with the balancing bias and without the balancing loss.
    assert rungs["top2_bias_z"].uses_expert_bias and not rungs["top2_bias_z"].uses_aux_loss
    assert not any(rungs[name].uses_expert_bias for name in list(rungs)[:-1])
    for arm in ladder_arms(config):
        assert _differing_keys(config, arm.config) <= {
            "model.moe.top_k", "model.moe.lb_coef", "model.moe.z_coef", "model.moe.lb_scope",
            "model.moe.balance"}


def test_a_base_configs_balancing_reaches_only_the_rungs_that_name_it():
    config = load_config("demo", ["model.moe.lb_scope=global_batch", "model.moe.balance=both"])
    rungs = {arm.name: arm.config.model.moe for arm in ladder_arms(config)}
    assert rungs["top2_lb_z"].lb_scope == "micro_batch" and rungs["top2_lb_z"].balance == "aux_loss"
    assert rungs["top2_global_lb_z"].lb_scope == "global_batch"
    assert rungs["top2_bias_z"].balance == "bias"


def test_a_dense_base_config_is_refused():
    config = load_config("demo", ["model.moe=null"])
    with pytest.raises(ConfigError, match="model.moe=null is invalid for a study"):
        study_arms(config, ["active"])


def test_study_section_and_base_preset(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("study:\n  base: demo\n  seeds: 2\n  budgets: [1M, 500K]\n"
                    "  criteria: total,active\ntrain:\n  lr: 0.001\n")
    config, settings = load_study(path, ["study.match_step=64"])
    assert config == load_config("demo", ["train.lr=0.001"])
    assert settings == StudySettings(seeds=2, criteria=["total", "active"],
                                     budgets=[500_000, 1_000_000], match_step=64)
    with pytest.raises(ConfigError, match="study.sedes is not a known key"):
        load_study(path, ["study.sedes=3"])
    with pytest.raises(ConfigError, match="criterion 'params' is invalid"):
        load_study(path, ["study.criteria=params"])


REPO_ROOT = Path(__file__).resolve().parents[1]
# Run counts as the documentation states them (phrase, file), not as the planner computes them.
DOCUMENTED_RUNS = {
    "demo": (18, "trains 18 runs", "docs/findings/study-by-hand.md"),
    "cpu-budgets": (36, "CPU, 36 runs", "docs/study.md"),
    "paper": (9, "3 seeds", "docs/study.md"),  # x 3 arms: moe, dense_active, dense_total
    "paper-budgets": (36, "GPU, 36 runs", "docs/study.md"),
    "ablation": (18, "GPU, 18 runs", "docs/study.md"),
    "cpu-ablation": (24, "CPU, 24 runs", "docs/study.md"),
    "cpu-replication": (9, "the 9 runs", "docs/findings/study-by-hand.md"),
}


@pytest.mark.parametrize("preset", list(DOCUMENTED_RUNS))
def test_presets_plan_the_documented_number_of_runs(preset, tmp_path):
    runs, phrase, doc = DOCUMENTED_RUNS[preset]
    assert phrase in (REPO_ROOT / doc).read_text()
    config, settings = load_study(preset)
    kind = "ablation" if preset.endswith("ablation") else "study"
    commands = study_commands.list_runs(kind, config, settings, tmp_path / preset)
    assert len(commands) == len(set(commands)) == runs


# --------------------------------------------------------------------------------------------
# Runner, results and report
# --------------------------------------------------------------------------------------------


def _study(tmp_path, demo, train=None, seeds=2, **settings):
    config, _ = demo
    train = train or FakeTrain()
    results = study_commands.run_study("study", config, StudySettings(seeds=seeds, **settings),
                            tmp_path / "s", train_fn=train, log=lambda line: None).to_dict()
    return results, train


@pytest.fixture(autouse=True)
def _no_data(monkeypatch):
    """The fake trainer needs no tokenizer or token cache."""
    monkeypatch.setattr(study_commands, "prepare_shared_data", lambda config, log: None)


@pytest.mark.slow
def test_results_equal_statistics_of_the_summaries(tmp_path, demo):
    results, train = _study(tmp_path, demo, seeds=3)
    assert len(train.calls) == 9
    folder = tmp_path / "s"
    for arm in ("moe", "dense_active", "dense_total"):
        losses = [json.loads((folder / f"runs/{arm}/seed{s}/summary.json").read_text())["best_val_loss"]
                  for s in range(3)]
        stats = results["arms"][arm]["best_val_loss"]
        assert stats["mean"] == pytest.approx(statistics.mean(losses), abs=1e-12)
        assert stats["std"] == pytest.approx(statistics.stdev(losses), abs=1e-12)
        assert stats["n"] == 3
    # Paired by hand: dense_active - moe is 0.08 + (0, 0.002, 0) over seeds 0, 1, 2: mean
    # 0.08 + 0.002/3, std 0.002/sqrt(3) (deviations -2/3, 4/3, -2/3 of 0.002), so the standard
    # error is std/sqrt(3) = 0.002/3 and t = mean/se on 2 degrees of freedom.
    gap = results["gaps"]["active"]
    mean_diff, std_diff = 0.08 + 0.002 / 3, 0.002 / 3 ** 0.5
    assert (gap["test"], gap["verdict"]) == ("paired", "MoE better (paired t, n=3)")
    assert gap["gap"] == pytest.approx(mean_diff, abs=1e-12)
    paired = gap["paired"]
    assert (paired["n_pairs"], paired["std_diff"]) == (3, pytest.approx(std_diff, rel=1e-9))
    assert paired["p_value"] == pytest.approx(2 * scipy_stats.t.sf(mean_diff / (0.002 / 3), 2), rel=1e-6)
    half_width = scipy_stats.t.ppf(0.975, 2) * 0.002 / 3
    assert (paired["ci_low"], paired["ci_high"]) == pytest.approx(
        (mean_diff - half_width, mean_diff + half_width), rel=1e-9)
    assert (gap["ci_low"], gap["p_value"]) == (paired["ci_low"], paired["p_value"])
    # Welch on the same runs, against scipy's unpaired test.
    moe = [fake_loss("moe", s, 1_000_000) for s in range(3)]
    dense = [fake_loss("dense_active", s, 1_000_000) for s in range(3)]
    reference = scipy_stats.ttest_ind(dense, moe, equal_var=False)
    assert gap["welch"]["p_value"] == pytest.approx(reference.pvalue, rel=1e-9)
    assert gap["welch"]["df"] == pytest.approx(reference.df, rel=1e-9)
    assert results["gaps"]["total"]["verdict"] == "dense better (paired t, n=3)"
    assert json.loads((folder / "results.json").read_text()) == results
    text = (folder / "results.csv").read_text()
    assert text.startswith("budget_tokens,arm,criterion,seed,best_val_loss")
    # One row per run, each with the numbers the fake trainer was told to produce.
    config, _ = demo
    counts = {arm.name: count_params(arm.config.model) for arm in study_arms(config, ["active", "total"])}
    criterion = {"moe": "", "dense_active": "active", "dense_total": "total"}
    rows = list(csv.DictReader(io.StringIO(text)))
    assert sorted((r["arm"], int(r["seed"])) for r in rows) == sorted(
        (arm, seed) for arm in criterion for seed in range(3))
    for row in rows:
        arm, seed = row["arm"], int(row["seed"])
        loss = fake_loss(arm, seed, 1_000_000)
        assert float(row["best_val_loss"]) == pytest.approx(loss, abs=1e-12)
        assert float(row["final_val_loss"]) == pytest.approx(loss, abs=1e-12)
        assert float(row["best_val_bpb"]) == pytest.approx(loss / 2, abs=1e-12)
        assert (row["budget_tokens"], row["criterion"]) == ("", criterion[arm])
        assert (int(row["tokens"]), int(row["steps"]), float(row["tokens_per_s"])) == (
            1_000_000, 3, 1000.0 + seed)
        assert (int(row["active_params"]), int(row["total_params"])) == (
            counts[arm].active, counts[arm].total)
        assert row["run_dir"] == f"runs/{arm}/seed{seed}"


@pytest.mark.slow
def test_rerun_skips_finished_runs_and_redoes_a_torn_one(tmp_path, demo):
    _, train = _study(tmp_path, demo)
    assert len(train.calls) == 6
    _, again = _study(tmp_path, demo)
    assert again.calls == []
    (tmp_path / "s/runs/dense_total/seed1/summary.json").write_text('{"status": "failed"}')
    (tmp_path / "s/runs/moe/seed0/summary.json").unlink()
    _, redo = _study(tmp_path, demo)
    assert sorted(redo.calls) == [(str(tmp_path / "s/runs/dense_total/seed1"), True),
                                  (str(tmp_path / "s/runs/moe/seed0"), True)]


@pytest.mark.slow
def test_a_failed_run_is_recorded_and_the_others_run(tmp_path, demo):
    results, train = _study(tmp_path, demo, train=FakeTrain(fail_arm="dense_total"))
    assert len(train.calls) == 6
    assert set(results["arms"]) == {"moe", "dense_active"}
    assert set(results["gaps"]) == {"active"}
    assert results["failed_runs"] == {
        "dense_total/seed0": "MoelabError: train.seed=0 is invalid: fake failure",
        "dense_total/seed1": "MoelabError: train.seed=1 is invalid: fake failure"}
    assert results["missing_runs"] == ["dense_total/seed0", "dense_total/seed1"]
    report = (tmp_path / "s/report.md").read_text()
    assert "`dense_total/seed0` failed: MoelabError" in report
    # Once the cause is gone, a rerun trains just those two and clears the record.
    results, train = _study(tmp_path, demo)
    assert len(train.calls) == 2 and results["failed_runs"] == {} and "total" in results["gaps"]


@pytest.mark.slow
def test_a_study_whose_every_run_fails_says_so(tmp_path, demo):
    """Not "not a study folder": the runs failed before writing a folder (refused configs)."""
    every_run = tuple(f"{arm}/seed{seed}" for arm in ("moe", "dense_active", "dense_total")
                      for seed in (0, 1))
    with pytest.raises(MoelabError, match=r"every run of the study failed \(6; the first: "
                                          r"moe/seed0: MoelabError: .*failures.json"):
        _study(tmp_path, demo, train=FakeTrain(fail_runs=every_run))


@pytest.mark.slow
def test_stale_temporaries_of_a_killed_write_are_removed_on_the_next_plan(tmp_path, demo):
    _study(tmp_path, demo)
    stale = [tmp_path / "s" / ".plan.json.k1ll3d.tmp", tmp_path / "s/configs/.moe-seed0.yaml.x.tmp"]
    for path in stale:
        path.write_text("half")
    _study(tmp_path, demo)
    assert not any(path.exists() for path in stale)


@pytest.mark.slow
def test_budgets_below_one_step_are_refused_when_planned(tmp_path, demo):
    with pytest.raises(MoelabError, match=r"token budget 100 is invalid: less than one step"):
        _study(tmp_path, demo, budgets=[100, 10**6])
    assert not (tmp_path / "s").exists()


def _figures_named(report: str) -> list[str]:
    return [line.split("](")[1].rstrip(")") for line in report.splitlines() if line.startswith("![")]


@pytest.mark.slow
def test_report_renders_every_figure_it_names(tmp_path, demo):
    _study(tmp_path, demo)
    folder = tmp_path / "s"
    named = _figures_named((folder / "report.md").read_text())
    assert {"figures/val_loss.png", "figures/gaps.png", "figures/routing.png",
            "figures/layer_load.png"} <= set(named)
    for relative in named:
        with Image.open(folder / relative) as image:
            assert image.format == "PNG"
            image.verify()


@pytest.mark.slow
def test_report_command_rebuilds_identical_numbers(tmp_path, demo, capsys):
    _study(tmp_path, demo)
    folder = tmp_path / "s"
    before = {name: (folder / name).read_text() for name in ("results.json", "results.csv", "report.md")}
    for name in before:
        (folder / name).unlink()
    assert main(["report", str(folder)]) == 0
    assert {name: (folder / name).read_text() for name in before} == before
    out = capsys.readouterr().out
    assert "| moe |" in out and "MoE better (paired t, n=2)" in out
    assert "    paired t: 95% CI [" in out and "    Welch t:  95% CI [" in out


@pytest.mark.slow
def test_budget_sweep_groups_and_plots(tmp_path, demo):
    results, train = _study(tmp_path, demo, budgets=[200_000, 1_000_000])
    assert len(train.calls) == 12
    assert (tmp_path / "s/runs/200K/moe/seed0/summary.json").is_file()
    assert [g["label"] for g in results["budgets"]] == ["200K", "1M"]
    # Paired within each budget: seeds 0 and 1 differ by 0.08 and 0.082.
    for group in results["budgets"]:
        active = group["gaps"]["active"]
        assert active["test"] == "paired" and active["paired"]["n_pairs"] == 2
        assert active["gap"] == pytest.approx(0.081, abs=1e-12)
        assert active["min_detectable_gap"] > 0
    assert results["arms"] == results["budgets"][-1]["arms"]
    assert "figures/gaps_vs_tokens.png" in _figures_named((tmp_path / "s/report.md").read_text())
    # Two budgets, the dense arms' loss falling with them: the leverage section follows.
    report = (tmp_path / "s/report.md").read_text()
    assert report.index("## Budget sweep") < report.index("## Efficiency leverage")
    assert "### In measured training seconds" in report


@pytest.mark.slow
def test_ablation_ladder_report(tmp_path, demo):
    config, _ = demo
    results = study_commands.run_study("ablation", config, StudySettings(seeds=2), tmp_path / "a",
                            train_fn=FakeTrain(), log=lambda line: None).to_dict()
    assert list(results["arms"]) == ["naive_top1", "top1_lb", "top2_lb", "top2_lb_z",
                                     "top2_global_lb_z", "top2_bias_z"]
    assert results["arms"]["naive_top1"]["best_val_loss"]["mean"] == pytest.approx(
        statistics.mean(fake_loss("naive_top1", s, 1_000_000) for s in range(2)))
    assert results["gaps"] == {}
    report = (tmp_path / "a/report.md").read_text()
    assert "## Ladder" in report and "| naive_top1 | top-1, no load balancing" in report
    assert "| top2_bias_z | top-2, aux-loss-free (bias) balancing" in report
    # FakeTrain's runs have one dead expert in layer 0 and none elsewhere (4 demo layers).
    assert results["arms"]["top2_bias_z"]["routing"]["dead_experts_per_layer"] == [1, 0, 0, 0]
    assert " | 1 / 0 / 0 / 0 |" in report


def _losses(arm: str, seeds) -> list[float]:
    return [fake_loss(arm, seed, 1_000_000) for seed in seeds]


@pytest.mark.slow
def test_a_seed_list_names_the_folders_and_pairs_by_seed(tmp_path, demo):
    results, train = _study(tmp_path, demo, seeds=[11, 10, 13])
    plan = json.loads((tmp_path / "s/plan.json").read_text())
    assert [run["name"] for run in plan["runs"]][:3] == [
        "moe/seed11", "dense_active/seed11", "dense_total/seed11"]  # the list's order
    assert sorted({Path(call).name for call, _ in train.calls}) == ["seed10", "seed11", "seed13"]
    assert results["seeds"] == [10, 11, 13]
    paired = results["gaps"]["active"]["paired"]
    moe, dense = _losses("moe", [10, 11, 13]), _losses("dense_active", [10, 11, 13])
    assert [d["seed"] for d in paired["differences"]] == [10, 11, 13]
    assert [d["diff"] for d in paired["differences"]] == pytest.approx(
        [d - m for d, m in zip(dense, moe)], abs=1e-12)
    reference = scipy_stats.ttest_rel(dense, moe)
    assert paired["p_value"] == pytest.approx(reference.pvalue, rel=1e-9)
    assert results["gaps"]["active"]["test"] == "paired"


@pytest.mark.slow
def test_a_missing_run_falls_back_to_welch(tmp_path, demo):
    results, _ = _study(tmp_path, demo, train=FakeTrain(fail_runs=("dense_active/seed1",)), seeds=3)
    active, total = results["gaps"]["active"], results["gaps"]["total"]
    assert active["test"] == "welch" and active["verdict"].endswith("(Welch t, n=3/2)")
    reference = scipy_stats.ttest_ind(_losses("dense_active", [0, 2]), _losses("moe", [0, 1, 2]),
                                      equal_var=False)
    assert active["p_value"] == active["welch"]["p_value"] == pytest.approx(reference.pvalue, rel=1e-9)
    assert active["paired"]["n_pairs"] == 2
    assert total["test"] == "paired" and total["verdict"] == "dense better (paired t, n=3)"
    report = (tmp_path / "s/report.md").read_text()
    assert "| Welch t |" in report and "| paired t |" in report  # the power table


@pytest.mark.slow
def test_one_seed_is_not_testable_and_writes_null_not_nan(tmp_path, demo, capsys):
    results, _ = _study(tmp_path, demo, seeds=1)
    gap = results["gaps"]["active"]
    assert gap["verdict"] == "not testable (paired t, n=1: needs 2+ paired seeds)"
    assert gap["paired"]["ci_low"] is None and gap["min_detectable_gap"] is None
    assert gap["seeds_needed"] == [{"gap": pytest.approx(0.08), "seeds": None},
                                   {"gap": 0.02, "seeds": None}]
    text = (tmp_path / "s/results.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert "figures/paired_differences.png" in _figures_named((tmp_path / "s/report.md").read_text())
    capsys.readouterr()
    assert main(["report", str(tmp_path / "s")]) == 0
    assert "no CI (not testable)" in capsys.readouterr().out


@pytest.mark.slow
def test_results_json_holds_both_tests_and_the_power(tmp_path, demo):
    _study(tmp_path, demo, seeds=3, budgets=[200_000, 1_000_000])
    results = json.loads((tmp_path / "s/results.json").read_text())
    for gaps in [results["gaps"]] + [group["gaps"] for group in results["budgets"]]:
        for gap in gaps.values():
            assert {"gap", "ci_low", "ci_high", "p_value", "test", "verdict", "min_detectable_gap",
                    "seeds_needed", "paired", "welch"} <= set(gap)
            assert {"gap", "ci_low", "ci_high", "p_value", "n_pairs", "std_diff"} <= set(gap["paired"])
            assert {"gap", "ci_low", "ci_high", "p_value", "df", "n_moe", "n_dense"} <= set(gap["welch"])
            assert gap["test"] == "paired" and gap["paired"]["n_pairs"] == 3
    report = (tmp_path / "s/report.md").read_text()
    assert "| paired 95 % CI |" in report and "| Welch 95 % CI |" in report
    assert "seeds needed (0.02 nats)" in report and "min detectable gap" in report


@pytest.mark.slow
def test_ablation_takes_a_seed_list(tmp_path, demo):
    config, _ = demo
    results = study_commands.run_study("ablation", config, StudySettings(seeds=[5, 7]), tmp_path / "a",
                                       train_fn=FakeTrain(), log=lambda line: None).to_dict()
    assert results["seeds"] == [5, 7]
    assert results["arms"]["top2_lb"]["best_val_loss"]["mean"] == pytest.approx(
        statistics.mean(_losses("top2_lb", [5, 7])))
    assert yaml.safe_load((tmp_path / "a/study.yaml").read_text())["study"]["seeds"] == [5, 7]


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def test_list_runs_prints_one_train_command_per_run(tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["study", "demo", "--seeds", "2", "--out", str(out), "--list-runs"]) == 0
    commands = capsys.readouterr().out.splitlines()
    assert len(commands) == 6 and all(c.startswith("moelab train ") for c in commands)
    config_path = Path(commands[0].split()[2])
    assert load_config(config_path).model.moe is not None
    plan = json.loads((out / "plan.json").read_text())
    assert [run["name"] for run in plan["runs"]][:4] == [
        "moe/seed0", "dense_active/seed0", "dense_total/seed0", "moe/seed1"]
    # Each command can be rerun as it is (a requeued cluster job): it resumes its run.
    assert all(c.endswith(" --resume") for c in commands)


def test_a_listed_command_reruns_after_it_finished(tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["study", "demo", "--seeds", "1", "--budgets", "2048", "--out", str(out),
                 *[a for pair in TINY_MOE_RUN for a in ("--set", pair)], "--list-runs"]) == 0
    command = shlex.split(capsys.readouterr().out.splitlines()[0])
    assert command[:2] == ["moelab", "train"]
    assert main(command[1:]) == 0
    first = (Path(command[command.index("--out") + 1]) / "metrics.jsonl").read_text()
    assert main(command[1:]) == 0  # the rerun finds the run complete and leaves it
    assert (Path(command[command.index("--out") + 1]) / "metrics.jsonl").read_text() == first


@pytest.mark.parametrize("argv, message", [
    (["study", "demo", "--budgets", "40.5M,1.5"], "token budget '1.5' is invalid"),
    (["study", "demo", "--seeds", "0"], "seeds=0 is invalid"),
    (["study", "demo", "--criteria", "active,params"], "criterion 'params' is invalid"),
    (["study", "demo", "--criteria", "flops"], "the dense arm is the dense_active model"),
    (["study", "demo", "--set", "model.moe=null"], "model.moe=null is invalid for a study"),
    (["report", "no-such-folder"], "no-such-folder is not a study folder"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv + (["--list-runs"] if argv[0] == "study" else [])) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_folder_of_another_study_is_refused(tmp_path, capsys):
    out = str(tmp_path / "s")
    assert main(["study", "demo", "--out", out, "--list-runs"]) == 0
    assert main(["study", "demo", "--out", out, "--list-runs", "--set", "model.n_layers=7"]) == 2
    err = capsys.readouterr().err
    assert "already holds a study with another base config: model.n_layers=" in err
    assert "(now 7)" in err
    assert main(["ablate-routing", "demo", "--out", out, "--list-runs"]) == 2


# --------------------------------------------------------------------------------------------
# The equal-compute criterion: dense_total against the MoE at dense_total's training FLOPs
# --------------------------------------------------------------------------------------------

# The demo shape by hand: vocab 1024, d_model 64, 4 layers, untied head. Per MoE layer:
# attention 4 * 64 * 64, two norms 2 * 64, router 64 * 4, four SwiGLU experts 4 * 3 * 64 * 128;
# dense_total (d_ff 512) per layer: attention, norms, 3 * 64 * 512. Both add the embedding and
# the output matrix (1024 * 64 each) and the final norm (64).
DEMO_MOE_TOTAL = 2 * 1024 * 64 + 4 * (4 * 64 * 64 + 2 * 64 + 64 * 4 + 4 * 3 * 64 * 128) + 64
DEMO_MOE_ACTIVE = DEMO_MOE_TOTAL - 4 * 2 * 3 * 64 * 128  # two of four experts idle per token
DEMO_DENSE_TOTAL = 2 * 1024 * 64 + 4 * (4 * 64 * 64 + 2 * 64 + 3 * 64 * 512) + 64


def _equal_compute_steps(dense_tokens: int, tokens_per_step: int) -> int:
    """The whole steps whose 6 N_active D is nearest dense_total's, by exact fractions."""
    from fractions import Fraction

    exact = Fraction(DEMO_DENSE_TOTAL * (dense_tokens // tokens_per_step), DEMO_MOE_ACTIVE)
    low = exact.numerator // exact.denominator
    return low if exact - low <= Fraction(1, 2) else low + 1


def test_equal_compute_tokens_by_hand():
    from moelab.accounting import equal_compute_tokens, match_dense

    moe = load_config("demo").model
    dense = match_dense(moe, "total").config
    assert (count_params(moe).total, count_params(moe).active) == (DEMO_MOE_TOTAL, DEMO_MOE_ACTIVE)
    assert count_params(dense).total == DEMO_DENSE_TOTAL
    # 400 steps of 8 x 128 tokens: 400 * 590,400 / 394,816 = 598.2 steps -> 598.
    assert _equal_compute_steps(409_600, 1024) == 598
    assert equal_compute_tokens(moe, dense, 409_600, 1024) == 598 * 1024
    for tokens, per_step in ((100_000, 1024), (2_000_000, 4096), (409_600, 128)):
        assert equal_compute_tokens(moe, dense, tokens, per_step) == \
            _equal_compute_steps(tokens, per_step) * per_step
    assert equal_compute_tokens(dense, dense, 409_600, 1024) == 409_600  # equal models: equal D


def test_compute_criterion_plans_the_equal_compute_arm(demo):
    config, _ = demo
    arms = {arm.name: arm for arm in study_arms(config, ["compute"])}
    assert list(arms) == ["moe", "dense_total", "moe_compute"]  # its dense arm comes along
    assert arms["moe_compute"].config == config and arms["moe_compute"].criterion == "compute"
    _, specs = study_commands.plan("study", config,
                                   StudySettings(seeds=[0], criteria=["active", "total", "compute"],
                                                 budgets=[409_600, 1_000_000]).validate())
    tokens = {spec.name: spec.config.train.max_tokens for spec in specs}
    # Every arm trains the budget, except the equal-compute MoE, which trains dense_total's FLOPs.
    assert tokens["409.6K/moe/seed0"] == tokens["409.6K/dense_total/seed0"] == 409_600
    assert tokens["409.6K/moe_compute/seed0"] == _equal_compute_steps(409_600, 1024) * 1024
    assert tokens["1M/moe_compute/seed0"] == _equal_compute_steps(1_000_000, 1024) * 1024
    for spec in specs:
        if spec.labels["arm"] == "moe_compute":
            assert spec.labels["budget"] in (409_600, 1_000_000)  # labelled by the dense budget


@pytest.mark.slow
def test_compute_gap_pairs_the_equal_compute_moe_with_dense_total(tmp_path, demo):
    results, train = _study(tmp_path, demo, seeds=3, criteria=["active", "total", "compute"])
    assert len(train.calls) == 12
    config, _ = demo
    compute_tokens = _equal_compute_steps(config.train.max_tokens, 1024) * 1024
    moe = {s: fake_loss("moe_compute", s, compute_tokens) for s in range(3)}
    dense = {s: fake_loss("dense_total", s, config.train.max_tokens) for s in range(3)}
    differences = [dense[s] - moe[s] for s in range(3)]
    gap = results["gaps"]["compute"]
    assert (gap["moe_arm"], gap["dense_arm"], gap["test"]) == ("moe_compute", "dense_total", "paired")
    assert gap["gap"] == pytest.approx(statistics.mean(differences), abs=1e-12)
    reference = scipy_stats.ttest_rel(list(dense.values()), list(moe.values()))
    assert gap["paired"]["p_value"] == pytest.approx(reference.pvalue, rel=1e-6)
    assert results["criteria"] == ["active", "total", "compute"]
    assert results["arms"]["moe_compute"]["criterion"] == "compute"
    assert results["arms"]["moe_compute"]["runs"][0]["tokens"] == compute_tokens
    report = (tmp_path / "s/report.md").read_text()
    assert "matched on total parameters at equal training FLOPs" in report
    flops = f"{6 * DEMO_MOE_ACTIVE * compute_tokens:.3g}"  # the arms table's training FLOPs
    assert flops in report and f"{6 * DEMO_DENSE_TOTAL * config.train.max_tokens:.3g}" in report


def test_match_shows_tokens_and_flops_per_arm(capsys):
    assert main(["match", "demo", "--json"]) == 0
    arms = json.loads(capsys.readouterr().out)
    compute_tokens = _equal_compute_steps(409_600, 1024) * 1024
    assert arms["moe_compute"]["training"]["tokens"] == compute_tokens
    assert arms["moe_compute"]["training"]["training_flops_6n"] == 6 * DEMO_MOE_ACTIVE * compute_tokens
    assert arms["dense_total"]["training"]["training_flops_6n"] == 6 * DEMO_DENSE_TOTAL * 409_600
    assert arms["moe"]["training"]["tokens"] == 409_600
    assert abs(arms["moe_compute"]["mismatch"]) < 1 / 598  # within half a step of the FLOPs
