"""The SLURM launcher: the plan's runs as one job array, submitted through submitit.

Each array task trains one run with ``cpus_per_run`` CPUs (and ``gpus_per_run`` GPUs). On
preemption or when its time limit is reached, submitit requeues the task (``checkpoint`` below
resubmits the same call) and the rerun resumes the run from its last checkpoint. Job logs go
to ``<folder>/slurm/``. ``launch`` waits for the array's tasks and records each; ``submit``
(``--detach``) returns once the array is submitted, and the run folders its tasks write are
what a later ``moelab report`` reads. ``cluster="local"`` runs the same array through submitit's local
executor: the way to try a setup, and how the tests exercise this launcher.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from moelab.errors import MoelabError, short_repr
from moelab.runs.execute import Log, RunOutcome
from moelab.runs.failures import raised_error_line
from moelab.runs.spec import RunSpec
from moelab.runs.training import train_planned_run
from moelab.train.run_summary import RunSummary


def _import_submitit():
    # Imported when a plan launches on SLURM: an optional dependency.
    try:
        import submitit
    except ImportError:
        raise MoelabError("--launcher slurm needs submitit: pip install 'moelab[slurm]'") from None
    return submitit


class RequeueableRun:
    """``train_planned_run`` as a submitit checkpointable: requeued as the same call."""

    def __call__(self, folder: Path, spec: RunSpec, threads: int) -> Optional[RunSummary]:
        return train_planned_run(folder, spec, threads)

    def checkpoint(self, *args, **kwargs):
        submitit = _import_submitit()
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


@dataclass
class SlurmLauncher:
    cluster: str = "slurm"
    """'slurm', or 'local' for submitit's local executor."""
    partition: Optional[str] = None
    time_minutes: int = 24 * 60
    cpus_per_run: int = 1
    gpus_per_run: int = 0
    account: Optional[str] = None
    qos: Optional[str] = None
    mem: Optional[str] = None
    """Memory per run as sbatch --mem takes it (64G, 500M); None: the partition's default."""
    max_parallel: Optional[int] = None
    """At most this many array tasks at once (SLURM's %N); None: the scheduler decides."""
    sbatch_options: dict = field(default_factory=dict)
    """More sbatch options, written as ``#SBATCH --KEY=VALUE`` (``--KEY`` for True)."""
    extra: dict = field(default_factory=dict)
    """More submitit parameters (``slurm_setup``, ...)."""

    def __post_init__(self) -> None:
        if self.cluster not in ("slurm", "local"):
            raise MoelabError(f"cluster={short_repr(self.cluster)} is invalid: allowed slurm, local")
        if self.cluster == "slurm" and shutil.which("sbatch") is None:  # before anything is planned
            raise MoelabError("--launcher slurm needs SLURM on this machine (no sbatch found): "
                              "run it on a login node, or try the array here with --slurm-local")

    def describe(self) -> str:
        where = "submitit's local executor" if self.cluster == "local" else "a SLURM job array"
        return f"{where}, {self.cpus_per_run} CPU{'s' if self.cpus_per_run > 1 else ''} per run"

    def launch(self, folder: Path, specs: list[RunSpec], record: Callable[[RunOutcome], None],
               log: Log) -> None:
        """Submit the runs as one job array and record each as its task ends."""
        submitit = _import_submitit()
        jobs = self._submit(folder, specs)
        log(f"submitted {len(jobs)} runs as job {array_id(jobs)}" if jobs else "")
        started = time.perf_counter()
        by_id = {job.job_id: spec for job, spec in zip(jobs, specs)}
        for job in submitit.helpers.as_completed(jobs):
            record(_outcome(job, folder, by_id[job.job_id], time.perf_counter() - started))

    def submit(self, folder: Path, specs: list[RunSpec]) -> str:
        """Submit the runs as one job array and return its job id at once (``--detach``):
        nothing here waits for them; each task writes its run folder, and a later
        ``moelab report`` reads them."""
        return array_id(self._submit(folder, specs))

    def _submit(self, folder: Path, specs: list[RunSpec]) -> list:
        submitit = _import_submitit()
        refused = io.StringIO()  # submitit prints sbatch's complaint too: it goes in the line
        try:
            with contextlib.redirect_stderr(refused):
                executor = submitit.AutoExecutor(folder=folder / "slurm", cluster=self.cluster)
                executor.update_parameters(**self.parameters())
                return executor.map_array(RequeueableRun(), [folder] * len(specs), specs,
                                          [self.cpus_per_run] * len(specs))
        except RuntimeError as exc:  # submitit found no srun; sbatch refused the array
            lines = [line for line in (str(exc) or refused.getvalue()).splitlines() if line.strip()]
            raise MoelabError(f"--launcher slurm: the job array was not submitted: "
                              f"{lines[-1].strip() if lines else type(exc).__name__}") from None

    def parameters(self) -> dict:
        """The submitit parameters of each array task (``slurm_*`` ones only on SLURM:
        submitit's local executor leaves them out)."""
        parameters = {"timeout_min": self.time_minutes, "cpus_per_task": self.cpus_per_run,
                      "tasks_per_node": 1, "nodes": 1, **self.extra}
        if self.gpus_per_run:
            parameters["gpus_per_node"] = self.gpus_per_run
        if self.cluster != "local":
            parameters["slurm_signal_delay_s"] = 120  # time to requeue before the kill
            slurm = {"partition": self.partition, "account": self.account, "qos": self.qos,
                     "mem": self.mem, "array_parallelism": self.max_parallel,
                     "additional_parameters": self.sbatch_options or None}
            parameters.update({f"slurm_{key}": value for key, value in slurm.items()
                               if value is not None})
        return parameters


def array_id(jobs: list) -> str:
    """The job id of the array (its tasks' ids are ID_0, ID_1, ...)."""
    return jobs[0].job_id.split("_")[0] if jobs else ""


def _outcome(job, folder: Path, spec: RunSpec, seconds: float) -> RunOutcome:
    try:
        job.result()
    except Exception as exc:  # noqa: BLE001 -- submitit re-raises the job's error (or its death)
        return RunOutcome(spec, "failed", seconds, _job_error(exc))
    return RunOutcome.completed(spec, seconds, folder / spec.run_dir)


def _job_error(exc: BaseException) -> str:
    """submitit's FailedJobError carries the job's traceback; its last line is the error."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    error_lines = [line for line in lines if "Error" in line.split(":")[0]]
    return error_lines[-1] if error_lines else raised_error_line(exc)
