"""The findings pages: the committed docs/findings/*.md equal a fresh render from
experiments/results/, and the headline numbers they print are recomputed here from the raw JSON
with scipy (not moelab's analysis code)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from moelab.findings import render_pages, stale_pages

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
PAGES = ROOT / "docs" / "findings"


def test_committed_pages_equal_a_fresh_render():
    assert stale_pages(RESULTS, PAGES) == [], "run `moelab findings` and commit docs/findings/"


@pytest.mark.slow
def test_check_flags_an_edited_page(tmp_path):
    for name, text in render_pages(RESULTS).items():
        (tmp_path / name).write_text(text.replace("MoE ahead", "dense ahead", 1), encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "moelab", "findings", "--results", str(RESULTS),
                             "--out", str(tmp_path), "--check"], capture_output=True, text=True)
    assert result.returncode == 1 and "differs from a fresh render" in result.stderr


def _choosing_seeds() -> set[int]:
    """The demo recipe's choosing seeds, read by hand: recipe.json's demo grid and trace rows and
    fair_lr.json's selection seeds."""
    chose = {int(s) for e in json.loads((RESULTS / "recipe.json").read_text())
             if e["grid"] == "demo" and e["kind"] in ("grid", "trace") for s in e["seeds"]}
    return chose | {int(s) for s in json.loads((RESULTS / "fair_lr.json").read_text())["select_seeds"]}


def _pooled_demo_losses():
    """Every stored seed of the demo's configuration (seeds 0-5 of the third CPU, seed 6 of the
    first, the headline file's 617-622 and 1000-1007, the until-resolved blocks) minus the
    choosing seeds."""
    arms = ("moe", "dense_active", "dense_total")
    first = json.loads((RESULTS / "studies/demo-seeds0-5-cpu3.json").read_text())["arms"]
    losses = {arm: {int(r["seed"]): r["best_val_loss"] for r in first[arm]["runs"]} for arm in arms}
    seventh = json.loads((RESULTS / "studies/demo-seeds0-6.json").read_text())["arms"]
    headline = json.loads((RESULTS / "demo_headline.json").read_text())
    for arm in arms:
        losses[arm].update({int(r["seed"]): r["best_val_loss"] for r in seventh[arm]["runs"]
                            if r["seed"] == 6})
        losses[arm].update({int(s): v for s, v in headline["losses"][arm].items()})
    for repetition in json.loads((RESULTS / "seeds_until_resolved.json").read_text())["repetitions"]:
        for arm in arms:
            losses[arm].update({int(s): v for s, v in repetition["losses"][arm].items()})
    chose = _choosing_seeds()
    return {arm: {s: v for s, v in by_seed.items() if s not in chose} for arm, by_seed in losses.items()}


def _row(page: str, label: str) -> list[str]:
    line = next(line for line in page.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


@pytest.mark.parametrize("criterion,dense", [("matched active", "dense_active"),
                                             ("matched total", "dense_total")])
def test_demo_pool_recomputed_with_scipy(criterion, dense):
    losses = _pooled_demo_losses()
    seeds = sorted(losses["moe"])
    assert len(seeds) == 53 and {5, 6} <= set(seeds) and 622 in seeds and not {0, 100, 617} & set(seeds)
    diff = np.array([losses[dense][s] - losses["moe"][s] for s in seeds])
    half = stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff))
    p_values = [stats.ttest_rel([losses[d][s] for s in seeds], [losses["moe"][s] for s in seeds]).pvalue
                for d in ("dense_active", "dense_total")]
    mine = stats.ttest_rel([losses[dense][s] for s in seeds], [losses["moe"][s] for s in seeds]).pvalue
    smallest = min(1.0, 2 * min(p_values))  # Holm over 2: 2 p(1), then max(that, p(2))
    holm = smallest if mine == min(p_values) else max(smallest, mine)
    row = _row(render_pages(RESULTS)["dense-vs-moe.md"], criterion)
    assert row[1] == "53"
    assert row[2] == f"{diff.mean():+.4f}"
    assert row[3] == f"[{diff.mean() - half:+.4f}, {diff.mean() + half:+.4f}]"
    assert row[4] == f"{holm:.2g}"
    assert holm < 0.05 and diff.mean() - half > 0 and row[6] == "**MoE ahead**"


def test_recipe_post_hoc_recomputed_with_scipy():
    """The two simple effects on the matched-total gap, Holm over the 15 pre-set and 3 post hoc
    tests written out by hand."""
    record = json.loads((RESULTS / "recipe_factorial.json").read_text())
    runs = record["report"]

    def total_gap(cell):
        r = runs[cell]["runs"]
        return np.array([r["dense_total"][s]["best_val_loss"] - r["moe"][s]["best_val_loss"]
                         for s in sorted(r["moe"])])

    def gap(cell, moe, dense):
        r = runs[cell]["runs"]
        return np.array([r[dense][s]["best_val_loss"] - r[moe][s]["best_val_loss"]
                         for s in sorted(r["moe"])])

    g = {cell: total_gap(cell) for cell in record["factorial"]}
    preset = [gap(cell, moe, dense) for cell in record["factorial"]
              for moe, dense in (("moe", "dense_active"), ("moe", "dense_total"),
                                 ("moe_compute", "dense_total"))]
    preset += [0.5 * (g["tied_warmup0.02"] + g["tied_warmup0.5"] - g["untied_warmup0.02"]
                      - g["untied_warmup0.5"]),
               0.5 * (g["tied_warmup0.02"] + g["untied_warmup0.02"] - g["tied_warmup0.5"]
                      - g["untied_warmup0.5"]),
               g["tied_warmup0.02"] - g["tied_warmup0.5"] - g["untied_warmup0.02"]
               + g["untied_warmup0.5"]]
    post = [g["tied_warmup0.5"] - g["untied_warmup0.5"],
            g["untied_warmup0.02"] - g["untied_warmup0.5"],
            g["tied_warmup0.5"] - g["untied_warmup0.02"]]
    raw = [stats.ttest_1samp(v, 0.0).pvalue for v in preset + post]
    order = np.argsort(raw)
    adjusted, running = np.empty(len(raw)), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(raw) - rank) * raw[i]))
        adjusted[i] = running
    page = render_pages(RESULTS)["dense-vs-moe.md"]
    for label, values, p_holm in zip(["tying, at warmup 50 %", "2 % warmup, untied head"],
                                     post, adjusted[-3:]):
        row = _row(page, label)
        assert row[1] == f"{values.mean():+.4f}"
        assert row[4] == f"{p_holm:.2g}"
        assert re.fullmatch(r"\*\*(lowers|raises) the gap\*\*", row[5]) and p_holm < 0.05


def _sweep_losses(name):
    import csv
    cells = {}
    with open(RESULTS / "sweeps" / name / "results.csv", newline="") as f:
        for row in csv.DictReader(f):
            cells.setdefault(row["size"], {}).setdefault(float(row["S"]), {})[row["seed"]] = \
                float(row["best_val_loss"])
    return cells


def test_fixed_size_page_recomputed_with_scipy():
    """s0's rise past its best S (0.875 → 0.9375) and cpu-expertn's smallest Holm p, from
    results.csv with scipy and a hand Holm."""
    page = render_pages(RESULTS)["sparsity-at-fixed-size.md"]
    s0 = _sweep_losses("cpu-fixedn")["s0"]
    seeds = sorted(s0[0.875])
    rise = np.array([s0[0.9375][s] - s0[0.875][s] for s in seeds])
    line = next(l for l in page.splitlines() if l.startswith("| s0 | 0.9375 − 0.875 |"))
    assert f"{rise.mean():+.4f}" in line
    assert f"| {stats.ttest_1samp(rise, 0.0).pvalue:.2g} |" in line
    cells = _sweep_losses("cpu-expertn")
    raw = sorted(stats.ttest_rel([by_s[S][s] for s in sorted(by_s[0.0])],
                                 [by_s[0.0][s] for s in sorted(by_s[0.0])]).pvalue
                 for by_s in cells.values() for S in by_s if S > 0)
    assert len(raw) == 9
    smallest_holm = 9 * raw[0]
    assert f"| {smallest_holm:.2g} | **not separated** |" in page
    assert "| **interior, not bounded** |" in page
    # s2's best S is the largest tried, not separated from 0.875: the optimum is not located
    assert "| s2 | 3.2197 / 3.1547 / 3.1291 / 3.1115 | 0.9375 | **best at the edge, not separated** |" in page


def test_ladder_counts_recomputed_from_the_traces():
    """Runs passing the 0.9 flag per rung, counted here from each run's raw trace."""
    entries = json.loads((RESULTS / "ladder_trace.json").read_text())
    page = render_pages(RESULTS)["routing-stability.md"]
    for entry in entries:
        for rung in entry["rungs"]:
            traces = [run["worst_layer_busiest_fraction"] for name, run in entry["runs"].items()
                      if name.startswith(rung + "/")]
            passing = sum(any(value > 0.9 for value in trace) for trace in traces)
            line = next(l for l in page.splitlines()
                        if f"`{entry['preset']}` (" in l and f"| `{rung}` |" in l)
            assert f"| {passing} of {len(traces)} |" in line
    balanced_top1 = [l for l in page.splitlines() if "| `top1_lb` |" in l]
    assert sum(int(re.search(r"\| (\d) of 4 \|", l).group(1)) for l in balanced_top1) == 4


def test_isoflop_page_reads_its_files():
    """The best S per budget and the lr check's extremes, read here from the raw JSON."""
    optima = json.loads((RESULTS / "sweeps/cpu-isoflop/isoflop.json").read_text())["sparsity_optima"]
    page = render_pages(RESULTS)["compute-optimal-sparsity.md"]
    for flops in optima["budgets"]:
        cells = [c for c in optima["cells"] if c["flops"] == flops]
        best = min(cells, key=lambda c: c["loss"])["sparsity"]
        edge = "edge" if best == max(c["sparsity"] for c in cells) else None
        line = next(l for l in page.splitlines() if l.startswith(f"| {flops:.3g} |"))
        assert f"| {best:g} |" in line and (edge is None or edge in line)
    per_run = json.loads((RESULTS / "isoflop_lr.json").read_text())["loss_change"]["per_run"]
    s3 = [v for k, v in per_run.items() if "/s3/" in k and "/S0.000" not in k]
    assert f"| s3 | 639.65K | {min(s3):+.3f} | {max(s3):+.3f} |" in page


def _csv_rows(sweep):
    import csv
    with open(RESULTS / "sweeps" / sweep / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _holm_by_hand(p_values):
    """The k-th smallest p times (m - k), a running maximum, capped at 1."""
    order, adjusted, running = np.argsort(p_values), np.empty(len(p_values)), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _t_interval(values):
    values = np.asarray(values, dtype=float)
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return values.mean() - half, values.mean() + half


def _budget_page_tests():
    """Every test of the budget-trend page, recomputed with scipy from the per-run losses, in
    one list: the 8 gaps (budget x criterion), the 2 slopes, the 6 steps, the two-size table's
    rows outside cpu-budgets and its Welch comparison. Returns (p-values, their Holm p over all
    of them, and the pieces by name)."""
    budgets = sorted(json.loads((RESULTS / "studies/cpu-budgets.json").read_text())["budgets"],
                     key=lambda b: b["tokens"])

    def by_seed(arms, arm):
        return {run["seed"]: run["best_val_loss"] for run in arms[arm]["runs"]}

    def gaps(b, dense):
        return np.array([by_seed(b["arms"], dense)[s] - by_seed(b["arms"], "moe")[s]
                         for s in sorted(by_seed(b["arms"], "moe"))])
    diffs = [gaps(b, dense) for b in budgets for dense in ("dense_active", "dense_total")]
    doublings = np.log2([b["tokens"] for b in budgets])
    slopes = {dense: [stats.linregress(doublings, [gaps(b, dense)[i] for b in budgets]).slope
                      for i in range(3)] for dense in ("dense_active", "dense_total")}
    steps = [gaps(large, dense) - gaps(small, dense) for dense in ("dense_active", "dense_total")
             for small, large in zip(budgets, budgets[1:])]
    flip = json.loads((RESULTS / "flip_table.json").read_text())
    rows = {}
    for row in flip["rows"]:
        if row["study"] == "cpu-budgets":
            rows[row["tokens"]] = diffs[[b["tokens"] for b in budgets].index(row["tokens"]) * 2 + 1]
            continue
        arms = json.loads((RESULTS / "studies" / f"{row['study']}.json").read_text())["arms"]
        rows[row["tokens"]] = np.array([by_seed(arms, "dense_total")[s] - by_seed(arms, "moe")[s]
                                        for s in sorted(by_seed(arms, "moe"))])
    larger = [rows[row["tokens"]] for row in flip["rows"] if row["study"] != "cpu-budgets"]
    same = flip["same_tokens_per_param"]
    welch = stats.ttest_ind(rows[same["small"]["tokens"]], rows[same["large"]["tokens"]],
                            equal_var=False)
    p_values = ([stats.ttest_1samp(d, 0.0).pvalue for d in diffs]
                + [stats.ttest_1samp(v, 0.0).pvalue for v in slopes.values()]
                + [stats.ttest_1samp(d, 0.0).pvalue for d in steps]
                + [stats.ttest_1samp(d, 0.0).pvalue for d in larger] + [welch.pvalue])
    assert len(p_values) == 19
    return p_values, _holm_by_hand(p_values), dict(diffs=diffs, slopes=slopes, steps=steps,
                                                   rows=rows, welch=welch, budgets=budgets)


def test_budget_page_recomputed_with_scipy():
    """cpu-budgets: every gap's Holm p over the page's 19 tests, the verdicts (only 3.28M
    matched active separates once the post hoc steps join), and the per-seed slope of the
    matched-active gap per doubling, from the per-run losses."""
    raw, adjusted, parts = _budget_page_tests()
    diffs = parts["diffs"]
    page = render_pages(RESULTS)["budget-trend.md"]
    assert "Holm over the 19 tests of the budget-trend page" in page
    for index, label in ((4, "1.64M"), (6, "3.28M")):
        low, high = _t_interval(diffs[index])
        cell = (f"{diffs[index].mean():+.3f} [{low:+.3f}, {high:+.3f}], p {raw[index]:.2g}, "
                f"Holm {adjusted[index]:.2g}")
        assert cell in _row(page, label)[4]
    assert adjusted[6] < 0.05 and "**MoE ahead**" in _row(page, "3.28M")[4]
    assert adjusted[4] >= 0.05 and "**not separated**" in _row(page, "1.64M")[4]
    assert all(p >= 0.05 for i, p in enumerate(adjusted) if i != 6)
    slopes = parts["slopes"]["dense_active"]
    low, high = _t_interval(slopes)
    row = _row(page, "matched active")
    assert row[1:4] == [f"{np.mean(slopes):+.4f}", f"[{low:+.4f}, {high:+.4f}]",
                        f"{adjusted[8]:.2g}"]
    assert low < 0 < high and row[5] == "**undetermined**"
    # Paper A's matched-total word beside moelab's: the MoE lower at every budget, none separated.
    total = [d.mean() for d in diffs[1::2]]
    assert (f"here the MoE is lower at {sum(g > 0 for g in total)} of the 4 budgets, and the words "
            "are **not separated** at 4.") in page


def _balancing_ends() -> list[dict[str, list[float]]]:
    """End-of-run worst-layer busiest fraction of naive_top1 and top1_lb on cpu-ablation's seeds
    1-4: the stored study's runs, then the traced runs."""
    runs = json.loads((RESULTS / "studies" / "cpu-ablation-seeds1-4-routing.json").read_text())["runs"]
    stored = {rung: [max(runs[f"{rung}/seed{s}"]["busiest_fraction"]) for s in range(1, 5)]
              for rung in ("naive_top1", "top1_lb")}
    entry = next(e for e in json.loads((RESULTS / "ladder_trace.json").read_text())
                 if e["preset"] == "cpu-ablation")
    traced = {rung: [entry["runs"][f"{rung}/seed{s}"]["worst_layer_busiest_fraction"][-1]
                     for s in entry["seeds"]] for rung in ("naive_top1", "top1_lb")}
    return [stored, traced]


def _balancing_p() -> list[float]:
    return [stats.ttest_rel(ends["naive_top1"], ends["top1_lb"]).pvalue for ends in _balancing_ends()]


def test_ladder_steps_recomputed_with_scipy():
    """cpu-ablation's top-2 step (top1_lb − top2_lb, paired over seeds 1-4), Holm over the
    ladder's 5 steps and the 2 post hoc balancing tests."""
    arms = json.loads((RESULTS / "studies/cpu-ablation-seeds1-4.json").read_text())["arms"]

    def by_seed(rung):
        return {run["seed"]: run["best_val_loss"] for run in arms[rung]["runs"]}

    steps = [("naive_top1", "top1_lb"), ("top1_lb", "top2_lb"), ("top2_lb", "top2_lb_z"),
             ("top2_lb_z", "top2_global_lb_z"), ("top2_lb_z", "top2_bias_z")]
    diffs = [np.array([by_seed(a)[s] - by_seed(b)[s] for s in sorted(by_seed(a))]) for a, b in steps]
    adjusted = _holm_by_hand([stats.ttest_1samp(d, 0.0).pvalue for d in diffs] + _balancing_p())
    low, high = _t_interval(diffs[1])
    line = next(l for l in render_pages(RESULTS)["routing-stability.md"].splitlines()
                if l.startswith("| `top1_lb` → `top2_lb` | 4 |"))
    assert f"| {diffs[1].mean():+.3f} | [{low:+.3f}, {high:+.3f}] |" in line
    assert f"| {adjusted[1]:.2g} | 1.33 | **not separated** |" in line
    assert adjusted[:5].min() >= 0.05


def test_zero_shot_page_recomputed_with_scipy():
    """MoE − dense_active accuracy per task from the correct/items counts, Holm over the 3 tasks;
    the runs whose Wilson interval reaches chance, from scipy's binomtest."""
    tasks = json.loads((RESULTS / "studies/demo-tasks-active.json").read_text())["zero_shot"]

    def accuracy(task, arm):
        return {r["seed"]: r["correct"] / r["items"] for r in tasks[task]["arms"][arm]["runs"]}

    diffs = {t: np.array([accuracy(t, "moe")[s] - accuracy(t, "dense_active")[s]
                          for s in sorted(accuracy(t, "moe"))]) for t in tasks}
    adjusted = _holm_by_hand([stats.ttest_1samp(d, 0.0).pvalue for d in diffs.values()])
    page = render_pages(RESULTS)["zero-shot-tasks.md"]
    for (task, d), p_holm in zip(diffs.items(), adjusted):
        low, high = _t_interval(d)
        row = _row(page, f"`{task}`")
        assert row[5] == f"{d.mean():+.4f} [{low:+.4f}, {high:+.4f}]"
        assert row[7] == f"{p_holm:.2g}" and row[8] == "**not separated**"
        runs = [r for arm in ("moe", "dense_active") for r in tasks[task]["arms"][arm]["runs"]]
        reaching = sum(stats.binomtest(r["correct"], r["items"]).proportion_ci(method="wilson").low
                       <= r["chance"] for r in runs)
        assert row[9] == f"{reaching} of {len(runs)}"


ISOFLOP_DRAWS = {"0": ("0",), "1": ("1",), "both": ("0", "1")}


def _isoflop_argmins():
    """{(budget, size): {draw: S of lowest mean final loss}} on cpu-isoflop, for the 3 draws of
    its 2 seeds (seed 0, seed 1, both), from results.csv alone."""
    cells: dict = {}
    for row in _csv_rows("cpu-isoflop"):
        cells.setdefault((row["budget"], row["size"]), {}).setdefault(float(row["S"]), {})[
            row["seed"]] = float(row["final_val_loss"])
    return {key: {d: min(by_s, key=lambda s: np.mean([by_s[s][x] for x in seeds]))
                  for d, seeds in ISOFLOP_DRAWS.items()} for key, by_s in cells.items()}


def test_fixed_n_on_isoflop_recomputed_from_results_csv():
    """S* per cell over the 3 draws of 2 seeds (seed 0, seed 1, both) and the sign sum along N,
    from cpu-isoflop's final losses; both trends undetermined at 2 seeds."""
    argmin = _isoflop_argmins()
    top, sizes = 0.875, ("sA", "s0", "s1", "s2", "s3")
    budgets = ("C3.6e+11", "C1.08e+12", "C3.24e+12")

    def cell(budget, size):
        a = argmin[budget, size]
        if a["both"] == top:
            return "≥ 0.875, unbounded"
        high = max(a.values())
        return f"{a['both']:g} [{min(a.values()):g}, {'≥ ' if high == top else ''}{high:g}]"

    page = render_pages(RESULTS)["sparsity-at-fixed-size.md"]
    for budget in budgets:
        assert f"| {budget[1:]} | " + " | ".join(cell(budget, s) for s in sizes) + " |" in page
    sums = {}
    for d in ISOFLOP_DRAWS:
        sums[d] = sum(0 if argmin[b, s1][d] == argmin[b, s2][d] == top
                      else int(np.sign(argmin[b, s2][d] - argmin[b, s1][d]))
                      for b in budgets for i, s1 in enumerate(sizes) for s2 in sizes[i + 1:])
    text = f"{sums['both']:+d} [{min(sums.values()):+d}, {max(sums.values()):+d}] over 30 pairs"
    assert "**S* rises with N at fixed C**: **undetermined**" in page and text in page


def test_topk_page_recomputed_with_scipy():
    """Every pair of E, paired t by seed; Holm by hand over the sweep report's 12 tests (the 6
    pairs and each split against dense), and over the 6 pairs alone for the page's aside."""
    loss = {}
    for row in _csv_rows("cpu-topk"):
        experts = int(float(row["E"])) if float(row["S"]) > 0 else 0
        loss.setdefault((row["size"], experts), {})[row["seed"]] = float(row["best_val_loss"])
    pairs = [(s, a, b) for s in ("s2", "s3") for a, b in ((4, 8), (4, 16), (8, 16))]
    diffs = [np.array([loss[s, b][x] - loss[s, a][x] for x in sorted(loss[s, a])])
             for s, a, b in pairs]
    raw = [stats.ttest_1samp(d, 0.0).pvalue for d in diffs]
    versus_dense = [stats.ttest_rel([loss[s, e][x] for x in sorted(loss[s, 0])],
                                    [loss[s, 0][x] for x in sorted(loss[s, 0])]).pvalue
                    for s in ("s2", "s3") for e in (4, 8, 16)]
    family = _holm_by_hand(raw + versus_dense)[:6]
    page = render_pages(RESULTS)["experts-at-one-sparsity.md"]
    for (size, fewer, more), d, p, p_holm in zip(pairs, diffs, raw, family):
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        row = _row(page, size + f" | E = {more} minus E = {fewer}")
        assert row[2] == f"{d.mean():+.3f}" and row[3] == f"[{d.mean() - half:+.3f}, {d.mean() + half:+.3f}]"
        assert row[4] == f"{p:.2g}" and row[5] == f"{p_holm:.2g}"
        separated = p_holm < 0.05 and d.mean() + half < 0
        assert row[6] == ("**more experts lower**" if separated else "**not separated**")
    alone = sum(p < 0.05 for p in _holm_by_hand(raw))
    assert f"{alone} of 6 pairs would be separated" in page


def test_zero_shot_page_recomputed_with_numpy():
    """Each sparse run minus its cell's dense run of the same seed; dacc = b dL + c S without
    intercept, CR1 clustered by (size, seed); Holm over the 3 tasks, by hand."""
    rows = _csv_rows("cpu-isoflop")
    dense = {(r["size"], r["budget"], r["seed"]): r for r in rows if float(r["S"]) == 0}
    page = render_pages(RESULTS)["downstream-against-sparsity.md"]
    tasks = ("last_word", "ending", "agreement")
    fits, raw = {}, []
    for task in tasks:
        column = f"zero_shot_{task}"
        pairs = [(r["size"], r["budget"], float(r["S"]), r["seed"],
                  float(r["final_val_loss"]) - float(dense[r["size"], r["budget"], r["seed"]]["final_val_loss"]),
                  float(r[column]) - float(dense[r["size"], r["budget"], r["seed"]][column]))
                 for r in rows if float(r["S"]) > 0]
        assert len(pairs) == 90 and len({(p[0], p[3]) for p in pairs}) == 10
        beta, se, df = _clustered(pairs, 5)
        fits[task] = (beta, se, df)
        raw.append(2 * stats.t.sf(abs(beta[1] / se[1]), df))
    adjusted = _holm_by_hand(np.array(raw))
    for task, p_raw, p_holm in zip(tasks, raw, adjusted):
        beta, se, df = fits[task]
        half = stats.t.ppf(0.975, df) * se
        row = _row(page, task)
        assert row[2] == f"{beta[0]:+.3f} [{beta[0] - half[0]:+.3f}, {beta[0] + half[0]:+.3f}]"
        assert row[3] == f"{beta[1]:+.3f} [{beta[1] - half[1]:+.3f}, {beta[1] + half[1]:+.3f}]"
        assert row[4] == f"{p_raw:.2g}" and row[5] == f"{p_holm:.2g}"
        separated = p_holm < 0.05 and (beta[1] - half[1] > 0 or beta[1] + half[1] < 0)
        assert row[6] == ("**rises with S**" if separated and beta[1] > 0 else
                          "**falls with S**" if separated else "**not separated**")


def _finetune_pairs():
    rows = _csv_rows("cpu-finetune")
    dense = {(r["size"], r["budget"], r["seed"]): r for r in rows if float(r["S"]) == 0}
    out = []
    for r in rows:
        if float(r["S"]) == 0:
            continue
        d = dense[r["size"], r["budget"], r["seed"]]
        out.append((r["size"], r["budget"], float(r["S"]), r["seed"],
                    *(float(r[k]) - float(d[k]) for k in
                      ("final_val_loss", "finetune_val_loss", "finetune_gain"))))
    return out


def _clustered(pairs, metric):
    """dy = b dL + c S without intercept; CR1 standard errors clustered by (size, seed)."""
    x = np.array([[p[4], p[2]] for p in pairs])
    y = np.array([p[metric] for p in pairs])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    e = y - x @ beta
    groups = sorted({(p[0], p[3]) for p in pairs})
    meat = sum(np.outer(v, v) for v in (
        sum(x[i] * e[i] for i, p in enumerate(pairs) if (p[0], p[3]) == g) for g in groups))
    inv = np.linalg.inv(x.T @ x)
    g, n = len(groups), len(y)
    return beta, np.sqrt(np.diag(inv @ meat @ inv * g / (g - 1) * (n - 1) / (n - 2))), g - 1


def test_finetune_page_recomputed_with_numpy_and_scipy():
    """The equal-loss c (clustered), every cell's paired t, Holm over the 26 by hand."""
    pairs = _finetune_pairs()
    tests, slopes = [], {}
    for metric in (5, 6):
        beta, se, df = _clustered(pairs, metric)
        slopes[metric] = (beta[1], stats.t.ppf(0.975, df) * se[1])
        tests.append(2 * stats.t.sf(abs(beta[1] / se[1]), df))
    cells = {}
    for p in pairs:
        cells.setdefault((p[1], p[0], p[2]), []).append(p)
    keys = sorted(cells)
    for key in keys:
        for metric in (5, 6):
            tests.append(stats.ttest_1samp([m[metric] for m in cells[key]], 0.0).pvalue)
    adjusted = _holm_by_hand(np.array(tests))
    assert len(tests) == 26
    page = render_pages(RESULTS)["fine-tuning-against-sparsity.md"]
    c, half = slopes[5]
    row = _row(page, "fine-tuned loss")
    assert row[2] == f"{c:+.3f} [{c - half:+.3f}, {c + half:+.3f}]"
    assert row[3] == f"{adjusted[0]:.2g}" and row[4] == "**not separated**"
    lower = [key for i, key in enumerate(keys) if adjusted[2 + 2 * i] < 0.05
             and np.mean([m[5] for m in cells[key]]) < 0]
    assert lower == [("C3.24e+12", "s1", 0.75)]
    assert page.count("**sparse lower**") == len(lower)
    assert all(np.mean([m[5] for m in cells[k]]) < 0 for k in keys)


def test_published_law_page_recomputed_by_brute_force():
    """S* of eq. 6 written out in numpy on a grid of 1e-5 steps, at each N and C of the table."""
    p = json.loads((ROOT / "tests" / "fixtures" / "abnar2025_table3_fit.json").read_text())
    assert json.loads((RESULTS / "published" / "abnar2025_table3_fit.json").read_text()) == p
    p = p["params"]
    sparsity = np.linspace(0.0, 0.98, 98_001)
    page = render_pages(RESULTS)["published-law.md"]
    for exponent in (20, 21, 22):
        cells = []
        for total in (1e8, 3e8, 1e9, 3e9, 1e10):
            u = 1.0 - sparsity
            tokens = 10.0 ** exponent / (6.0 * u * total)
            loss = (p["a"] / total ** p["alpha"] + p["b"] / tokens ** p["beta"]
                    + p["c"] / u ** p["lam"] + p["d"] / (u ** p["delta"] * total ** p["gamma"])
                    + p["e"])
            best = float(sparsity[int(np.argmin(loss))])
            cells.append("0" if best == 0 else f"{best:.2f}" + (" (edge)" if best >= 0.98 else ""))
        assert f"| C = 1e{exponent} | " + " | ".join(cells) + " |" in page


def test_wall_clock_reads_the_optima_file():
    """cpu's wall-clock S* sits at the search's edge (dense): the optimum rule's word, no
    interval printed, and the share of replicates at an edge as stored."""
    three = json.loads((RESULTS / "sweeps/cpu/optima.json").read_text())["three"]
    by_seconds = three["by_seconds"]
    assert by_seconds["optimum"]["at_boundary"] and by_seconds["optimum"]["sparsity"] == 0.0
    page = render_pages(RESULTS)["compute-optimal-sparsity.md"]
    assert (f"S* sits at the edge of the search (0; {by_seconds['bootstrap_at_boundary']:.0%} "
            "of the replicates also do): **best at the edge, not separated**") in page
    low, high = by_seconds["ci"]["sparsity"]
    assert f"{high:.3f}" not in page.split("## S* under a wall-clock budget")[1]
    status = json.loads((RESULTS / "sweeps/cpu-isoflop/analysis.json").read_text())["status"]
    assert status["optima"] == "no_law" and "`cpu-isoflop` (law: no_form_identified)" in page


def _prereg_runs():
    """{(size, S): {seed: best val loss}} of the complete target runs, read with json alone."""
    cells: dict = {}
    for path in sorted((RESULTS / "preregistered" / "runs-sweep" / "runs").rglob("summary.json")):
        summary = json.loads(path.read_text())
        if summary.get("status") != "complete":
            continue
        seed_dir, s_dir, size_dir = path.parent, path.parent.parent, path.parent.parent.parent
        sparsity = float(s_dir.name.split("-")[0][1:])
        cells.setdefault((size_dir.name, sparsity), {})[seed_dir.name] = summary["best_val_loss"]
    return cells


def test_preregistered_page_recomputed_by_hand():
    """Each cell's mean of its seeds against its 90 % interval, widened as written in the
    prediction file (t quantile at the cell's df times the root sum of the sd terms, the noise
    over the seeds trained), and each size's lowest mean, recomputed with json, numpy, scipy."""
    page = (ROOT / "docs" / "findings" / "preregistered.md").read_text()
    prediction = json.loads((RESULTS / "preregistered" / "prediction.json").read_text())
    runs = _prereg_runs()
    inside = 0
    for cell in prediction["cells"]:
        c = cell["cell"]
        losses = list(runs[(c["size"], c["sparsity"])].values())
        n, mean = len(losses), float(np.mean(losses))
        sd = np.sqrt(cell["parameter_sd"] ** 2 + cell["misfit_sd"] ** 2
                     + cell["extrapolation_sd"] ** 2 + cell["noise_sd"] ** 2 / n)
        half = stats.t.ppf(0.95, cell["df"]) * sd
        low, high = cell["loss"] - half, cell["loss"] + half
        word = "inside" if low <= mean <= high else "outside"
        inside += word == "inside"
        assert (f"| {c['label']} | {cell['loss']:.4f} | [{low:.4f}, {high:.4f}] | {n} | "
                f"{mean:.4f} | {mean - cell['loss']:+.4f} | {(mean - cell['loss']) / sd:+.2f} | "
                f"**{word}** |") in page
    assert f"Coverage: {inside} of {len(prediction['cells'])} cells inside" in page
    for size in sorted({size for size, _ in runs}):
        means = {s: float(np.mean(list(v.values()))) for (z, s), v in runs.items() if z == size}
        best = min(means, key=means.get)
        by_s = ", ".join(f"{s:g}: {means[s]:.4f}" for s in sorted(means))
        assert re.search(rf"\| {size} \| [0-9.]+ \| {best:g} \| \d+% \| {re.escape(by_s)} \|", page)


def test_granularity_page_recomputed_with_scipy():
    """cpu-granularity: each cell's mean, the 3 pre-set pairs paired by seed with scipy's t,
    Holm over the 3 by hand, and the word: a direction only where Holm p < 0.05."""
    loss = {}
    for row in _csv_rows("cpu-granularity"):
        cell = (float(row["G"]), int(row["shared_experts"] or 0))
        loss.setdefault(cell, {})[int(row["seed"])] = float(row["best_val_loss"])
    page = render_pages(RESULTS)["granularity-and-shared-experts.md"]
    names = {(1.0, 0): "G = 1: 4-choose-1", (2.0, 0): "G = 2: 8-choose-2",
             (2.0, 1): "G = 2: 7-choose-1 + 1 shared"}
    for cell, name in names.items():
        assert _row(page, name)[4] == f"{np.mean(list(loss[cell].values())):.4f}"
    pairs = [((2.0, 0), (1.0, 0)), ((2.0, 1), (1.0, 0)), ((2.0, 1), (2.0, 0))]
    diffs = [np.array([loss[a][s] - loss[b][s] for s in sorted(loss[a])]) for a, b in pairs]
    raw = [stats.ttest_1samp(d, 0.0).pvalue for d in diffs]
    for (a, b), d, p, p_holm in zip(pairs, diffs, raw, _holm_by_hand(raw)):
        low, high = _t_interval(d)
        row = _row(page, f"{names[a]} minus {names[b]}")
        assert row[1] == f"{d.mean():+.4f} [{low:+.4f}, {high:+.4f}]"
        assert row[2] == f"{p:.2g}" and row[3] == f"{p_holm:.2g}"
        word = ("lower" if high < 0 else "higher" if low > 0 else "not separated") \
            if p_holm < 0.05 else "not separated"
        assert row[4] == f"**{word}**"


def test_rollout_page_recomputed_with_numpy():
    """Each form's pooled row from the stored cells alone: inside where the measured mean lies
    in the stored interval, error and z from measured, predicted and sd."""
    rollouts = json.loads((RESULTS / "rollout.json").read_text())["rollouts"]
    page = render_pages(RESULTS)["prediction-calibration.md"]
    forms = sorted({r["form"] for r in rollouts})
    assert len(forms) == 6
    for form in forms:
        mine = [r for r in rollouts if r["form"] == form and r["score"]
                and any(c["measured"] is not None for c in r["score"]["cells"])]
        cells = [c for r in mine for c in r["score"]["cells"]
                 if c["interval"] is not None and c["measured"] is not None]
        inside = sum(c["interval"][0] <= c["measured"] <= c["interval"][1] for c in cells)
        errors = np.array([c["measured"] - c["predicted"] for c in cells])
        z = errors / np.array([c["sd"] for c in cells])
        assert _row(page, f"`{form}`") == [
            f"`{form}`", str(len(mine)), str(len(cells)),
            f"{inside}/{len(cells)} ({round(100 * inside / len(cells))}%)",
            f"{errors.mean():+.4f}", f"{np.abs(errors).mean():.4f}",
            f"{np.sqrt(np.mean(z ** 2)):.2f}"]


def test_isoflop_lr_check_recomputed_with_scipy():
    """The per-cell lr check from isoflop_lr.json alone: the lrs chosen, the median selection
    margin, and per size the t over its changed families' mean changes with Holm by hand."""
    record = json.loads((RESULTS / "isoflop_lr.json").read_text())
    page = render_pages(RESULTS)["compute-optimal-sparsity.md"]
    page = page[page.index("## The per-cell lr check"):]
    family_lr = {cell.split("/", 1)[1]: lr for cell, lr in record["lrs"].items()}
    for lr in (0.005, 0.01, 0.02):
        chosen = sum(v == lr for v in family_lr.values())
        assert f"{chosen} of {len(family_lr)} chose {lr:g}" in page
    margins = [sorted(v.values())[1] - sorted(v.values())[0] for v in record["selection"].values()]
    assert f"by a median of {np.median(margins):.3f} nats" in page
    changes = {}
    for run, change in record["loss_change"]["per_run"].items():
        family = run.split("/", 1)[1].rsplit("/", 1)[0]
        if family_lr[family] != 0.01:
            changes.setdefault(family.split("/")[0], {}).setdefault(family, []).append(change)
    tested = {size: [np.mean(v) for v in by_family.values()]
              for size, by_family in changes.items() if len(by_family) > 1}
    sizes = sorted(tested)
    raw = [stats.ttest_1samp(tested[size], 0.0).pvalue for size in sizes]
    for size, p, p_holm in zip(sizes, raw, _holm_by_hand(raw)):
        low, high = _t_interval(tested[size])
        row = _row(page, size)
        assert row[5] == f"{np.mean(tested[size]):+.3f} [{low:+.3f}, {high:+.3f}]"
        assert row[6] == f"{p:.2g}" and row[7] == f"{p_holm:.2g}"
        separated = p_holm < 0.05 and (low > 0 or high < 0)
        assert row[8] == ("**not separated**" if not separated else
                          "**better at its own lr**" if high < 0 else "**worse at its own lr**")
    for size in set(changes) - set(tested):
        assert _row(page, size)[8] == "**undetermined**"
    shared = record["isoflop_minima"]["shared"][0]
    assert f"| 3.6e+11 | {shared['loss']:.4f} [{shared['loss_ci'][0]:.4f}, " in page


def test_extension_means_recomputed_from_results_csv():
    """cpu-fixedn and cpu-expertn: each point's mean final val loss over its seeds, the dense
    point taken from cpu-expertn for both families."""
    page = render_pages(RESULTS)["sparsity-at-fixed-size.md"]
    page = page[page.index("## Both extensions side by side"):]
    means = {}
    for sweep in ("cpu-fixedn", "cpu-expertn"):
        for row in _csv_rows(sweep):
            means.setdefault((sweep, row["size"], float(row["S"])), []).append(
                float(row["final_val_loss"]))
    grid = (0.0, 0.5, 0.75, 0.875, 0.9375)
    rows = [line for line in page.splitlines() if line.startswith("| fixed N")]
    assert len(rows) == 6
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        sweep, size = cells[0].split("`")[1], cells[1].split()[0]
        for value, S in zip(cells[2:], grid):
            source = "cpu-expertn" if S == 0 else sweep
            expected = means.get((source, size, S))
            assert value == ("–" if expected is None else f"{np.mean(expected):.3f}")


def test_isoflop_minima_and_fixed_n_trend_along_c_recomputed():
    """The IsoFLOP minima as the sweep stored them (raw JSON), and the sign sum of S* along C at
    fixed N from cpu-isoflop's final losses (pairs with both S* at the grid's top count 0)."""
    optima = json.loads((RESULTS / "sweeps/cpu-isoflop/isoflop.json").read_text())["sparsity_optima"]
    page = render_pages(RESULTS)["compute-optimal-sparsity.md"]
    for flops in optima["budgets"]:
        cells = sorted((c for c in optima["cells"] if c["flops"] == flops),
                       key=lambda c: c["sparsity"])
        assert f"| {flops:.3g} | " + " / ".join(f"{c['loss']:.4f}" for c in cells) + " |" in page
    argmin = _isoflop_argmins()
    budgets = ("C3.6e+11", "C1.08e+12", "C3.24e+12")
    sums = {d: sum(0 if argmin[b1, s][d] == argmin[b2, s][d] == 0.875
                   else int(np.sign(argmin[b2, s][d] - argmin[b1, s][d]))
                   for s in ("sA", "s0", "s1", "s2", "s3")
                   for i, b1 in enumerate(budgets) for b2 in budgets[i + 1:]) for d in ISOFLOP_DRAWS}
    tied = sum(argmin[b1, s]["both"] == argmin[b2, s]["both"] == 0.875
               for s in ("sA", "s0", "s1", "s2", "s3")
               for i, b1 in enumerate(budgets) for b2 in budgets[i + 1:])
    fixed = render_pages(RESULTS)["sparsity-at-fixed-size.md"]
    assert (f"{sums['both']:+d} [{min(sums.values()):+d}, {max(sums.values()):+d}] over 15 pairs "
            f"of cells along C ({tied} with both") in fixed


def test_law_sweep_page_recomputed_with_scipy():
    """The cpu sweep's effective-size exponent from fit.json's raw numbers, and wsd - cosine
    paired by point on seed 0 with scipy's t, Holm over the 2 budgets by hand."""
    fit = json.loads((RESULTS / "sweeps/cpu/fit.json").read_text())
    page = render_pages(RESULTS)["law-on-the-cpu-sweep.md"]
    exponent = fit["params"]["delta"] / fit["params"]["gamma"]
    assert f"N (1 - S)^{exponent:.3f}: {0.125 ** exponent:.2f} N at S = 0.875" in page
    for name in ("e", "beta", "gamma"):
        low, high = fit["ci"][name]
        assert f"| {name} | {fit['params'][name]:.3g} | [{low:.3g}, {high:.3g}] |" in page

    def points(sweep, budget, seed=None):
        return {(r["size"], r["S"], r["E"], r["k"]): float(r["best_val_loss"])
                for r in _csv_rows(sweep) if r["budget"] == budget
                and (seed is None or r["seed"] == seed)}
    diffs = []
    for budget in ("D1228800", "D3686400"):
        wsd, cosine = points("cpu", budget, "0"), points("cpu-cosine", budget)
        diffs.append(np.array([wsd[k] - cosine[k] for k in sorted(wsd.keys() & cosine.keys())]))
    raw = [stats.ttest_1samp(d, 0.0).pvalue for d in diffs]
    for d, p, p_holm, label in zip(diffs, raw, _holm_by_hand(raw), ("1.23M", "3.69M")):
        low, high = _t_interval(d)
        row = _row(page, label)
        assert row[1] == str(len(d)) == "16"
        assert row[2] == f"{d.mean():+.3f} [{low:+.3f}, {high:+.3f}]"
        assert row[3] == f"{p:.1e}" and row[4] == f"{p_holm:.1e}"
        assert row[5] == ("**wsd higher**" if p_holm < 0.05 and low > 0 else
                          "**wsd lower**" if p_holm < 0.05 and high < 0 else "**not separated**")


# --- The demo study page (demo-study.md), recomputed from the raw study files ---------------

DEMO_CPU_FILES = {"first": "", "second": "-cpu2", "third": "-cpu3"}


def _demo_study_losses(suffix: str, arm: str) -> list[dict[int, float]]:
    """Per seed set (0-5, then 617-622): {seed: best val loss} of ``arm``."""
    sets = []
    for name in ("demo-seeds0-5", "demo-seeds617-622"):
        runs = json.loads((RESULTS / "studies" / f"{name}{suffix}.json").read_text())["arms"][arm]["runs"]
        sets.append({run["seed"]: run["best_val_loss"] for run in runs})
    return sets


def _holm_two(p_values: list[float]) -> list[float]:
    low = min(1.0, 2 * min(p_values))
    return [low if p == min(p_values) else max(low, p) for p in p_values]


def _page_row(page: str, *labels: str) -> list[str]:
    prefix = "| " + " | ".join(labels) + " |"
    (line,) = [line for line in page.splitlines() if line.startswith(prefix)]
    return [cell.strip() for cell in line.strip("|").split("|")]


@pytest.mark.parametrize("cpu", list(DEMO_CPU_FILES))
def test_demo_cpus_pooled_recomputed_with_scipy(cpu):
    suffix = DEMO_CPU_FILES[cpu]
    moe = _demo_study_losses(suffix, "moe")
    diffs, p_values = {}, []
    for criterion, dense in (("matched active", "dense_active"), ("matched total", "dense_total")):
        other = _demo_study_losses(suffix, dense)
        halves = [np.array([o[s] - m[s] for s in sorted(m)]) for m, o in zip(moe, other)]
        diffs[criterion] = halves
        p_values.append(stats.ttest_1samp(np.concatenate(halves), 0.0).pvalue)
    page = render_pages(RESULTS)["demo-study.md"]
    for (criterion, halves), p_holm in zip(diffs.items(), _holm_two(p_values)):
        pooled = np.concatenate(halves)
        assert len(pooled) == 12
        half = stats.t.ppf(0.975, 11) * pooled.std(ddof=1) / np.sqrt(12)
        row = _page_row(page, cpu, criterion, "12")
        assert row[3] == f"{pooled.mean():+.4f}"
        assert row[4] == f"[{pooled.mean() - half:+.4f}, {pooled.mean() + half:+.4f}]"
        assert row[6] == f"{p_holm:.2g}"
        assert p_holm < 0.05 and pooled.mean() - half > 0 and row[8] == "**MoE ahead**"
        welch = stats.ttest_ind(halves[0], halves[1], equal_var=False)
        apart = _page_row(page, cpu, criterion, f"{halves[0].mean() - halves[1].mean():+.4f}")
        assert apart[4] == f"{welch.pvalue:.2g}" and apart[6] == "**not separated**"


def test_demo_choosing_seeds_are_named_beside_the_reported_ones():
    """The seeds that chose the recipe, read here from recipe.json's demo grid and fair_lr.json,
    named for each reported set (the first CPU's studies and the until-resolved blocks)."""
    chose = {s for e in json.loads((RESULTS / "recipe.json").read_text())
             if e["grid"] == "demo" and e["kind"] in ("grid", "trace") for s in e["seeds"]}
    chose |= set(json.loads((RESULTS / "fair_lr.json").read_text())["select_seeds"])
    assert {0, 1, 2, 3, 4, 100, 104, 617, 621} <= chose and not {5, 105, 622} & chose
    page = render_pages(RESULTS)["demo-study.md"]
    section = page[:page.index("## The demo on three CPUs")]
    assert "`studies/demo-seeds0-5.json`: seeds 0-5, of which 0-4 chose" in section
    assert "`studies/demo-seeds617-622.json`: seeds 617-622, of which 617-621 chose" in section
    for rep in json.loads((RESULTS / "seeds_until_resolved.json").read_text())["repetitions"]:
        seeds = sorted(int(s) for s in rep["losses"]["moe"])
        chosen = [s for s in seeds if s in chose]
        named = f"until-resolved block {rep['first_seed']}: seeds {seeds[0]}-{seeds[-1]}, of which "
        assert named + (f"{chosen[0]}-{chosen[-1]} chose" if chosen else "none chose") in section
    assert "[dense-vs-moe.md](dense-vs-moe.md)" in section


def test_demo_tuned_lr_recomputed_with_scipy():
    stored = json.loads((RESULTS / "studies" / "demo-tune-lr.json").read_text())
    by_arm = {arm: {run["seed"]: run["best_val_loss"] for run in stored["arms"][arm]["runs"]}
              for arm in ("moe", "dense_active", "dense_total")}
    diffs = [np.array([by_arm[dense][s] - by_arm["moe"][s] for s in sorted(by_arm["moe"])])
             for dense in ("dense_active", "dense_total")]
    page = render_pages(RESULTS)["demo-study.md"]
    section = page[page.index("## Each arm at its own lr"):page.index("## Seeds until resolved")]
    # Every arm chose 0.01, the shared lr: the reporting runs are the second CPU's seeds 0-5,
    # so the 6-seed table is descriptive (raw p, no verdict) and points to that CPU's 12 seeds.
    second = json.loads((RESULTS / "studies" / "demo-seeds0-5-cpu2.json").read_text())["arms"]
    assert all({r["seed"]: r["best_val_loss"] for r in second[arm]["runs"]} == by_arm[arm]
               for arm in by_arm)
    assert "repeat the second CPU's demo study of the same seeds" in section
    for criterion, d in zip(("matched active", "matched total"), diffs):
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        row = _page_row(section, criterion, str(len(d)))
        assert row[2:] == [f"{d.mean():+.4f}", f"[{d.mean() - half:+.4f}, {d.mean() + half:+.4f}]",
                           f"{stats.ttest_1samp(d, 0.0).pvalue:.2g}"]
    # Every arm's mean selection loss is lowest at 0.01, an interior point of the grid.
    for arm, record in stored["lr_selection"]["arms"].items():
        means = {float(lr): np.mean(list(by_seed.values())) for lr, by_seed in record["losses"].items()}
        assert min(means, key=means.get) == 0.01
        assert _page_row(section, f"`{arm}`", "0.01")[-1] == "chosen"


def test_demo_until_resolved_fixed_designs_recomputed_with_scipy():
    record = json.loads((RESULTS / "seeds_until_resolved.json").read_text())
    ahead = {"first 6": 0, "all": 0}
    for rep in record["repetitions"]:
        for label, count in (("first 6", 6), ("all", rep["seeds_trained"])):
            seeds = [str(s) for s in rep["seed_order"][:count]]
            diffs = [np.array([rep["losses"][dense][s] - rep["losses"]["moe"][s] for s in seeds])
                     for dense in ("dense_active", "dense_total")]
            p_holm = _holm_two([stats.ttest_1samp(d, 0.0).pvalue for d in diffs])
            ahead[label] += sum(p < 0.05 and d.mean() > 0 for d, p in zip(diffs, p_holm))
    page = render_pages(RESULTS)["demo-study.md"]
    # The all-seeds rows are descriptive (the stopping rule set their n); the sequential design
    # is counted by its own outcome.
    resolved = sum(c["reason"] == "resolved" for rep in record["repetitions"]
                   for c in rep["comparisons"])
    assert (f"The fixed 6-seed design: **MoE ahead** in {ahead['first 6']} of the 8 comparisons. "
            f"The sequential design: {resolved} of 8 resolved") in page
    assert page.count("| descriptive |") == 8
    assert "on a CPU the file does not record" in page and "machine" not in record
    trained = [rep["seeds_trained"] for rep in record["repetitions"]]
    assert f"Seeds trained: {np.mean(trained):.2f} on average" in page


def _paired_by_hand(first: dict, second: dict) -> tuple[float, float, float, float]:
    """Mean of first − second over the shared seeds, its 95 % t interval and p (scipy)."""
    d = np.array([first[s] - second[s] for s in sorted(first)])
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half, stats.ttest_1samp(d, 0.0).pvalue


def _holm_in_order(p_values: list[float]) -> list[float]:
    order = np.argsort(p_values)
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def _check_row(row: list[str], gap: float, low: float, high: float, p: float, p_holm: float,
               ahead: str, behind: str) -> None:
    assert row[:4] == [f"{gap:+.4f}", f"[{low:+.4f}, {high:+.4f}]", f"{p:.2g}", f"{p_holm:.2g}"]
    word = (ahead if low > 0 else behind) if p_holm < 0.05 and (low > 0 or high < 0) else "not separated"
    assert row[5] == f"**{word}**"


def test_schedule_pages_recomputed_with_scipy():
    page = render_pages(RESULTS)["schedules-and-balancing.md"]
    for file in ("schedule.json", "balancing.json"):
        stored = json.loads((RESULTS / file).read_text())
        by_setting = {name: dict(zip(stored["seeds"], (r["best_val_loss"] for r in record["runs"])))
                      for name, record in stored["settings"].items()}
        base = by_setting.pop(stored["baseline"])
        tests = {name: _paired_by_hand(base, losses) for name, losses in by_setting.items()}
        for (name, t), p_holm in zip(tests.items(), _holm_in_order([t[3] for t in tests.values()])):
            row = _page_row(page, f"`{name}`")
            _check_row(row[3:], *t, p_holm, "variant lower", "variant higher")
    fair = json.loads((RESULTS / "wsd_cosine.json").read_text())["final_val_loss"]
    keys = [(h, name) for h in ("1000", "3000") for name in ("wsd20", "wsd30")]
    tests = [_paired_by_hand(fair["cosine"][h], fair[name][h]) for h, name in keys]
    for (h, name), t, p_holm in zip(keys, tests, _holm_in_order([t[3] for t in tests])):
        row = _page_row(page, f"{int(h):,} steps: cosine − {name}", "6")
        _check_row(row[2:], *t, p_holm, "WSD lower", "cosine lower")
    # The schedule grid's cosine runs are the demo's first-CPU MoE runs of seeds 0-5.
    cosine = [r["best_val_loss"] for r in
              json.loads((RESULTS / "schedule.json").read_text())["settings"]["cosine"]["runs"]]
    demo = json.loads((RESULTS / "studies" / "demo-seeds0-5.json").read_text())["arms"]["moe"]
    assert cosine == [r["best_val_loss"] for r in demo["runs"]]
    assert "The `cosine` runs are the MoE runs of `studies/demo-seeds0-5.json`" in page
    assert page.count("Seeds 0-4 of these also chose or checked the demo's recipe") == 2
    stored = json.loads((RESULTS / "wsd_budgets.json").read_text())
    budgets = stored["by_budget"]
    # Cosine warms up for half its own steps (the demo preset: warmup 0.5, batch 8 x 128).
    warmups = ", ".join(f"{int(t) // 2048:,} of {int(t) // 1024:,}" for t in budgets)
    assert (f"({warmups} steps), the WSD family for {stored['warmup_steps']}") in page
    tests = [_paired_by_hand(row["cosine_best_val_loss"], row["wsd_best_val_loss"])
             for row in budgets.values()]
    for tokens, t, p_holm in zip(budgets, tests, _holm_in_order([t[3] for t in tests])):
        _check_row(_page_row(page, f"{int(tokens):,}")[3:], *t, p_holm, "WSD family lower",
                   "cosine lower")


def test_ladder_routing_recomputed_with_scipy():
    page = render_pages(RESULTS)["routing-stability.md"]
    traced = {}
    for entry in json.loads((RESULTS / "ladder_trace.json").read_text()):
        for rung in entry["rungs"]:
            traces = [entry["runs"][f"{rung}/seed{s}"]["worst_layer_busiest_fraction"]
                      for s in entry["seeds"]]
            row = _page_row(page, f"`{entry['preset']}`", rung)
            assert row[2] == " / ".join(f"{t[0]:.3f}" for t in traces)
            assert row[3] == " / ".join(f"{max(t):.3f}" for t in traces)
            assert row[5] == " / ".join(f"{t[-1]:.3f}" for t in traces)
            if entry["preset"] == "cpu-ablation":
                traced[rung] = [t[-1] for t in traces]
    # The two balancing tests join cpu-ablation's 5 loss steps (earlier − later best val loss).
    arms = json.loads((RESULTS / "studies" / "cpu-ablation-seeds1-4.json").read_text())["arms"]
    loss = {rung: [r["best_val_loss"] for r in sorted(arm["runs"], key=lambda r: r["seed"])]
            for rung, arm in arms.items()}
    pairs = [("naive_top1", "top1_lb"), ("top1_lb", "top2_lb"), ("top2_lb", "top2_lb_z"),
             ("top2_lb_z", "top2_global_lb_z"), ("top2_lb_z", "top2_bias_z")]
    step_p = [stats.ttest_rel(loss[a], loss[b]).pvalue for a, b in pairs]
    stored, traced_ends = _balancing_ends()
    assert traced_ends == {rung: traced[rung] for rung in traced_ends}
    family = _holm_by_hand([*step_p, *_balancing_p()])
    words = []
    for ends, p_holm in zip((stored, traced_ends), family[-2:]):
        test = stats.ttest_rel(ends["naive_top1"], ends["top1_lb"])
        ci = test.confidence_interval(0.95)
        gap = np.mean(ends["naive_top1"]) - np.mean(ends["top1_lb"])
        word = "lower with balancing" if p_holm < 0.05 and ci.low > 0 else "not separated"
        words.append(word)
        assert (f"{gap:+.2f} [{ci.low:+.2f}, {ci.high:+.2f}], p {test.pvalue:.2g}, Holm over the "
                f"7 tests of cpu-ablation's ladder (5 loss steps and the 2 balancing tests, post "
                f"hoc): p "
                f"{p_holm:.2g}, **{word}**") in page
    assert words == ["lower with balancing", "not separated"]
    assert "The word depends on which run of the same seeds is read." in page


def test_rounding_noise_recomputed_with_numpy():
    record = json.loads((RESULTS / "rounding_noise.json").read_text())
    first = str(record["seeds"][0])
    page = render_pages(RESULTS)["demo-study.md"]
    for arm, runs in record["arms"].items():
        reference = runs.pop("reference")
        diffs = np.array([runs[name][first] - reference[first] for name in runs])
        sd = np.std(list(reference.values()), ddof=1)
        rms = np.sqrt(np.mean(diffs ** 2))
        row = _page_row(page, f"`{arm}`", f"{sd:.4f} (n={len(reference)})")
        assert row[-2:] == [f"{rms:.5f}", f"{rms / sd:.2f}"]
    span = np.sqrt(stats.chi2.ppf(0.975, 2) / stats.chi2.ppf(0.025, 2))
    assert f"spans a factor of {span:.1f}" in page
    # At the demo's length: the second and third CPUs' re-runs of the 12 seeds against the first.
    for cpu, suffix in (("second", "-cpu2"), ("third", "-cpu3")):
        for arm in ("moe", "dense_active", "dense_total"):
            first = {s: v for d in _demo_study_losses("", arm) for s, v in d.items()}
            here = {s: v for d in _demo_study_losses(suffix, arm) for s, v in d.items()}
            diffs = np.array([here[s] - first[s] for s in sorted(first)])
            rms, sd = np.sqrt(np.mean(diffs ** 2)), np.std(list(first.values()), ddof=1)
            row = _page_row(page, f"{cpu} − first", f"`{arm}`")
            assert row[2:] == [f"{rms:.4f}", f"{np.abs(diffs).max():.4f}", f"{sd:.4f}",
                               f"{rms / sd:.2f}"]


def test_budget_steps_recomputed_with_scipy():
    raw, adjusted, parts = _budget_page_tests()
    page = render_pages(RESULTS)["budget-trend.md"]
    lines = [line for line in page.splitlines() if " → " in line]
    assert len(lines) == len(parts["steps"]) == 6
    assert "Post hoc (added after a hand reading saw the gap fall)" in page
    for line, d, p, p_holm in zip(lines, parts["steps"], raw[10:16], adjusted[10:16]):
        low, high = _t_interval(d)
        separated = p_holm < 0.05 and (low > 0 or high < 0)
        word = ("gap grows" if low > 0 else "gap shrinks") if separated else "not separated"
        assert (f"| {d.mean():+.3f} | [{low:+.3f}, {high:+.3f}] | {p:.2g} | {p_holm:.2g} | "
                f"**{word}** |") in line


def test_two_sizes_recomputed_with_scipy():
    """The two-size table reads every test at the page's one Holm p: its cpu-budgets rows carry
    the gaps table's p, the others and the Welch comparison theirs in the same family."""
    raw, adjusted, parts = _budget_page_tests()
    record = json.loads((RESULTS / "flip_table.json").read_text())
    page = render_pages(RESULTS)["budget-trend.md"]
    budget_tokens = [b["tokens"] for b in parts["budgets"]]
    larger = iter(range(16, 18))
    for row in record["rows"]:
        index = (budget_tokens.index(row["tokens"]) * 2 + 1 if row["study"] == "cpu-budgets"
                 else next(larger))
        gaps = parts["rows"][row["tokens"]]
        line = next(line for line in page.splitlines()
                    if line.startswith(f"| `{row['study']}` |") and f"| {row['tokens']:,} |" in line)
        assert f"| {gaps.mean():+.3f} |" in line
        assert f"| {raw[index]:.2g} | {adjusted[index]:.2g} |" in line
    small = parts["rows"][record["same_tokens_per_param"]["small"]["tokens"]]
    large = parts["rows"][record["same_tokens_per_param"]["large"]["tokens"]]
    ci = parts["welch"].confidence_interval(0.95)
    assert (f"{small.mean() - large.mean():+.3f} [{ci.low:+.3f}, {ci.high:+.3f}], p "
            f"{raw[18]:.2g}, Holm {adjusted[18]:.2g}: **not separated**") in page
    assert adjusted[18] >= 0.05
    # The confounds are read from the studies' configs: 8,192 against 1,024 tokens per step.
    for study in ("cpu-budgets", "cpu-replication-compiled"):
        stored = json.loads((RESULTS / "studies" / f"{study}.json").read_text())
        arms = (stored.get("budgets") or [stored])[0]["arms"]
        run, model = arms["moe"]["runs"][0], arms["moe"]["model"]
        assert (f"`{study}` {model['n_layers']} layers of width {model['d_model']}, context "
                f"{model['max_seq_len']}, {run['tokens'] // run['steps']:,} tokens per step") in page
