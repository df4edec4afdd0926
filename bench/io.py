"""Files written atomically and read defensively: the one place for bdl-bench's generic file I/O.

Writes go to a temporary file in the same folder, flushed to disk, then renamed over the target, so a
reader (or a run killed half-way) sees the old file or the new one, never half of one. Reads of the
project's JSON files (registry, manifests, run records, trust stores) accept regular files only, read
at most a bounded number of bytes, and turn a damaged file into one :class:`~bench.errors.DamagedFile`
line that names the file and the command that repairs it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import stat
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from bench.errors import MACHINE_ERRNOS, BenchError, DamagedFile, DamagedInstallation, cannot_write

JSON_BYTES_LIMIT = 64 * 2**20
"""The largest JSON file bdl-bench reads (its own are kilobytes; a run's record with every argument is
well under a megabyte)."""

HASH_CHUNK_BYTES = 1 << 20


def file_to_write(path: Path, what: str) -> Path:
    """Where writing ``path`` atomically puts the file: ``path`` itself, or, for a symbolic link, the file it points to
    (the rename replaces that file and keeps the link). One :class:`BenchError` line, before anything is written, if
    something other than a regular file is there (a folder, FIFO, socket or device such as ``/dev/full``) or the path
    names an open file descriptor (``/dev/stdout``): a rename would put a file in place of it. ``what``: how the line
    names the file (``the --output file``)."""
    path = Path(path)
    if _names_a_descriptor(path):
        raise BenchError(f"{path}: {what} names an open file descriptor (a standard stream, through /proc or /dev/fd), "
                         "which a rename cannot replace; give the path of a regular file (to print, leave the option out)")
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):  # nothing there: the write itself says if the folder is wrong
        return target
    except OSError as error:
        raise BenchError(f"{path}: {what} cannot be written ({error.strerror or error}); choose another path") \
            from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else \
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
            "not a regular file"
        raise BenchError(f"{path}: {what} would replace {kind}; give the path of a regular file (new or existing)")
    return target


DESCRIPTOR_FOLDERS = ("/proc/", "/dev/fd/")
"""Where links to open file descriptors live (``/dev/stdout`` leads to ``/proc/self/fd/1``): a file "there" is a
stream, a pipe or a file opened elsewhere, and the folder takes no temporary file."""
MAX_LINK_HOPS = 40


def _names_a_descriptor(path: Path) -> bool:
    """Whether ``path``, or a symbolic link it leads through (one hop at a time), lies in a folder of
    :data:`DESCRIPTOR_FOLDERS` once that folder's own links are resolved (``/dev/fd/1``, ``/dev/stdout``)."""
    for _ in range(MAX_LINK_HOPS):
        folder = os.path.realpath(path.parent) + "/"
        if folder.startswith(DESCRIPTOR_FOLDERS):
            return True
        if not path.is_symlink():
            return False
        path = path.parent / os.readlink(path)
    return False


def atomic_write_bytes(path: Path, data: bytes, what: str = "the file") -> None:
    """Writes ``data`` to ``path`` through a temporary file in the same folder and a rename; a path where something
    other than a regular file is found is refused before anything is written (:func:`file_to_write`)."""
    path = file_to_write(path, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename == tmp:  # the file being written is the one to name
            error.filename, error.filename2 = str(path), None
        raise


@contextlib.contextmanager
def exclusive(lock_path: Path, busy: str, unwritable: str) -> Iterator[None]:
    """Holds an exclusive lock on ``lock_path`` (created if absent) for the block, without waiting: a
    :class:`BenchError` ``busy`` if another process holds it, ``unwritable`` (followed by the reason) if the file
    cannot be opened. The lock ends with the block or with the process, so a killed holder leaves nothing held."""
    try:
        lock = open(lock_path, "a")
    except OSError as error:
        raise cannot_write(unwritable, error) from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BenchError(busy) from None
        yield


def json_bytes(obj: dict) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def npz_bytes(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def open_regular_file(path: Path, what: str, repair: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (a symlink to one is followed), else one
    :class:`DamagedFile` line. Never waits on a FIFO, never opens a device for reading."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer; the type is checked on the opened descriptor, so
    # the path cannot be swapped for a device between the check and the read, and before it is wrapped (a
    # folder's descriptor would fail there as "Is a directory: 3", naming the descriptor, not the file).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise DamagedFile(f"{path}: the {what} is not a regular file{' but a folder' if stat.S_ISDIR(mode) else ''}; "
                          f"{repair}")
    return open(fd, "rb")


def read_regular_file(path: Path, limit: int, what: str, repair: str) -> bytes:
    """The bytes of ``path``, a regular file (:func:`open_regular_file`) of at most ``limit`` bytes, or one
    :class:`DamagedFile` line. Never reads past ``limit + 1`` bytes, whatever the file claims."""
    with open_regular_file(path, what, repair) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise DamagedFile(f"{path}: the {what} is larger than {limit} bytes; {repair}")
    return data


def json_depth(value) -> int:
    """Nesting depth of a parsed JSON value: a scalar is 0, ``{"a": 1}`` is 1, ``[[]]`` is 2; without recursion."""
    depth, pending = 0, [(value, 0)]
    while pending:
        item, outer = pending.pop()
        if isinstance(item, (dict, list)):
            depth = max(depth, outer + 1)
            pending.extend((child, outer + 1) for child in (item.values() if isinstance(item, dict) else item))
    return depth


def read_json(path: Path, what: str, repair: str, limit: int = JSON_BYTES_LIMIT, installed: bool = False) -> dict:
    """A JSON object from ``path`` (see :func:`read_regular_file`), or one :class:`DamagedFile` line naming
    the file, what is wrong and ``repair`` (the command that fixes it); a :class:`DamagedInstallation` (exit 3) where
    ``installed``: a file the installation ships, not the user's."""
    if installed:
        with _as_installed():
            return read_json(path, what, repair, limit)
    data = read_regular_file(path, limit, what, repair)
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as error:  # ValueError: not JSON, not UTF-8, or a number of > 4300 digits
        reason = "nested too deeply" if isinstance(error, RecursionError) else \
            f"not valid JSON: {error}" if isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)) else \
            "it holds a number too long to read"
        raise DamagedFile(f"{path}: the {what} is damaged ({reason}); {repair}") from None
    if not isinstance(value, dict):
        raise DamagedFile(f"{path}: the {what} is damaged (a JSON {type(value).__name__}, not an object); {repair}")
    return value


@contextlib.contextmanager
def _as_installed() -> Iterator[None]:
    """A :class:`DamagedFile` raised in the block, as the :class:`DamagedInstallation` it is for a file the
    installation ships."""
    try:
        yield
    except DamagedInstallation:
        raise
    except DamagedFile as error:
        raise DamagedInstallation(*error.args) from None


ARCHIVE_FAILURES = (ValueError, OSError, EOFError, KeyError, IndexError, zipfile.BadZipFile, zlib.error)
"""What NumPy's and PyTorch's readers raise on a truncated, edited or foreign archive (a ``.npz`` is a zip file; a
``.pt`` file a zip of pickles): a damaged file, never a bug."""


def _damaged(path: Path, what: str, error: BaseException, repair: str) -> DamagedFile:
    if isinstance(error, FileNotFoundError):
        return DamagedFile(f"{path}: the {what} is missing; {repair}")
    detail = " ".join(str(error).split())[:200]
    return DamagedFile(f"{path}: the {what} is damaged and cannot be read ({type(error).__name__}"
                       f"{': ' + detail if detail else ''}); {repair}")


def _refused_by_machine(error: BaseException) -> bool:
    """An operating system error that is the machine's refusal (memory, file handles), not the file's damage."""
    return isinstance(error, OSError) and error.errno in MACHINE_ERRNOS


def read_npz(path: Path, what: str, repair: str, installed: bool = False) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` (or ``.npy``, as ``{"array": ...}``) file at ``path``, read whole, without pickles,
    from a regular file; a file that is missing, truncated, edited or not an archive is one :class:`DamagedFile` line
    naming it, what it is (``what``) and ``repair``, a :class:`DamagedInstallation` (exit 3) where ``installed``. The
    one reader of the arrays bdl-bench and its scripts keep (chain files, predictions, evidence)."""
    if installed:
        with _as_installed():
            return read_npz(path, what, repair)
    try:
        with open_regular_file(path, what, repair) as f:
            loaded = np.load(f, allow_pickle=False)
            if isinstance(loaded, np.ndarray):
                return {"array": loaded}
            with loaded:
                return {name: loaded[name] for name in loaded.files}
    except DamagedFile:
        raise
    except ARCHIVE_FAILURES as error:
        if _refused_by_machine(error):
            raise
        raise _damaged(path, what, error, repair) from None


def read_torch(path: Path, what: str, repair: str, installed: bool = False):
    """What ``torch.save`` wrote to ``path`` (tensors and plain values only: ``weights_only``, on the CPU), from a
    regular file; a damaged one is one :class:`DamagedFile` line as :func:`read_npz` says (the one reader of
    checkpoints bdl-bench writes with ``torch.save``)."""
    if installed:
        with _as_installed():
            return read_torch(path, what, repair)
    import pickle

    import torch

    try:
        with open_regular_file(path, what, repair) as f:
            return torch.load(f, map_location="cpu", weights_only=True)
    except DamagedFile:
        raise
    except (*ARCHIVE_FAILURES, RuntimeError, pickle.UnpicklingError, AttributeError, TypeError) as error:
        if _refused_by_machine(error) or isinstance(error, RuntimeError) and "memory" in str(error):
            raise
        raise _damaged(path, what, error, repair) from None


def read_json_file(path: Path, what: str, repair: str, installed: bool = False):
    """Any JSON value (an object or not) from ``path``, as :func:`read_json` reads an object: a damaged file is one
    :class:`DamagedFile` line."""
    if installed:
        with _as_installed():
            return read_json_file(path, what, repair)
    data = read_regular_file(path, JSON_BYTES_LIMIT, what, repair)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as error:
        raise _damaged(path, what, error, repair) from None


MALFORMED = (KeyError, IndexError, TypeError, AttributeError, ValueError)
"""What reading a field a JSON file lacks, or holds as another type, raises."""


@contextlib.contextmanager
def malformed_is_damage(path: Path, what: str, repair: str, installed: bool = False) -> Iterator[None]:
    """Reads of the fields of a file already parsed (a results file, a kept measurement) inside the block: a field
    missing or of another type is one :class:`DamagedFile` line naming ``path`` (a :class:`DamagedInstallation`, exit
    3, where ``installed``), never a bug's traceback."""
    try:
        yield
    except BenchError:
        raise
    except MALFORMED as error:
        kind = DamagedInstallation if installed else DamagedFile
        detail = " ".join(str(error).split())[:100]
        raise kind(f"{path}: the {what} is damaged (a field missing or of another type: {type(error).__name__}"
                   f"{' ' + detail if detail else ''}); {repair}") from None
