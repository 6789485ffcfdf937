"""Nothing left behind, nothing written outside: a killed launcher's temporaries are removed by
the next one, a killed report's by the next report, and a study whose run folder is a link out
of it is refused before anything is written.

(A study preempted with SIGTERM leaving $TMPDIR as it found it is in test_preemption.py.)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from moelab.cli import main
from moelab.fileio import LOCK_NAME, WriterLock
from one_line_errors import refused_on_one_line
from tiny_overrides import TINY_MOE_RUN

# A launcher's process as far as its temporaries go: its scratch folder, the fork server that
# children are forked from (whose socket multiprocessing keeps in a pymp-* folder), then kill -9.
KILLED_LAUNCHER = """
import os, signal
from multiprocessing import forkserver
from moelab.runs.scratch import scratch_dir

print(scratch_dir(), flush=True)
forkserver.ensure_running()
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_a_launcher_killed_with_sigkill_leaves_one_folder_the_next_removes(tmp_path, monkeypatch):
    from moelab.runs.scratch import SCRATCH_PREFIX, remove_stale_scratch

    temp = Path(tempfile.mkdtemp(prefix="moelab-test-"))  # short: the socket moves in (see scratch)
    try:
        process = subprocess.run([sys.executable, "-c", KILLED_LAUNCHER], capture_output=True,
                                 text=True, env={**os.environ, "TMPDIR": str(temp)})
        assert process.returncode == -signal.SIGKILL, process.stderr
        scratch = Path(process.stdout.strip())
        # Everything it made is in its scratch folder, multiprocessing's folder too.
        assert [p.name for p in temp.iterdir()] == [scratch.name]
        assert scratch.name.startswith(SCRATCH_PREFIX)
        assert any(p.name.startswith("pymp-") for p in scratch.iterdir())
        # A scratch folder whose process lives (its lock held) is not touched.
        alive = temp / f"{SCRATCH_PREFIX}alive"
        held = WriterLock(alive)
        monkeypatch.setattr(tempfile, "tempdir", str(temp))
        remove_stale_scratch()
        assert [p.name for p in temp.iterdir()] == [alive.name]
        assert (alive / LOCK_NAME).is_file()
        held.release()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_a_killed_reports_temporaries_are_removed_by_the_next_report(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert main(["sweep-sparsity", "micro", "--list-runs", "--out", str(sweep)]) == 0
    (sweep / "figures").mkdir()
    left = [sweep / "figures" / ".isoflop.png.k1ll3d.tmp", sweep / ".report.md.k1ll3d.tmp"]
    for path in left:
        path.write_bytes(b"half a file")
    main(["report", str(sweep)])  # no run is complete: what it says of that is not tested here
    assert not any(path.exists() for path in left)


def test_the_study_report_removes_a_killed_reports_temporaries(tmp_path, monkeypatch):
    from moelab.study import report
    from moelab.study.folder import StudyFolder

    study = tmp_path / "study"
    (study / "runs").mkdir(parents=True)
    (study / "figures").mkdir()
    left = study / "figures" / ".val_loss.png.k1ll3d.tmp"
    left.write_bytes(b"half a file")
    monkeypatch.setattr(report, "compute_all",
                        lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):  # stopped at once after the clean-up
        report.write_outputs(StudyFolder(study, runs=[]))
    assert not left.exists()


@pytest.mark.parametrize("linked", ["runs/moe/seed0", "runs/moe", "runs"])
@pytest.mark.parametrize("list_runs", [False, True], ids=["study", "list-runs"])
def test_a_study_folder_with_a_link_out_of_it_is_refused_before_writing(
        tmp_path, capsys, linked, list_runs):
    study, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (study / linked).parent.mkdir(parents=True, exist_ok=True)
    (study / linked).symlink_to(elsewhere, target_is_directory=True)
    # Tiny, one step: without the check the study would train quickly, into ``elsewhere``.
    command = ["study", "demo", "--seeds", "1", "--criteria", "active",
               *[arg for pair in [*TINY_MOE_RUN, "train.max_tokens=256"] for arg in ("--set", pair)],
               "--out", str(study)]
    refused_on_one_line(capsys, command + (["--list-runs"] if list_runs else []),
                        str(elsewhere), "outside")
    assert list(elsewhere.iterdir()) == []


def test_a_sweep_with_its_runs_linked_out_is_refused(tmp_path, capsys):
    sweep, elsewhere = tmp_path / "sweep", tmp_path / "elsewhere"
    elsewhere.mkdir()
    sweep.mkdir()
    (sweep / "runs").symlink_to(elsewhere, target_is_directory=True)
    refused_on_one_line(capsys, ["sweep-sparsity", "micro", "--list-runs", "--out", str(sweep)],
                        "outside")
    assert list(elsewhere.iterdir()) == []


def test_a_link_that_stays_inside_the_study_is_followed(tmp_path, capsys):
    study = tmp_path / "study"
    (study / "real-runs").mkdir(parents=True)
    (study / "runs").symlink_to(study / "real-runs", target_is_directory=True)
    assert main(["study", "demo", "--seeds", "1", "--list-runs", "--out", str(study)]) == 0
