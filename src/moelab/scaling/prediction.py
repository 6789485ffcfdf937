"""Predicting runs not yet trained, with a prediction interval: ``moelab predict``.

A prediction fits a form (a law, or the IsoFLOP parabolas: ``prediction_forms``) to a sweep's
runs and reads off the loss of target cells (a budget C or D, a total size N, a sparsity S),
the best sparsity among each size's targets, and the compute-optimal (N*, S*) at C.

**The interval** is for what the target will measure: the mean best validation loss of
``seeds`` new runs of the cell. Its variance has three parts, each recorded per cell:

- *parameters*: the spread of the cell's prediction over refits of the sweep with every cell's
  seeds (wsd families: a seed's budgets share a trunk) drawn with replacement
  (``prediction_data.family_bootstrap_weights``), each seed's deviation from its point's mean
  scaled by sqrt(n / (n - 1)); the sd is read robustly off the 5 % and 95 % quantiles
  ((q95 - q05) / 3.29), so a few runaway refits do not decide it;
- *misfit*: how far the sweep's own point means sit from the fit beyond what their seeds'
  noise explains: max(0, sum r^2 / (points - parameters) - mean(noise^2 / seeds)); a form
  that misses the points it was fitted on will miss a new one by at least as much;
- *noise*: the seeds' pooled scatter at the cell's sparsity (``prediction_data.seed_noise``),
  divided by the seeds the cell will have;
- *extrapolation* (optional, ``Extrapolation``): what a rollout on the same sweep found beyond
  the three parts above when its largest budget was left out and predicted from the rest
  (``moelab.scaling.rollout``): max(0, mean error^2 - mean predicted variance) over the cells
  left out. It is measured at the sweep's own budget ratio, and a target farther out may need
  more.

The interval is prediction +- t(0.95, df) sqrt(parameters^2 + misfit^2 + noise^2 / seeds
+ extrapolation^2), df
the noise estimate's degrees of freedom (the residuals' when the sweep has one seed: the misfit
then stands for noise and misfit together). It does not include what the sweep cannot show:
that the form bends differently beyond the budgets fitted, a change of machine or code (MoE
runs on another CPU differ by more than their seeds), or a learning rate that would be
re-tuned at the new budget (docs/explanation/prediction.md, "Predicting your next budget").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from moelab.errors import MoelabError
from moelab.scaling.family import estimate_shared_fraction
from moelab.scaling.fit_record import FitFile
from moelab.scaling.optimal import compute_optimal
from moelab.scaling.prediction_data import SeedNoise, SweepRuns, family_bootstrap_weights, seed_noise
from moelab.scaling.prediction_forms import (
    LawForecaster, ParabolaForecaster, Targets, forecaster,
)

LEVEL = 0.90
QUANTILE_SPREAD = 2 * stats.norm.ppf(0.95)
"""(q95 - q05) of a normal is this many sds."""
PREDICTIVE_DRAWS = 20
"""Noise draws per bootstrap replicate for the shares of each sparsity being best."""
MIN_FINITE_SHARE = 0.9


@dataclass
class TargetCell:
    label: str
    size: str
    params_total: float
    params_active: float
    sparsity: float
    budget: float
    """C (FLOPs) for a FLOPs sweep, D (tokens) for a tokens sweep."""
    tokens: float


@dataclass
class CellPrediction:
    cell: TargetCell
    loss: float
    """The full fit's prediction."""
    interval: list[float] | None
    """The LEVEL prediction interval for the mean of ``seeds`` runs; None when fewer than
    MIN_FINITE_SHARE of the refits give a finite prediction."""
    seeds: int
    parameter_sd: float
    misfit_sd: float
    noise_sd: float
    df: int
    finite_share: float
    extrapolation_sd: float = 0.0


@dataclass
class SparsityChoice:
    """Among one size's target cells, the sparsity of lowest predicted loss."""

    size: str
    sparsity: float
    shares: dict[float, float] = field(metadata={"key_format": "g"})
    """S -> share of predictive draws (refits plus noise for ``seeds`` runs) in which it is
    lowest: how often the measured means would put S* there if the prediction is right."""


@dataclass
class OptimumPrediction:
    """The compute-optimal model at ``flops``: S*, N* and its loss, with LEVEL intervals."""

    flops: float
    sparsity: float
    sparsity_interval: list[float] | None
    params_total: float
    params_interval: list[float] | None
    loss: float
    bound: str | None
    """Set when S* sits on an edge: then it is a bound, not an estimate."""
    shared_fraction: float


@dataclass
class Extrapolation:
    """The error a rollout found beyond the predicted sd: the largest budget of the same runs
    left out and predicted from the rest."""

    held_out_budget: float
    ratio: float
    """The held-out budget over the largest budget its fit saw."""
    cells: int
    rms_error: float
    rms_predicted_sd: float
    sd: float
    """sqrt(max(0, rms_error^2 - rms_predicted_sd^2))."""


@dataclass
class Prediction:
    form: str
    formula: str
    level: float
    source: str
    data_hash: str
    """sha256 of the fitted rows (``SweepRuns.data_hash``)."""
    runs: int
    families: int
    excluded: list[str]
    budget_kind: str
    budgets_fitted: list[float]
    params: dict[str, float]
    bootstrap: int
    seed: int
    noise: SeedNoise
    misfit_sd: float
    cells: list[CellPrediction]
    sparsity_choices: list[SparsityChoice]
    optima: list[OptimumPrediction]
    command: str = ""
    """The command that trains the targets, for a pre-registered prediction."""
    extrapolation: Extrapolation | None = None
    notes: list[str] = field(default_factory=list)


def predicted_sd(cell: CellPrediction, seeds: int, with_extrapolation: bool = True) -> float:
    """The sd of the mean of ``seeds`` runs about the cell's prediction."""
    extrapolation = cell.extrapolation_sd if with_extrapolation else 0.0
    return float(np.sqrt(cell.parameter_sd ** 2 + cell.misfit_sd ** 2 + extrapolation ** 2
                         + cell.noise_sd ** 2 / max(seeds, 1)))


def cell_interval(cell: CellPrediction, seeds: int, level: float = LEVEL,
                  with_extrapolation: bool = True) -> list[float]:
    """The cell's interval for the mean of ``seeds`` runs (the score's, when fewer trained)."""
    half = stats.t.ppf(0.5 + level / 2, max(cell.df, 1)) * predicted_sd(cell, seeds,
                                                                          with_extrapolation)
    return [cell.loss - float(half), cell.loss + float(half)]


def predict(runs: SweepRuns, form: str, cells: list[TargetCell], *, flops: list[float],
            seeds: int = 3, bootstrap: int = 200, seed: int = 0, max_starts: int | None = None,
            source: str = "", excluded: list[str] | None = None,
            extrapolation: Extrapolation | None = None) -> Prediction:
    """Fit ``form`` to ``runs`` and predict ``cells`` and the compute-optimal model at each of
    ``flops``."""
    if bootstrap < 10:
        raise MoelabError(f"--bootstrap {bootstrap} is invalid: a prediction interval needs "
                          ">= 10 refits")
    model = forecaster(form, max_starts)
    params = model.fit(runs)
    replicas = model.refit(runs, family_bootstrap_weights(runs, bootstrap, seed))
    noise = seed_noise(runs)
    misfit, residual_df = _misfit(model, params, runs, noise)
    targets = _targets(cells)
    point = model.predict(params, targets)
    draws = np.array([model.predict(r, targets) for r in replicas])
    extra_sd = extrapolation.sd if extrapolation else 0.0
    predicted = [_cell(c, point[i], draws[:, i], misfit, residual_df, noise, seeds, extra_sd)
                 for i, c in enumerate(cells)]
    record = Prediction(
        form=model.name, formula=model.formula, level=LEVEL, source=source,
        data_hash=runs.data_hash(), runs=len(runs), families=len(set(runs.family.tolist())),
        excluded=list(excluded or []), budget_kind=runs.budget_kind,
        budgets_fitted=runs.budgets(), params=_natural(model, params), bootstrap=bootstrap,
        seed=seed, noise=noise, misfit_sd=misfit, cells=predicted,
        sparsity_choices=_sparsity_choices(predicted, draws, seed),
        optima=[_optimum(model, params, replicas, runs, c) for c in flops],
        extrapolation=extrapolation,
    )
    record.notes = _notes(record, runs)
    return record


def predict_from_fit(fit: FitFile, cells: list[TargetCell], *, flops: list[float], seeds: int,
                     source: str, data_hash: str, noise_sd: float | None = None,
                     noise_df: int = 0) -> Prediction:
    """A prediction from a FIT.json alone (``moelab fit --out``): the parameter part from its
    own bootstrap (over points, not seed families, and none without one), no misfit (the fit
    file holds no points), and the noise only when given."""
    law = fit.law
    forecaster_ = LawForecaster(law.name)
    theta = law.theta_from_natural(fit.params)
    replicas = [law.theta_from_natural(p) for p in fit.replicas]
    targets = _targets(cells)
    point = forecaster_.predict(theta, targets)
    draws = np.array([forecaster_.predict(r, targets) for r in replicas]) if replicas \
        else np.full((0, len(cells)), np.nan)
    noise = SeedNoise(sd=noise_sd, df=noise_df, by_sparsity={})
    predicted = []
    for i, cell in enumerate(cells):
        one = _cell(cell, point[i], draws[:, i], 0.0, max(noise_df, 1), noise, seeds, 0.0)
        if not replicas:  # no refits: the interval stands on the noise alone
            one.parameter_sd, one.finite_share = 0.0, 1.0
            one.interval = cell_interval(one, seeds) if np.isfinite(point[i]) else None
        predicted.append(one)
    shared = fit.shared_fraction or 0.0
    record = Prediction(
        form=law.name, formula=law.formula, level=LEVEL, source=source, data_hash=data_hash,
        runs=0, families=0, excluded=[], budget_kind="C" if flops else "D", budgets_fitted=[],
        params=dict(fit.params), bootstrap=len(replicas), seed=0, noise=noise, misfit_sd=0.0,
        cells=predicted, sparsity_choices=_sparsity_choices(predicted, draws, 0) if replicas else [],
        optima=[_law_optimum(forecaster_, theta, replicas, c, shared) for c in flops],
    )
    record.notes = ["from a fit file: data_hash is the file's sha256; the refits are its own "
                    "bootstrap over points, not over seed families; no misfit term (the file "
                    "holds no points)" + ("" if noise_sd else "; no noise term (give --noise-sd)")]
    return record


def _law_optimum(model: LawForecaster, theta, replicas: list, flops: float, shared: float
                 ) -> OptimumPrediction:
    solve = _optimum_solver(model, flops, shared)
    best = solve(theta)
    found = np.array([solve(r) for r in replicas]).reshape(-1, 3)
    finite = found[np.all(np.isfinite(found), axis=1)]
    s_interval = n_interval = None
    if len(finite) >= 2 and len(finite) >= MIN_FINITE_SHARE * len(replicas):
        tail = 100 * (1 - LEVEL) / 2
        s_interval = [float(x) for x in np.percentile(finite[:, 0], [tail, 100 - tail])]
        n_interval = [float(x) for x in np.percentile(finite[:, 1], [tail, 100 - tail])]
    bound = None
    if "log_U" not in model.law.features:
        bound = "S* = 0 by construction: the law has no sparsity term"
    elif best[0] >= 0.98 - 1e-3:
        bound = "S* >= 0.98, the search's edge (unbounded)"
    return OptimumPrediction(flops=flops, sparsity=best[0], sparsity_interval=s_interval,
                             params_total=best[1], params_interval=n_interval, loss=best[2],
                             bound=bound, shared_fraction=shared)


def _targets(cells: list[TargetCell]) -> Targets:
    return Targets(N=np.array([c.params_total for c in cells]),
                   N_active=np.array([c.params_active for c in cells]),
                   D=np.array([c.tokens for c in cells]), S=np.array([c.sparsity for c in cells]),
                   budget=np.array([c.budget for c in cells]))


def _misfit(model, params, runs: SweepRuns, noise: SeedNoise) -> tuple[float, int]:
    """(misfit sd, the residuals' degrees of freedom) of the point means about the fit."""
    means, fitted = model.fitted_points(params, runs)
    counts = np.array([int((runs.point == p).sum()) for p in sorted(set(runs.point.tolist()))])
    sparsities = [float(runs.S[runs.point == p][0]) for p in sorted(set(runs.point.tolist()))]
    if isinstance(model, ParabolaForecaster):
        used = len(set(zip(runs.budget.tolist(), runs.S.tolist()))) * model.num_params
    else:
        used = model.num_params
    residual_df = max(len(means) - used, 1)
    mean_square = float(np.nansum((means - fitted) ** 2) / residual_df)
    noise_part = 0.0
    if noise.sd is not None:
        noise_part = float(np.mean([(noise.at(s)[0] or 0.0) ** 2 / n
                                    for s, n in zip(sparsities, counts)]))
    return float(np.sqrt(max(mean_square - noise_part, 0.0))), residual_df


def _cell(cell: TargetCell, point: float, draws: np.ndarray, misfit: float, residual_df: int,
          noise: SeedNoise, seeds: int, extrapolation_sd: float) -> CellPrediction:
    finite = draws[np.isfinite(draws)]
    share = len(finite) / max(len(draws), 1)
    noise_sd, noise_df = noise.at(cell.sparsity)
    df = noise_df if noise_sd is not None else residual_df
    parameter_sd = float("nan")
    if len(finite) >= 2:
        q05, q95 = np.percentile(finite, [5, 95])
        parameter_sd = float((q95 - q05) / QUANTILE_SPREAD)
    result = CellPrediction(cell=cell, loss=float(point), interval=None, seeds=seeds,
                            parameter_sd=parameter_sd, misfit_sd=misfit,
                            noise_sd=float(noise_sd or 0.0), df=int(df), finite_share=share,
                            extrapolation_sd=extrapolation_sd)
    if share >= MIN_FINITE_SHARE and np.isfinite(point):
        result.interval = cell_interval(result, seeds)
    return result


def _sparsity_choices(cells: list[CellPrediction], draws: np.ndarray, seed: int
                      ) -> list[SparsityChoice]:
    """Per size with >= 2 target sparsities at one budget: which is lowest, and how often."""
    rng = np.random.default_rng(seed + 1)
    choices = []
    groups: dict[tuple[str, float], list[int]] = {}
    for i, c in enumerate(cells):
        groups.setdefault((c.cell.size, c.cell.budget), []).append(i)
    for (size, _), members in sorted(groups.items()):
        if len(members) < 2 or not all(np.isfinite(cells[i].loss) for i in members):
            continue
        sparsities = np.array([cells[i].cell.sparsity for i in members])
        sub = draws[:, members]
        sub = sub[np.all(np.isfinite(sub), axis=1)]
        spread = np.array([np.sqrt(cells[i].misfit_sd ** 2 + cells[i].extrapolation_sd ** 2
                                   + cells[i].noise_sd ** 2 / cells[i].seeds) for i in members])
        noisy = (np.repeat(sub, PREDICTIVE_DRAWS, axis=0)
                 + rng.standard_normal((len(sub) * PREDICTIVE_DRAWS, len(members))) * spread)
        winners = sparsities[np.argmin(noisy, axis=1)] if len(noisy) else np.array([])
        shares = {float(s): float(np.mean(winners == s)) if len(winners) else float("nan")
                  for s in sparsities}
        best = float(sparsities[int(np.argmin([cells[i].loss for i in members]))])
        choices.append(SparsityChoice(size=size, sparsity=best, shares=shares))
    return choices


def _optimum(model, params, replicas: list, runs: SweepRuns, flops: float) -> OptimumPrediction:
    if runs.budget_kind != "C":
        raise MoelabError("a compute-optimal prediction needs a FLOPs sweep (C budgets)")
    shared = estimate_shared_fraction(runs.N, runs.N_active, runs.S) or 0.0
    solve = _optimum_solver(model, flops, shared)
    best = solve(params)
    replicate_optima = np.array([solve(r) for r in replicas])
    finite = replicate_optima[np.all(np.isfinite(replicate_optima), axis=1)]
    s_interval = n_interval = None
    if len(finite) >= MIN_FINITE_SHARE * max(len(replicas), 1) and len(finite) >= 2:
        tail = 100 * (1 - LEVEL) / 2
        s_interval = [float(x) for x in np.percentile(finite[:, 0], [tail, 100 - tail])]
        n_interval = [float(x) for x in np.percentile(finite[:, 1], [tail, 100 - tail])]
    return OptimumPrediction(flops=flops, sparsity=best[0], sparsity_interval=s_interval,
                             params_total=best[1], params_interval=n_interval, loss=best[2],
                             bound=_bound(model, best[0], runs), shared_fraction=shared)


def _optimum_solver(model, flops: float, shared: float):
    if isinstance(model, ParabolaForecaster):
        return lambda p: model.optimum(p, flops)

    def solve(theta):
        law = model.law
        try:
            found = compute_optimal(law, law.natural_params(theta), flops, shared_fraction=shared)
        except (MoelabError, ValueError, FloatingPointError):
            return (np.nan, np.nan, np.nan)
        return (found.sparsity, found.params_total, found.loss)
    return solve


def _bound(model, sparsity: float, runs: SweepRuns) -> str | None:
    if isinstance(model, LawForecaster) and "log_U" not in model.law.features:
        return "S* = 0 by construction: the law has no sparsity term"
    largest = float(runs.S.max())
    if isinstance(model, ParabolaForecaster):
        return f"S* >= {largest:g}, the largest sparsity fitted (unbounded)" \
            if sparsity >= largest else None
    if sparsity >= 0.98 - 1e-3:
        return "S* >= 0.98, the search's edge (unbounded)"
    if sparsity > largest:
        return f"S* beyond the largest sparsity fitted ({largest:g}): an extrapolation in S"
    return None


def _natural(model, params) -> dict[str, float]:
    if isinstance(model, LawForecaster):
        return model.law.natural_params(params)
    return {}


def _notes(record: Prediction, runs: SweepRuns) -> list[str]:
    notes = []
    if record.noise.sd is None:
        notes.append("one seed per point: the noise cannot be told from the misfit; the misfit "
                     "term stands for both")
    if any(c.interval is None for c in record.cells):
        notes.append(f"no interval where fewer than {MIN_FINITE_SHARE:.0%} of the refits "
                     "predict a finite loss")
    largest = max(runs.budgets())
    far = max((c.cell.budget / largest for c in record.cells), default=1.0)
    if far > 1:
        notes.append(f"the targets reach {far:.3g}x the largest budget fitted ({largest:.3g})")
    return notes
