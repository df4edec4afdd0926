"""``python -m bench fetch --check-mirror``: whether a mirror of the official files holds every file of the
competition tasks where ``fetch`` looks for it, without downloading them.

A mirror is two base locations, ``--data-url`` (the organisers' bucket) and ``--reference-url`` (the starter kit's
raw files): ``fetch`` downloads each file from ``<base>/<path>``, with the bases and paths of :func:`layout` (its
table, :func:`layout_table`, is in docs/tasks.md, kept equal by a test). Each file is reported present, missing,
of the wrong size or, for a mirror on this machine (a folder, as a path or a ``file://`` URL, where reading a file
downloads nothing), of the wrong sha256, against what the code knows of it: the official sizes and sha256
(:mod:`reference.official`), and else the sizes and sha256 the cache recorded when the task was fetched (its
manifest) or first trusted (``checksums.json``). A file of an http(s) mirror is checked from the answer to a
request for its first byte: the fetch's rules apply (same-host redirects, the stall timeout), and a server that
cannot be reached is reported once, its other files left unchecked.
"""

from __future__ import annotations

import http.client
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

from bench.download import ANY_SOURCE_ENV, FetchError, TrustStore, remote_size, resolve_cache
from bench.errors import ConfigError, DamagedFile
from bench.io import sha256_file
from bench.tasks.competition import DATA_URL, REFERENCE_URL, SPECS, Remote, read_manifest
from reference.official import OFFICIAL_SIZES, official_checksums

OPTIONS = {"data": "--data-url", "reference": "--reference-url"}
"""The option naming each base of a mirror."""


@dataclass(frozen=True)
class MirrorFile:
    """One file a task needs, with what is known of it: its size and sha256 (None where unknown) and where each
    was learnt (``official``, or what in the cache recorded it)."""

    task: str
    remote: Remote
    size: int | None = None
    sha256: str | None = None
    size_from: str = ""
    sha256_from: str = ""


@dataclass(frozen=True)
class Finding:
    """A file as the mirror holds it: ``problem`` is None (present, as expected), ``missing``, ``wrong size``,
    ``wrong sha256``, ``unreadable``, ``unreachable`` or ``not checked``; ``detail`` says what was seen."""

    file: MirrorFile
    location: str
    problem: str | None
    detail: str


def layout(names: list[str] | None = None) -> list[MirrorFile]:
    """Every file of the competition tasks ``names`` (default: all), each once, with its official size and sha256
    where known."""
    checksums, files = official_checksums(), []
    for name in names or list(SPECS):
        for remote in SPECS[name].remotes():
            url = remote.official_url
            size, sha256 = OFFICIAL_SIZES.get(url), checksums.get(url)
            files.append(MirrorFile(name, remote, size, sha256, "official" if size else "",
                                    "official" if sha256 else ""))
    return list({file.remote: file for file in files}.values())


def layout_table() -> str:
    """:func:`layout` of every task as the Markdown table of docs/tasks.md ("-": not known before a fetch)."""
    rows = ["| task | base | path under the base | bytes | sha256 |", "|---|---|---|---|---|"]
    for file in layout():
        size = f"{file.size:,}" if file.size is not None else "-"
        sha256 = f"`{file.sha256}`" if file.sha256 else "-"
        rows.append(f"| `{file.task}` | `{OPTIONS[file.remote.base]}` | `{file.remote.path}` | {size} | {sha256} |")
    return "\n".join(rows)


def with_recorded(files: list[MirrorFile], cache: Path | str | None) -> list[MirrorFile]:
    """``files`` with what the cache recorded filled in where nothing official is known: the size and sha256 of
    each file of a fetched task (its manifest), else a sha256 trusted on first use. A damaged record is skipped."""
    recorded: dict[str, tuple[int, str, str]] = {}
    for name in dict.fromkeys(file.task for file in files):
        try:
            manifest = read_manifest(name, cache)
        except DamagedFile:
            continue
        if manifest is not None and manifest["version"] == SPECS[name].version:
            for url, entry in manifest["files"].items():
                recorded[url] = (entry["bytes"], entry["sha256"], f"the fetch of {name} in this cache")
    try:
        trusted = TrustStore(resolve_cache(cache)).read()
    except DamagedFile:
        trusted = {}
    filled = []
    for file in files:
        url = file.remote.official_url
        size, sha256, source = recorded.get(url, (None, None, ""))
        if sha256 is None and url in trusted:
            sha256, source = trusted[url]["sha256"], "the cache's record of first-use checksums"
        if file.size is None and size is not None:
            file = replace(file, size=size, size_from=source)
        if file.sha256 is None and sha256 is not None:
            file = replace(file, sha256=sha256, sha256_from=source)
        filled.append(file)
    return filled


def local_folder(base: str, option: str) -> Path | None:
    """The folder a mirror's base names on this machine (a path or a ``file://`` URL), None for http(s); one
    :class:`ConfigError` line for another scheme or a folder that does not exist."""
    parts = urllib.parse.urlsplit(base)
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        return None
    if scheme == "file":
        folder = Path(urllib.request.url2pathname(parts.path))
    elif scheme == "" or (len(scheme) == 1 and base[1:2] == ":"):  # a path (a Windows drive letter is no scheme)
        folder = Path(base).expanduser()
    else:
        raise ConfigError(f"{option} {base}: a mirror is checked at an http(s) URL or in a folder of this machine "
                          f"(a path or a file:// URL), not over {scheme}")
    if not folder.is_dir():
        raise ConfigError(f"{option} {base}: no such folder")
    return folder


def _bytes(n: int) -> str:
    return f"{n:,} bytes"


def _check_local(file: MirrorFile, path: Path) -> Finding:
    location = str(path)
    if not path.exists():
        return Finding(file, location, "missing", "")
    if not path.is_file():
        return Finding(file, location, "unreadable", "not a regular file")
    size = path.stat().st_size
    if file.size is not None and size != file.size:
        return Finding(file, location, "wrong size", f"{_bytes(size)}; expected {file.size:,} ({file.size_from})")
    if file.sha256 is None:
        return Finding(file, location, None, f"{_bytes(size)}; no sha256 known to compare")
    try:
        actual = sha256_file(path)
    except OSError as error:
        return Finding(file, location, "unreadable", error.strerror or str(error))
    if actual != file.sha256:
        return Finding(file, location, "wrong sha256",
                       f"sha256 {actual[:16]}..., expected {file.sha256[:16]}... ({file.sha256_from})")
    return Finding(file, location, None, f"{_bytes(size)}, sha256 as {file.sha256_from}")


def _check_remote(file: MirrorFile, url: str) -> Finding:
    """Raises ``OSError`` (or ``http.client.HTTPException``) when the server cannot be reached at all."""
    try:
        size = remote_size(url)
    except urllib.error.HTTPError as error:
        if error.code in (404, 410):
            return Finding(file, url, "missing", f"the server answered {error.code} {error.reason}")
        return Finding(file, url, "unreadable", f"the server answered {error.code} {error.reason}")
    except FetchError as error:  # a redirect the fetch would refuse
        return Finding(file, url, "unreadable", str(error))
    if size is None:
        return Finding(file, url, None, "the server does not state its size")
    if file.size is not None and size != file.size:
        return Finding(file, url, "wrong size", f"{_bytes(size)}; expected {file.size:,} ({file.size_from})")
    known = f", as {file.size_from}" if file.size is not None else "; no size known to compare"
    return Finding(file, url, None, _bytes(size) + known)


def check(files: list[MirrorFile], data_url: str = DATA_URL, reference_url: str = REFERENCE_URL) -> list[Finding]:
    """Each of ``files`` as the mirror at ``data_url`` and ``reference_url`` holds it (see the module's docstring);
    one :class:`ConfigError` line for a base that is neither http(s) nor a folder of this machine."""
    bases = {"data": data_url, "reference": reference_url}
    folders = {kind: local_folder(base, OPTIONS[kind]) for kind, base in bases.items()}
    unreachable: dict[str, str] = {}
    findings = []
    for file in files:
        kind = file.remote.base
        folder = folders[kind]
        if folder is not None:
            findings.append(_check_local(file, folder / file.remote.path))
            continue
        url = file.remote.url(data_url, reference_url)
        if kind in unreachable:
            findings.append(Finding(file, url, "not checked", f"{bases[kind]} could not be reached"))
            continue
        try:
            findings.append(_check_remote(file, url))
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            unreachable[kind] = str(getattr(error, "reason", None) or error) or type(error).__name__
            findings.append(Finding(file, url, "unreachable", unreachable[kind]))
    return findings


def report(names: list[str], data_url: str | None, reference_url: str | None, cache: Path | str | None) -> int:
    """``fetch --check-mirror``: one line per file, a summary, and 1 if any file is not as it should be."""
    data_url, reference_url = data_url or DATA_URL, reference_url or REFERENCE_URL
    findings = check(with_recorded(layout(names), cache), data_url, reference_url)
    for finding in findings:
        detail = f" ({finding.detail})" if finding.detail else ""
        print(f"{finding.problem or 'present'}: {finding.file.task}: {finding.location}{detail}")
    problems: dict[str, int] = {}
    for finding in findings:
        if finding.problem:
            problems[finding.problem] = problems.get(finding.problem, 0) + 1
    present = len(findings) - sum(problems.values())
    counts = "".join(f", {n} {problem}" for problem, n in problems.items())
    print(f"mirror: {len(findings)} files of {len(names)} task(s) checked: {present} present{counts}")
    local = [base for base in (data_url, reference_url) if urllib.parse.urlsplit(base).scheme.lower()
             not in ("http", "https")]
    if local:
        print(f"note: fetch reads a mirror on this machine as a file:// URL and only with {ANY_SOURCE_ENV}=1")
    if problems:
        print(f"error: the mirror does not hold {sum(problems.values())} of the {len(findings)} files as fetch needs "
              "them (each named above; the layout is in docs/tasks.md)", file=sys.stderr)
        return 1
    return 0
