"""Atomic file writes: write to a temporary file in the same folder, fsync it, then rename.

A reader never sees a half-written checkpoint, results table or report, and a crash mid-write
leaves the previous version in place. The fsync before the rename matters after a power loss:
without it the rename can reach the disk before the data, leaving an empty file under the
final name. Appends (metrics.jsonl) do not come through here: a torn last line is tolerated by
their reader, and an fsync per logged step would cost more than it protects.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from moelab.errors import MoelabError


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> Path:
    """Call ``write(tmp_path)``, fsync the result and rename it onto ``path``.

    ``write`` receives a temporary path in the destination folder (so the rename is atomic on
    POSIX file systems); it need not fsync, this does it for every writer (safetensors, a copied
    tokenizer, a saved figure). On any failure the temporary file is removed and ``path`` is
    untouched. The folder is fsynced after the rename, best effort, so the new name is durable.
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
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp's 0600 would hide results from others
        _fsync_file(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        _remove_quietly(tmp)
        raise MoelabError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        _remove_quietly(tmp)
        raise
    _fsync_folder_quietly(path.parent)
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    return atomic_write(path, write)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def current_umask() -> int:
    """The process's umask (022 gives files 0644 and folders 0755), read without changing it
    where /proc allows (os.umask can only be read by setting it, which races other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


LOCK_NAME = ".moelab.lock"
"""The lock file a writer holds in the folder it writes (``writer_lock``)."""


class WriterLock:
    """A folder's writer lock, held until ``release()`` or the holder's exit.

    An OS lock (``flock`` on ``LOCK_NAME`` in the folder), so the kernel releases it when its
    holder dies, however it dies: a lock is never stale. Readers do not take it. Given the
    ``kind`` of command that writes the folder, the lock also claims it (``claim_folder``):
    a folder another kind of command wrote is refused before anything is created in it.
    """

    def __init__(self, folder: str | os.PathLike, *, wait: bool = False,
                 kind: str | None = None):
        """Take the lock, creating the folder if needed; a held one fails at once, naming its
        pid, or with ``wait`` is waited for (until its holder releases it or dies)."""
        self.folder = Path(folder)
        self._handle: int | None = None
        if kind is not None:
            check_folder_kind(self.folder, kind)  # before the lock file exists
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._handle = os.open(self.folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise MoelabError(f"cannot write {self.folder}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._handle, 32, 0).decode("ascii", "replace").strip() or "unknown"
            self.release()
            raise MoelabError(f"{self.folder} is being written by another moelab process (pid "
                              f"{holder}): wait for it to finish or stop it") from None
        except OSError as exc:  # ENOLCK, EOPNOTSUPP: Lustre without -o flock, some NFS mounts
            self.release()
            raise MoelabError(_unlockable_message(self.folder, exc)) from None
        os.ftruncate(self._handle, 0)
        os.pwrite(self._handle, f"{os.getpid()}\n".encode("ascii"), 0)
        if kind is not None:
            try:  # again under the lock: another writer may have claimed it meanwhile
                claim_folder(self.folder, kind)
            except BaseException:
                self.release()
                raise

    def release(self) -> None:
        if self._handle is not None:
            os.close(self._handle)  # closing the file releases the lock
            self._handle = None

    __del__ = release


def _unlockable_message(folder: Path, exc: OSError) -> str:
    code = errno.errorcode.get(exc.errno, str(exc.errno))  # type: ignore[arg-type]  # None: the default
    return (f"cannot lock {folder}: its file system refuses file locks (flock: "
            f"{exc.strerror or exc}, {code}); mount it with locking (Lustre: -o flock; NFS: "
            f"without nolock) or write to a folder on a local or locking file system")


@contextlib.contextmanager
def writer_lock(folder: str | os.PathLike, *, wait: bool = False,
                kind: str | None = None) -> Iterator[None]:
    """Hold the folder's ``WriterLock`` for the block (``wait``: wait for a held one; ``kind``:
    claim the folder for that kind of command, ``claim_folder``)."""
    lock = WriterLock(folder, wait=wait, kind=kind)
    try:
        yield
    finally:
        lock.release()


FOLDER_RECORD = ".moelab-folder"
"""In every folder a moelab command writes: which kind of command owns it (``claim_folder``),
a JSON object named without a .json suffix, so that no reader of a folder's *.json files
takes it for one of its results."""

KIND_FILES = {"grid.json": "sweep-sparsity", "compare.json": "compare", "pooled.json": "pool",
              "summary.json": "run", "metrics.jsonl": "run", "config.yaml": "run"}
"""The files that tell the owner of a folder written before FOLDER_RECORD existed (plan.json
names its kind itself): each kind of command writes one of them and no other kind does."""


def folder_kind(folder: str | os.PathLike) -> str | None:
    """The kind of command that owns ``folder``: as its FOLDER_RECORD names it, else as the
    files only that kind writes tell (a folder from an older moelab); None for a folder no
    moelab command wrote (missing, empty or someone else's)."""
    folder = Path(folder)
    record = _read_json_object(folder / FOLDER_RECORD)
    if isinstance(record.get("kind"), str):
        return record["kind"]
    planned = _read_json_object(folder / "plan.json")
    if (folder / "plan.json").is_file():
        return str(planned.get("kind", "study"))
    return next((kind for name, kind in KIND_FILES.items() if (folder / name).is_file()), None)


def check_folder_kind(folder: str | os.PathLike, kind: str, flag: str = "--out") -> None:
    """Refuse, on one line and before anything is written, a folder another kind of command
    owns: a compare trained into a study folder would be read back as the study's runs. The
    folder's own files are asked as well as its FOLDER_RECORD, so that a record edited or
    copied from another folder hands over no folder whose files another kind wrote."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    # The files only one kind writes outweigh a record, which may be edited or copied.
    told = _kinds_told_by_files(folder)
    owner = folder_kind(folder) if not told else kind if told == {kind} else min(told - {kind})
    if owner is not None and owner != kind:
        held = sorted(p.name for p in folder.iterdir() if not is_bookkeeping(p))
        listing = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        raise MoelabError(f"{flag} {folder} is not empty and holds no {kind} (it has {listing}): "
                          f"it holds the output of moelab {owner}; use another folder for {kind}")


def _kinds_told_by_files(folder: Path) -> set[str]:
    """The kinds of command the files in ``folder`` name: plan.json's kind (a study's when it
    names none and no grid.json says sweep), and every file of KIND_FILES present."""
    kinds = {kind for name, kind in KIND_FILES.items() if (folder / name).is_file()}
    if (folder / "plan.json").is_file():
        planned = _read_json_object(folder / "plan.json").get("kind")
        if isinstance(planned, str):
            kinds.add(planned)
        elif "sweep-sparsity" not in kinds:
            kinds.add("study")
    return kinds


def claim_folder(folder: str | os.PathLike, kind: str, flag: str = "--out") -> None:
    """Check that ``folder`` is free or already ``kind``'s, and record ``kind`` as its owner
    (the folder is created if needed). The one ownership check of every writing command."""
    check_folder_kind(folder, kind, flag)
    path = Path(folder) / FOLDER_RECORD
    if _read_json_object(path).get("kind") != kind:
        atomic_write_json(path, {"kind": kind})


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's content. Too deep a nesting is a ``JSONDecodeError`` naming the file, like
    any other malformed JSON (``json`` raises a bare ``RecursionError``), so that every
    reader's handler of malformed JSON names the file."""
    return parse_json(Path(path).read_bytes().decode("utf-8"), str(path))


def parse_json(text: str, where: str = "the JSON text") -> Any:
    """``json.loads(text)``, too deep a nesting a ``JSONDecodeError`` naming ``where`` (the
    file, or the file and line) instead of a bare ``RecursionError``."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(f"{where} nests too deeply", text, 0) from None


def _read_json_object(path: Path) -> dict:
    """A small JSON object file, or {} when it is missing, unreadable or not an object (a
    damaged record counts as none: the files the kind writes still tell it)."""
    try:
        content = read_json(path)
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


def remove_stale_temporaries(*folders: Path) -> None:
    """Remove the temporary files killed atomic writes left in these folders.

    Only for folders whose writer is this process (it holds their lock, or drives them alone):
    a temporary file there is no write in progress."""
    for folder in folders:
        if folder.is_dir() and not folder.is_symlink():
            for path in folder.iterdir():
                if is_temporary(path) and path.is_file():
                    path.unlink(missing_ok=True)


def is_bookkeeping(path: Path) -> bool:
    """Files moelab keeps beside a folder's contents: temporaries, the writer lock and the
    record of the folder's owner."""
    return is_temporary(path) or path.name in (LOCK_NAME, FOLDER_RECORD)


def is_temporary(path: Path) -> bool:
    """Whether ``path`` is one of atomic_write's temporary files (``.NAME.XXXX.tmp``)."""
    return path.name.startswith(".") and path.name.endswith(".tmp")


def is_inside(path: str | os.PathLike, root: str | os.PathLike) -> bool:
    """Whether ``path``, symlinks and ``..`` resolved, is ``root`` or lies below it.

    Paths read back from a run, study or sweep file are checked with this before they are
    opened: a hand-edited or copied file must not point a command at another run's folder or
    at a system folder.
    """
    resolved, resolved_root = Path(path).resolve(), Path(root).resolve()
    return resolved == resolved_root or resolved_root in resolved.parents


def refuse_overwriting_inputs(out: str | os.PathLike | None, flag: str,
                              inputs: list[str | os.PathLike | None]) -> None:
    """Refuse an output path that is one of the command's inputs: the same path, a link to it
    or another name of the same file (a hard link); an input that is no file (a preset name)
    is none. Checked before anything is written, so the
    input stays as it was."""
    if out is None:  # the command's default output, which no input can be
        return
    for source in inputs:
        if source is not None and _same_file(out, source):
            raise MoelabError(f"{flag} {out} is invalid: it is the input {source}, which the "
                              f"command would overwrite; write to another path")


def portable_command(argv: list[str], root: str | os.PathLike) -> str:
    """A command line as a results file records it: an absolute path inside ``root`` (the
    repository) relative to it, any other absolute path (an --out folder of the machine that
    ran it) as its last part, so that a committed record names no machine's folders."""
    def portable(arg: str) -> str:
        flag, sep, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if not os.path.isabs(value):
            return arg
        path, base = Path(value), Path(root).resolve()
        shown = (str(path.resolve().relative_to(base)) if is_inside(path, base)
                 else path.name or ".")
        return f"{flag}{sep}{shown}"

    return " ".join(portable(arg) for arg in argv)


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    if not os.path.exists(b):  # a preset or source name ("demo", "sample"), not a file
        return False
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def _fsync_file(path: str) -> None:
    """Flush a closed file's data to disk (read-write: Windows refuses fsync on a read-only fd)."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder_quietly(folder: Path) -> None:
    """Make a rename in ``folder`` durable; skipped where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
