"""Efficiency leverage of a sweep's MoE points from a fitted law, with a bootstrap interval.

Efficiency leverage (Tian et al. 2025, arXiv 2507.17702: dense compute over MoE compute at equal
loss) is read here off one fitted law that holds dense models at S = 0 (the sparsity law and its
reduced forms) or off two fits, a dense one and an MoE one:

- the MoE point (N_total, N_active, D, S) has the law's loss L and costs C_MoE = 6 N_active D;
- C_dense is the least compute at which a *compute-optimal* dense model reaches L on the dense
  law: min over N of L_dense(N, C / (6 N)) falls with C, and C_dense is where it equals L
  (bisection in log C); a loss below every dense model's reach gives None, "unbounded";
- EL = C_dense / C_MoE, and each bootstrap replicate of the fit gives its own EL: the 95 %
  percentile interval over the replicates (a replicate whose dense law cannot reach the loss
  counts as unbounded, above every finite value). A replicate's C_dense is read off its dense
  law's optimal loss tabulated once on a grid of log C (``OptimalDenseCurve``: a grid of log N
  at each budget, refined by a parabola through the grid minimum), not by a bisection per
  point and replicate, which at a sweep's 200 replicates and dozens of points would take
  minutes; the tabulated C_dense agrees with the bisection to about 1e-4 relative
  (``tests/test_scaling_efficiency_leverage.py``), far inside any bootstrap interval.

In measured seconds: the MoE's training seconds are D / its measured tokens per second; the
dense model's are C_dense times the dense runs' median seconds per FLOP (6 N D / (D / tokens per
second)), which assumes dense speed per FLOP does not change between the measured sizes and the
compute-optimal one. Both are the hardware's that timed the runs.

Torch-free: numpy and scipy. The record renders with ``render``; nothing here reads a folder.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional, Protocol

import numpy as np
import scipy.optimize

from moelab.scaling.fitting import percentile_interval
from moelab.scaling.laws import Law

LOG_PARAMS_RANGE = (math.log(1e3), math.log(1e15))
"""Dense sizes the compute-optimal search considers (parameters)."""
LOG_FLOPS_RANGE = (math.log(1e6), math.log(1e32))
"""Compute budgets the bisection considers (FLOPs); beyond them the loss is "unbounded"."""


class SweepRow(Protocol):
    """What a sweep's results row (``moelab.sweep.results_csv.ResultRow``, frozen: so the
    members are read-only properties) gives this module."""

    @property
    def size(self) -> str: ...
    @property
    def S(self) -> float: ...
    @property
    def E(self) -> int: ...
    @property
    def N_total(self) -> float: ...
    @property
    def N_active(self) -> float: ...
    @property
    def D(self) -> float: ...
    @property
    def C(self) -> float: ...
    @property
    def tokens_per_s(self) -> Optional[float]: ...


@dataclass(frozen=True)
class DenseLaw:
    """A fitted law read at S = 0 (when it has S) as the dense model's loss L(N, D)."""

    law: Law
    params: Mapping[str, float]

    def loss(self, params_count: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        columns = {"N": params_count, "D": tokens}
        if "S" in self.law.columns:
            columns["S"] = np.zeros_like(params_count)
        if "N_active" in self.law.columns:
            columns["N_active"] = params_count
        return self.law.predict_loss(dict(self.params), **columns)


def optimal_dense_loss(dense: DenseLaw, flops: float) -> float:
    """The least loss a dense model reaches with ``flops`` of training (C = 6 N D)."""
    def loss_at(log_params: float) -> float:
        params_count = math.exp(log_params)
        return float(dense.loss(np.array([params_count]), np.array([flops / (6 * params_count)]))[0])

    result = scipy.optimize.minimize_scalar(loss_at, bounds=LOG_PARAMS_RANGE, method="bounded",
                                            options={"xatol": 1e-6})
    return float(result.fun)


def dense_compute_at_loss(dense: DenseLaw, loss: float) -> Optional[float]:
    """The least compute a compute-optimal dense model needs to reach ``loss``; None when no
    budget in LOG_FLOPS_RANGE reaches it."""
    low, high = LOG_FLOPS_RANGE
    if optimal_dense_loss(dense, math.exp(high)) > loss:
        return None
    if optimal_dense_loss(dense, math.exp(low)) <= loss:
        return math.exp(low)
    for _ in range(80):  # halves a 60-nat interval to 1e-23: far below float noise in the loss
        middle = 0.5 * (low + high)
        if optimal_dense_loss(dense, math.exp(middle)) > loss:
            low = middle
        else:
            high = middle
    return math.exp(high)


CURVE_FLOPS_POINTS = 1201
"""Budgets of the tabulated optimal dense loss, evenly spaced in log C over LOG_FLOPS_RANGE."""
CURVE_PARAMS_POINTS = 561
"""Dense sizes tried at each tabulated budget, evenly spaced in log N over LOG_PARAMS_RANGE."""


@dataclass(frozen=True)
class OptimalDenseCurve:
    """A dense law's least loss against log compute, tabulated (for bootstrap replicates)."""

    log_flops: np.ndarray
    losses: np.ndarray

    @classmethod
    def of(cls, dense: DenseLaw) -> OptimalDenseCurve:
        log_flops = np.linspace(*LOG_FLOPS_RANGE, CURVE_FLOPS_POINTS)
        log_params = np.linspace(*LOG_PARAMS_RANGE, CURVE_PARAMS_POINTS)
        grid_c, grid_n = np.meshgrid(log_flops, log_params, indexing="ij")
        params_count = np.exp(grid_n).ravel()
        with np.errstate(over="ignore", invalid="ignore"):
            loss = dense.loss(params_count, np.exp(grid_c).ravel() / (6 * params_count))
        loss = np.where(np.isfinite(loss), loss, np.inf).reshape(grid_c.shape)
        return cls(log_flops, _refined_minimum(loss))

    def compute_at_loss(self, loss: float) -> Optional[float]:
        """The least tabulated-then-interpolated compute reaching ``loss``; None beyond."""
        losses = np.minimum.accumulate(self.losses)  # more compute never loses: monotone
        if losses[-1] > loss:
            return None
        if losses[0] <= loss:
            return math.exp(self.log_flops[0])
        index = int(np.argmax(losses <= loss))  # the first budget at or below the loss
        high_loss, low_loss = losses[index - 1], losses[index]
        fraction = (high_loss - loss) / (high_loss - low_loss)
        return math.exp(self.log_flops[index - 1]
                        + fraction * (self.log_flops[index] - self.log_flops[index - 1]))


def _refined_minimum(loss_CN: np.ndarray) -> np.ndarray:
    """Each row's minimum over the log N grid, refined by the parabola through the grid minimum
    and its two neighbours (the grid's step alone would leave the minimum ~1e-4 high)."""
    index = np.clip(np.argmin(loss_CN, axis=1), 1, loss_CN.shape[1] - 2)
    rows = np.arange(loss_CN.shape[0])
    left, middle, right = (loss_CN[rows, index + shift] for shift in (-1, 0, 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        curvature = left - 2 * middle + right
        refined = middle - (right - left) ** 2 / (8 * curvature)
    usable = np.isfinite(refined) & (curvature > 0)
    return np.where(usable, np.minimum(refined, middle), np.min(loss_CN, axis=1))


@dataclass
class LeveragePoint:
    """One MoE point of the sweep (its seeds pooled) and its efficiency leverage."""

    size: str
    """The grid's size name."""
    S: float
    """Sparsity (E - k) / E."""
    E: int
    """Experts per MoE layer."""
    N_total: float
    """Total parameters."""
    N_active: float
    """Parameters active per token."""
    D: float
    """Training tokens."""
    C_moe: float
    """The MoE run's training FLOPs (6 N_active D)."""
    law_loss: float
    """The fitted MoE law's loss at the point (what the dense model must reach)."""
    C_dense: Optional[float]
    """None: no dense budget reaches the loss (leverage unbounded)."""
    leverage: Optional[float]
    """C_dense / C_moe in FLOPs (None: unbounded)."""
    ci: list[float] = field(default_factory=list)
    """95 % bootstrap percentile interval; inf where unbounded replicates reach the tail."""
    leverage_seconds: Optional[float] = None
    """The same ratio in measured training seconds (None: no timing for an arm)."""
    ci_seconds: list[float] = field(default_factory=list)
    """95 % bootstrap interval of ``leverage_seconds``."""


@dataclass
class EfficiencyLeverage:
    """Efficiency leverage at every MoE point of a sweep: dense compute over MoE compute at the
    MoE's loss, read off the fitted dense and MoE laws."""

    dense_law: str
    """The law form giving the dense loss-compute curve."""
    moe_law: str
    """The law form giving each MoE point's loss."""
    replicates: int
    """Bootstrap replicates behind each interval (0: no interval)."""
    dense_seconds_per_flop: Optional[float]
    """Measured seconds per training FLOP of the dense runs (None: not timed)."""
    points: list[LeveragePoint]
    """One per MoE point of the sweep."""


def _moe_points(rows: Sequence[SweepRow]) -> list[dict]:
    groups: dict[tuple, list[SweepRow]] = {}
    for row in rows:
        if row.S > 0:
            groups.setdefault((row.size, row.S, row.E, row.N_total, row.D), []).append(row)
    points = []
    for (size, sparsity, experts, total, tokens), members in sorted(groups.items()):
        speeds = [r.tokens_per_s for r in members if r.tokens_per_s]
        points.append({"size": size, "S": sparsity, "E": experts, "N_total": total,
                       "N_active": float(np.mean([r.N_active for r in members])), "D": tokens,
                       "seconds": tokens / float(np.median(speeds)) if speeds else None})
    return points


def dense_seconds_per_flop(rows: Sequence[SweepRow]) -> Optional[float]:
    """Median over the dense runs of training seconds per FLOP (C / (D / tokens per s))."""
    rates = [(row.D / row.tokens_per_s) / row.C for row in rows
             if row.S == 0 and row.tokens_per_s and row.C > 0]
    return float(np.median(rates)) if rates else None


def _moe_loss(law: Law, params: Mapping[str, float], point: dict) -> float:
    columns = {"N": point["N_total"], "D": point["D"], "S": point["S"], "E": float(point["E"]),
               "N_active": point["N_active"]}
    return float(law.predict_loss(dict(params), **{k: columns[k] for k in law.columns})[0])


def _leverage(dense: DenseLaw, moe_law: Law, moe_params: Mapping[str, float],
              point: dict) -> tuple[float, Optional[float]]:
    loss = _moe_loss(moe_law, moe_params, point)
    dense_flops = dense_compute_at_loss(dense, loss)
    return loss, dense_flops


def compute(rows: Sequence[SweepRow], dense_law: Law, dense_params: Mapping[str, float],
            moe_law: Law, moe_params: Mapping[str, float],
            dense_replicas: Sequence[Mapping[str, float]] = (),
            moe_replicas: Sequence[Mapping[str, float]] = ()) -> Optional[EfficiencyLeverage]:
    """EL of every MoE point of ``rows``. One law fitted to dense and MoE runs alike: pass it
    (and its replicas) as both. Replicates pair by index (the same resample in both fits when
    both come from one fit); the interval uses min(len(dense), len(moe)) of them."""
    points = _moe_points(rows)
    if not points:
        return None
    seconds_per_flop = dense_seconds_per_flop(rows)
    replicate_pairs = list(zip(dense_replicas, moe_replicas))
    record = EfficiencyLeverage(dense_law=dense_law.name, moe_law=moe_law.name,
                                replicates=len(replicate_pairs),
                                dense_seconds_per_flop=seconds_per_flop, points=[])
    curves = [OptimalDenseCurve.of(DenseLaw(dense_law, dense_p)) for dense_p, _ in replicate_pairs]
    for point in points:
        c_moe = 6.0 * point["N_active"] * point["D"]
        loss, c_dense = _leverage(DenseLaw(dense_law, dense_params), moe_law, moe_params, point)
        leverage = None if c_dense is None else c_dense / c_moe
        replicate_values = []
        for curve, moe_p in zip(curves, (moe_p for _, moe_p in replicate_pairs)):
            c = curve.compute_at_loss(_moe_loss(moe_law, moe_p, point))
            replicate_values.append(math.inf if c is None else c / c_moe)
        entry = LeveragePoint(size=point["size"], S=point["S"], E=point["E"],
                              N_total=point["N_total"], N_active=point["N_active"], D=point["D"],
                              C_moe=c_moe, law_loss=loss, C_dense=c_dense, leverage=leverage,
                              ci=list(percentile_interval(replicate_values))
                              if replicate_values else [])
        if seconds_per_flop and point["seconds"]:
            scale = seconds_per_flop * c_moe / point["seconds"]  # EL in seconds = EL x this
            entry.leverage_seconds = None if leverage is None else leverage * scale
            entry.ci_seconds = [bound * scale for bound in entry.ci]
        record.points.append(entry)
    return record


def _leverage_text(value: Optional[float], ci: list[float]) -> str:
    if value is None:
        return "unbounded (no dense budget reaches the loss)"
    interval = ""
    if ci:
        high = "unbounded" if math.isinf(ci[1]) else f"{ci[1]:.3g}"
        interval = f" [{ci[0]:.3g}, {high}]"
    return f"{value:.3g}{interval}"


def render(record: Optional[EfficiencyLeverage]) -> str:
    """The markdown section of an EfficiencyLeverage record ("" for none)."""
    if record is None:
        return ""
    rows = [f"| {p.size} | {p.S:g} | {p.E} | {p.D:.3g} | {p.law_loss:.4f} | {p.C_moe:.3g} | "
            + ("–" if p.C_dense is None else f"{p.C_dense:.3g}") + " | "
            + _leverage_text(p.leverage, p.ci) + " | "
            + ("–" if p.leverage_seconds is None and not p.ci_seconds
               else _leverage_text(p.leverage_seconds, p.ci_seconds)) + " |"
            for p in record.points]
    same = record.dense_law == record.moe_law
    laws = f"the {record.moe_law} law" if same else (
        f"the dense {record.dense_law} law and the MoE {record.moe_law} law")
    interval = (f"95 % percentile intervals over {record.replicates} bootstrap replicates of "
                "the fit" if record.replicates else "no bootstrap interval (the fit has no "
                "replicates)")
    return ("## Efficiency leverage\n\n"
            f"Dense compute over MoE compute at equal loss (Tian et al. 2025), from {laws}: "
            "C_dense is the least 6ND at which a compute-optimal dense model reaches the MoE "
            "point's fitted loss, C_MoE = 6 N_active D; " + interval + ". In seconds: the "
            "MoE's measured training time against C_dense at the dense runs' median seconds "
            "per FLOP. Read off the fitted law, so it inherits the law's form and its misfit; "
            "beyond the sweep's sizes it is an extrapolation.\n\n"
            "| size | S | E | D | fitted loss | C_MoE | C_dense | EL (FLOPs) [95 % CI] | "
            "EL (seconds) [95 % CI] |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            + "\n".join(rows) + "\n")
