"""The Ray launcher: one Ray task per run, with its CPUs (and GPUs) reserved, on a cluster.

``address`` joins an existing cluster (``ray start --head`` on one machine, ``ray start
--address ...`` on the others; the run folders must be on storage every node sees); without
it, and with no Ray already initialised in this process, ``ray.init()`` starts a local one for
the plan. A task whose worker dies (a lost node, out of memory, kill -9) is retried up to
``max_retries`` times; the retry resumes the run from its last checkpoint, so it ends
identical to an uninterrupted run. An error the run raises itself (a bad config) is not retried.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from moelab.errors import MoelabError, short_repr
from moelab.runs.execute import Log, RunOutcome
from moelab.runs.failures import raised_error_line
from moelab.runs.spec import RunSpec
from moelab.runs.training import train_planned_run


@dataclass
class RayLauncher:
    address: Optional[str] = None
    cpus_per_run: int = 1
    """CPUs Ray reserves per run, and its torch thread count."""
    gpus_per_run: float = 0
    """GPUs per run; fractions (0.25) put several small runs on one GPU."""
    max_retries: int = 3

    def __post_init__(self) -> None:
        _check_reachable(self.address)  # before anything is planned or prepared

    def describe(self) -> str:
        where = f"Ray cluster at {self.address}" if self.address else "Ray"
        gpus = f", {self.gpus_per_run:g} GPU" if self.gpus_per_run else ""
        return f"{where}, {self.cpus_per_run} CPU{gpus} per run"

    def launch(self, folder: Path, specs: list[RunSpec], record: Callable[[RunOutcome], None],
               log: Log) -> None:
        ray = _import_ray()
        started_here = not ray.is_initialized()
        if started_here:
            try:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise MoelabError(f"--ray-address {self.address}: cannot join the Ray cluster "
                                  f"({raised_error_line(exc)})") from None
        try:
            self._check_feasible(ray.cluster_resources())
            remote = ray.remote(train_planned_run).options(
                num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run,
                max_retries=self.max_retries, retry_exceptions=False)
            pending = {}
            for index, spec in enumerate(specs, start=1):
                log(f"[{index}/{len(specs)}] {spec.name}: submitted")
                ref = remote.remote(folder, spec, self.cpus_per_run)
                pending[ref] = (spec, time.perf_counter())
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                spec, started = pending.pop(ready[0])
                record(_outcome(ray, ready[0], folder, spec, time.perf_counter() - started))
        finally:
            if started_here:
                ray.shutdown()

    def _check_feasible(self, resources: dict) -> None:
        """A run asking for more than the whole cluster has would wait forever: refuse it (an
        autoscaling cluster reports what it has now)."""
        for option, asked, name in (("--cpus-per-run", self.cpus_per_run, "CPU"),
                                    ("--gpus-per-run", self.gpus_per_run, "GPU")):
            available = resources.get(name, 0)
            if asked > available:
                raise MoelabError(f"{option} {asked:g} is invalid: the Ray cluster has "
                                  f"{available:g} {name}s in all")


def _outcome(ray, ref, folder: Path, spec: RunSpec, seconds: float) -> RunOutcome:
    try:
        ray.get(ref)
    except ray.exceptions.RayTaskError as exc:  # the run raised: its own error, one line
        return RunOutcome(spec, "failed", seconds, raised_error_line(exc.cause or exc))
    except ray.exceptions.RayError as exc:  # the worker died more often than it was retried
        return RunOutcome(spec, "failed", seconds, raised_error_line(exc))
    return RunOutcome.completed(spec, seconds, folder / spec.run_dir)


def _host_and_port(address: Optional[str]) -> Optional[tuple[str, str]]:
    """(host, port) of a HOST:PORT or ray://HOST:PORT address; None for auto, local or none."""
    if not address or address in ("auto", "local"):
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise MoelabError(f"--ray-address {short_repr(address)} is invalid: expected HOST:PORT, "
                          "ray://HOST:PORT or auto")
    return host, port


def _check_reachable(address: Optional[str], timeout_s: float = 5.0) -> None:
    """A HOST:PORT address that nothing answers on is a one-line error within seconds (Ray
    itself retries for minutes); ``auto``, ``local`` and no address are left to Ray."""
    host_and_port = _host_and_port(address)
    if host_and_port is None:
        return
    host, port = host_and_port
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise MoelabError(f"--ray-address {address}: no Ray cluster answers there "
                          f"({exc.strerror or exc}); start one with 'ray start --head'") from None


def _import_ray():
    # Imported when a plan launches on Ray: an optional dependency, seconds to import.
    try:
        import ray
    except ImportError:
        raise MoelabError("--launcher ray needs Ray: pip install 'moelab[ray]'") from None
    return ray
