"""The local launcher: runs train on this machine, in this process or in child processes.

With ``jobs=1`` (and no GPU pinning) each run trains in this process through ``train_fn``;
otherwise each is a ``moelab train CONFIG --out RUN --resume`` child, ``jobs`` at a time, with
the CPUs shared out as torch threads and, on a machine with GPUs, its own GPU slot
(``CUDA_VISIBLE_DEVICES``; ``runs_per_gpu`` slots per GPU). A child dies with its parent, even
a parent killed with SIGKILL (Linux's parent-death signal), so a rerun never races orphans.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from moelab.errors import MoelabError
from moelab.runs.execute import Log, RunOutcome, one_line_error
from moelab.runs.launchers import remote_arguments, train_arguments, train_planned_run
from moelab.runs.records import has_checkpoint, is_complete
from moelab.runs.spec import RunSpec
from moelab.train.run_folder import RunFolder

POLL_SECONDS = 0.1


def visible_gpus() -> list[str]:
    """The GPU ids runs may be pinned to: CUDA_VISIBLE_DEVICES when set, else every CUDA
    device torch sees (none on a CPU build)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [gpu.strip() for gpu in visible.split(",") if gpu.strip() and gpu.strip() != "-1"]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


def gpu_slots(gpus: list[str], runs_per_gpu: int) -> list[str]:
    """One entry per run that may train at once: each GPU ``runs_per_gpu`` times, GPUs
    interleaved so that N runs spread over N GPUs before any GPU takes a second."""
    return [gpu for _ in range(runs_per_gpu) for gpu in gpus]


def threads_per_job(jobs: int) -> int:
    """Torch threads for each of ``jobs`` parallel runs: OMP_NUM_THREADS when the caller set it,
    else the CPUs shared out (at least 1), so the runs do not oversubscribe the cores."""
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return int(os.environ["OMP_NUM_THREADS"])
    return max(1, (os.cpu_count() or 1) // jobs)


@dataclass
class LocalLauncher:
    jobs: int = 1
    runs_per_gpu: int = 1
    train_fn: Optional[Callable[..., dict]] = None
    """Trains one run in this process (``jobs=1``): ``train_fn(config, run_dir, resume=True)``;
    default ``moelab.train.train``."""
    gpus: Optional[list[str]] = field(default=None)
    """GPU ids to pin runs to; None: ``visible_gpus()``."""

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise MoelabError(f"--jobs {self.jobs} is invalid: allowed 1 or more")
        if self.runs_per_gpu < 1:
            raise MoelabError(f"--runs-per-gpu {self.runs_per_gpu} is invalid: allowed 1 or more")

    def describe(self) -> str:
        return "in this process" if self._in_process() else f"{self.jobs} at a time"

    def _in_process(self) -> bool:
        """One run at a time trains here, unless it must be pinned to one of several GPUs."""
        return self.jobs == 1 and (self.train_fn is not None or len(self._gpus()) <= 1)

    def _gpus(self) -> list[str]:
        return visible_gpus() if self.gpus is None else list(self.gpus)

    def launch(self, folder: Path, specs: list[RunSpec], record: Callable[[RunOutcome], None],
               log: Log) -> None:
        if self._in_process():
            from moelab.train import train

            train_fn = self.train_fn or train
            for index, spec in enumerate(specs, start=1):
                record(_train_here(train_fn, folder, spec, f"[{index}/{len(specs)}]", log))
            return
        gpus = self._gpus()
        slots: list[Optional[str]] = gpu_slots(gpus, self.runs_per_gpu) if gpus else [None] * self.jobs
        if len(slots) < self.jobs:
            raise MoelabError(f"--jobs {self.jobs} is invalid with {len(gpus)} GPU(s) x "
                              f"--runs-per-gpu {self.runs_per_gpu}: allowed up to {len(slots)}")
        self._train_in_children(folder, specs, slots[:self.jobs], record, log)

    def _train_in_children(self, folder: Path, specs: list[RunSpec], slots: list[Optional[str]],
                           record: Callable[[RunOutcome], None], log: Log) -> None:
        """Keep one child per free slot; poll (children only, no threads: a parent-death
        signal follows the thread that forked, so the main thread forks them all)."""
        threads = threads_per_job(self.jobs)
        waiting = list(enumerate(specs, start=1))
        running: dict[int, _Child] = {}
        free = list(enumerate(slots))
        try:
            while waiting or running:
                while waiting and free:
                    (slot_index, gpu), (index, spec) = free.pop(0), waiting.pop(0)
                    log(f"[{index}/{len(specs)}] {spec.name}: {_how(folder / spec.run_dir, spec)} "
                        f"({threads} thread{'s' if threads > 1 else ''}"
                        + (f", GPU {gpu})" if gpu is not None else ")"))
                    running[slot_index] = _Child.start(folder, spec, threads, gpu)
                for slot_index, child in list(running.items()):
                    if child.process.poll() is not None:
                        del running[slot_index]
                        free.append((slot_index, slots[slot_index]))
                        record(child.outcome(folder))
                time.sleep(POLL_SECONDS)
        finally:
            for child in running.values():  # stopped by an exception or Ctrl-C: no orphans
                child.stop()


def _train_here(train_fn: Callable[..., dict], folder: Path, spec: RunSpec, counter: str,
                log: Log) -> RunOutcome:
    """``resume=True`` always: the engine continues a torn run from its checkpoint, starts
    one without a checkpoint afresh, and refuses a folder of another config."""
    run_dir = folder / spec.run_dir
    log(f"{counter} {spec.name}: {_how(run_dir, spec)}")
    started = time.perf_counter()
    try:
        if spec.branch is None:
            summary = train_fn(spec.config, run_dir, resume=True)
        else:  # a branch trains as the workers do: from its source's kept checkpoint
            summary = train_planned_run(*remote_arguments(folder, spec, None))
    except Exception as exc:  # noqa: BLE001 -- one failed run must not stop the others
        return RunOutcome(spec, "failed", time.perf_counter() - started, one_line_error(exc))
    return RunOutcome(spec, "complete", time.perf_counter() - started, summary=summary)


@dataclass
class _Child:
    spec: RunSpec
    process: subprocess.Popen
    output: object
    started: float

    @classmethod
    def start(cls, folder: Path, spec: RunSpec, threads: int, gpu: Optional[str]) -> "_Child":
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        command = [sys.executable, "-m", "moelab", "train", *train_arguments(folder, spec)]
        # A file, not a pipe: a chatty child would block on a full pipe nobody reads until the end.
        output = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env,
                                   preexec_fn=_die_with_parent(os.getpid()))
        return cls(spec, process, output, time.perf_counter())

    def outcome(self, folder: Path) -> RunOutcome:
        """A finished child's outcome: its one-line error (the CLI's last line) on failure."""
        seconds = time.perf_counter() - self.started
        self.output.seek(0)
        lines = self.output.read().strip().splitlines()
        self.output.close()
        run_dir = folder / self.spec.run_dir
        code = self.process.returncode
        if code == 0 and is_complete(run_dir):
            return RunOutcome(self.spec, "complete", seconds, summary=RunFolder(run_dir).read_summary())
        if code < 0:  # killed (out of memory, a signal): its output ends anywhere
            error = f"moelab train was killed by signal {-code}"
        else:
            error = lines[-1] if lines else f"moelab train exited with code {code}"
        return RunOutcome(self.spec, "failed", seconds, error)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.output.close()


def _how(run_dir: Path, spec: RunSpec) -> str:
    if has_checkpoint(run_dir):
        return "resuming from its checkpoint"
    if spec.branch is not None:
        return f"branching from {spec.branch.source} at step {spec.branch.step}"
    return "training"


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> Optional[Callable[[], None]]:
    """A preexec function asking Linux to SIGKILL the child when its parent dies; None where
    there is no such signal (the launcher's ``finally`` then covers exceptions and Ctrl-C)."""
    if not sys.platform.startswith("linux"):
        return None

    def ask() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the request took effect
            os._exit(1)

    return ask
