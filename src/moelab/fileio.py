"""Atomic file writes: write to a temporary file in the same folder, then rename.

A reader never sees a half-written checkpoint, results table or report, and a crash mid-write
leaves the previous version in place.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from moelab.errors import MoelabError


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` and rename the result onto ``path``.

    ``write`` receives a temporary path in the destination folder (so the rename is atomic on
    POSIX file systems). On any failure the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as exc:
        raise MoelabError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        _remove_quietly(tmp)
        raise MoelabError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        _remove_quietly(tmp)
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    return atomic_write(path, write)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
