"""Atomic writes: the data is fsynced before the rename, the folder after, for every writer.

The reference is the file system itself: an fsync is matched to the file it flushed by inode
(a rename keeps the inode), not by anything the code under test reports.
"""

from __future__ import annotations

import os
import shutil

import pytest

from moelab import fileio
from moelab.errors import MoelabError


@pytest.fixture
def disk_events(monkeypatch):
    """Every fsync (by inode) and rename, in order."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.fstat(fd).st_ino))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.stat(src).st_ino))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


@pytest.mark.parametrize("writer", ["copy", "text", "json"])
def test_data_is_fsynced_before_the_rename_and_the_folder_after(tmp_path, disk_events, writer):
    source = tmp_path / "source.bin"
    source.write_bytes(b"checkpoint bytes")
    target = tmp_path / "out" / "file"
    if writer == "copy":  # a writer that does not fsync by itself, like safetensors or savefig
        fileio.atomic_write(target, lambda tmp: shutil.copyfile(source, tmp))
    elif writer == "text":
        fileio.atomic_write_text(target, "text")
    else:
        fileio.atomic_write_json(target, {"a": 1})

    file_inode, folder_inode = os.stat(target).st_ino, os.stat(target.parent).st_ino
    assert disk_events == [("fsync", file_inode), ("replace", file_inode), ("fsync", folder_inode)]


def test_a_failing_fsync_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "file"
    target.write_text("old")

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(MoelabError, match=r"cannot write .*file: No space left on device"):
        fileio.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_a_folder_that_cannot_be_fsynced_does_not_fail_the_write(tmp_path, monkeypatch):
    real_open = os.open

    def open_refusing_folders(path, flags, *args, **kwargs):
        if os.path.isdir(path):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_refusing_folders)
    fileio.atomic_write_text(tmp_path / "file", "text")
    assert (tmp_path / "file").read_text() == "text"
