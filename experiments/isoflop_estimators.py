"""Which IsoFLOP vertex estimator to use: measured on simulated grids with a known N*(C).

    python experiments/isoflop_estimators.py [--draws 200] [--law epoch] [--published ISOFLOPS_CSV]

The truth is a Chinchilla law (Besiroglu et al.'s refit: A = 482.01, B = 2085.43, E = 1.81686,
alpha = 0.34781, beta = 0.36585), so N*(C) = G (C / 6)^a with a = beta / (alpha + beta) =
0.5126. Per budget, sizes 1.5x apart on a lopsided grid as researchers run them: at the smallest
budget 2 sizes below N* and 12 above, shifting to 6 below and 4 above at the largest (spans
90x-1300x), with the grid's offset from N* drawn at random; Gaussian noise on every loss. Per
estimator, the exponent over the budgets whose vertex lies inside the sizes it used: its mean
error (bias), its spread and RMS error over the draws, and the worst budget's N* ratio.

With --published, the same estimators on a published IsoFLOP table (the Open-Athena extract's
columns source, experiment, params, budget, loss): the exponent per experiment.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict

import numpy as np
from scipy.interpolate import Akima1DInterpolator

from moelab.scaling.isoflop_vertex import fit_vertex

EPOCH = {"A": 482.01, "B": 2085.43, "E": 1.81686, "alpha": 0.34781, "beta": 0.36585}
HOFFMANN = {"A": 406.4, "B": 410.7, "E": 1.69, "alpha": 0.34, "beta": 0.28}
LAWS = {"epoch": EPOCH, "hoffmann": HOFFMANN,
        # Lopsided curves: one side of the minimum far steeper than the other.
        "steep-n": {"A": 2000.0, "B": 410.7, "E": 1.69, "alpha": 0.6, "beta": 0.25},
        "steep-d": {"A": 406.4, "B": 4000.0, "E": 1.69, "alpha": 0.25, "beta": 0.6}}
LAW = dict(EPOCH)
BUDGETS = np.array([1e18, 1e19, 1e20, 1e21, 1e22])
BELOW_ABOVE = [(2, 12), (3, 10), (4, 8), (5, 6), (6, 4)]
SPACING = math.log(1.5)


def true_exponent() -> float:
    return LAW["beta"] / (LAW["alpha"] + LAW["beta"])


def true_log_optimum(flops: float) -> float:
    a, b = LAW["alpha"], LAW["beta"]
    g = (a * LAW["A"] / (b * LAW["B"])) ** (1 / (a + b))
    return math.log(g) + true_exponent() * math.log(flops / 6)


def law_loss(log_n: np.ndarray, flops: float) -> np.ndarray:
    n = np.exp(log_n)
    return LAW["E"] + LAW["A"] / n ** LAW["alpha"] + LAW["B"] / (flops / (6 * n)) ** LAW["beta"]


def simulated_grid(rng, noise: float):
    """(budget, log N, loss) per budget on the lopsided grid."""
    for flops, (below, above) in zip(BUDGETS, BELOW_ABOVE):
        offset = rng.uniform(0, SPACING)
        log_n = true_log_optimum(flops) + offset + SPACING * np.arange(-below, above)
        yield flops, log_n, law_loss(log_n, flops) + rng.normal(0, noise, len(log_n))


def akima_vertex(log_n, loss):
    """Porian et al.-style: the argmin of an Akima interpolant of the losses (no bootstrap)."""
    sizes, index = np.unique(log_n, return_inverse=True)
    means = np.bincount(index, weights=loss) / np.bincount(index)
    curve = Akima1DInterpolator(sizes, means)
    fine = np.linspace(log_n.min(), log_n.max(), 2001)
    best = fine[int(np.nanargmin(curve(fine)))]
    return best, bool(log_n.min() < best < log_n.max())


def estimate(name: str, log_n, loss):
    """(log N*, inside) by the named estimator, or None."""
    if name == "akima":
        return akima_vertex(log_n, loss)
    estimator, _, factor = name.partition("-")
    fit = fit_vertex(log_n, loss, estimator=estimator,
                     window_factor=float(factor) if factor else 3.0)
    return None if fit is None else (fit.log_params, fit.inside)


def exponent(flops, log_stars) -> float:
    return float(np.polyfit(np.log(flops), log_stars, 1)[0]) if len(flops) >= 2 else math.nan


ESTIMATORS = ("global", "window-2", "window-3", "window-4", "akima")


def simulate(draws: int, noise: float) -> None:
    errors = defaultdict(list)
    worst_ratio = defaultdict(list)
    for draw in range(draws):
        rng = np.random.default_rng(draw)
        grid = list(simulated_grid(rng, noise))
        for name in ESTIMATORS:
            kept = [(flops, est[0]) for flops, log_n, loss in grid
                    if (est := estimate(name, log_n, loss)) is not None and est[1]]
            flops, log_stars = (np.array(v) for v in zip(*kept)) if kept else ([], [])
            errors[name].append(exponent(flops, log_stars) - true_exponent())
            ratios = [math.exp(x - true_log_optimum(c)) for c, x in zip(flops, log_stars)]
            worst_ratio[name].append(max(ratios, key=lambda r: abs(math.log(r))) if ratios else math.nan)
    print(f"law {LAW}, noise {noise} nats, {draws} draws, true a = {true_exponent():.4f}")
    print(f"  {'estimator':<10} {'bias':>8} {'sd':>7} {'rmse':>7} {'|err|<0.02':>10} "
          f"{'median worst N*/truth':>22}")
    for name in ESTIMATORS:
        e = np.array(errors[name])
        e = e[np.isfinite(e)]
        print(f"  {name:<10} {e.mean():+8.4f} {e.std():7.4f} {math.sqrt(np.mean(e ** 2)):7.4f} "
              f"{np.mean(np.abs(e) < 0.02):10.0%} {np.nanmedian(worst_ratio[name]):22.2f}")


def published(path: str) -> None:
    table = defaultdict(lambda: defaultdict(list))
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            table[row["experiment"]][float(row["budget"])].append(
                (math.log(float(row["params"])), float(row["loss"])))
    print(f"published: {path}")
    for experiment, budgets in sorted(table.items()):
        line = f"  {experiment:<50}"
        for name in ESTIMATORS:
            kept = []
            for flops, points in sorted(budgets.items()):
                log_n, loss = (np.array(v) for v in zip(*points))
                if len(np.unique(log_n)) >= 3 and (est := estimate(name, log_n, loss)) and est[1]:
                    kept.append((flops, est[0]))
            line += f" {name} {exponent(*zip(*kept)) if len(kept) >= 2 else math.nan:.3f}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--published", metavar="CSV")
    parser.add_argument("--law", choices=sorted(LAWS), default="epoch",
                        help="the truth: Besiroglu et al.'s refit, Hoffmann et al.'s own fit, or "
                             "a curve much steeper on the small-N or the large-N side")
    args = parser.parse_args()
    LAW.update(LAWS[args.law])
    for noise in (0.003, 0.01, 0.02):
        simulate(args.draws, noise)
    if args.published:
        published(args.published)


if __name__ == "__main__":
    main()
