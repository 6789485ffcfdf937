"""``moelab compare A B --seeds N``: both sides trained on the same seeds, the paired gap A - B
of the best val loss checked against a hand computation from the runs' own summary.json."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from moelab.cli import main
from moelab.config import load_config
from moelab.stats.power import min_detectable_gap
from tiny_overrides import TINY_MOE_RUN

TINY = TINY_MOE_RUN + ["train.max_tokens=768", "train.eval_interval=1"]
SEEDS = [4, 5, 6]


def _sets(flag: str, overrides: list[str]) -> list[str]:
    return [arg for override in overrides for arg in (flag, override)]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare") / "lr"
    args = ["compare", "demo", "demo", *_sets("--set", TINY), *_sets("--set-b", ["train.lr=0.03"]),
            "--seeds", ",".join(map(str, SEEDS)), "--out", str(out), "--json"]
    return out, args


@pytest.mark.slow
def test_compare_gives_the_paired_gap_of_the_two_sides_runs(compared, capsys):
    out, args = compared
    assert main(args) == 0
    record = json.loads((out / "compare.json").read_text())
    assert capsys.readouterr().out.endswith(json.dumps(record, indent=2) + "\n")
    assert list(record) == ["labels", "common_overrides", "best_val_loss", "outcome",
                            "gap_a_minus_b", "missing_runs"]  # compare.json's keys, in order
    assert list(record["best_val_loss"]["A"]) == [str(seed) for seed in SEEDS]
    losses = {side: [json.loads((out / "runs" / side / f"seed{s}" / "summary.json").read_text())
                     ["best_val_loss"] for s in SEEDS] for side in ("A", "B")}
    diffs = np.subtract(losses["A"], losses["B"])
    n = len(SEEDS)
    standard_error = diffs.std(ddof=1) / math.sqrt(n)
    half_width = stats.t.ppf(0.975, n - 1) * standard_error
    gap = record["gap_a_minus_b"]
    assert gap["test"] == "paired" and gap["paired"]["n_pairs"] == n
    assert gap["gap"] == pytest.approx(diffs.mean(), rel=1e-12)
    assert gap["ci_low"] == pytest.approx(diffs.mean() - half_width, rel=1e-9)
    assert gap["ci_high"] == pytest.approx(diffs.mean() + half_width, rel=1e-9)
    assert gap["p_value"] == pytest.approx(stats.ttest_rel(losses["A"], losses["B"]).pvalue,
                                           rel=1e-9)
    assert gap["min_detectable_gap"] == pytest.approx(min_detectable_gap(standard_error, n - 1))
    expected = ("not significant" if gap["p_value"] >= 0.05 else
                "B better" if diffs.mean() > 0 else "A better")
    assert record["outcome"] == expected
    # Each side trained its own config at each seed, and only the asked-for key differs.
    for seed in SEEDS:
        a = load_config(out / "runs" / "A" / f"seed{seed}" / "config.yaml")
        b = load_config(out / "runs" / "B" / f"seed{seed}" / "config.yaml")
        assert a.train.seed == b.train.seed == seed
        assert (a.train.lr, b.train.lr) == (0.01, 0.03)
        assert a.model == b.model and a.data == b.data


@pytest.mark.slow
def test_compare_again_trains_nothing_and_prints_the_gap(compared, capsys):
    out, args = compared
    summaries = sorted(out.glob("runs/*/*/summary.json"))
    before = [p.read_bytes() for p in summaries]
    assert main(args[:-1]) == 0  # without --json: the table
    printed = capsys.readouterr().out
    assert "6 already complete, 0 to train" in printed
    assert "gap A - B" in printed and "min detectable gap" in printed and "95% CI" in printed
    assert [p.read_bytes() for p in summaries] == before


def test_compare_refuses_an_unknown_config_in_one_line(tmp_path, capsys):
    assert main(["compare", "demo", "no-such-preset", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no-such-preset" in err
    assert not (tmp_path / "c").exists()
