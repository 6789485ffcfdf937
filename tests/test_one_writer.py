"""One writer per study or sweep folder, for every command that writes one, and a lock the
storage refuses told in one line.

The printed-command launchers (``--list-runs``, ``--launcher commands``) write the plan; while
another process holds the folder (a study training it) they must be refused as a second
``study`` is, leaving the holder's plan untouched. Commands that only read keep working.
"""

from __future__ import annotations

import errno
import fcntl
import subprocess
import sys
from pathlib import Path

import pytest

from moelab.cli import main
from moelab.errors import MoelabError
from moelab.fileio import LOCK_NAME, WriterLock

HOLD = ("import sys, time\n"
        "from moelab.fileio import writer_lock\n"
        "with writer_lock(sys.argv[1]):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n")


@pytest.fixture
def holder_of():
    """Start another process holding a folder's writer lock; killed after the test."""
    holders = []

    def start(folder: Path) -> subprocess.Popen:
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)],
                                  stdout=subprocess.PIPE, text=True)
        holders.append(holder)
        assert holder.stdout.readline().strip() == "held"
        return holder

    yield start
    for holder in holders:
        holder.kill()
        holder.wait()


def _files(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != LOCK_NAME}


PRINTED_COMMANDS = [
    ["study", "demo", "--seeds", "2", "--list-runs"],
    ["study", "demo", "--seeds", "2", "--launcher", "commands"],
    ["ablate-routing", "demo", "--seeds", "1", "--list-runs"],
    ["sweep-sparsity", "micro", "--list-runs"],
    ["sweep-sparsity", "micro", "--launcher", "commands"],
]


@pytest.mark.slow
@pytest.mark.parametrize("command", PRINTED_COMMANDS, ids=" ".join)
def test_printed_commands_are_refused_while_another_process_writes_the_folder(
        tmp_path, capsys, holder_of, command):
    folder = tmp_path / "busy"
    # The study that holds the folder planned it with one seed: its plan must stay so.
    assert main([*command[:2], "--seeds", "1", "--list-runs", "--out", str(folder)]
                if command[0] != "sweep-sparsity" else [*command, "--out", str(folder)]) == 0
    before = _files(folder)
    capsys.readouterr()
    holder = holder_of(folder)
    assert main([*command, "--out", str(folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no command printed for a plan it did not write
    assert captured.err.count("\n") == 1 and f"(pid {holder.pid})" in captured.err
    assert _files(folder) == before


@pytest.mark.slow
def test_printed_commands_into_a_new_busy_folder_write_nothing(tmp_path, capsys, holder_of):
    folder = tmp_path / "busy"
    holder_of(folder)
    assert main(["study", "demo", "--seeds", "2", "--list-runs", "--out", str(folder)]) == 2
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_NAME]


@pytest.mark.slow
def test_a_dry_run_reads_beside_a_writer(tmp_path, capsys, holder_of):
    folder = tmp_path / "busy"
    holder_of(folder)
    assert main(["sweep-sparsity", "micro", "--dry-run", "--out", str(folder)]) == 0
    # The plan's run count, then the cost the dry run prices.
    assert any(line.endswith(" runs") for line in capsys.readouterr().out.splitlines())


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_file_system_without_locks_is_one_line(tmp_path, monkeypatch, code):
    def refuse(fd, operation):
        raise OSError(code, "simulated")

    monkeypatch.setattr(fcntl, "flock", refuse)
    with pytest.raises(MoelabError) as raised:
        WriterLock(tmp_path / "run")
    message = str(raised.value)
    assert "\n" not in message and str(tmp_path / "run") in message
    assert errno.errorcode[code] in message and "Lustre: -o flock" in message


def test_a_file_system_without_locks_stops_a_command_in_one_line(tmp_path, capsys, monkeypatch):
    def refuse(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    folder = tmp_path / "study"
    assert main(["study", "demo", "--seeds", "1", "--list-runs", "--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ENOLCK" in err and "Traceback" not in err
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_NAME]  # nothing planned
