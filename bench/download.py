"""Verified, resumable HTTP downloads into the user's cache folder (used only by ``python -m bench fetch``).

A file is downloaded to ``<name>.part`` beside its final name. An interrupted transfer keeps the
``.part`` file and the next attempt asks the server for the rest (an HTTP range request); a server
that ignores the range sends the whole file again, which replaces the partial one. Only a transfer
whose size matches the server's ``Content-Length`` and whose sha256 matches the expected value is
renamed to its final name, so a partial or corrupted download never looks like a finished one; a
checksum mismatch deletes the ``.part`` file.

Checksums: the package ships the official sha256 of every file whose value is known
(``reference/official_checksums.json``). For the others the sha256 is recorded at the first
download in the cache's ``checksums.json`` and every later download must match it (trust on first
use); the fetch says which of the two applied.
"""

from __future__ import annotations

import errno
import http.client
import os
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.io import atomic_write_bytes, json_bytes, read_json, sha256_file

CACHE_ENV = "BDL_BENCH_CACHE"
"""Environment variable naming the cache folder (``--cache`` on the command line overrides it)."""

CHUNK_BYTES = 1 << 20
TIMEOUT_SECONDS = 60
RETRIES = 3
"""Attempts per file after an interrupted transfer or a server error, each resuming where the last stopped."""

RETRY_PAUSE_SECONDS = 1.0


class FetchError(BenchError):
    """A download or conversion that failed; nothing invalid was left in the cache."""


def default_cache() -> Path:
    """``$BDL_BENCH_CACHE``, else ``$XDG_CACHE_HOME/bdl-bench``, else ``~/.cache/bdl-bench``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "bdl-bench"


def resolve_cache(cache: Path | str | None) -> Path:
    return Path(cache).expanduser() if cache else default_cache()


@dataclass(frozen=True)
class Downloaded:
    """A verified file: its path, sha256, and how the sha256 was trusted (``official`` or ``first use``)."""

    path: Path
    sha256: str
    trust: str


class TrustStore:
    """The cache's record of sha256 values first seen for files with no official checksum."""

    def __init__(self, cache: Path):
        self.path = cache / "checksums.json"

    def read(self) -> dict:
        if not self.path.exists():
            return {}
        return read_json(self.path, "record of checksums trusted on first use", "delete it to start afresh")

    def record(self, key: str, sha256: str) -> None:
        records = self.read()
        records[key] = {"sha256": sha256, "first_seen": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        guard_os(lambda: atomic_write_bytes(self.path, json_bytes(records)), self.path.parent)


def guard_os(action, where: Path):
    """Runs ``action`` and turns a full disk or an unwritable folder into one clear FetchError."""
    try:
        return action()
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise FetchError(f"no space left on the device holding {where}; free some space or choose "
                             f"another cache folder with --cache or ${CACHE_ENV}") from None
        if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST):
            raise FetchError(f"cannot write to the cache folder {where} ({error.strerror}); choose another "
                             f"with --cache or ${CACHE_ENV}") from None
        raise


def _open(url: str, start: int):
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    return urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS)


def _total_size(response, start: int) -> int | None:
    """The whole file's size from a 200's Content-Length or a 206's Content-Range."""
    if response.status == 206:
        total = response.headers.get("Content-Range", "").rpartition("/")[2]
        return int(total) if total.isdigit() else None
    length = response.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def _transfer(url: str, part: Path, progress) -> None:
    """One attempt: appends the rest of ``url`` to ``part`` (or restarts it); raises on a short transfer."""
    start = part.stat().st_size if part.exists() else 0
    try:
        response = _open(url, start)
    except urllib.error.HTTPError as error:
        if error.code == 416 and start:  # asked past the end: the partial file is suspect, start over
            part.unlink()
            raise ConnectionError("the server refused to resume; restarting") from None
        raise
    with response:
        if response.status != 206:
            start = 0
        total = _total_size(response, start)
        if total is not None:
            needed = total - start
            free = shutil.disk_usage(part.parent).free
            if needed > free:
                raise FetchError(f"{url} needs {needed / 2**30:.2f} GiB but only {free / 2**30:.2f} GiB is free "
                                 f"in {part.parent}; choose another cache folder with --cache or ${CACHE_ENV}")
        bar = progress(total=total, initial=start, desc=part.name.removesuffix(".part"))
        try:
            with open(part, "ab" if start else "wb") as f:
                for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                    f.write(chunk)
                    bar.update(len(chunk))
        finally:
            bar.close()
    size = part.stat().st_size
    if total is not None and size != total:
        raise ConnectionError(f"transfer ended at {size} of {total} bytes")


def _no_progress(**_kwargs):
    class _Null:
        def update(self, _n): ...
        def close(self): ...
    return _Null()


def download(url: str, target: Path, expected_sha256: str | None, trust: TrustStore, trust_key: str,
             progress=None, retries: int = RETRIES) -> Downloaded:
    """Downloads ``url`` to ``target`` (resuming a previous ``.part``), verifies it and returns it.

    ``expected_sha256`` is the official value, or None to use (and on first success, record) the
    trust store's value under ``trust_key``. An existing ``target`` is re-verified rather than
    downloaded again. Raises :class:`FetchError` with one line; a checksum mismatch deletes the file.
    """
    progress = progress or _no_progress
    known = expected_sha256 or trust.read().get(trust_key, {}).get("sha256")
    source = "the official checksum" if expected_sha256 else f"the checksum recorded at first download in {trust.path}"
    guard_os(lambda: target.parent.mkdir(parents=True, exist_ok=True), target.parent)
    part = target.with_name(target.name + ".part")
    if target.exists():
        actual = _verified_sha256(target, known, url, source)
    else:
        _download_part(url, part, target.parent, progress, retries)
        actual = _verified_sha256(part, known, url, source)
        guard_os(lambda: os.replace(part, target), target.parent)
    if known is None:
        trust.record(trust_key, actual)
    return Downloaded(target, actual, "official" if expected_sha256 else "first use")


def _download_part(url: str, part: Path, folder: Path, progress, retries: int) -> None:
    for attempt in range(retries + 1):
        try:
            guard_os(lambda: _transfer(url, part, progress), folder)
            return
        except urllib.error.HTTPError as error:
            reason = f"the server answered {error.code} {error.reason}"
            if error.code < 500:
                raise FetchError(f"cannot download {url}: {reason}") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            reason = getattr(error, "reason", None) or str(error) or type(error).__name__
        if attempt < retries:
            time.sleep(RETRY_PAUSE_SECONDS)
    kept = (f"; the {part.stat().st_size} bytes received are kept in {part} and the next fetch resumes "
            "from there") if part.exists() and part.stat().st_size else ""
    raise FetchError(f"cannot download {url}: {reason} (after {retries + 1} attempts){kept}")


def _verified_sha256(path: Path, known: str | None, url: str, source: str) -> str:
    """``path``'s sha256; deletes the file and raises if it is not ``known`` (None: nothing to compare with yet)."""
    actual = sha256_file(path)
    if known is not None and actual != known:
        path.unlink()
        raise FetchError(f"{url}: sha256 {actual[:16]}... does not match {source} {known[:16]}...; "
                         "the file was deleted, run fetch again")
    return actual
