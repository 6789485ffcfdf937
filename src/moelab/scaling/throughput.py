"""Training throughput as a function of model shape: a cost model fitted to measured timings.

FLOPs are not seconds: an MoE's routing, token permutation and smaller expert matmuls cost time
that 6 N_active does not count, and its optimizer still updates every stored expert. The model
adds up the kinds of work one training step does, each at its own (fitted) price:

    seconds per token = c + a F + m F_expert + p N_total + e E [S > 0]

- F = 6 N_active, the training FLOPs per token the scaling laws count: a is seconds per FLOP of
  the dense model's matmuls, and every FLOP pays it (attention, embeddings, head and experts);
- F_expert = 6 x the routed-expert parameters one token uses, the FLOPs that run inside the
  expert layers; m is their extra price (dispatch, permutation, smaller matmuls), so (a + m) / a
  is what a FLOP inside the experts costs against a dense one. It is read off the counts alone:
  N_total - N_active = S x the routed experts' parameters, of which a token uses (1 - S);
- p: work per stored parameter each step whatever the tokens (AdamW's update, zeroing and
  clipping the gradients), spread over the step's tokens: where an MoE pays for its idle experts;
- e: fixed work per expert (a router column, one matmul launch per expert and layer);
- c: per-token work that no shape term describes (embedding lookups, the framework's overhead).

Why this form and not a log-linear interpolation of the measured table: time is a sum over the
work done, and each price is a cost, so the coefficients are non-negative (non-negative least
squares); the form is linear in them, so it is fitted exactly, without starts; and it
extrapolates to the compute-bound limit (seconds per token -> (a + m [S > 0]) F for large
models), where an interpolation would carry the small models' overhead-dominated curvature
along. The p and e terms are costs per step divided by the tokens of a step, so a fitted model
holds for the batch it was measured at: a table mixing batch sizes is refused.

Residuals are relative (each row weighted by 1 / its seconds per token): the table's models span
orders of magnitude in speed, and an absolute fit would describe only the slowest. Intervals come
from bootstrap resamples of the distinct shapes, each with all its rows (a sweep times a shape
once per run: its 96 rows are 16 shapes, and resampling rows would count one shape's repeats as
independent evidence), dense and sparse shapes resampled apart so that every resample can see the
MoE terms.

A table is rows with N_total, N_active, S, E (and k, tokens_per_step) and tokens_per_s: written by
``moelab throughput`` (CSV or JSON), or a sweep's results.csv (its runs' own throughput).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.optimize

from moelab.errors import MoelabError, short_repr
from moelab.scaling.family import active_params
from moelab.scaling.fitting import percentile_interval
from moelab.scaling.fit_record import OMIT_NONE
from moelab.scaling.table import csv_records

COEFFICIENTS = ("c", "a", "m", "p", "e")
"""The model's prices, in the order of ``features``' columns."""
REQUIRED_COLUMNS = ("N_total", "N_active", "S", "E", "tokens_per_s")
DEFAULT_BOOTSTRAP = 200


FORM = ("seconds/token = c + a F + m F_expert + p N_total + e E [S>0], F = 6 N_active, "
        "F_expert = 6 (N_total - N_active) (1 - S) / S")


def expert_flops(total_params, active_params, sparsity) -> np.ndarray:
    """6 x the routed-expert parameters one token uses; 0 for a dense model.

    The routed experts hold X parameters of which a token uses k / E = 1 - S, so N_total -
    N_active = S X and the token's share is (1 - S) X = (N_total - N_active)(1 - S) / S."""
    total, active, sparsity = np.broadcast_arrays(
        *(np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in (total_params, active_params,
                                                                   sparsity)))
    sparse = sparsity > 0
    out = np.zeros(total.shape)
    out[sparse] = 6.0 * (total[sparse] - active[sparse]) * (1.0 - sparsity[sparse]) / sparsity[sparse]
    return out


def features(total_params, active_params, sparsity, experts) -> np.ndarray:
    """(points, 5) design matrix: the work per token that each coefficient prices."""
    total = np.atleast_1d(np.asarray(total_params, dtype=np.float64))
    flops = 6.0 * np.atleast_1d(np.asarray(active_params, dtype=np.float64))
    sparse = (np.atleast_1d(np.asarray(sparsity, dtype=np.float64)) > 0).astype(np.float64)
    experts = np.atleast_1d(np.asarray(experts, dtype=np.float64))
    inside_experts = expert_flops(total_params, active_params, sparsity)
    ones = np.ones(np.broadcast_shapes(total.shape, flops.shape, sparse.shape, experts.shape))
    return np.stack(np.broadcast_arrays(ones, flops, inside_experts, total, experts * sparse),
                    axis=-1)


@dataclass(kw_only=True)
class ThroughputRow:
    """One timed shape (a throughput table's row) or one run of a sweep (its own speed)."""

    N_total: float
    """Total parameters of the shape."""
    N_active: float
    """Active parameters per token."""
    S: float
    """Sparsity (E - k) / E; 0 for dense."""
    E: float
    """Routed experts per layer; 1 for dense."""
    tokens_per_s: float
    """Training tokens per second (a shape's row in a sweep: the median of its runs)."""
    k: float | None = None
    """Experts per token; None where the table has no k column."""
    device: str | None = None
    """The device timed, e.g. cpu."""
    step_time_s: float | None = None
    """Seconds per optimizer step."""
    peak_memory_bytes: float | None = None
    """Peak memory while training."""
    tokens_per_step: float | None = field(default=None, metadata=OMIT_NONE)
    """Tokens per optimizer step."""


@dataclass(kw_only=True)
class ShapeThroughput(ThroughputRow):
    """A shape's runs in one row (``per_shape_means``), beside the dense models."""

    runs: int
    """Runs of the shape."""
    tokens_per_s_vs_dense: float | None = None
    """tokens/s over the dense model of the same total size (``moe_versus_dense``)."""
    step_time_vs_equal_flops_dense: float | None = None
    """Its seconds per token over those of a dense model of its active size (interpolated log-log
    between the dense shapes); null outside them."""


@dataclass
class DenseComparison:
    """A sparse row's two measured ratios against dense models (``moe_versus_dense``)."""

    N_total: float
    N_active: float
    S: float
    E: float
    tokens_per_s_vs_same_size_dense: float | None
    step_time_vs_equal_flops_dense: float | None


@dataclass
class ThroughputModel:
    coefficients: dict[str, float]
    """Seconds per token per unit of each term (``COEFFICIENTS``)."""
    replicates: list[dict[str, float]] = field(default_factory=list)
    """The coefficients refitted on bootstrap resamples of the rows."""
    tokens_per_step: float | None = None
    n_rows: int = 0
    source: str = ""

    def seconds_per_token(self, total_params, active_params, sparsity, experts,
                          coefficients: dict[str, float] | None = None) -> np.ndarray:
        price = np.array([(coefficients or self.coefficients)[k] for k in COEFFICIENTS])
        return features(total_params, active_params, sparsity, experts) @ price

    def tokens_per_s(self, total_params, active_params, sparsity, experts,
                     coefficients: dict[str, float] | None = None) -> np.ndarray:
        return 1.0 / self.seconds_per_token(total_params, active_params, sparsity, experts,
                                            coefficients)

    def ci(self, level: float = 0.95) -> dict[str, list[float]]:
        if not self.replicates:
            return {}
        return {k: list(percentile_interval([r[k] for r in self.replicates], level))
                for k in COEFFICIENTS}

    def record(self) -> ThroughputModelRecord:
        """The model as throughput.json stores it."""
        return ThroughputModelRecord(
            form=FORM, coefficients=self.coefficients, ci=self.ci(),
            bootstrap=ThroughputBootstrap(len(self.replicates), self.replicates),
            tokens_per_step=self.tokens_per_step, n_rows=self.n_rows, source=self.source)


@dataclass
class ThroughputBootstrap:
    """The bootstrap refits of a throughput model, resampling whole shapes."""

    replicates: int
    """Resamples of the distinct shapes fitted."""
    coefficients: list[dict[str, float]]
    """Each resample's prices."""


@dataclass
class ThroughputModelRecord:
    """A fitted ``ThroughputModel`` as a file holds it: its form in words, the prices with
    their 95 % intervals and the bootstrap refits."""

    form: str
    """The model's formula in words."""
    coefficients: dict[str, float]
    """The fitted prices (c, a, m, p, e) by name."""
    ci: dict[str, list[float]]
    """Their bootstrap 95 % intervals."""
    bootstrap: ThroughputBootstrap
    """The bootstrap refits."""
    tokens_per_step: float | None
    """The batch the model was measured at (its p and e terms hold for it alone)."""
    n_rows: int
    """Rows fitted."""
    source: str
    """The table it was fitted to."""

    def model(self) -> ThroughputModel:
        return ThroughputModel(self.coefficients, self.bootstrap.coefficients,
                               self.tokens_per_step, self.n_rows, self.source)


# --------------------------------------------------------------------------------------------
# Fitting
# --------------------------------------------------------------------------------------------


def fit_throughput(rows: list[ThroughputRow], *, bootstrap_replicates: int = DEFAULT_BOOTSTRAP,
                   seed: int = 0, source: str = "the throughput table") -> ThroughputModel:
    """Non-negative least squares of relative seconds-per-token residuals, plus a bootstrap over
    the distinct shapes (each resampled shape brings all its rows)."""
    check_identifiable(rows, source)
    X, seconds = _design(rows)
    coefficients = _nnls_relative(X, seconds)
    rng = np.random.default_rng(seed)
    shapes = _rows_by_shape(rows)
    dense = [indices for key, indices in shapes.items() if key[2] == 0]
    sparse = [indices for key, indices in shapes.items() if key[2] > 0]
    replicates = []
    for _ in range(bootstrap_replicates):
        picked = ([dense[i] for i in rng.integers(len(dense), size=len(dense))]
                  + [sparse[i] for i in rng.integers(len(sparse), size=len(sparse))])
        pick = np.concatenate(picked)
        replicates.append(_nnls_relative(X[pick], seconds[pick]))
    steps = {row.tokens_per_step for row in rows}
    return ThroughputModel(coefficients, replicates, steps.pop() if len(steps) == 1 else None,
                           len(rows), source)


def _rows_by_shape(rows: list[ThroughputRow]) -> dict[tuple, np.ndarray]:
    """Row indices per distinct shape (N_total, N_active, S, E), in first-seen order."""
    shapes: dict[tuple, list[int]] = {}
    for index, row in enumerate(rows):
        shapes.setdefault((row.N_total, row.N_active, row.S, row.E), []).append(index)
    return {key: np.array(indices) for key, indices in shapes.items()}


def _design(rows: list[ThroughputRow]) -> tuple[np.ndarray, np.ndarray]:
    column = {key: np.array([getattr(row, key) for row in rows], dtype=np.float64)
              for key in REQUIRED_COLUMNS}
    X = features(column["N_total"], column["N_active"], column["S"], column["E"])
    return X, 1.0 / column["tokens_per_s"]


def _nnls_relative(X: np.ndarray, seconds: np.ndarray) -> dict[str, float]:
    """min sum ((X beta - t) / t)^2 over beta >= 0, with the columns scaled to comparable size
    (F is ~1e6 times E) so that the solver's tolerances mean the same for every term."""
    weighted = X / seconds[:, None]
    scale = np.max(np.abs(weighted), axis=0)
    scale[scale == 0] = 1.0
    beta, _ = scipy.optimize.nnls(weighted / scale, np.ones(len(seconds)))
    return dict(zip(COEFFICIENTS, (beta / scale).tolist()))


def check_identifiable(rows: list[ThroughputRow], source: str) -> None:
    """Refuse a table that cannot separate the five terms, on one line naming what is missing."""
    if len(rows) < len(COEFFICIENTS) + 1:
        raise MoelabError(f"{source}: {len(rows)} rows are too few for the throughput model's "
                          f"{len(COEFFICIENTS)} terms: need {len(COEFFICIENTS) + 1} or more")
    sparsities = np.array([row.S for row in rows])
    if not (sparsities == 0).any() or not (sparsities > 0).any():
        kind = "dense (S = 0)" if not (sparsities == 0).any() else "sparse (S > 0)"
        raise MoelabError(f"{source}: no {kind} row: the throughput model compares MoE and dense "
                          f"steps, so the table needs both")
    sparse_experts = {row.E for row in rows if row.S > 0}
    if len(sparse_experts) < 2:
        raise MoelabError(f"{source}: every sparse row has E = {sparse_experts.pop():g}: the "
                          "per-expert cost needs 2 or more sparse sparsities (E values)")
    steps = {row.tokens_per_step for row in rows}
    if len(steps) > 1:
        raise MoelabError(f"{source}: rows were timed at different tokens per step "
                          f"({', '.join(str(s) for s in sorted(steps, key=str))}): per-step costs "
                          "differ per token at another batch; use one batch shape")
    X, _seconds = _design(rows)
    if np.linalg.matrix_rank(X / np.max(np.abs(X), axis=0)) < len(COEFFICIENTS):
        raise MoelabError(f"{source}: the rows cannot separate the throughput model's terms "
                          "(per-FLOP, MoE per-FLOP, per-parameter, per-expert, constant): time 2 "
                          "or more sizes and 2 or more sparse sparsities")


# --------------------------------------------------------------------------------------------
# Tables: reading and checking
# --------------------------------------------------------------------------------------------


def read_throughput_table(path: str | Path) -> tuple[list[ThroughputRow], dict]:
    """(rows, header fields) of a throughput table: a JSON file from ``moelab throughput`` or a
    CSV (``moelab throughput --out x.csv``, or a sweep's results.csv). Checked on one line."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise MoelabError(f"cannot read throughput table {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise MoelabError(f"throughput table {path} is not UTF-8 text (byte {exc.start})") from None
    if path.suffix == ".json":
        raw_rows, header = _json_rows(path, text)
    else:
        raw_rows, header = _csv_rows(path, text), {}
    if not raw_rows:
        raise MoelabError(f"throughput table {path} has no rows: expected one row per timed shape")
    return [_checked_row(path, index, row) for index, row in enumerate(raw_rows)], header


def _json_rows(path: Path, text: str) -> tuple[list, dict]:
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        raise MoelabError(f"throughput table {path} is not JSON: expected the output of "
                          "moelab throughput --out FILE.json") from None
    if not isinstance(record, dict) or not isinstance(record.get("rows"), list):
        raise MoelabError(f"throughput table {path} is invalid: expected a mapping with a list "
                          "'rows' (moelab throughput --out FILE.json)")
    return record["rows"], {k: v for k, v in record.items() if k != "rows"}


def _csv_rows(path: Path, text: str) -> list[dict]:
    header, rows = csv_records(text.splitlines(), f"throughput table {path}")
    missing = [key for key in REQUIRED_COLUMNS if key not in header]
    if missing:
        raise MoelabError(f"throughput table {path}: column {short_repr(missing[0])} is missing: a table "
                          f"needs {', '.join(REQUIRED_COLUMNS)}")
    return rows


def _checked_row(path: Path, index: int, row) -> ThroughputRow:
    where = f"throughput table {path} row {index + 1}"
    if not isinstance(row, dict):
        raise MoelabError(f"{where} is invalid: expected a mapping of column names to values")
    checked: dict[str, Any] = {}
    for key in REQUIRED_COLUMNS + ("k", "tokens_per_step"):
        value = row.get(key)
        if key in ("k", "tokens_per_step") and value in (None, ""):
            continue
        try:
            if value is None:
                raise TypeError(key)
            number = float(value)
        except (TypeError, ValueError):
            raise MoelabError(f"{where}: {key}={short_repr(value)} is invalid: expected a number") from None
        if not math.isfinite(number) or (key != "S" and number <= 0) or \
                (key == "S" and not 0 <= number < 1):
            allowed = "[0, 1)" if key == "S" else "a finite number > 0"
            raise MoelabError(f"{where}: {key}={short_repr(value)} is invalid: allowed {allowed}")
        checked[key] = number
    checked_row = ThroughputRow(**checked)
    if checked_row.N_active > checked_row.N_total:
        raise MoelabError(f"{where}: N_active={checked_row.N_active:g} is invalid: more than "
                          f"N_total={checked_row.N_total:g}")
    return checked_row


def per_shape_means(rows: list[ThroughputRow]) -> list[ShapeThroughput]:
    """One row per (N_total, S): the median tokens/s and step time of its runs (a sweep has one
    per budget) and the largest peak memory; the rest is its first run's."""
    groups: dict[tuple, list[ThroughputRow]] = {}
    for row in rows:
        groups.setdefault((row.N_total, row.S), []).append(row)
    shapes = []
    for _, group in sorted(groups.items()):
        first = {f.name: getattr(group[0], f.name) for f in fields(ThroughputRow)}
        shape = ShapeThroughput(**first, runs=len(group))
        shape.tokens_per_s = float(np.median([r.tokens_per_s for r in group]))
        if all(r.step_time_s for r in group):
            shape.step_time_s = float(np.median([r.step_time_s for r in group]))
        if all(r.peak_memory_bytes for r in group):
            shape.peak_memory_bytes = max(r.peak_memory_bytes or 0.0 for r in group)
        shapes.append(shape)
    return shapes


def family_throughput(model: ThroughputModel, shared_fraction: float, top_k: int,
                      coefficients: dict[str, float] | None = None):
    """tokens/s(N, S) over the architecture family of ``moelab.scaling.family``: N_active from
    the shared fraction, E = k / (1 - S)."""
    def tokens_per_s(total_params, sparsity):
        total, sparsity = np.broadcast_arrays(np.asarray(total_params, dtype=np.float64),
                                              np.asarray(sparsity, dtype=np.float64))
        return model.tokens_per_s(total, active_params(total, sparsity, shared_fraction),
                                  sparsity, top_k / (1.0 - sparsity), coefficients)

    return tokens_per_s


def table_top_k(rows: list[ThroughputRow], source: str) -> int:
    """The table's one k (top-k experts per token); 1 when the table has no k column."""
    values = {int(row.k) for row in rows if row.k is not None and row.S > 0}
    if len(values) > 1:
        raise MoelabError(f"{source}: rows have several top_k ({', '.join(map(str, sorted(values)))}):"
                          " pass --top-k K for the family to read off")
    return values.pop() if values else 1


def moe_versus_dense(rows: Sequence[ThroughputRow]) -> list[DenseComparison]:
    """Per sparse row, two measured ratios (no model): its tokens/s over the dense model of the
    same total size (nearest dense N_total within 5 %), and its step time over a dense step of
    equal FLOPs (the dense rows' seconds per token interpolated log-log at its N_active; None
    outside the dense rows' range)."""
    dense = sorted((row for row in rows if row.S == 0), key=lambda r: r.N_active)
    log_active = np.log([row.N_active for row in dense])
    log_seconds = np.log([1.0 / row.tokens_per_s for row in dense])
    ratios = []
    for row in rows:
        if row.S == 0:
            continue
        same_size = min(dense, key=lambda d: abs(math.log(d.N_total / row.N_total)), default=None)
        vs_size = (row.tokens_per_s / same_size.tokens_per_s if same_size and
                   abs(math.log(same_size.N_total / row.N_total)) < 0.05 else None)
        inside = len(dense) >= 2 and log_active[0] <= math.log(row.N_active) <= log_active[-1]
        equal_flops = (float(np.exp(np.interp(math.log(row.N_active), log_active, log_seconds)))
                       if inside else None)
        ratios.append(DenseComparison(
            row.N_total, row.N_active, row.S, row.E, tokens_per_s_vs_same_size_dense=vs_size,
            step_time_vs_equal_flops_dense=(1.0 / row.tokens_per_s) / equal_flops
            if equal_flops else None))
    return ratios
