"""A fit as a typed record: parameters, objective, intervals, held-out error, and back again.

``fit_columns`` is what ``moelab fit`` runs (after ``check_identifiable``); its ``LawFit`` is,
through ``moelab.codec.to_json``, the ``--json`` output and the FIT.json that ``moelab optimal``
reads back, checked, as a ``FitFile`` (``load_fit``):

    {"law", "params": {...}, "objective", "n_points", "num_starts", "theta": {...},
     "derived": {...}, "ci": {name: [low, high]}, "holdout": {...} | null,
     "bootstrap": {"replicates", "seed", "params": [...]} | null,
     "data_ranges": {"N": [low, high], "N_active": [low, high]}}   (fits since it was added)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from moelab.fileio import read_json
from moelab.errors import MoelabError, short_repr
from moelab.scaling.fitting import FitResult, bootstrap, fit_law, percentile_interval
from moelab.scaling.laws import Law, get_law
from moelab.scaling.table import holdout_mask, select


def derived_quantities(law: Law, params: dict[str, float]) -> dict[str, float]:
    """Closed-form consequences of a fit (Chinchilla: N* ~ C^a, D* ~ C^b with a + b = 1)."""
    if law.name == "chinchilla":
        total = params["alpha"] + params["beta"]
        return {"a_params_exponent": params["beta"] / total,
                "b_tokens_exponent": params["alpha"] / total}
    return {}


OMIT_NONE = {"omit_none": True}


@dataclass(kw_only=True)
class HeldoutPoint:
    """A held-out point beside the loss the fit predicts for it."""

    N: float
    """Its parameter count (the law's N column)."""
    D: float
    """Its training tokens."""
    S: float | None = field(default=None, metadata=OMIT_NONE)
    """Only for a law with a sparsity term."""
    E: float | None = field(default=None, metadata=OMIT_NONE)
    """Its routed experts, for a law that reads them."""
    G: float | None = field(default=None, metadata=OMIT_NONE)
    """Its granularity, for a law that reads it."""
    N_active: float | None = field(default=None, metadata=OMIT_NONE)
    """Its active parameters, for a law that reads them."""
    loss: float
    """Its measured loss."""
    predicted: float
    """The loss the fit predicts for it."""


@dataclass
class HeldoutError:
    """How well a fit predicts points it never saw (``--holdout SPEC``)."""

    spec: str
    """Which points were held out (``--holdout SPEC``, e.g. the largest budget)."""
    n_points: int
    """Points held out."""
    mean_abs_error: float
    """Mean |predicted - actual| loss, nats."""
    mean_abs_log_error: float
    """Mean |log predicted - log actual|."""
    rmse_loss: float
    """Root mean square of predicted - actual loss."""
    max_abs_relative_error: float
    """The largest |predicted / actual - 1|."""
    points: list[HeldoutPoint]
    """Each held-out point with its prediction."""


@dataclass
class FitBootstrap:
    """The bootstrap refits behind a fit's intervals."""

    replicates: int
    """Bootstrap resamples fitted."""
    seed: int
    """The resampling seed."""
    params: list[dict[str, float]]
    """Each resample's fitted parameters."""


@dataclass
class LawFit:
    """A law fitted to points: what ``moelab fit --json`` prints and FIT.json holds."""

    law: str
    """The law's name (``moelab.scaling.laws``, e.g. chinchilla or a sparsity form)."""
    params: dict[str, float]
    """The fitted parameters by name, in the law's own units."""
    objective: float
    """Summed Huber loss of the log residuals at the fit."""
    n_points: int
    """Points fitted."""
    num_starts: int
    """Starting points of the fit (the law's grid, or a seeded subset of --starts K)."""
    theta: dict[str, float]
    """The parameters in the fit's log space, by ``law.param_names``."""
    derived: dict[str, float]
    """Closed-form consequences of the fit (Chinchilla's a and b exponents of N* and D*); {} for
    other laws."""
    ci: dict[str, list[float]]
    """95 % intervals by parameter name; empty without bootstrap resamples."""
    holdout: HeldoutError | None
    """How it predicts the points held out of the fit; null without a holdout."""
    bootstrap: FitBootstrap | None
    """The bootstrap resamples behind ci; null without them."""
    data_ranges: dict[str, list[float]] | None = field(default=None, metadata=OMIT_NONE)
    """[lowest, highest] of the fitted points' N (total parameters) and, where the table has
    it, N_active: ``moelab optimal`` says when an optimum lies outside them. Absent in records
    written before it was kept."""

    @property
    def replicas(self) -> list[dict[str, float]]:
        """The bootstrap fits' parameters (empty without resamples)."""
        return self.bootstrap.params if self.bootstrap else []


def fit_columns(law_name: str, columns: dict[str, np.ndarray], *, bootstrap_replicates: int = 0,
                holdout: str | None = None, max_starts: int | None = None,
                seed: int = 0) -> LawFit:
    """Fit, optionally bootstrap and hold out, and return the record."""
    law = get_law(law_name)
    fit_points = columns
    heldout_points = None
    if holdout:
        mask = holdout_mask(columns, holdout)
        fit_points, heldout_points = select(columns, ~mask), select(columns, mask)
    fit = fit_law(law, fit_points, max_starts=max_starts)
    params = fit.params
    record = LawFit(law=law.name, params=params, objective=fit.objective, n_points=fit.n_points,
                    num_starts=fit.num_starts,
                    theta=dict(zip(law.param_names, map(float, fit.theta))),
                    derived=derived_quantities(law, params), ci={}, holdout=None,
                    bootstrap=None, data_ranges=data_ranges(fit_points))
    if bootstrap_replicates:
        bootstrap(fit, fit_points, bootstrap_replicates, seed=seed)
        record.ci = _intervals(fit)
        record.bootstrap = FitBootstrap(bootstrap_replicates, seed, fit.bootstrap_params())
    if holdout and heldout_points is not None:
        record.holdout = heldout_error(law, params, heldout_points, holdout)
    return record


RANGE_COLUMNS = ("N", "N_active")
"""The columns whose range a fit record keeps (``LawFit.data_ranges``)."""
WIDE_INTERVAL_FACTOR = 10.0
"""A 95 % interval wider than this many times its estimate's size says the data do not
identify the parameter (``wide_intervals``)."""


def data_ranges(columns: dict[str, np.ndarray]) -> dict[str, list[float]]:
    """[lowest, highest] of each of ``RANGE_COLUMNS`` the fitted points have."""
    return {name: [float(np.min(columns[name])), float(np.max(columns[name]))]
            for name in RANGE_COLUMNS if name in columns and len(columns[name])}


def wide_intervals(fit: LawFit) -> list[str]:
    """The parameters (and derived quantities) whose 95 % interval is wider than
    ``WIDE_INTERVAL_FACTOR`` times the size of their estimate: these data do not pin them down
    (an estimate of 0 with an interval of any width counts)."""
    values = {**fit.params, **fit.derived}
    return [name for name, (low, high) in fit.ci.items()
            if name in values and high - low > WIDE_INTERVAL_FACTOR * abs(values[name])]


def _intervals(fit: FitResult) -> dict[str, list[float]]:
    replicas = fit.bootstrap_params()
    derived = [derived_quantities(fit.law, p) for p in replicas]
    ci = {}
    for name in replicas[0]:
        ci[name] = list(percentile_interval([p[name] for p in replicas]))
    for name in derived[0] if derived else []:
        ci[name] = list(percentile_interval([d[name] for d in derived]))
    return ci


def heldout_error(law: Law, params: dict[str, float], points: dict[str, np.ndarray],
                  spec: str) -> HeldoutError:
    """How well the fit predicts points it never saw."""
    columns = {key: points[key] for key in law.columns}
    # S whenever the points have it (a sweep's report lists held-out points by S).
    shown = {key: points[key] for key in ("N", "D", "S", *law.columns) if key in points}
    predicted = law.predict_loss(params, **columns)
    actual = points["loss"]
    relative = (predicted - actual) / actual
    return HeldoutError(
        spec=spec, n_points=int(len(actual)),
        mean_abs_error=float(np.mean(np.abs(predicted - actual))),
        mean_abs_log_error=float(np.mean(np.abs(np.log(predicted) - np.log(actual)))),
        rmse_loss=float(np.sqrt(np.mean((predicted - actual) ** 2))),
        max_abs_relative_error=float(np.max(np.abs(relative))),
        points=[HeldoutPoint(**{key: float(values[i]) for key, values in shown.items()},
                             loss=float(actual[i]), predicted=float(predicted[i]))
                for i in range(len(actual))],
    )


@dataclass
class FitFile:
    """A FIT.json as ``moelab optimal`` uses it, read and checked once (``load_fit``)."""

    law: Law
    params: dict[str, float]
    replicas: list[dict[str, float]]
    """The bootstrap fits' parameters (empty without resamples)."""
    shared_fraction: float | None
    """The fit's own estimate of the share of parameters outside the experts; None when it
    stores none (a sweep of dense runs only has nothing to estimate it from)."""
    data_ranges: dict[str, list[float]] = field(default_factory=dict)
    """[lowest, highest] of the fitted points' N and N_active (``LawFit.data_ranges``); empty
    for a record written before fits kept them."""


SCALE_EXPONENTS = ("alpha", "beta", "gamma")
"""The exponents of N and D in every law: at or below 0 the loss would not fall with size or
data, and every optimum would sit at the edge of the search."""


def load_fit(path: str | Path) -> FitFile:
    """A FIT.json written by ``moelab fit --json`` (or a sweep), checked before use: UTF-8 JSON
    whose parameters, and bootstrap replicas, are finite numbers (a NaN exponent would print
    ``loss = nan``), with every parameter of its law."""
    path = Path(path)
    if path.is_dir():  # a sweep folder: its fit of the chosen law form
        if not (path / "fit.json").is_file():
            raise MoelabError(f"{path} has no fit.json: its sweep identified no law form (see "
                              "its report.md, 'Law form'), so there is no fit to read optima from")
        path = path / "fit.json"
    record = _read_fit_record(path)
    if isinstance(record, dict) and "forms" in record and "chosen" in record:
        chosen = record["chosen"]
        raise MoelabError(
            f"{path} compares law forms, it is not a fit: "
            + (f"the chosen form's fit ({chosen}) is fit.json beside it" if chosen else
               "none was identified, so there is no fit to read optima from"))
    if not isinstance(record, dict):
        raise MoelabError(f"{path} is not a fit: expected keys 'law' and 'params' (moelab fit --json)")
    _check_fit_numbers(record, path)
    if "law" not in record or "params" not in record:
        raise MoelabError(f"{path} is not a fit: expected keys 'law' and 'params' (moelab fit --json)")
    law = get_law(record["law"])
    params = record["params"]
    missing = [name for name in law.natural_params(np.zeros(law.num_params)) if name not in params]
    if missing:
        raise MoelabError(f"{path}: params lack {', '.join(missing)} for the {law.name} law")
    replicas = (record.get("bootstrap") or {}).get("params") or []
    return FitFile(law, params, replicas, record.get("shared_fraction"),
                   _checked_ranges(record.get("data_ranges"), path))


def _checked_ranges(ranges, path: Path) -> dict[str, list[float]]:
    if ranges is None:
        return {}
    if not isinstance(ranges, dict):
        raise MoelabError(f"{path}: data_ranges={short_repr(ranges)} is invalid: expected a "
                          "mapping of column names to [low, high] or null")
    for name, pair in ranges.items():
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                        and math.isfinite(v) and v > 0 for v in pair) and pair[0] <= pair[1]):
            raise MoelabError(f"{path}: data_ranges.{name}={short_repr(pair)} is invalid: "
                              "expected [low, high], positive finite numbers, low <= high")
    return {name: [float(low), float(high)] for name, (low, high) in ranges.items()}


def _read_fit_record(path: Path):
    try:
        return read_json(path)
    except OSError as exc:
        raise MoelabError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise MoelabError(f"{path} is not UTF-8 text (byte {exc.start}): expected the output "
                          f"of moelab fit --json") from None
    except (ValueError, RecursionError):
        raise MoelabError(f"{path} is not JSON: expected the output of moelab fit --json") from None


def _check_fit_numbers(record: dict, path: Path) -> None:
    """The parameters, the bootstrap replicas and the shared fraction of a fit record."""
    if "params" in record:
        _check_params(record["params"], "params", path)
        check_scale_exponents(record["params"], path)
    bootstrap = record.get("bootstrap")
    if bootstrap is not None and not isinstance(bootstrap, dict):
        raise MoelabError(f"{path}: bootstrap is invalid: expected a mapping or null")
    replicas = (bootstrap or {}).get("params")
    if replicas is not None:
        if not isinstance(replicas, list):
            raise MoelabError(f"{path}: bootstrap.params is invalid: expected a list of fits")
        for index, replica in enumerate(replicas):
            _check_params(replica, f"bootstrap.params[{index}]", path)
    shared = record.get("shared_fraction")
    if shared is not None and (isinstance(shared, bool) or not isinstance(shared, (int, float))
                               or not 0 <= shared <= 1):
        raise MoelabError(f"{path}: shared_fraction={short_repr(shared)} is invalid: allowed [0, 1] or null")


def _check_params(params, where: str, path: Path) -> None:
    if not isinstance(params, dict):
        raise MoelabError(f"{path}: {where}={short_repr(params)} is invalid: expected a mapping of "
                          f"parameter names to numbers")
    for name, value in params.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise MoelabError(f"{path}: {where}.{name}={short_repr(value)} is invalid: expected a "
                              f"finite number")


def check_scale_exponents(params: dict, path: Path) -> None:
    for name in SCALE_EXPONENTS:
        value = params.get(name)
        if value is not None and value <= 0:
            raise MoelabError(f"{path}: params.{name}={short_repr(value)} is invalid: allowed > 0 (the "
                              "loss must fall with parameters and tokens for an optimum to exist)")


def check_identifiable(law_name: str, columns: dict, holdout: str | None, csv_path: str) -> None:
    """Refuse a table the law cannot be identified from (the fit would report a perfect
    objective and meaningless parameters): the loss must vary, every variable of the law must
    take at least two values, and there must be more distinct points than parameters."""
    law = get_law(law_name)
    if holdout:
        columns = select(columns, ~holdout_mask(columns, holdout))
    used = list(law.columns)
    where = f"{csv_path}" + (f" (without --holdout {holdout})" if holdout else "")
    loss = np.asarray(columns["loss"], dtype=float)
    if np.ptp(loss) == 0:
        raise MoelabError(f"{where}: every loss is {loss[0]:g}: a table without loss variation "
                          f"cannot identify the {law.name} law")
    for name in used:
        distinct = np.unique(columns[name])
        if len(distinct) < 2:
            raise MoelabError(f"{where}: {name} takes one value ({distinct[0]:g}): the {law.name} "
                              f"law's {name} term cannot be identified; vary {name} across runs")
    points = len({tuple(row) for row in np.column_stack([columns[name] for name in used])})
    if points <= law.num_params:
        raise MoelabError(f"{where}: too few distinct ({', '.join(used)}) points for the "
                          f"{law.name} law: {points} for {law.num_params} parameters; allowed "
                          f"{law.num_params + 1} or more (more points than parameters)")
