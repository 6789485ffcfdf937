"""The minimum of one IsoFLOP curve: where loss against log N is lowest at a fixed budget.

Every IsoFLOP answer in moelab (``moelab isoflop``, a sweep's ``isoflop.json`` and S*(C) from
the IsoFLOP minima) reads its minima here, with one of two estimators:

- ``window`` (the default): a parabola in log N through the sizes within ``WINDOW_FACTOR`` of the
  size with the lowest loss (at least ``MIN_SIZES`` sizes: the nearest ones when the window holds
  fewer), recentred on its own vertex and refitted until the sizes it uses stop changing. Far
  from its minimum an IsoFLOP curve is not a parabola (the loss rises as a power of N on one
  side and of D on the other), so a parabola through a wide grid is pulled towards whichever
  side has more sizes; near the minimum every smooth curve is a parabola.
- ``global``: one parabola through every size of the budget (Hoffmann et al.'s approach 2 as
  usually run), kept for comparison.

docs/explanation/isoflop.md gives the measurement that chose the window and its factor. Each vertex comes
with the diagnostics a reader needs to trust it (``VertexSupport``): the sizes it used, how far
they spread and how many lie on each side of the vertex, the fit's residuals against the seeds'
noise when there are seeds, and warnings when the vertex is poorly supported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

ESTIMATORS = ("window", "global")
WINDOW_FACTOR = 3.0
"""Sizes within this factor of the window's centre (the best size, then the vertex) are fitted."""
MIN_SIZES = 3
"""Distinct sizes a parabola in log N needs."""
MAX_RECENTRING = 10
MISFIT_RATIO = 2.0
"""Residual RMS of the size means above this many times their seed noise: the parabola misfits."""


@dataclass
class VertexFit:
    """One IsoFLOP curve's minimum: log N*, L*, the parabola (c2, c1, c0 in log N) it came from
    and the distinct sizes that parabola used."""

    log_params: float
    loss: float
    coefficients: list[float]
    sizes_used: list[float]
    inside: bool
    """The vertex lies within the sizes used (otherwise an extrapolation)."""
    recentred: int = 0
    """Refits after the first (0 for the global parabola)."""
    widened: bool = False
    """The window had to grow past its factor to find a parabola that opens upward."""

    def uses(self, params) -> np.ndarray:
        """Mask of the sizes in ``params`` (N) that this parabola was fitted to."""
        log_n = np.log(np.asarray(params, dtype=np.float64))
        used = np.log(self.sizes_used)
        close = np.isclose(log_n[:, None], used[None, :], rtol=0, atol=1e-9)
        return np.asarray(close.any(axis=1))


@dataclass
class VertexSupport:
    """How well the data pin a vertex down. Spans are max N / min N; ``sizes_below`` and
    ``sizes_above`` count the budget's sizes on each side of the vertex (``used_below`` and
    ``used_above`` among the sizes fitted). ``residual_rms`` is the RMS deviation of the fitted
    sizes' mean losses from the parabola (None with no degrees of freedom left: 3 sizes);
    ``seed_noise`` the standard error of a size's mean loss from the seeds' scatter (None
    without two seeds of a size); ``residual_to_noise`` their ratio. Written with
    ``well_supported`` after its fields (``moelab.codec``)."""

    JSON_EXTRA = ("well_supported",)

    estimator: str
    """window or global: how the vertex was read."""
    sizes_used: list[float]
    """The sizes (N) the parabola was fitted to."""
    n_sizes: int
    """The budget's distinct sizes."""
    span_used: float
    """max N / min N of the sizes used."""
    grid_span: float
    """max N / min N of all the budget's sizes."""
    sizes_below: int
    """The budget's sizes below the vertex."""
    sizes_above: int
    """The budget's sizes above it."""
    used_below: int
    """Sizes used below the vertex."""
    used_above: int
    """Sizes used above it."""
    residual_rms: float | None
    """RMS deviation of the used sizes' mean losses from the parabola; null with 3 sizes."""
    seed_noise: float | None
    """Standard error of a size's mean loss from its seeds' scatter; null without two seeds of a
    size."""
    residual_to_noise: float | None
    """residual_rms / seed_noise."""
    warnings: list[str] = field(default_factory=list)
    """What makes the vertex doubtful, in words; [] when nothing does."""

    @property
    def well_supported(self) -> bool:
        return not self.warnings


@dataclass(frozen=True)
class VertexEstimator:
    """How every IsoFLOP vertex of one analysis is read: ``fit_vertex``'s estimator and window."""

    estimator: str = "window"
    window_factor: float = WINDOW_FACTOR

    def fit(self, log_n: np.ndarray, loss: np.ndarray,
            weights: np.ndarray | None = None) -> VertexFit | None:
        return fit_vertex(log_n, loss, weights, estimator=self.estimator,
                          window_factor=self.window_factor)


def check_estimator(estimator: str, window_factor: float) -> None:
    """Raise ValueError naming the bad value (the CLI turns it into its one-line error)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator {estimator!r} is invalid: allowed {', '.join(ESTIMATORS)}")
    if not (math.isfinite(window_factor) and window_factor > 1.0):
        raise ValueError(f"window factor {window_factor} is invalid: must be a number > 1")


def size_means(log_n: np.ndarray, loss: np.ndarray,
               weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct log N, weighted mean loss, total weight) over the points of weight > 0."""
    weights = np.ones_like(loss) if weights is None else np.asarray(weights, dtype=np.float64)
    keep = weights > 0
    sizes, index = np.unique(log_n[keep], return_inverse=True)
    total = np.bincount(index, weights=weights[keep], minlength=len(sizes))
    means = np.bincount(index, weights=weights[keep] * loss[keep], minlength=len(sizes)) / total
    return sizes, means, total


def fit_vertex(log_n: np.ndarray, loss: np.ndarray, weights: np.ndarray | None = None, *,
               estimator: str = "window", window_factor: float = WINDOW_FACTOR) -> VertexFit | None:
    """The minimum of loss against x = log N. ``weights`` count each point (a bootstrap's
    multiplicities). None with fewer than ``MIN_SIZES`` sizes, or when no parabola through
    them opens upward."""
    log_n = np.asarray(log_n, dtype=np.float64)
    loss = np.asarray(loss, dtype=np.float64)
    sizes, means, counts = size_means(log_n, loss, weights)
    if len(sizes) < MIN_SIZES:
        return None
    if estimator == "global":
        return _parabola_through(sizes, means, counts, np.ones(len(sizes), dtype=bool))
    half_width = math.log(window_factor)
    widened = False
    while True:
        fit = _recentred_window(sizes, means, counts, half_width)
        if fit is not None or half_width >= sizes[-1] - sizes[0]:
            if fit is not None:
                fit.widened = widened
            return fit
        half_width *= 1.5  # a window whose parabola opens downward: take in more sizes
        widened = True


def _recentred_window(sizes, means, counts, half_width: float) -> VertexFit | None:
    """Window on the best size, then on the vertex, until the sizes in it stop changing."""
    centre = sizes[int(np.argmin(means))]
    chosen = _window(sizes, centre, half_width)
    seen: list = []
    for refits in range(MAX_RECENTRING):
        fit = _parabola_through(sizes, means, counts, chosen)
        if fit is None:
            return None
        fit.recentred = refits
        # The vertex's own window, kept within the sampled sizes.
        centre = min(max(fit.log_params, sizes[0]), sizes[-1])
        following = _window(sizes, centre, half_width)
        if np.array_equal(following, chosen) or any(np.array_equal(following, s) for s in seen):
            return fit
        seen.append(chosen)
        chosen = following
    return fit


def _window(sizes: np.ndarray, centre: float, half_width: float) -> np.ndarray:
    """Mask of the sizes within ``half_width`` of ``centre`` in log N, or the MIN_SIZES nearest."""
    distance = np.abs(sizes - centre)
    chosen = distance <= half_width + 1e-12
    if chosen.sum() < MIN_SIZES:
        chosen = np.zeros(len(sizes), dtype=bool)
        chosen[np.argsort(distance, kind="stable")[:MIN_SIZES]] = True
    return chosen


def _parabola_through(sizes, means, counts, chosen) -> VertexFit | None:
    """Least squares on the size means weighted by their point counts: the same parabola as
    through the points themselves (the seeds' scatter about a mean does not move it)."""
    x, y, w = sizes[chosen], means[chosen], counts[chosen]
    # polyfit's weights multiply residuals: sqrt(count) counts a mean ``count`` times.
    c2, c1, c0 = np.polyfit(x, y, 2, w=np.sqrt(w))
    if c2 <= 0:
        return None
    x_star = -c1 / (2 * c2)
    return VertexFit(log_params=float(x_star), loss=float(c0 - c1 * c1 / (4 * c2)),
                     coefficients=[float(c2), float(c1), float(c0)],
                     sizes_used=[float(math.exp(v)) for v in x],
                     inside=bool(x.min() <= x_star <= x.max()))


def vertex_support(fit: VertexFit, log_n: np.ndarray, loss: np.ndarray,
                   seeds: np.ndarray | None = None, estimator: str = "window") -> VertexSupport:
    """The diagnostics of ``fit`` on the points it was fitted to (see ``VertexSupport``)."""
    log_n = np.asarray(log_n, dtype=np.float64)
    loss = np.asarray(loss, dtype=np.float64)
    sizes, means, counts = size_means(log_n, loss)
    used = fit.uses(np.exp(sizes))
    residuals = means[used] - np.polyval(fit.coefficients, sizes[used])
    dof = int(used.sum()) - 3
    # Unbiased for the noise of a mean when the parabola is right: sum of squares over dof.
    residual_rms = float(math.sqrt(np.sum(residuals ** 2) / dof)) if dof > 0 else None
    noise = _seed_noise(log_n, loss, seeds, counts[used])
    ratio = residual_rms / noise if residual_rms is not None and noise else None
    x_star = fit.log_params
    support = VertexSupport(
        estimator=estimator, sizes_used=fit.sizes_used, n_sizes=len(sizes),
        span_used=float(math.exp(sizes[used].max() - sizes[used].min())),
        grid_span=float(math.exp(sizes.max() - sizes.min())),
        sizes_below=int(np.sum(sizes < x_star)), sizes_above=int(np.sum(sizes > x_star)),
        used_below=int(np.sum(sizes[used] < x_star)), used_above=int(np.sum(sizes[used] > x_star)),
        residual_rms=residual_rms, seed_noise=noise, residual_to_noise=ratio)
    support.warnings = _warnings(fit, support, means, sizes)
    return support


def _seed_noise(log_n, loss, seeds, used_counts) -> float | None:
    """Standard error of a fitted size's mean loss: the pooled seed standard deviation over
    every size with two or more seeds, divided by sqrt(seeds per size)."""
    if seeds is None:
        return None
    groups: dict[float, list[float]] = {}
    for x, value in zip(log_n, loss):
        groups.setdefault(float(x), []).append(float(value))
    squares = sum(float(np.sum((np.array(v) - np.mean(v)) ** 2)) for v in groups.values())
    dof = sum(len(v) - 1 for v in groups.values())
    if dof == 0:
        return None
    return float(math.sqrt(squares / dof / float(np.mean(used_counts))))


def _warnings(fit: VertexFit, support: VertexSupport, means, sizes) -> list[str]:
    """Why a vertex is poorly supported, one phrase each; empty when it is not."""
    warnings = []
    if not fit.inside:
        warnings.append("vertex outside the sizes fitted (an extrapolation)")
    elif min(support.used_below, support.used_above) == 0:
        warnings.append("vertex on a size fitted, with none beyond it")
    best = int(np.argmin(means))
    if best in (0, len(sizes) - 1):
        warnings.append("lowest loss at the grid's "
                        + ("smallest" if best == 0 else "largest") + " size")
    if support.residual_to_noise is not None and support.residual_to_noise > MISFIT_RATIO:
        warnings.append(f"parabola misfits: residuals {support.residual_to_noise:.1f}x the "
                        "seed noise")
    if fit.widened:
        warnings.append("window widened: its parabola opened downward")
    return warnings
