"""Scaling laws written as a log-sum-exp of linear terms, so one fitting routine serves them all.

Every law here has the form

    log L = LSE_j( term_j ),   term_j = sum_p theta_p * M[j, p, i]   for data point i,

where ``theta`` holds log-coefficients (a = log A, ...) and exponents, and ``M`` is the *design
tensor*: 1 where term j carries log-coefficient p, minus a log feature (-log N, -log D,
-log(1 - S)) where term j carries exponent p, 0 elsewhere. Fitting in this parametrisation is
what Hoffmann et al. (2022) and Besiroglu et al. (2024) do, and it makes value and gradient of
the prediction two einsums, for thousands of starting points at once.

- ``chinchilla``: L = E + A / N^alpha + B / D^beta
  (log L = LSE(a - alpha log N, b - beta log D, e)).
- ``sparsity`` (Abnar et al. 2025, eq. 6):
  L = a / N^alpha + b / D^beta + c / (1 - S)^lambda + d / ((1 - S)^delta N^gamma) + e,
  with N the *total* parameter count by default (``n_kind="active"`` fits the active count).
- Reduced forms of the sparsity law, each eq. 6 with some terms removed, for sweeps too small to
  identify all ten parameters (``SPARSITY_FORMS``, richest first; ``moelab.scaling.forms`` picks
  one):
  - ``sparsity-interaction``: without c / (1 - S)^lambda (8 parameters);
  - ``sparsity-additive``: without d / ((1 - S)^delta N^gamma) (7 parameters);
  - ``sparsity-effective-size``: L = b / D^beta + d / ((1 - S)^delta N^gamma) + e (6
    parameters), Chinchilla's law in an effective size N (1 - S)^(delta / gamma).
- MoE forms beyond Abnar et al. (docs/explanation/laws.md, "Other MoE law forms"), each a log-sum-exp
  of linear terms in log features too:
  - ``clark`` (Clark et al. 2022): log L = a log N_active + b log Ê + c log N_active log Ê + d,
    with Ê the saturating expert count of ``saturated_experts`` (E_start, E_max fixed per law,
    not fitted);
  - ``granularity`` (after Krajewski et al. 2024): L = c + (g / G^gamma + a) / N^alpha + b / D^beta;
  - ``joint`` (after Ludziejewski et al. 2025): L = a / (Ê^delta N_active^(alpha + gamma ln Ê))
    + b / (Ê^omega D^(beta + zeta ln Ê)) + c.

A feature is ``log_X`` (the log of canonical column X), ``log_U`` (log(1 - S)), ``log_Ehat``
(log Ê of column E), a product ``F*G`` of two, or ``-F`` (the negative of one: a term
``theta * log N`` rather than ``-theta * log N``, for a law written with signed slopes).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from moelab.errors import MoelabError, short_repr


@dataclass(frozen=True)
class Law:
    """A law: parameter names, its terms, its start grid and its data columns."""

    name: str
    param_names: tuple[str, ...]
    """Fitted (log-space) parameters, in the order of theta."""
    log_coef_names: dict[str, str]
    """Log-coefficients among param_names -> the name of exp(.) in reports (a -> A)."""
    terms: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    """Per term: (log-coefficient name or "", ((exponent name, feature name), ...))."""
    features: tuple[str, ...]
    """Log features the terms use: 'log_N', 'log_D', 'log_U' (U = 1 - S)."""
    start_grid: Callable[..., np.ndarray]
    """start_grid(max_starts=default) -> (num_starts, P) initial theta values; a seeded subset
    when max_starts is below the grid's size."""
    formula: str = ""
    """The law in natural parameters, for reports."""
    expert_saturation: tuple[float, float] = (1.0, math.inf)
    """(E_start, E_max) of the saturating expert count Ê of a law with ``log_Ehat``."""

    @property
    def num_params(self) -> int:
        return len(self.param_names)

    @property
    def columns(self) -> tuple[str, ...]:
        """The canonical columns the law's features read (N, D, S, E, G, N_active)."""
        names = [_feature_column(base) for feature in self.features
                 for base in feature.lstrip("-").split("*")]
        return tuple(dict.fromkeys(names))

    def design(self, feature_values: dict[str, np.ndarray]) -> np.ndarray:
        """The design tensor M (terms J, params P, points n) for these log features."""
        num_points = len(next(iter(feature_values.values())))
        design_JPn = np.zeros((len(self.terms), self.num_params, num_points))
        index = {name: p for p, name in enumerate(self.param_names)}
        for j, (log_coef, exponents) in enumerate(self.terms):
            if log_coef:
                design_JPn[j, index[log_coef]] = 1.0
            for exponent, feature in exponents:
                design_JPn[j, index[exponent]] = -feature_values[feature]
        return design_JPn

    def natural_params(self, theta: np.ndarray) -> dict[str, float]:
        """Readable parameters: exp of the log-coefficients (A = exp(a), ...) and the exponents.

        A log-coefficient beyond float range (a degenerate fit or bootstrap replicate can run
        off to a = 800) gives A = inf rather than an error."""
        out = {}
        for name, value in zip(self.param_names, theta):
            if name in self.log_coef_names:
                with np.errstate(over="ignore"):
                    out[self.log_coef_names[name]] = float(np.exp(value))
            else:
                out[name] = float(value)
        return out

    def theta_from_natural(self, params: dict[str, float]) -> np.ndarray:
        """Inverse of natural_params (for synthetic data and for reloading a saved fit)."""
        values = []
        for name in self.param_names:
            if name in self.log_coef_names:
                # A coefficient that underflowed to 0 in exp(theta) is a vanished term: log -> -inf.
                with np.errstate(divide="ignore"):
                    values.append(float(np.log(params[self.log_coef_names[name]])))
            else:
                values.append(params[name])
        return np.array(values, dtype=np.float64)

    def log_terms(self, theta: np.ndarray, feature_values: dict[str, np.ndarray]) -> np.ndarray:
        """(terms J, points n): the log of each term at each point, for one theta (P,)."""
        index = {name: p for p, name in enumerate(self.param_names)}
        terms = []
        for log_coef, exponents in self.terms:
            term = theta[index[log_coef]] if log_coef else 0.0
            for exponent, feature in exponents:
                term = term - theta[index[exponent]] * feature_values[feature]
            terms.append(np.broadcast_to(term, np.shape(next(iter(feature_values.values())))))
        return np.stack(terms)

    def predict_log_loss(self, theta: np.ndarray, feature_values: dict[str, np.ndarray]) -> np.ndarray:
        """log L at each point for one parameter vector theta (P,)."""
        return _logsumexp(self.log_terms(theta, feature_values), axis=0)

    def predict_loss(self, params: dict[str, float], **columns: np.ndarray | float) -> np.ndarray:
        """L from natural parameters and raw columns N, D (and S), e.g. predict_loss(p, N=.., D=..)."""
        arrays = {k: np.atleast_1d(np.asarray(v, dtype=np.float64)) for k, v in columns.items()}
        size = max(len(a) for a in arrays.values())
        arrays = {k: np.broadcast_to(a, (size,)) for k, a in arrays.items()}
        return np.exp(self.predict_log_loss(self.theta_from_natural(params), log_features(self, arrays)))


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    peak = np.max(x, axis=axis, keepdims=True)
    # An infinite term (a coefficient beyond float range) makes the sum infinite, not inf - inf.
    peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(over="ignore", divide="ignore"):
        return np.squeeze(peak, axis) + np.log(np.sum(np.exp(x - peak), axis=axis))


def log_features(law: Law, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The log features a law needs from raw columns N, D, S (U = 1 - S), E, G, N_active."""
    return {feature: _feature_values(law, feature, columns) for feature in law.features}


def _feature_values(law: Law, feature: str, columns: dict[str, np.ndarray]) -> np.ndarray:
    if feature.startswith("-"):
        return -_feature_values(law, feature[1:], columns)
    if "*" in feature:
        left, right = feature.split("*", 1)
        return _feature_values(law, left, columns) * _feature_values(law, right, columns)
    if feature == "log_U":
        return np.log1p(-columns["S"])
    if feature == "log_Ehat":
        return np.log(saturated_experts(columns["E"], *law.expert_saturation))
    return np.log(columns[_feature_column(feature)])


def _feature_column(feature: str) -> str:
    """The canonical column behind one plain log feature."""
    return {"log_U": "S", "log_Ehat": "E"}.get(feature, feature[len("log_"):])


def saturated_experts(experts, e_start: float = 1.0, e_max: float = math.inf) -> np.ndarray:
    """Clark et al.'s saturating expert count: 1/Ê = 1/(E - 1 + (1/E_start - 1/E_max)^-1) +
    1/E_max. Ê = E_start at E = 1, grows like E past E_start and saturates at E_max; with
    E_start = 1 and E_max = inf it is E itself."""
    experts = np.asarray(experts, dtype=np.float64)
    inverse_max = 0.0 if math.isinf(e_max) else 1.0 / e_max
    return 1.0 / (1.0 / (experts - 1.0 + 1.0 / (1.0 / e_start - inverse_max)) + inverse_max)


# --------------------------------------------------------------------------------------------
# Start grids
# --------------------------------------------------------------------------------------------


def _chinchilla_starts(max_starts: int | None = None) -> np.ndarray:
    """The grid of Hoffmann et al. / Besiroglu et al.: 5 * 5 * 5 * 6 * 6 = 4,500 starts."""
    exponents = np.arange(0.0, 2.0 + 1e-9, 0.5)
    log_e = np.arange(-1.0, 1.0 + 1e-9, 0.5)
    log_coefs = np.arange(0.0, 25.0 + 1e-9, 5.0)
    # param order: a, b, e, alpha, beta
    grid = np.array(list(itertools.product(log_coefs, log_coefs, log_e, exponents, exponents)))
    return _subsample(grid, max_starts)


SPARSITY_LOG_E_GRID = (-1.0, 0.0, 1.0)
"""Start values of log e for the sparsity law (our choice; Abnar et al.'s Table 2 starts it at
1.5, outside this grid)."""

SPARSITY_DEFAULT_STARTS = 4096
"""The full sparsity grid has 3^4 * 6^3 * 5^2 * 3 = 1,312,200 starts; we use a seeded subset."""


SPARSITY_START_AXES = {
    **{f"log_{x}": (0.0, 10.0, 20.0) for x in "abcd"},
    "log_e": SPARSITY_LOG_E_GRID,
    **{name: tuple(np.arange(0.0, 1.25 + 1e-9, 0.25)) for name in ("alpha", "beta", "gamma")},
    **dict.fromkeys(("lam", "delta"), (-1.0, -0.5, 0.0, 0.5, 1.0)),
}
"""Abnar et al.'s grid (their Table 2): log a..log d in {0, 10, 20}; alpha, beta, gamma in
{0, 0.25, ..., 1.25}; lambda, delta in {-1, -0.5, 0, 0.5, 1}; log e in SPARSITY_LOG_E_GRID. A
reduced form starts from the same values of the parameters it keeps."""


def _sparsity_starts(param_names: tuple[str, ...], max_starts: int | None = SPARSITY_DEFAULT_STARTS
                     ) -> np.ndarray:
    """The product of SPARSITY_START_AXES over ``param_names``, or a seeded subset of it.

    The full law's product has 1.3 million points, far too many to run; by default a fixed,
    seeded subset of SPARSITY_DEFAULT_STARTS points is used (deterministic: the same subset
    every run).
    """
    axes = [SPARSITY_START_AXES[name] for name in param_names]
    sizes = [len(axis) for axis in axes]
    total = int(np.prod(sizes))
    if max_starts is None or max_starts >= total:
        flat = np.arange(total)
    else:
        flat = np.sort(np.random.default_rng(0).choice(total, size=max_starts, replace=False))
    digits = np.unravel_index(flat, sizes)
    return np.stack([np.asarray(axis)[d] for axis, d in zip(axes, digits)], axis=1)


def _subsample(grid: np.ndarray, max_starts: int | None) -> np.ndarray:
    if max_starts is None or max_starts >= len(grid):
        return grid
    keep = np.sort(np.random.default_rng(0).choice(len(grid), size=max_starts, replace=False))
    return grid[keep]


CHINCHILLA = Law(
    name="chinchilla",
    param_names=("a", "b", "e", "alpha", "beta"),
    log_coef_names={"a": "A", "b": "B", "e": "E"},
    terms=(("a", (("alpha", "log_N"),)), ("b", (("beta", "log_D"),)), ("e", ())),
    features=("log_N", "log_D"),
    start_grid=_chinchilla_starts,
    formula="L = E + A / N^alpha + B / D^beta",
)

SPARSITY_TERMS = {
    "a": ("log_a", (("alpha", "log_N"),)),
    "b": ("log_b", (("beta", "log_D"),)),
    "c": ("log_c", (("lam", "log_U"),)),
    "d": ("log_d", (("delta", "log_U"), ("gamma", "log_N"))),
    "e": ("log_e", ()),
}
"""Abnar et al.'s five terms by the name of their coefficient."""
SPARSITY_TERM_TEXT = {"a": "a / N^alpha", "b": "b / D^beta", "c": "c / (1 - S)^lam",
                      "d": "d / ((1 - S)^delta N^gamma)", "e": "e"}


def _sparsity_form(name: str, kept: str) -> Law:
    """Eq. 6 with only the terms named in ``kept`` (a subset of "abcde")."""
    terms = tuple(SPARSITY_TERMS[x] for x in kept)
    log_coefs = tuple(log_coef for log_coef, _ in terms)
    exponents = tuple(exponent for _, pairs in terms for exponent, _ in pairs)
    # Parameter order of the full law: log-coefficients, then alpha, beta, lam, delta, gamma.
    param_names = log_coefs + tuple(x for x in ("alpha", "beta", "lam", "delta", "gamma") if x in exponents)
    return Law(
        name=name,
        # Abnar et al. name the coefficients a..e themselves, so the fitted logs are log_a..log_e.
        param_names=param_names,
        log_coef_names={log_coef: log_coef[len("log_"):] for log_coef in log_coefs},
        terms=terms,
        features=("log_N", "log_D", "log_U"),
        start_grid=functools.partial(_sparsity_starts, param_names),
        formula="L = " + " + ".join(SPARSITY_TERM_TEXT[x] for x in kept),
    )


SPARSITY = _sparsity_form("sparsity", "abcde")
SPARSITY_FORMS = (
    SPARSITY,
    _sparsity_form("sparsity-interaction", "abde"),
    _sparsity_form("sparsity-additive", "abce"),
    _sparsity_form("sparsity-effective-size", "bde"),
)
"""The sparsity law and its reduced forms, richest first."""

def _grid_starts(axes: Mapping[str, tuple[float, ...]], max_starts: int | None = 4096) -> np.ndarray:
    """The product of ``axes`` (in their order), or a seeded subset of ``max_starts`` rows."""
    grid = np.array(list(itertools.product(*axes.values())), dtype=np.float64)
    return _subsample(grid, max_starts)


CLARK_START_AXES = {"d": (0.0, 1.0, 2.0), "a": (-0.2, -0.1, -0.05, 0.0),
                    "b": (-0.2, -0.1, -0.05, 0.0), "c": (-0.02, -0.01, 0.0, 0.01, 0.02)}
"""Clark et al.'s form is linear in log L: any start reaches its one optimum; these span the
signs and sizes they report (loss falling with N and E, a shrinking gain at larger N)."""

CLARK = Law(
    name="clark",
    param_names=tuple(CLARK_START_AXES),
    log_coef_names={},  # d is an intercept of log L: reported as fitted, not exponentiated
    terms=(("d", (("a", "-log_N_active"), ("b", "-log_Ehat"),
                  ("c", "-log_N_active*log_Ehat"))),),
    features=("-log_N_active", "-log_Ehat", "-log_N_active*log_Ehat"),
    start_grid=functools.partial(_grid_starts, CLARK_START_AXES),
    formula="log L = a log N_active + b log Ê + c log N_active log Ê + d",
)

GRANULARITY_START_AXES = {
    "log_a": (0.0, 5.0, 10.0), "log_b": (0.0, 5.0, 10.0), "log_c": (-1.0, 0.0, 1.0),
    "log_g": (0.0, 5.0, 10.0), "alpha": (0.0, 0.25, 0.5, 0.75, 1.0),
    "beta": (0.0, 0.25, 0.5, 0.75, 1.0), "gamma": (0.0, 0.5, 1.0)}
"""Our grid (4,050 starts): coefficients and exponents at the sizes Chinchilla-like fits take."""

GRANULARITY = Law(
    name="granularity",
    param_names=tuple(GRANULARITY_START_AXES),
    log_coef_names={"log_a": "a", "log_b": "b", "log_c": "c", "log_g": "g"},
    terms=(("log_g", (("gamma", "log_G"), ("alpha", "log_N"))),
           ("log_a", (("alpha", "log_N"),)),
           ("log_b", (("beta", "log_D"),)),
           ("log_c", ())),
    features=("log_N", "log_D", "log_G"),
    start_grid=functools.partial(_grid_starts, GRANULARITY_START_AXES),
    formula="L = c + (g / G^gamma + a) / N^alpha + b / D^beta",
)

JOINT_START_AXES = {
    "log_a": (0.0, 5.0, 10.0), "log_b": (0.0, 5.0, 10.0), "log_c": (-1.0, 0.0, 1.0),
    "alpha": (0.0, 0.25, 0.5), "beta": (0.0, 0.25, 0.5), "delta": (-0.5, 0.0, 0.5),
    "omega": (-0.5, 0.0, 0.5), "gamma": (-0.02, 0.0, 0.02), "zeta": (-0.02, 0.0, 0.02)}
"""Our grid (a seeded 4,096 of its 19,683 starts)."""

JOINT = Law(
    name="joint",
    param_names=tuple(JOINT_START_AXES),
    log_coef_names={"log_a": "a", "log_b": "b", "log_c": "c"},
    terms=(("log_a", (("delta", "log_Ehat"), ("alpha", "log_N_active"),
                      ("gamma", "log_N_active*log_Ehat"))),
           ("log_b", (("omega", "log_Ehat"), ("beta", "log_D"), ("zeta", "log_D*log_Ehat"))),
           ("log_c", ())),
    features=("log_N_active", "log_D", "log_Ehat", "log_N_active*log_Ehat", "log_D*log_Ehat"),
    start_grid=functools.partial(_grid_starts, JOINT_START_AXES),
    formula="L = a / (Ê^delta N_active^(alpha + gamma ln Ê)) "
            "+ b / (Ê^omega D^(beta + zeta ln Ê)) + c",
)

MOE_FORMS = (CLARK, GRANULARITY, JOINT)
"""The MoE forms beyond Abnar et al.'s law."""

LAWS = {law.name: law for law in (CHINCHILLA, *SPARSITY_FORMS, *MOE_FORMS)}


def get_law(name: str) -> Law:
    if name not in LAWS:
        raise MoelabError(f"law {short_repr(name)} is unknown: allowed {', '.join(LAWS)}")
    return LAWS[name]
