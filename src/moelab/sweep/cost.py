"""What a sweep grid costs before it runs (``moelab sweep-sparsity --dry-run``): its runs, the
tokens they train, their training FLOPs, and the time, priced at the tokens/s a table of
measured shapes gives: ``--speeds``, or without it the committed table (``moelab.runs.estimate``),
said to be an estimate.

The time prices every run's trained tokens (a cooldown branch trains only its steps after the
branch point) at the tokens/s of its shape: the median over the table's rows of that shape,
interpolated log-log in N_active between the shapes of the same sparsity (the nearest sparsity
when the table has not this one), extrapolated along the last segment above them and flat
below them. Smaller shapes are overhead-bound (eager, a 68K and a 41K model trained only 1.08x
and 1.2x the 98K model's tokens/s, timed with `moelab throughput --clock process`), so an estimate for
them errs long. Each
run adds ``per_run_seconds`` for its start, compile and evals; a grid's finetunes run eager,
each with a fixed overhead.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Optional

from moelab.accounting import count_params, flops_per_token
from moelab.errors import MoelabError, short_repr
from moelab.report import format_count
from moelab.runs.completion import runs_left
from moelab.runs.estimate import (
    Speeds, already_complete_text, stored_speeds, time_line, tokens_per_s, tokens_trained,
)
from moelab.runs.spec import RunSpec
from moelab.scaling.table import read_csv_rows
from moelab.sweep.grid import SweepGrid
from moelab.sweep.plan import SweepPoint, finetune_specs

PER_RUN_SECONDS = 2.0
"""Start, cached compile and evals per run: the cpu sweep's runs took 5,005 CPU-s
(docs/findings/sweeps-hand-read.md, "Where the 43 minutes go"), its trained tokens at its shapes'
median speeds 4,827, so 1.9 s each (a shape's first, uncached compile costs 13-22 s more)."""
EAGER_SLOWDOWN = 5629 / 5005
"""A grid's finetunes run eager: the cpu sweep's runs took 5,629 CPU-s eager, 5,005 compiled."""
FINETUNE_OVERHEAD_SECONDS = 2.5
"""Per finetune, beyond its steps: building its token cache of the adaptation set and scoring
the source's weights (the pilot's 100-step finetunes took 3.8-7.0 s on a busy CPU, their tokens
at the shapes' eager speeds about 3 s; experiments/results/finetune_pilot.json)."""
SPEED_COLUMNS = ("S", "N_active", "tokens_per_s")
"""What a speeds table needs: a sweep's results.csv or a ``moelab throughput`` CSV has them."""



@dataclass(frozen=True)
class GridCost:
    """The plan's size: runs, tokens trained (a branch only after its branch step) and as
    separate runs would train them, and training FLOPs (6 N_active x tokens trained)."""

    runs: int
    tokens_trained: int
    tokens_separate: int
    flops_6n: float

    def text(self, runs_note: str = "") -> str:
        return (f"{self.runs} runs{runs_note}, {format_count(self.tokens_trained)} tokens trained "
                f"({format_count(self.tokens_separate)} as separate runs), "
                f"{self.flops_6n:.3g} training FLOPs (6ND)")


@dataclass(frozen=True)
class ShapeTime:
    size: str
    sparsity: float
    num_experts: int
    active_params: int
    seconds: float

    def text(self) -> str:
        return (f"{self.size:>4} S={self.sparsity:<6g} E={self.num_experts:<3} "
                f"N_active={self.active_params:>9,}: {self.seconds:7.0f} s")


@dataclass(frozen=True)
class TimeEstimate:
    """Seconds of training, one run at a time: per shape (its runs summed) and the finetunes."""

    shapes: list[ShapeTime] = field(default_factory=list)
    finetune_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        return sum(shape.seconds for shape in self.shapes) + self.finetune_seconds


def grid_cost(specs: list[RunSpec]) -> GridCost:
    trained = [tokens_trained(spec) for spec in specs]
    flops = sum(flops_per_token(spec.config.model).six_n * tokens
                for spec, tokens in zip(specs, trained))
    return GridCost(len(specs), sum(trained),
                    sum(spec.config.train.max_tokens for spec in specs), float(flops))


def read_speeds(path: Path) -> Speeds:
    """The median tokens/s of each (S, N_active) shape of a table; one line for a bad table."""
    columns, rows = read_csv_rows(Path(path))
    missing = [name for name in SPEED_COLUMNS if name not in columns]
    if missing:
        raise MoelabError(f"--speeds {path} has no {', '.join(missing)} column: give a sweep's "
                          "results.csv or a moelab throughput CSV")
    by_shape: dict[tuple[float, float], list[float]] = defaultdict(list)
    for line, row in enumerate(rows, start=2):
        if row["tokens_per_s"]:  # an older run without a speed
            by_shape[_shape_key(path, line, row)].append(_positive(path, line, row, "tokens_per_s"))
    if not by_shape:
        raise MoelabError(f"--speeds {path} has no row with tokens_per_s")
    speeds: Speeds = defaultdict(list)
    for (sparsity, active), values in sorted(by_shape.items()):
        speeds[sparsity].append((active, float(median(values))))
    return dict(speeds)


def _shape_key(path: Path, line: int, row: dict[str, str]) -> tuple[float, float]:
    sparsity = _number(path, line, row, "S")
    if not 0 <= sparsity < 1:
        raise MoelabError(f"--speeds {path} line {line}: S {short_repr(row['S'])} is invalid: "
                          "allowed 0 <= S < 1")
    return sparsity, _positive(path, line, row, "N_active")


def _positive(path: Path, line: int, row: dict[str, str], column: str) -> float:
    value = _number(path, line, row, column)
    if not value > 0:
        raise MoelabError(f"--speeds {path} line {line}: {column} {short_repr(row[column])} is "
                          "invalid: allowed a number > 0")
    return value


def _number(path: Path, line: int, row: dict[str, str], column: str) -> float:
    try:
        value = float(row[column])
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value):
        raise MoelabError(f"--speeds {path} line {line}: {column} {short_repr(row[column])} is "
                          "invalid: allowed a finite number")
    return value


def time_estimate(grid: SweepGrid, points: list[SweepPoint], specs: list[RunSpec],
                  speeds: Speeds, per_run_seconds: float = PER_RUN_SECONDS,
                  folder: Optional[Path] = None) -> TimeEstimate:
    """Seconds to train the planned runs (and the grid's finetunes) at ``speeds``; with
    ``folder``, only those it does not hold complete (the real run skips the others)."""
    per_shape: dict[tuple[str, float, int, int], float] = defaultdict(float)
    left = _names_left(folder, specs)
    for point, spec in zip(points, specs):
        if spec.name not in left:
            continue
        active = count_params(spec.config.model).active
        speed = tokens_per_s(speeds, point.sparsity, active)
        per_shape[(point.size, point.sparsity, point.num_experts, active)] += (
            tokens_trained(spec) / speed + per_run_seconds)
    shapes = [ShapeTime(*key, seconds) for key, seconds in sorted(per_shape.items())]
    return TimeEstimate(shapes, _finetune_seconds(grid, points, specs, speeds, folder))


def _names_left(folder: Optional[Path], specs: list[RunSpec]) -> set[str]:
    return {spec.name for spec in (specs if folder is None else runs_left(folder, specs))}


def _finetune_seconds(grid: SweepGrid, points: list[SweepPoint], specs: list[RunSpec],
                      speeds: Speeds, folder: Optional[Path]) -> float:
    """One eager finetune per run (not complete in ``folder``), at its shape's speed, each with
    its fixed overhead."""
    if grid.finetune is None:
        return 0.0
    seconds = 0.0
    finetunes = finetune_specs(grid.finetune, specs)
    left = _names_left(folder, finetunes)
    for point, spec in zip(points, finetunes):
        if spec.name not in left:
            continue
        active = count_params(spec.config.model).active
        speed = tokens_per_s(speeds, point.sparsity, active) / EAGER_SLOWDOWN
        seconds += spec.config.train.max_tokens / speed + FINETUNE_OVERHEAD_SECONDS
    return seconds


def dry_run_cost_lines(grid: SweepGrid, points: list[SweepPoint], specs: list[RunSpec],
                       speeds_path: Optional[Path], per_run_seconds: float,
                       jobs: int, folder: Path) -> list[str]:
    """What ``--dry-run`` prints after the runs: the cost of those ``folder`` does not hold
    complete (what the real run trains), and with a speeds table the time."""
    left = runs_left(folder, specs)
    note = already_complete_text(len(specs) - len(left), folder)
    lines = [f"cost: {grid_cost(left).text(note)}"]
    if speeds_path is None:  # the committed table: an estimate, its basis said
        stored = stored_speeds()
        estimate = time_estimate(grid, points, specs, stored.speeds, per_run_seconds, folder)
        return lines + [time_line(estimate.seconds, jobs) + " (plus the fits)",
                        stored.basis(per_run_seconds) + " (--speeds CSV: a table of this "
                        "machine's)"]
    estimate = time_estimate(grid, points, specs, read_speeds(speeds_path), per_run_seconds,
                             folder)
    lines += [shape.text() for shape in estimate.shapes]
    if estimate.finetune_seconds:
        lines.append(f"finetunes, one per run: {estimate.finetune_seconds:7.0f} s")
    lines.append(f"time at the speeds of {speeds_path}: about {estimate.seconds:,.0f} s one run "
                 f"at a time, {estimate.seconds / 60 / jobs:.0f} min with --jobs {jobs} "
                 "(plus the fits)")
    return lines
