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
use); the fetch says which of the two applied. A first-use checksum is recorded by the fetch only
once the file has been converted (:mod:`bench.fetch`): a mirror that serves an error page instead of
the file leaves no record behind, and its download is deleted.

Time limits (module constants, each overridable by an environment variable read at every download;
tests set tiny values): :data:`STALL_SECONDS` bounds every wait for the server (connecting, the
headers, each read of the body), and :data:`DEADLINE_SECONDS` bounds one file's download in one
fetch, retries included, however the server trickles its bytes: at the deadline the connection is
shut down even inside a blocking read. A transfer cut by either keeps its ``.part`` file, and the
error line says to fetch again, which resumes.

Sources: only ``http://`` and ``https://`` URLs are fetched, and a redirect is followed only to the
same host (its name as written in the URL, compared case-insensitively; the port is not part of it,
so ``http://example.org`` to ``https://example.org`` is followed, ``127.0.0.1`` to ``localhost`` is
not). ``BDL_BENCH_FETCH_ANY_SOURCE=1`` (:data:`ANY_SOURCE_ENV`) allows other schemes (``file://``,
``ftp://``) and redirects to other hosts; checksums are checked all the same.
"""

from __future__ import annotations

import errno
import http.client
import math
import os
import re
import shutil
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError, CheckFailed, DamagedFile, shown
from bench.trust import FIRST_USE, OFFICIAL, PINNED
from bench.io import atomic_write_bytes, json_bytes, read_json, sha256_file

CACHE_ENV = "BDL_BENCH_CACHE"
"""Environment variable naming the cache folder (``--cache`` on the command line overrides it)."""

CHUNK_BYTES = 1 << 20
"""The most bytes read from the connection at once (a read returns what has arrived, up to this)."""

STALL_SECONDS = 60.0
"""The longest wait for the server: to connect, for its headers, for the next bytes of a file. A silent
server ends the attempt (retried, resuming). ``$BDL_BENCH_FETCH_STALL_SECONDS`` overrides it."""

STALL_ENV = "BDL_BENCH_FETCH_STALL_SECONDS"

DEADLINE_SECONDS = 4 * 3600.0
"""The most one file's download may take in one fetch, every attempt included: a server that sends a byte
just before each stall timeout cannot hold a fetch longer. Generous (CIFAR-10's training inputs are a
text file of several GiB); the bytes received are kept and the next fetch resumes. ``$BDL_BENCH_FETCH_DEADLINE_SECONDS``
overrides it."""

DEADLINE_ENV = "BDL_BENCH_FETCH_DEADLINE_SECONDS"

MIN_BYTES_PER_SECOND = 16 * 1024
"""The slowest transfer a fetch waits for: averaged over each stall timeout's worth of seconds, a server sending less
ends the attempt (retried, resuming), so one trickling a byte just before each stall timeout fails within
minutes rather than at the deadline; 16 KiB/s is 1 GiB in 18 hours, far below any real link."""

ANY_SOURCE_ENV = "BDL_BENCH_FETCH_ANY_SOURCE"
"""Set to 1 to fetch from URLs other than http(s) (``file://``, ``ftp://``) and follow redirects to other hosts."""

RETRIES = 3
"""Attempts per file after an interrupted transfer or a server error, each resuming where the last stopped."""

RETRY_PAUSE_SECONDS = 1.0

_SHA256 = re.compile(r"[0-9a-f]{64}")


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


def _seconds(env: str, default: float) -> float:
    """``$env`` as a positive number of seconds, else ``default``; one line if it is set to anything else."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise FetchError(f"${env}={raw!r} is not a positive number of seconds; unset it or give one")
    return value


def stall_seconds() -> float:
    """:data:`STALL_SECONDS`, or ``$BDL_BENCH_FETCH_STALL_SECONDS``."""
    return _seconds(STALL_ENV, STALL_SECONDS)


def deadline_seconds() -> float:
    """:data:`DEADLINE_SECONDS`, or ``$BDL_BENCH_FETCH_DEADLINE_SECONDS``."""
    return _seconds(DEADLINE_ENV, DEADLINE_SECONDS)


def any_source_allowed() -> bool:
    return os.environ.get(ANY_SOURCE_ENV, "").strip() not in ("", "0")


def check_source(url: str) -> None:
    """Refuses (one line) a URL that urllib cannot take (one it cannot parse, a port out of range, spaces or control
    characters, an http(s) URL without a host), or one that is not http(s) unless :data:`ANY_SOURCE_ENV` allows it."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- parsed on access: a port that is not a number in [0, 65535] raises here
    except ValueError as error:
        raise FetchError(f"{url!r} is not a URL urllib can read ({error}); give an http(s) URL") from None
    unsafe = next((ch for ch in url if ord(ch) <= 0x20 or ord(ch) >= 0x7F), None)
    if unsafe is not None:
        raise FetchError(f"{url!r} holds {unsafe!r}, which a URL carries only percent-encoded; give the URL with it "
                         "encoded (a space as %20)")
    scheme = parts.scheme.lower()
    if scheme in ("http", "https") and not parts.hostname:
        raise FetchError(f"{url!r} names no host; give an http(s) URL such as https://example.org/data/")
    if scheme not in ("http", "https") and not any_source_allowed():
        raise FetchError(f"{url}: only http:// and https:// sources are fetched from, not {scheme or 'a path'}; "
                         f"give an http(s) mirror, or set {ANY_SOURCE_ENV}=1 to allow it")


def _check_redirect(url: str, target: str) -> None:
    """Refuses (one line) a redirect from ``url`` to another host or to a scheme other than http(s)."""
    if any_source_allowed():
        return
    check_source(target)
    here, there = urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(target).hostname
    if here != there:
        raise FetchError(f"{url} redirects to {target}, on another host ({there}); refused, a mirror must serve "
                         f"its files itself: give the final location as the mirror, or set {ANY_SOURCE_ENV}=1 "
                         "to follow redirects to other hosts")


@dataclass(frozen=True)
class Downloaded:
    """A verified file: its path, sha256, and how the sha256 was trusted (:mod:`bench.trust`: ``official``,
    ``pinned`` or ``first use``).

    ``unconfirmed``: not official, and not yet in the cache's store as trusted so (first use, or pinned); the fetch
    records its sha256 only once the file has been converted, and deletes the file if its content is refused."""

    path: Path
    sha256: str
    trust: str
    unconfirmed: bool = False


TRUST_STORE = "checksums.json"


class TrustStore:
    """The cache's record of sha256 values first seen for files with no official checksum:
    ``{url: {"sha256": ..., "first_seen": ..., "trust": ...}}``, ``trust`` ``pinned`` where the user supplied that
    sha256 (``fetch --expect-sha256``), else ``first use`` (absent in a store of an older version)."""

    def __init__(self, cache: Path):
        self.path = cache / TRUST_STORE

    def read(self, repair: str | None = None) -> dict:
        """The records; one :class:`DamagedFile` line naming the file and ``repair`` if it cannot be read."""
        if not self.path.exists():
            return {}
        repair = repair or ("rebuild it with `python -m bench fetch --task TASK --force` for a task you "
                            "fetched (the checksums are restored from the fetched tasks' manifests)")
        records = read_json(self.path, "record of checksums trusted on first use", repair)
        for key, entry in records.items():
            if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
                    and _SHA256.fullmatch(entry["sha256"])):
                raise DamagedFile(f"{self.path}: the record of checksums trusted on first use is damaged (the "
                                  f"entry of {key} has no sha256); {repair}")
        return records

    def _write(self, records: dict) -> None:
        guard_os(lambda: atomic_write_bytes(self.path, json_bytes(records)), self.path.parent)

    def record(self, key: str, sha256: str) -> None:
        self.record_all({key: sha256})

    def record_all(self, checksums: dict[str, str], pinned=()) -> None:
        """Adds first-use records, ``pinned`` those of the keys in ``pinned`` (a key already recorded with the same
        sha256 keeps its first date)."""
        records = self.read()
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        trust = {k: PINNED if k in pinned else FIRST_USE for k in checksums}
        changed = {k: v for k, v in checksums.items()
                   if records.get(k, {}).get("sha256") != v or self.trust_of(records.get(k)) != trust[k]}
        if changed:
            records.update({k: {"sha256": v, "first_seen": records[k]["first_seen"]
                                if records.get(k, {}).get("sha256") == v and "first_seen" in records[k] else now,
                                "trust": trust[k]} for k, v in changed.items()})
            self._write(records)

    @staticmethod
    def trust_of(record: dict | None) -> str | None:
        """How a record's sha256 is trusted (``pinned`` or ``first use``), None for no record."""
        if record is None:
            return None
        return PINNED if record.get("trust") == PINNED else FIRST_USE

    def forget(self, keys) -> None:
        records = self.read()
        if any(key in records for key in keys):
            self._write({k: v for k, v in records.items() if k not in keys})

    def damaged(self) -> bool:
        try:
            self.read()
        except DamagedFile:
            return True
        return False

    def rebuild(self, records: dict) -> Path:
        """Replaces a damaged store by ``records``; the damaged file is kept beside it as ``.damaged``."""
        aside = self.path.with_name(self.path.name + ".damaged")

        def move_aside():
            if aside.is_dir() and not aside.is_symlink():
                shutil.rmtree(aside)
            else:
                aside.unlink(missing_ok=True)
            os.replace(self.path, aside)
        guard_os(move_aside, self.path.parent)
        self._write(records)
        return aside


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


class _Deadline:
    """One file's deadline: when it passes, every connection opened for the file is shut down, which ends a
    read blocked inside the socket (a server trickling bytes never lets the stall timeout fire)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expired = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> socket.socket:
        # A duplicate of the descriptor: shutting it down ends the connection even after TLS has wrapped
        # (and detached) the original socket object.
        watched = sock.dup()
        with self._lock:
            self._sockets.append(watched)
            expired = self.expired
        if expired:
            _shutdown(watched)
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed by the other side
        pass


class _DeadlinePassed(Exception):
    """Raised inside a transfer cut by its deadline (turned into one FetchError line by the retry loop)."""


def _watched(connection_class, deadline: _Deadline):
    """A factory of ``connection_class`` connections whose sockets ``deadline`` can shut down."""
    def connect(host, **kwargs):
        connection = connection_class(host, **kwargs)
        create = connection._create_connection
        connection._create_connection = lambda *args, **kw: deadline.watch(create(*args, **kw))
        return connection
    return connect


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self._deadline = deadline

    def http_open(self, req):
        return self.do_open(_watched(http.client.HTTPConnection, self._deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self._deadline = deadline

    def https_open(self, req):
        return self.do_open(_watched(http.client.HTTPSConnection, self._deadline), req, context=self._context)


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follows redirects within the same host only (see the module's docstring)."""

    def http_error_302(self, req, fp, code, msg, headers):
        location = headers.get("location") or headers.get("uri")
        if location:
            try:
                _check_redirect(req.full_url, urllib.parse.urljoin(req.full_url, location.strip()))
            except FetchError:
                fp.close()
                raise
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def _open(url: str, start: int, deadline: _Deadline, end: int | None = None):
    """The response to a GET of ``url`` from byte ``start`` (to ``end`` included, if given)."""
    ranged = start or end is not None
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-{'' if end is None else end}"}
                                     if ranged else {})
    opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline), _RedirectHandler())
    return opener.open(request, timeout=stall_seconds())


def remote_size(url: str) -> int | None:
    """The size in bytes of the file at ``url`` as its server states it, None if it does not; nothing of the file is
    read: the request asks for its first byte only (a range request; a server that ignores ranges answers with the
    whole file's length, and the connection is closed unread). The fetch's rules apply: http(s) only, redirects
    within the same host, the stall timeout. Raises ``urllib.error.HTTPError`` for an error status (404: no such
    file), :class:`FetchError` for a refused source or redirect, ``OSError`` when the server cannot be reached."""
    check_source(url)
    deadline = _Deadline(stall_seconds())
    try:
        with _open(url, 0, deadline, end=0) as response:
            return _stated_size(url, response)
    finally:
        deadline.close()


def _stated_size(url: str, response) -> int | None:
    """The whole file's size as the server states it (a 206's Content-Range total, a 200's Content-Length), None
    where it states none (no header, or a total of ``*``); a header that is there but no size is a
    :class:`FetchError`, since what the cache knows of the file cannot be compared with it."""
    if response.status == 206:
        header, text = "Content-Range", response.headers.get("Content-Range", "").rpartition("/")[2].strip()
        absent = text in ("", "*")
    else:
        header, text = "Content-Length", (response.headers.get("Content-Length") or "").strip()
        absent = not text
    if absent:
        return None
    if not (text.isascii() and text.isdigit()):
        raise FetchError(f"{url}: the server states its size as {shown(text)} in its {header}, not a number of bytes")
    return int(text)


def _total_size(response, start: int) -> int | None:
    """The whole file's size from a 200's Content-Length or a 206's Content-Range."""
    if response.status == 206:
        total = response.headers.get("Content-Range", "").rpartition("/")[2]
        return int(total) if total.isdigit() else None
    length = response.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def _transfer(url: str, part: Path, progress, deadline: _Deadline) -> None:
    """One attempt: appends the rest of ``url`` to ``part`` (or restarts it); raises on a short transfer."""
    start = part.stat().st_size if part.exists() else 0
    try:
        response = _open(url, start, deadline)
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
        # read1: returns after one read from the connection, so the deadline is checked as bytes arrive.
        read = getattr(response, "read1", response.read)
        window, window_started, window_bytes = stall_seconds(), time.monotonic(), 0
        try:
            with open(part, "ab" if start else "wb") as f:
                for chunk in iter(lambda: read(CHUNK_BYTES), b""):
                    f.write(chunk)
                    bar.update(len(chunk))
                    if deadline.expired:
                        raise _DeadlinePassed()
                    window_bytes += len(chunk)
                    elapsed = time.monotonic() - window_started
                    if elapsed >= window:
                        if window_bytes < MIN_BYTES_PER_SECOND * elapsed:
                            raise ConnectionError(f"the server sent {window_bytes} bytes in {elapsed:.1f} s, slower "
                                                  f"than {MIN_BYTES_PER_SECOND // 1024} KiB/s")
                        window_started, window_bytes = time.monotonic(), 0
        finally:
            bar.close()
    size = part.stat().st_size
    if deadline.expired and (total is None or size != total):  # shut down: what looks like the end is not
        raise _DeadlinePassed()
    if total is not None and size != total:
        raise ConnectionError(f"transfer ended at {size} of {total} bytes")


def no_progress(**_kwargs):
    """A bar that draws nothing, for a caller that asked for none (``progress=None``)."""
    class _Null:
        def update(self, _n): ...
        def close(self): ...
    return _Null()


def download(url: str, target: Path, expected_sha256: str | None, trust: TrustStore, trust_key: str,
             progress=None, retries: int | None = None, fresh: bool = False,
             pinned_sha256: str | None = None) -> Downloaded:
    """Downloads ``url`` to ``target`` (resuming a previous ``.part``), verifies it and returns it.

    ``expected_sha256`` is the official value, or None to use the trust store's value under
    ``trust_key``; with no record either, the file is returned ``unconfirmed`` and the caller records
    its sha256 (:meth:`TrustStore.record_all`) once the file has proved to be what it should (converted).
    ``pinned_sha256``: the sha256 the user supplied for a file with no official value (``fetch --expect-sha256``); it
    replaces the store's record, and a file that does not match it is deleted (:class:`CheckFailed`, exit 1).
    An existing ``target`` is re-verified rather than downloaded again, unless ``fresh``: then it and any
    ``.part`` are deleted first and the file is downloaded anew. ``retries``: default :data:`RETRIES`.
    Raises :class:`FetchError` with one line; a checksum mismatch deletes the file.
    """
    check_source(url)
    progress = progress or no_progress
    retries = RETRIES if retries is None else retries
    record = trust.read().get(trust_key)
    known = expected_sha256 or pinned_sha256 or (record or {}).get("sha256")
    level = (OFFICIAL if expected_sha256 else PINNED if pinned_sha256 else TrustStore.trust_of(record) or FIRST_USE)
    source = ("the official checksum" if expected_sha256 else "the sha256 you supplied" if pinned_sha256
              else f"the checksum recorded at first download in {trust.path} for {trust_key}")
    guard_os(lambda: target.parent.mkdir(parents=True, exist_ok=True), target.parent)
    part = target.with_name(target.name + ".part")
    if fresh:
        guard_os(lambda: (target.unlink(missing_ok=True), part.unlink(missing_ok=True)), target.parent)
    if target.exists():
        actual = _verified_sha256(target, known, url, source, level)
    else:
        _download_part(url, part, target.parent, progress, retries)
        actual = _verified_sha256(part, known, url, source, level)
        guard_os(lambda: os.replace(part, target), target.parent)
    # Unconfirmed: the store does not yet hold this sha256 as trusted so (recorded once the file has converted).
    unconfirmed = level != OFFICIAL and (record is None or record["sha256"] != actual
                                         or TrustStore.trust_of(record) != level)
    return Downloaded(target, actual, level, unconfirmed=unconfirmed)


def _download_part(url: str, part: Path, folder: Path, progress, retries: int) -> None:
    deadline = _Deadline(deadline_seconds())
    try:
        for attempt in range(retries + 1):
            stalled = False
            try:
                guard_os(lambda: _transfer(url, part, progress, deadline), folder)
                return
            except _DeadlinePassed:
                pass
            except urllib.error.HTTPError as error:
                reason = f"the server answered {error.code} {error.reason}"
                if error.code < 500 and not deadline.expired:
                    raise FetchError(f"cannot download {url}: {reason}") from None
            except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
                cause = getattr(error, "reason", error)
                stalled = isinstance(cause, (TimeoutError, socket.timeout))
                if stalled:
                    reason = f"the server sent nothing for {stall_seconds():g} s"
                else:
                    reason = str(getattr(error, "reason", None) or error) or type(error).__name__
            if deadline.expired:
                raise FetchError(f"cannot download {url}: not complete within the deadline of {deadline.seconds:g} s "
                                 f"(${DEADLINE_ENV}){_kept(part) or '; run the fetch again later'}") from None
            if attempt < retries:
                time.sleep(RETRY_PAUSE_SECONDS)
    finally:
        deadline.close()
    again = "; run the fetch again later" if stalled else ""
    raise FetchError(f"cannot download {url}: {reason} (after {retries + 1} attempts){_kept(part) or again}")


def _kept(part: Path) -> str:
    size = part.stat().st_size if part.exists() else 0
    return f"; the {size} bytes received are kept in {part}: run the fetch again and it resumes from there" if size \
        else ""


def _verified_sha256(path: Path, known: str | None, url: str, source: str, level: str) -> str:
    """``path``'s sha256; deletes the file and raises if it is not ``known`` (None: nothing to compare with yet), the
    sha256 trusted as ``level``; a file that is not the one the user pinned fails their check (exit 1)."""
    actual = sha256_file(path)
    if known is not None and actual != known:
        path.unlink()
        advice = {FIRST_USE: "fetch from the source first trusted, or, if the file changed upstream on purpose, "
                             "delete its entry from that record",
                  PINNED: "fetch from a mirror serving the file whose sha256 you were given"}.get(
            level, "run the fetch again, from another mirror if it recurs")
        failed = CheckFailed if level == PINNED else FetchError
        raise failed(f"{url}: sha256 {actual[:16]}... does not match {source} ({known[:16]}...); "
                     f"the file was deleted; {advice}")
    return actual
