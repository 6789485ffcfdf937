"""Optimal sparsity (and size) read off a fitted law.

Two questions, after Abnar et al. (2025), with their budget convention C = 6 N_active D
(moelab's ``six_n`` FLOP count; attention over the context is not counted):

- **Fixed total parameters** N (and a data budget: tokens D, or compute C): which sparsity S
  minimises L(N, D, S)? With C given, D = C / (6 N_active(N, S)) grows with S because a sparser
  model spends fewer FLOPs per token.
- **Fixed compute** C: which (N, S) minimises L(N, C / (6 N_active(N, S)), S)? This gives S*(C),
  N*(C) and N_active*(C).

N in the law is the total parameter count. The architecture family maps it to the active count:

    N_active = N * (shared_fraction + (1 - shared_fraction) * (1 - S)),

where ``shared_fraction`` is the share of parameters outside the experts (attention, embeddings,
norms, router). shared_fraction = 0 is the "all parameters are experts" idealisation,
N_active = (1 - S) N; the sweep estimates the fraction of its own models
(``moelab.scaling.family``).

Minimisation: a dense grid over S in [0, max_sparsity] (and log N), then a bounded L-BFGS-B
polish from the best grid point. Results at the edge of the search box are flagged.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TypeVar

import numpy as np
import scipy.optimize

from moelab.errors import MoelabError
from moelab.scaling.family import active_params
from moelab.scaling.fitting import percentile_interval
from moelab.scaling.laws import Law
from moelab.scaling.fit_record import OMIT_NONE
from moelab.scaling.throughput import family_throughput

DEFAULT_MAX_SPARSITY = 0.98
"""Upper end of the sparsity search (S = 1 - 1/50; the law diverges or is meaningless at 1)."""


@dataclass
class Optimum:
    """An optimal shape a fitted law gives: its S, size, tokens and loss."""

    sparsity: float
    """The optimal sparsity S*."""
    params_total: float
    """Its total parameters N."""
    params_active: float
    """Its active parameters per token."""
    tokens: float
    """Its training tokens D."""
    loss: float
    """The loss the law predicts there."""
    at_boundary: bool
    """True when S* or N* lies on the edge of the search box (the law has no interior optimum)."""


def _loss(law: Law, params: dict[str, float], total_params, tokens, sparsity) -> np.ndarray:
    columns = {"N": total_params, "D": tokens}
    if "log_U" in law.features:
        columns["S"] = sparsity
    return law.predict_loss(params, **columns)


def _check(value: float | None, name: str) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise MoelabError(f"{name}={value} is invalid: must be a positive number")


def optimal_sparsity_at_params(
    law: Law, params: dict[str, float], total_params: float, *, tokens: float | None = None,
    flops: float | None = None, shared_fraction: float = 0.0,
    max_sparsity: float = DEFAULT_MAX_SPARSITY,
) -> Optimum:
    """S* at a fixed total parameter count, for a fixed token budget D or compute budget C."""
    _check(total_params, "--params")
    _check(tokens, "--tokens")
    _check(flops, "--flops")
    _check_family(shared_fraction, max_sparsity)
    if (tokens is None) == (flops is None):
        raise MoelabError("give exactly one of --tokens D or --flops C with --params N")

    def tokens_at(sparsity):
        if tokens is not None:
            return np.full_like(np.asarray(sparsity, dtype=np.float64), tokens)
        return flops / (6.0 * active_params(total_params, sparsity, shared_fraction))

    def loss_at(sparsity):
        return _loss(law, params, total_params, tokens_at(sparsity), sparsity)

    grid = np.linspace(0.0, max_sparsity, 491)
    step = grid[1] - grid[0]
    best = float(grid[int(np.argmin(loss_at(grid)))])
    # Brent's method on the bracket around the best grid point.
    bracket = (max(best - step, 0.0), min(best + step, max_sparsity))
    result = scipy.optimize.minimize_scalar(lambda s: float(loss_at(s)[0]), bounds=bracket,
                                            method="bounded", options={"xatol": 1e-10})
    sparsity = float(result.x) if result.fun <= float(loss_at(best)[0]) else best
    return Optimum(
        sparsity=sparsity, params_total=float(total_params),
        params_active=float(active_params(total_params, sparsity, shared_fraction)),
        tokens=float(tokens_at(sparsity)), loss=float(loss_at(sparsity)[0]),
        at_boundary=_on_edge(sparsity, 0.0, max_sparsity) and "log_U" in law.features,
    )


def compute_optimal(
    law: Law, params: dict[str, float], flops: float, *, shared_fraction: float = 0.0,
    max_sparsity: float = DEFAULT_MAX_SPARSITY, min_params: float = 1e3,
) -> Optimum:
    """(S*, N*) minimising the loss at compute C = 6 N_active D (S fixed at 0 for a dense law)."""
    _check(flops, "--flops")
    _check_family(shared_fraction, max_sparsity)
    has_sparsity = "log_U" in law.features
    max_params = flops / 6.0  # at least one training token
    if max_params <= min_params:
        raise MoelabError(f"--flops {flops:g} is invalid: too small (need C > {6 * min_params:g})")
    log_n_range = (math.log(min_params), math.log(max_params))
    s_range = (0.0, max_sparsity if has_sparsity else 0.0)

    def loss_at(log_n, sparsity):
        total = np.exp(log_n)
        tokens = flops / (6.0 * active_params(total, sparsity, shared_fraction))
        return _loss(law, params, total, tokens, sparsity)

    log_n_grid = np.linspace(*log_n_range, 241)
    s_grid = np.linspace(*s_range, 50 if has_sparsity else 1)
    log_n_G, s_G = (a.ravel() for a in np.meshgrid(log_n_grid, s_grid))
    grid_loss = loss_at(log_n_G, s_G)
    start = int(np.argmin(np.where(np.isfinite(grid_loss), grid_loss, np.inf)))
    x0 = [log_n_G[start], s_G[start]]
    log_n, sparsity = x0
    if np.isfinite(grid_loss[start]):  # else a degenerate (bootstrap) fit: nothing to refine
        result = scipy.optimize.minimize(lambda x: float(loss_at(x[0], x[1])[0]), x0,
                                         method="L-BFGS-B", bounds=[log_n_range, s_range],
                                         options={"ftol": 1e-15, "gtol": 1e-12})
        if result.fun <= grid_loss[start]:
            log_n, sparsity = result.x
    total = float(math.exp(log_n))
    active = float(active_params(total, sparsity, shared_fraction))
    at_boundary = _on_edge(log_n, *log_n_range, tol=1e-3) or (
        has_sparsity and _on_edge(sparsity, *s_range))
    return Optimum(sparsity=float(sparsity), params_total=total, params_active=active,
                   tokens=float(flops / (6.0 * active)), loss=float(loss_at(log_n, sparsity)[0]),
                   at_boundary=bool(at_boundary))


INTERVAL_KEYS = ("sparsity", "params_total", "params_active", "tokens", "loss")


@dataclass(kw_only=True)
class OptimumInterval:
    """An optimum of the best fit with percentile intervals over the bootstrap fits."""

    optimum: Optimum
    """The optimum of the best fit."""
    ci: dict[str, list[float]]
    """By the optimum's field name; empty without bootstrap fits."""
    bootstrap_at_boundary: float | None = field(default=None, metadata=OMIT_NONE)
    """The share of bootstrap optima on the edge of the search (None without them)."""

    def value(self, key: str) -> float:
        """The optimum's field ``key`` (one of ``INTERVAL_KEYS``, or a seconds optimum's)."""
        return getattr(self.optimum, key)

    def at(self, cls: type[P], **where: float) -> P:
        """This interval as a point of a curve (``cls``), placed by ``where``."""
        return cls(optimum=self.optimum, ci=self.ci,
                   bootstrap_at_boundary=self.bootstrap_at_boundary, **where)


P = TypeVar("P", bound=OptimumInterval)


@dataclass(kw_only=True)
class FlopsCurvePoint(OptimumInterval):
    """A point of S*(C): the compute-optimal (N, S) at ``flops``."""

    flops: float
    """The FLOPs budget C (6 N_active D)."""


@dataclass(kw_only=True)
class ParamsCurvePoint(OptimumInterval):
    """A point of S*(N): the best S at ``params`` total parameters."""

    params: float
    """The total parameter count N."""


def with_intervals(optimum_fn, params, bootstrap_params: list, level: float = 0.95,
                   keys: tuple[str, ...] = INTERVAL_KEYS) -> OptimumInterval:
    """The optimum of the best fit plus percentile intervals over the bootstrap fits.

    ``params`` and each of ``bootstrap_params`` are whatever ``optimum_fn`` takes (a law's
    parameters, or a pair of them and a throughput model's coefficients)."""
    result = OptimumInterval(optimum=optimum_fn(params), ci={})
    if bootstrap_params:
        replicas = [optimum_fn(p) for p in bootstrap_params]
        for key in keys:
            result.ci[key] = list(percentile_interval([getattr(r, key) for r in replicas], level))
        result.bootstrap_at_boundary = float(np.mean([r.at_boundary for r in replicas]))
    return result


def _on_edge(value: float, low: float, high: float, tol: float = 1e-4) -> bool:
    return bool(value <= low + tol or value >= high - tol)


def _check_family(shared_fraction: float, max_sparsity: float) -> None:
    if not 0.0 <= shared_fraction < 1.0:
        raise MoelabError(f"--shared-fraction {shared_fraction} is invalid: allowed [0, 1)")
    if not 0.0 < max_sparsity < 1.0:
        raise MoelabError(f"--max-sparsity {max_sparsity} is invalid: allowed (0, 1)")


# --------------------------------------------------------------------------------------------
# Under a wall-clock budget
# --------------------------------------------------------------------------------------------

MAX_PARAMS = 1e13
"""Upper end of the size search under a seconds budget (no FLOPs budget bounds it there)."""


@dataclass
class SecondsOptimum(Optimum):
    """A time-optimal shape: an Optimum with its throughput and the compute it spends."""

    tokens_per_s: float = 0.0
    """Training throughput of the optimal shape, from the throughput model."""
    flops: float = 0.0
    """The compute it spends, 6 N_active D: the FLOPs budget to compare it with."""


@dataclass(kw_only=True)
class SecondsCurvePoint(OptimumInterval):
    """A point of S*(T): the time-optimal (N, S) at a wall-clock budget of ``seconds``."""

    optimum: SecondsOptimum
    """The time-optimal shape at this budget."""
    seconds: float
    """The wall-clock budget, seconds of training."""


def seconds_optimal(law: Law, params: dict[str, float], seconds: float, tokens_per_s_fn, *,
                    max_sparsity: float = DEFAULT_MAX_SPARSITY, shared_fraction: float = 0.0,
                    min_params: float = 1e3, max_params: float = MAX_PARAMS) -> SecondsOptimum:
    """(S*, N*) minimising L(N, D, S) when D = seconds x tokens/s(N, S) on the measured hardware.

    ``tokens_per_s_fn(total_params, sparsity)`` is the hardware's throughput (a
    ``ThroughputModel`` over the architecture family). The MoE terms of a throughput model jump
    at S = 0 (a dense step has no routing), so the dense line and the sparse region are searched
    apart and the lower optimum wins.
    """
    _check(seconds, "--seconds")
    _check_family(shared_fraction, max_sparsity)
    has_sparsity = "log_U" in law.features
    log_n_range = (math.log(min_params), math.log(max_params))

    def loss_at(log_n, sparsity):
        total = np.exp(log_n)
        return _loss(law, params, total, seconds * tokens_per_s_fn(total, sparsity), sparsity)

    log_n_grid = np.linspace(*log_n_range, 241)
    dense = _polished(loss_at, log_n_grid, np.zeros(1), log_n_range, (0.0, 0.0))
    # Even a law without an S term sees S through the hardware: a sparser model of a size
    # trains more tokens per second (or fewer, when routing costs more than it saves).
    s_low = max_sparsity / 490
    sparse = _polished(loss_at, log_n_grid, np.linspace(s_low, max_sparsity, 49), log_n_range,
                       (s_low, max_sparsity))
    log_n, sparsity, loss = min(dense, sparse, key=lambda x: x[2])
    total = float(math.exp(log_n))
    active = float(active_params(total, sparsity, shared_fraction))
    throughput = float(tokens_per_s_fn(np.array([total]), np.array([sparsity]))[0])
    tokens = seconds * throughput
    # As in compute_optimal, S* = 0 under a law with an S term is the search's lower edge.
    at_boundary = _on_edge(log_n, *log_n_range, tol=1e-3) or (
        has_sparsity and (sparsity == 0 or _on_edge(sparsity, s_low, max_sparsity)))
    return SecondsOptimum(sparsity=float(sparsity), params_total=total, params_active=active,
                          tokens=tokens, loss=float(loss), at_boundary=bool(at_boundary),
                          tokens_per_s=throughput, flops=6.0 * active * tokens)


def _polished(loss_at, log_n_grid, s_grid, log_n_range, s_range) -> tuple[float, float, float]:
    """(log N, S, loss): the best grid point, refined by L-BFGS-B inside the box."""
    log_n_G, s_G = (a.ravel() for a in np.meshgrid(log_n_grid, s_grid))
    grid_loss = loss_at(log_n_G, s_G)
    grid_loss = np.where(np.isfinite(grid_loss), grid_loss, np.inf)
    start = int(np.argmin(grid_loss))
    best = (float(log_n_G[start]), float(s_G[start]), float(grid_loss[start]))
    if not np.isfinite(best[2]):  # a degenerate (bootstrap) fit: nothing to refine
        return best
    result = scipy.optimize.minimize(lambda x: float(loss_at(x[:1], x[1:])[0]), best[:2],
                                     method="L-BFGS-B", bounds=[log_n_range, s_range],
                                     options={"ftol": 1e-15, "gtol": 1e-12})
    if result.fun <= best[2]:
        best = (float(result.x[0]), float(result.x[1]), float(result.fun))
    return best


def dense_seconds_to_loss(law: Law, params: dict[str, float], target_loss: float,
                          tokens_per_s_fn, reference_seconds: float) -> SecondsOptimum | None:
    """The dense model that reaches ``target_loss`` soonest on the hardware: the smallest
    budget T whose dense seconds-optimum has that loss (bisection in log T; the best dense
    loss falls as T grows). None when no budget within 10^6 x the reference reaches it."""
    def best_dense(seconds):
        return seconds_optimal_dense(law, params, seconds, tokens_per_s_fn)

    low, high = math.log(reference_seconds) - 6 * math.log(10), math.log(reference_seconds) + 6 * math.log(10)
    if best_dense(math.exp(high)).loss > target_loss:
        return None
    if best_dense(math.exp(low)).loss <= target_loss:
        return best_dense(math.exp(low))
    for _ in range(60):
        middle = (low + high) / 2
        if best_dense(math.exp(middle)).loss > target_loss:
            low = middle
        else:
            high = middle
    return best_dense(math.exp(high))


def seconds_optimal_dense(law: Law, params: dict[str, float], seconds: float, tokens_per_s_fn,
                          min_params: float = 1e3, max_params: float = MAX_PARAMS) -> SecondsOptimum:
    """The best dense model (S = 0) for a seconds budget: a fine grid in log N, then Brent."""
    def loss_at(log_n):
        total = np.exp(np.atleast_1d(log_n))
        return _loss(law, params, total, seconds * tokens_per_s_fn(total, np.zeros_like(total)),
                     np.zeros_like(total))

    grid = np.linspace(math.log(min_params), math.log(max_params), 481)
    losses = np.where(np.isfinite(g := loss_at(grid)), g, np.inf)
    index = int(np.argmin(losses))
    bracket = (grid[max(index - 1, 0)], grid[min(index + 1, len(grid) - 1)])
    result = scipy.optimize.minimize_scalar(lambda x: float(loss_at(x)[0]), bounds=bracket,
                                            method="bounded", options={"xatol": 1e-10})
    log_n = float(result.x) if result.fun <= losses[index] else float(grid[index])
    total = math.exp(log_n)
    throughput = float(tokens_per_s_fn(np.array([total]), np.zeros(1))[0])
    tokens = seconds * throughput
    return SecondsOptimum(sparsity=0.0, params_total=total, params_active=total, tokens=tokens,
                          loss=float(loss_at(log_n)[0]), at_boundary=False,
                          tokens_per_s=throughput, flops=6.0 * total * tokens)


@dataclass
class SecondsVersusDense(SecondsOptimum):
    """A seconds optimum beside the dense model that reaches its loss soonest."""

    dense_params: float = math.nan
    """Total parameters of the dense model that reaches the optimum's loss soonest."""
    dense_tokens_per_s: float = math.nan
    """Its training throughput, from the throughput model."""
    dense_seconds: float = math.nan
    """Wall-clock time the best dense model needs for the same loss (nan: none within range)."""
    throughput_ratio: float = math.nan
    """tokens/s of the optimum over the equal-loss dense model's."""
    seconds_ratio: float = math.nan
    """dense_seconds / the budget: how much sooner the optimum reaches its loss."""


SECONDS_KEYS = INTERVAL_KEYS + ("tokens_per_s", "flops", "dense_params", "dense_tokens_per_s",
                                "dense_seconds", "throughput_ratio", "seconds_ratio")


def seconds_versus_dense(law: Law, params: dict[str, float], seconds: float, tokens_per_s_fn,
                         **search) -> SecondsVersusDense:
    optimum = seconds_optimal(law, params, seconds, tokens_per_s_fn, **search)
    dense = dense_seconds_to_loss(law, params, optimum.loss, tokens_per_s_fn, seconds)
    result = SecondsVersusDense(**asdict(optimum))
    if dense is not None:
        seconds_needed = dense.tokens / dense.tokens_per_s
        result.dense_params, result.dense_tokens_per_s = dense.params_total, dense.tokens_per_s
        result.dense_seconds, result.seconds_ratio = seconds_needed, seconds_needed / seconds
        result.throughput_ratio = optimum.tokens_per_s / dense.tokens_per_s
    return result


@dataclass(kw_only=True)
class VersusDenseInterval(OptimumInterval):
    """A seconds optimum with its intervals, beside the dense model that reaches its loss
    soonest."""

    optimum: SecondsVersusDense
    """The optimum, beside the equal-loss dense model."""


@dataclass
class ThreeOptima:
    """S* under a wall-clock budget, and beside it under the FLOPs that optimum spends and at
    its total size with those FLOPs (``three_optima``)."""

    seconds: float
    """The wall-clock budget, seconds of training."""
    flops: float
    """The compute the seconds optimum spends."""
    params: float
    """The seconds optimum's total parameters."""
    by_seconds: VersusDenseInterval
    """S* under the seconds budget, beside the dense model that reaches its loss soonest."""
    by_flops: OptimumInterval
    """S* under the FLOPs that optimum spends."""
    by_params: OptimumInterval
    """S* at the optimum's total size, with those FLOPs."""
    shared_fraction: float
    """The share of parameters outside the experts the sizes are computed with."""
    top_k: int
    """Experts per token of the optimal shapes."""

    def questions(self) -> tuple[tuple[str, OptimumInterval], ...]:
        """(name, optimum) of the three questions, seconds first."""
        return (("by_seconds", self.by_seconds), ("by_flops", self.by_flops),
                ("by_params", self.by_params))


def three_optima(law: Law, params: dict[str, float], replicas: list[dict[str, float]],
                 seconds: float, throughput, *, shared_fraction: float, top_k: int,
                 max_sparsity: float = DEFAULT_MAX_SPARSITY) -> ThreeOptima:
    """S* under a wall-clock budget on the measured hardware, and beside it S* under the FLOPs
    that optimum spends (compute-optimal over N and S) and S* at its total size N with those
    FLOPs (fixed parameters), each with bootstrap intervals.

    The seconds optimum's intervals pair the law's replicate i with the throughput model's
    replicate i (cycled): both the fit and the timings are uncertain.
    """
    def solve_seconds(pair):
        law_params, coefficients = pair
        rate = family_throughput(throughput, shared_fraction, top_k, coefficients)
        return seconds_versus_dense(law, law_params, seconds, rate, max_sparsity=max_sparsity,
                                    shared_fraction=shared_fraction)

    timings = throughput.replicates or [throughput.coefficients]
    pairs = [(p, timings[i % len(timings)]) for i, p in enumerate(replicas)]
    by_seconds = with_intervals(solve_seconds, (params, throughput.coefficients), pairs,
                                keys=SECONDS_KEYS).at(VersusDenseInterval)
    flops, total = by_seconds.optimum.flops, by_seconds.optimum.params_total
    by_flops = with_intervals(lambda p: compute_optimal(
        law, p, flops, shared_fraction=shared_fraction, max_sparsity=max_sparsity), params, replicas)
    by_params = with_intervals(lambda p: optimal_sparsity_at_params(
        law, p, total, flops=flops, shared_fraction=shared_fraction, max_sparsity=max_sparsity),
        params, replicas)
    return ThreeOptima(seconds=seconds, flops=flops, params=total, by_seconds=by_seconds,
                       by_flops=by_flops, by_params=by_params, shared_fraction=shared_fraction,
                       top_k=top_k)
