"""A fit as a JSON-able record: parameters, objective, intervals, held-out error, and back again.

``fit_columns`` is what ``moelab fit`` runs; its dict is the ``--json`` output and the FIT.json
that ``moelab optimal`` reads:

    {"law", "params": {...}, "objective", "n_points", "ci": {name: [low, high]},
     "derived": {...}, "holdout": {...} | null, "bootstrap": {"replicates", "seed", "params": [...]},
     "num_starts", "theta": {...}}
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from moelab.errors import MoelabError
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


def fit_columns(law_name: str, columns: dict[str, np.ndarray], *, bootstrap_replicates: int = 0,
                holdout: str | None = None, max_starts: int | None = None, seed: int = 0) -> dict:
    """Fit, optionally bootstrap and hold out, and return the JSON-able record."""
    law = get_law(law_name)
    record: dict = {"law": law.name}
    fit_points = columns
    heldout_points = None
    if holdout:
        mask = holdout_mask(columns, holdout)
        fit_points, heldout_points = select(columns, ~mask), select(columns, mask)
    fit = fit_law(law, fit_points, max_starts=max_starts)
    params = fit.params
    record.update(params=params, objective=fit.objective, n_points=fit.n_points,
                  num_starts=fit.num_starts,
                  theta=dict(zip(law.param_names, map(float, fit.theta))),
                  derived=derived_quantities(law, params), ci={}, holdout=None, bootstrap=None)
    if bootstrap_replicates:
        bootstrap(fit, fit_points, bootstrap_replicates, seed=seed)
        record["ci"] = _intervals(fit)
        record["bootstrap"] = {"replicates": bootstrap_replicates, "seed": seed,
                               "params": fit.bootstrap_params()}
    if heldout_points is not None:
        record["holdout"] = heldout_error(law, params, heldout_points, holdout)
    return record


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
                  spec: str) -> dict:
    """How well the fit predicts points it never saw."""
    columns = {key: points[key] for key in ("N", "D", "S") if key in points}
    predicted = law.predict_loss(params, **columns)
    actual = points["loss"]
    relative = (predicted - actual) / actual
    return {
        "spec": spec,
        "n_points": int(len(actual)),
        "mean_abs_error": float(np.mean(np.abs(predicted - actual))),
        "mean_abs_log_error": float(np.mean(np.abs(np.log(predicted) - np.log(actual)))),
        "rmse_loss": float(np.sqrt(np.mean((predicted - actual) ** 2))),
        "max_abs_relative_error": float(np.max(np.abs(relative))),
        "points": [
            {**{key: float(points[key][i]) for key in columns}, "loss": float(actual[i]),
             "predicted": float(predicted[i])}
            for i in range(len(actual))
        ],
    }


def load_fit(path: str | Path) -> tuple[Law, dict[str, float], list[dict[str, float]], dict]:
    """(law, params, bootstrap params, whole record) from a FIT.json written by ``moelab fit --json``."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MoelabError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError:
        raise MoelabError(f"{path} is not JSON: expected the output of moelab fit --json") from None
    if not isinstance(record, dict) or "law" not in record or "params" not in record:
        raise MoelabError(f"{path} is not a fit: expected keys 'law' and 'params' (moelab fit --json)")
    law = get_law(record["law"])
    params = record["params"]
    missing = [name for name in law.natural_params(np.zeros(law.num_params)) if name not in params]
    if missing:
        raise MoelabError(f"{path}: params lack {', '.join(missing)} for the {law.name} law")
    replicas = (record.get("bootstrap") or {}).get("params") or []
    return law, params, replicas, record
