"""The local launcher's scratch folder: the records its child processes leave it, and
multiprocessing's own state (the fork server's socket), in one folder per process under the
system's temporary folder (``$TMPDIR``).

The folder goes when its process exits, whether it finishes, fails or is preempted. A process
killed outright (kill -9, out of memory) leaves it behind; the next launcher to start removes
it. Each folder holds a writer lock its process keeps while it lives, and the kernel releases
it when the process dies, so a folder whose lock can be taken is one nobody uses.
"""

from __future__ import annotations

import multiprocessing.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from moelab.errors import MoelabError
from moelab.fileio import WriterLock

SCRATCH_PREFIX = "moelab-scratch-"
MAX_SOCKET_PATH = 100
"""Bytes of the longest fork-server socket path put in the scratch folder (Linux allows 107)."""

_scratch: Optional[Path] = None


def scratch_dir() -> Path:
    """This process's scratch folder, made (and stale ones removed) on first use."""
    global _scratch
    if _scratch is None:
        remove_stale_scratch()
        path = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        lock = WriterLock(path)
        _keep_multiprocessing_state_in(path)
        # After multiprocessing removes its own folder (exit priority -100) at this process's
        # exit: an atexit hook would run before it and pull the fork server's socket away.
        multiprocessing.util.Finalize(None, _remove, args=(path, lock), exitpriority=-101)
        _scratch = path
    return _scratch


def remove_stale_scratch() -> None:
    """Remove the scratch folders of processes that died without removing theirs."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        if not folder.is_dir() or folder.is_symlink():
            continue
        try:
            lock = WriterLock(folder)
        except MoelabError:  # its process lives (or the folder is not ours to lock)
            continue
        _remove(folder, lock)


def _keep_multiprocessing_state_in(folder: Path) -> None:
    """Make ``folder`` the parent of multiprocessing's temporary folder (``pymp-*``), which it
    creates once per process and removes only at a clean exit. Where it exists already (made
    before the first launch), or where the fork server's socket path would grow too long for
    a Unix socket (108 bytes on Linux), it stays where it is."""
    if len(os.fsencode(folder)) + len("/pymp-XXXXXXXX/listener-XXXXXXXX") > MAX_SOCKET_PATH:
        return
    saved = tempfile.tempdir
    tempfile.tempdir = str(folder)  # what multiprocessing.util.get_temp_dir's mkdtemp reads
    try:
        multiprocessing.util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


def _remove(folder: Path, lock: WriterLock) -> None:
    shutil.rmtree(folder, ignore_errors=True)  # under the lock: no one takes the folder meanwhile
    lock.release()
