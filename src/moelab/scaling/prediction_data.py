"""The runs a prediction is fitted on: one entry per run of a sweep's results.csv, with the
units its uncertainty is built from.

- a **point** is one grid point (budget, size, sparsity, experts): its seeds are replicates of
  one another, and their scatter is the run-to-run noise (``seed_noise``);
- a **family** is one seed of one (size, sparsity, experts) cell across every budget: under a
  wsd schedule its budgets are cooldown branches of one trunk, so they are not independent, and
  the family, not the run, is what a bootstrap resamples (``family_bootstrap_weights``);
- a **cell** is the (size, sparsity, experts) a family belongs to: the bootstrap draws each
  cell's families with replacement, so every replicate keeps every cell.

``data_hash`` is the sha256 of the fitted rows (run, N, N_active, D, S, loss, in the table's
order, as JSON), so a prediction names exactly the data it came from.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moelab.errors import MoelabError, short_repr
from moelab.scaling.table import read_csv_rows

MIN_NOISE_DF = 4
"""A sparsity's own noise estimate is used from this many degrees of freedom; below it the
estimate pooled over every sparsity."""


@dataclass(frozen=True)
class SweepRuns:
    """A sweep's runs as arrays, one entry per run."""

    run: np.ndarray
    size: np.ndarray
    seed: np.ndarray
    point: np.ndarray
    family: np.ndarray
    cell: np.ndarray
    budget: np.ndarray
    """The run's nominal budget: C (FLOPs) or D (tokens), as ``budget_kind`` says."""
    budget_kind: str
    N: np.ndarray
    N_active: np.ndarray
    D: np.ndarray
    S: np.ndarray
    loss: np.ndarray

    def __len__(self) -> int:
        return len(self.loss)

    def subset(self, mask: np.ndarray) -> SweepRuns:
        arrays = {name: getattr(self, name)[mask] for name in _ARRAY_FIELDS}
        return SweepRuns(budget_kind=self.budget_kind, **arrays)

    def with_loss(self, loss: np.ndarray) -> SweepRuns:
        arrays = {name: getattr(self, name) for name in _ARRAY_FIELDS}
        arrays["loss"] = np.asarray(loss, dtype=np.float64)
        return SweepRuns(budget_kind=self.budget_kind, **arrays)

    def columns(self) -> dict[str, np.ndarray]:
        """The law fit's columns (N is the total parameter count, as ``moelab fit`` reads a sweep)."""
        return {"N": self.N, "N_active": self.N_active, "D": self.D, "S": self.S, "loss": self.loss}

    def budgets(self) -> list[float]:
        return sorted(set(self.budget.tolist()))

    def data_hash(self) -> str:
        rows = [[str(r), float(n), float(a), float(d), float(s), float(x)] for r, n, a, d, s, x
                in zip(self.run, self.N, self.N_active, self.D, self.S, self.loss)]
        return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


_ARRAY_FIELDS = ("run", "size", "seed", "point", "family", "cell", "budget", "N", "N_active",
                 "D", "S", "loss")


def read_sweep_runs(source: str | Path, exclude: list[str] | None = None) -> SweepRuns:
    """A sweep folder's results.csv (or that CSV itself) as runs, less those whose COLUMN
    equals VALUE for any ``exclude`` item "COLUMN=VALUE"."""
    path = Path(source)
    csv_path = path / "results.csv" if path.is_dir() else path
    if not csv_path.is_file():
        raise MoelabError(f"{short_repr(str(source))} is invalid: not a sweep folder with a "
                          "results.csv, nor such a CSV")
    header, rows = read_csv_rows(csv_path)
    for name in ("run", "budget", "N_total", "N_active", "D", "S", "best_val_loss"):
        if name not in header:
            raise MoelabError(f"{csv_path} lacks the column {name!r}: allowed inputs are a "
                              "sweep's results.csv")
    rows = [row for row in rows if not _excluded(row, exclude or [], header)]
    if not rows:
        raise MoelabError(f"{csv_path}: no runs left after --exclude {' '.join(exclude or [])}")
    return _runs_from_rows(rows)


def _excluded(row: dict[str, str], exclude: list[str], header: list[str]) -> bool:
    for item in exclude:
        column, sep, value = item.partition("=")
        if not sep or column not in header:
            raise MoelabError(f"--exclude {short_repr(item)} is invalid: allowed COLUMN=VALUE "
                              f"with COLUMN one of {', '.join(header)}")
        if row[column] == value:
            return True
    return False


def _runs_from_rows(rows: list[dict[str, str]]) -> SweepRuns:
    budget_kind = rows[0]["budget"][:1]
    if budget_kind not in ("C", "D") or any(row["budget"][:1] != budget_kind for row in rows):
        raise MoelabError("the budget column must name every run's budget as C<FLOPs> or "
                          "D<tokens>, all of one kind")
    families, cells, points = [], [], []
    for row in rows:
        parts = [part for part in row["run"].split("/") if part not in ("runs", row["budget"])]
        seed = row.get("seed") or ""
        family = "/".join(parts) if seed else "/".join(parts) + "/seed?"
        families.append(family)
        cells.append(family.rsplit("/", 1)[0])
        points.append(row["budget"] + "/" + cells[-1])
    return SweepRuns(
        run=np.array([row["run"] for row in rows]), size=np.array([row.get("size", "") for row in rows]),
        seed=np.array([row.get("seed", "") for row in rows]), point=np.array(points),
        family=np.array(families), cell=np.array(cells),
        budget=np.array([float(row["budget"][1:]) for row in rows]), budget_kind=budget_kind,
        N=_floats(rows, "N_total"), N_active=_floats(rows, "N_active"), D=_floats(rows, "D"),
        S=_floats(rows, "S"), loss=_floats(rows, "best_val_loss"),
    )


def _floats(rows: list[dict[str, str]], name: str) -> np.ndarray:
    values = np.array([float(row[name]) for row in rows])
    if not np.all(np.isfinite(values)):
        raise MoelabError(f"results.csv column {name!r} has a value that is not a finite number")
    return values


# --------------------------------------------------------------------------------------------
# Run-to-run noise
# --------------------------------------------------------------------------------------------


@dataclass
class SeedNoise:
    """The seeds' scatter about their grid point's mean (loss units, nats), pooled."""

    sd: float | None
    """Pooled over every point with >= 2 seeds; None when no point has 2."""
    df: int
    by_sparsity: dict[float, list[float]]
    """S -> [sd, df] pooled over that sparsity's points."""

    def at(self, sparsity: float) -> tuple[float | None, int]:
        """The sd and df a new run at ``sparsity`` is given: its own sparsity's when that has
        >= MIN_NOISE_DF degrees of freedom, else the pooled one."""
        own = self.by_sparsity.get(round(float(sparsity), 6))
        if own is not None and own[1] >= MIN_NOISE_DF:
            return own[0], int(own[1])
        return self.sd, self.df


def seed_noise(runs: SweepRuns) -> SeedNoise:
    squares: dict[float, float] = {}
    dfs: dict[float, int] = {}
    for point in sorted(set(runs.point.tolist())):
        losses = runs.loss[runs.point == point]
        if len(losses) < 2:
            continue
        sparsity = round(float(runs.S[runs.point == point][0]), 6)
        squares[sparsity] = squares.get(sparsity, 0.0) + float(np.sum((losses - losses.mean()) ** 2))
        dfs[sparsity] = dfs.get(sparsity, 0) + len(losses) - 1
    total_df = sum(dfs.values())
    if not total_df:
        return SeedNoise(sd=None, df=0, by_sparsity={})
    pooled = math.sqrt(sum(squares.values()) / total_df)
    by_sparsity = {s: [math.sqrt(squares[s] / dfs[s]), dfs[s]] for s in sorted(dfs)}
    return SeedNoise(sd=pooled, df=total_df, by_sparsity=by_sparsity)


# --------------------------------------------------------------------------------------------
# The family bootstrap
# --------------------------------------------------------------------------------------------


def inflated_deviations(runs: SweepRuns) -> np.ndarray:
    """Each run's loss with its deviation from its point's mean scaled by sqrt(n / (n - 1)),
    n the point's seeds: a bootstrap over n seeds shrinks a mean's variance by (n - 1) / n
    (by half with 2 seeds), and this undoes it (the same device as the IsoFLOP S* bootstrap)."""
    loss = runs.loss.copy()
    for point in set(runs.point.tolist()):
        mask = runs.point == point
        count = int(mask.sum())
        if count >= 2:
            mean = loss[mask].mean()
            loss[mask] = mean + math.sqrt(count / (count - 1)) * (loss[mask] - mean)
    return loss


def family_bootstrap_weights(runs: SweepRuns, replicates: int, seed: int = 0) -> np.ndarray:
    """(replicates, runs): how often each run is drawn when every cell's families (its seeds)
    are drawn with replacement, a drawn family bringing all its runs."""
    rng = np.random.default_rng(seed)
    weights = np.zeros((replicates, len(runs)))
    for cell in sorted(set(runs.cell.tolist())):
        families = sorted(set(runs.family[runs.cell == cell].tolist()))
        members = [np.flatnonzero(runs.family == family) for family in families]
        draws = rng.integers(0, len(families), size=(replicates, len(families)))
        for f, member in enumerate(members):
            weights[:, member] += (draws == f).sum(axis=1)[:, None]
    return weights


def point_means(runs: SweepRuns) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(points, mean loss, seeds) per grid point, points sorted."""
    points = sorted(set(runs.point.tolist()))
    means = np.array([runs.loss[runs.point == p].mean() for p in points])
    counts = np.array([int((runs.point == p).sum()) for p in points])
    return points, means, counts
