"""The local launcher: runs train on this machine, in this process or in child processes.

Either way a run trains through ``train_planned_run``. With ``jobs=1`` (and no GPU pinning)
each run trains in this process (``train_fn``, a stand-in for tests, trains those that do not
branch); otherwise each trains in a child process, ``jobs`` at a time, with the CPUs shared
out as torch threads and, on a machine with GPUs, its own GPU slot (``CUDA_VISIBLE_DEVICES``;
``runs_per_gpu`` slots per GPU). A child whose run raises leaves its error line in a
``ChildFailure`` record its parent reads; a killed one is told by its exit code. A child dies
with its parent, even a parent killed with SIGKILL (it watches a pipe only the parent holds
open), so a rerun never races orphans.

On Linux the children are forked from a server process that has imported torch and moelab once
(multiprocessing's forkserver), so a run does not pay those imports: seconds each, which add up
over a sweep of many small runs. Each child is still a fresh process (a crash or a kill ends
that run only); where there is no forkserver, children are spawned and import for themselves.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from tqdm import tqdm

from moelab.errors import EXIT_PREEMPTED, MoelabError, Preempted
from moelab.runs.execute import Log, RunOutcome
from moelab.runs.failures import ChildFailure, child_error_line, raised_error_line
from moelab.runs.completion import has_checkpoint, is_complete
from moelab.runs.scratch import scratch_dir
from moelab.runs.spec import RunSpec
from moelab.runs.training import TrainFn, train_planned_run
from moelab.train.preemption import preemptible, preemption_requested

POLL_SECONDS = 0.1
PRELOAD = ("moelab.runs.training", "torch._dynamo")
"""What every child imports, imported once by the fork server: the training engine, and
``torch._dynamo``, which torch's optimizers import when they are built."""


def visible_gpus() -> list[str]:
    """The GPU ids runs may be pinned to: CUDA_VISIBLE_DEVICES when set, else every CUDA
    device torch sees (none on a CPU build)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [gpu.strip() for gpu in visible.split(",") if gpu.strip() and gpu.strip() != "-1"]
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
    train_fn: Optional[TrainFn] = None
    """Trains, in this process (``jobs=1``), each run that does not branch:
    ``train_fn(config, run_dir, resume=True)``; default ``moelab.train.train``."""
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
        """Train ``specs``; a SIGTERM or SIGUSR1 meanwhile preempts the runs in training (each
        saves its checkpoint at its next step boundary), starts no other, and raises
        ``Preempted`` once they have stopped."""
        with preemptible():
            self._launch(folder, specs, record, log)

    def _launch(self, folder: Path, specs: list[RunSpec], record: Callable[[RunOutcome], None],
                log: Log) -> None:
        if self._in_process():
            for index, spec in enumerate(specs, start=1):
                if preemption_requested():  # between two runs: nothing to save
                    raise _study_preempted()
                record(self._train_here(folder, spec, f"[{index}/{len(specs)}]", log))
            return
        gpus = self._gpus()
        slots: list[Optional[str]] = (list(gpu_slots(gpus, self.runs_per_gpu)) if gpus
                                      else [None] * self.jobs)
        if len(slots) < self.jobs:
            raise MoelabError(f"--jobs {self.jobs} is invalid with {len(gpus)} GPU(s) x "
                              f"--runs-per-gpu {self.runs_per_gpu}: allowed up to {len(slots)}")
        self._train_in_children(folder, specs, slots[:self.jobs], record, log)

    def _train_here(self, folder: Path, spec: RunSpec, counter: str, log: Log) -> RunOutcome:
        """One run in this process: the engine continues a torn run from its checkpoint,
        starts one without a checkpoint afresh, and refuses a folder of another config."""
        run_dir = folder / spec.run_dir
        log(f"{counter} {spec.name}: {_how(run_dir, spec)}")
        started = time.perf_counter()
        try:
            train_planned_run(folder, spec, train_fn=self.train_fn)
        except Preempted:
            # The run's own line says "rerun with --resume", a flag of train, not of the
            # study or sweep that trains it here: rerunning that same command resumes it.
            raise _study_preempted() from None
        except Exception as exc:  # noqa: BLE001 -- one failed run must not stop the others
            return RunOutcome(spec, "failed", time.perf_counter() - started,
                              raised_error_line(exc))
        return RunOutcome.completed(spec, time.perf_counter() - started, run_dir)

    def _train_in_children(self, folder: Path, specs: list[RunSpec], slots: list[Optional[str]],
                           record: Callable[[RunOutcome], None], log: Log) -> None:
        """Keep one child per free slot; poll their exit codes (no threads: bookkeeping stays
        on the calling thread)."""
        threads = threads_per_job(self.jobs)
        waiting = list(enumerate(specs, start=1))
        running: dict[int, _Child] = {}
        free = list(enumerate(slots))
        forwarded = False
        try:
            while waiting or running:
                if preemption_requested() and not forwarded:
                    waiting, forwarded = [], True
                    for child in running.values():
                        child.preempt()
                while waiting and free:
                    (slot_index, gpu), (index, spec) = free.pop(0), waiting.pop(0)
                    log(f"[{index}/{len(specs)}] {spec.name}: {_how(folder / spec.run_dir, spec)} "
                        f"({threads} thread{'s' if threads > 1 else ''}"
                        + (f", GPU {gpu})" if gpu is not None else ")"))
                    running[slot_index] = _Child.start(folder, spec, threads, gpu)
                for slot_index, child in list(running.items()):
                    if child.finished():
                        del running[slot_index]
                        free.append((slot_index, slots[slot_index]))
                        if forwarded and child.was_preempted():
                            child.close()  # not a failure: the rerun resumes it
                        else:
                            record(child.outcome(folder))
                time.sleep(POLL_SECONDS)
            if forwarded:
                raise _study_preempted()
        finally:
            for child in running.values():  # stopped by an exception or Ctrl-C: no orphans
                child.stop()


@dataclass
class _Child:
    spec: RunSpec
    process: multiprocessing.process.BaseProcess
    failure_path: Path
    """Where the child leaves a ``ChildFailure`` if its run raises."""
    lifeline: multiprocessing.connection.Connection
    """Held open while we live: the child dies when it closes."""
    started: float

    @classmethod
    def start(cls, folder: Path, spec: RunSpec, threads: int, gpu: Optional[str]) -> _Child:
        handle, failure_path = tempfile.mkstemp(prefix="moelab-train-", suffix=".json",
                                                dir=scratch_dir())
        os.close(handle)
        context = _child_context()
        lifeline, our_end = context.Pipe(duplex=False)  # we only hold our end, never write
        process = context.Process(
            target=_train_child, name=f"moelab train {spec.name}",
            args=(folder, spec, threads, gpu, Path(failure_path), lifeline))
        process.start()
        lifeline.close()
        return cls(spec, process, Path(failure_path), our_end, time.perf_counter())

    def finished(self) -> bool:
        return self.process.exitcode is not None

    def preempt(self) -> None:
        """Ask the run to stop at its next step boundary, its checkpoint saved (as SIGTERM
        asks ``moelab train``)."""
        if self.process.pid is None:  # never started: nothing to stop
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGTERM)

    def was_preempted(self) -> bool:
        """Whether a finished child stopped for a preemption: it saved and exited
        ``EXIT_PREEMPTED``, or the signal reached it before its run could note it."""
        return self.process.exitcode in (EXIT_PREEMPTED, -signal.SIGTERM, -signal.SIGUSR1)

    def close(self) -> None:
        self.process.close()  # its pipes and sentinel now, not when it is garbage-collected
        self.lifeline.close()
        self._take_failure()

    def outcome(self, folder: Path) -> RunOutcome:
        """A finished child's outcome: on failure, the error line it recorded, or what its
        exit code tells."""
        seconds = time.perf_counter() - self.started
        code = self.process.exitcode
        self.process.close()  # its pipes and sentinel now, not when it is garbage-collected
        self.lifeline.close()
        failure = self._take_failure()
        run_dir = folder / self.spec.run_dir
        if code == 0 and is_complete(run_dir):
            return RunOutcome.completed(self.spec, seconds, run_dir)
        if code is not None and code < 0:  # killed (out of memory, a signal): it recorded nothing
            error = f"moelab train was killed by signal {-code}"
        elif failure is not None:
            error = failure.error
        else:  # it failed while the fork server set it up: its error went to our stderr
            error = (f"moelab train exited with code {code} before it started (its error is in "
                     "this process's output)")
        return RunOutcome(self.spec, "failed", seconds, error)

    def stop(self) -> None:
        self.process.kill()
        self.process.join()
        self.lifeline.close()
        self._take_failure()

    def _take_failure(self) -> Optional[ChildFailure]:
        """The child's failure record, once: the file is removed as it is read."""
        try:
            return ChildFailure.read(self.failure_path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.failure_path)


def _child_context():
    """The forkserver (preloaded with ``PRELOAD``) on Linux, else spawn: never a plain fork of
    this process, whose threads and torch state a child must not inherit."""
    if not sys.platform.startswith("linux"):
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))  # used when the server starts: once a process
    return context


def _train_child(folder: Path, spec: RunSpec, threads: int, gpu: Optional[str],
                 failure_path: Path, lifeline) -> None:
    """A child's body: ``train_planned_run`` with ``threads`` torch threads and, if given, one
    GPU, its output discarded; a run that raises leaves a ``ChildFailure`` at
    ``failure_path`` and exits with code 1. It dies with the launcher."""
    _die_with_parent(lifeline)
    _discard_output()
    # tqdm's default lock is a multiprocessing semaphore, which a child killed with its parent
    # could not unregister: the resource tracker would warn of it. A thread lock does here.
    tqdm.set_lock(threading.RLock())
    os.environ["OMP_NUM_THREADS"] = str(threads)  # for anything this run starts in turn
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu  # before CUDA starts: the server never starts it
    try:
        # The threads are set again here: the server read OMP_NUM_THREADS at its own start.
        train_planned_run(folder, spec, threads)
    except Preempted:
        sys.exit(EXIT_PREEMPTED)  # its checkpoint is saved; the parent stops the study
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 -- told to the parent
        ChildFailure(child_error_line(exc)).write(failure_path)
        sys.exit(1)


def _study_preempted() -> Preempted:
    return Preempted(f"stopped by {preemption_requested()}, every run in training at a "
                     f"checkpoint: rerun the same command to resume them")


def _discard_output() -> None:
    """A child's progress bars and prints would interleave with the launcher's log."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
        os.dup2(devnull, stream.fileno())
    os.close(devnull)


def _how(run_dir: Path, spec: RunSpec) -> str:
    if has_checkpoint(run_dir):
        return "resuming from its checkpoint"
    if spec.branch is not None:
        return f"branching from {spec.branch.source} at step {spec.branch.step}"
    if spec.finetune is not None:
        return f"fine-tuning {spec.finetune.source} on {spec.finetune.data}"
    return "training"


def _die_with_parent(lifeline) -> None:
    """End this process at once when the launcher dies, even by SIGKILL: its end of
    ``lifeline`` closes then, and a thread waiting on ours sees the end of the pipe. (Linux's
    parent-death signal would not do: a forked child's parent is the fork server, which the
    children themselves keep alive.)"""

    def wait_for_the_end() -> None:
        with contextlib.suppress(EOFError, OSError):
            while True:
                lifeline.recv_bytes()
        os._exit(1)  # no cleanup: the run's files are written atomically, a rerun resumes it

    threading.Thread(target=wait_for_the_end, name="lifeline", daemon=True).start()
