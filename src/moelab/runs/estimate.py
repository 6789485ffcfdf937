"""A plan's wall time, estimated before it runs (``--dry-run`` of a study or a sweep).

Each run's tokens are priced at the tokens/s of its shape, read off a speed table: the median
over the table's rows of the shape, interpolated log-log in N_active between the shapes of the
nearest measured sparsity, extrapolated along the last segment above them and flat below them
(small shapes are overhead-bound, so an estimate for them errs long). Each run adds a fixed
number of seconds for its start, evaluations and checkpoints.

Without a table of this machine's own (a sweep's ``--speeds``), the table is the committed one,
``moelab/presets/measured_speeds.json``: the median tokens/s of every committed run of each
shape on the 2-core x86-64 CPU moelab's results were measured on (studies and sweeps, eager and
compiled, one or two runs at a time), and the median seconds a study run spent beyond training,
written from experiments/results/ by ``benchmarks/preset_times.py``. Another machine, or the
same one busy, runs at other speeds: the estimate says so, and names its basis.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from moelab.accounting import count_params
from moelab.errors import MoelabError
from moelab.runs.spec import RunSpec

Speeds = dict[float, list[tuple[float, float]]]
"""Per sparsity, (N_active, median tokens/s) of each measured shape, by N_active."""
STORED_SPEEDS = "measured_speeds.json"
"""The committed speed table, a file of the ``moelab.presets`` package."""


@dataclass(frozen=True)
class StoredSpeeds:
    """The committed speed table: its shapes, the seconds a run adds, and what it was read from."""

    speeds: Speeds
    seconds_per_run: float
    runs: int
    """The committed runs its medians are taken over."""

    def basis(self, seconds_per_run: float) -> str:
        """What the estimate stands on, said after it."""
        return (f"  an estimate: the median tokens/s of {self.runs:,} committed runs at the "
                f"nearest measured shapes on a 2-core x86-64 CPU (moelab/presets/{STORED_SPEEDS})"
                f", plus {seconds_per_run:g} s per run; another machine, or a busy one, differs")


def stored_speeds() -> StoredSpeeds:
    """The committed speed table (``benchmarks/preset_times.py`` writes it)."""
    try:
        record = json.loads(resources.files("moelab.presets").joinpath(STORED_SPEEDS).read_text())
        speeds: dict[float, list[tuple[float, float]]] = {}
        for shape in record["shapes"]:
            speeds.setdefault(float(shape["S"]), []).append(
                (float(shape["N_active"]), float(shape["tokens_per_s"])))
        return StoredSpeeds({s: sorted(rows) for s, rows in sorted(speeds.items())},
                            float(record["seconds_beyond_training"]), int(record["runs"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MoelabError(f"the installed moelab's {STORED_SPEEDS} cannot be read ({exc}): "
                          "reinstall moelab") from None


def tokens_per_s(speeds: Speeds, sparsity: float, active: float) -> float:
    """Log-log interpolation in N_active among the shapes of the nearest measured sparsity."""
    nearest = min(speeds, key=lambda s: abs(s - sparsity))
    x = [math.log(a) for a, _ in speeds[nearest]]
    y = [math.log(t) for _, t in speeds[nearest]]
    at = math.log(active)
    if at <= x[0]:  # below the smallest shape, overhead dominates: no faster than it
        return math.exp(y[0])
    if at >= x[-1]:  # above the largest, along the last segment (flat with one shape)
        slope = (y[-1] - y[-2]) / (x[-1] - x[-2]) if len(x) > 1 else 0.0
        return math.exp(y[-1] + slope * (at - x[-1]))
    upper = next(i for i, value in enumerate(x) if value >= at)
    share = (at - x[upper - 1]) / (x[upper] - x[upper - 1])
    return math.exp(y[upper - 1] + share * (y[upper] - y[upper - 1]))


def run_seconds(speeds: Speeds, sparsity: float, active: float, tokens: int,
                seconds_per_run: float) -> float:
    """One run's estimated seconds: its tokens at its shape's speed, plus the fixed part."""
    return tokens / tokens_per_s(speeds, sparsity, active) + seconds_per_run


def time_line(seconds: float, jobs: int) -> str:
    """The estimate as ``--dry-run`` prints it (its basis follows on the next line)."""
    minutes = seconds / 60 / jobs
    return (f"estimated time: about {seconds:,.0f} s one run at a time, "
            f"{minutes:.{1 if minutes < 10 else 0}f} min with --jobs {jobs}")


def tokens_trained(spec: RunSpec) -> int:
    """A run's tokens; a branch's only after its branch step (the trunk trained the rest)."""
    train = spec.config.train
    tokens = train.max_tokens
    if spec.branch is not None:
        tokens -= spec.branch.step * train.batch_size * spec.config.model.max_seq_len
    return tokens


def sparsity_of(spec: RunSpec) -> float:
    """S = (E - k) / E of the run's routed experts; 0 for a dense run."""
    moe = spec.config.model.moe
    return 0.0 if moe is None else (moe.num_experts - moe.top_k) / moe.num_experts


def plan_seconds(specs: list[RunSpec], speeds: Speeds, seconds_per_run: float) -> float:
    """The runs' estimated seconds, one at a time."""
    return sum(run_seconds(speeds, sparsity_of(spec), count_params(spec.config.model).active,
                           tokens_trained(spec), seconds_per_run) for spec in specs)


def already_complete_text(done: int, folder: Path) -> str:
    """What a dry run's cost line adds when ``folder`` already holds ``done`` of the planned runs
    complete (they are not priced: the real run skips them); nothing when it holds none."""
    return f" to train ({done} already complete in {folder})" if done else ""
