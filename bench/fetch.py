"""``python -m bench fetch``: the only place anything is downloaded.

For a competition task: download every file it needs into ``<cache>/downloads/`` (resumable,
sha256-verified: :mod:`bench.download`), convert the data and the official reference once into
``.npy`` arrays in a staging folder beside ``<cache>/tasks/<task>/``, write the manifest (file
checksums and how they were trusted, array shapes and checksums) and only then move the staging
folder into place. A fetch that fails at any step leaves the previous state of the task's folder
untouched and removes its staging folder, so a task folder with a manifest is always complete.
The downloaded originals are deleted after conversion unless ``keep_downloads`` is set (the
CIFAR-10 text files alone take 4.4 GiB).

The cache heals: checksums trusted on first use are recorded only after the task's files converted,
and a downloaded file whose content the conversion refused (an error page from a mirror) is deleted,
so the next fetch, from a good mirror, starts clean. ``force`` downloads every file again (no kept
download or partial file is reused) and drops this task's first-use records that no fetched task's
manifest confirms. A fetch (forced or not) replaces a damaged manifest, and a damaged record of
first-use checksums is moved aside (``checksums.json.damaged``) and rebuilt from the checksums in the
intact manifests of the fetched tasks. A task is "already fetched" only if its manifest is intact,
every cached array matches it, and its checksums agree with the official ones or the first-use records.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from pathlib import Path

import numpy as np

import bench
from bench.download import Downloaded, TrustStore, check_source, guard_os, download, no_progress, resolve_cache
from bench.errors import DamagedFile
from bench.formats import FormatError, npz_array, text_to_npy
from bench.io import atomic_write_bytes, json_bytes, sha256_file
from bench.tasks.competition import (DATA_URL, MANIFEST, REFERENCE_ARRAY, REFERENCE_URL, SPECS, read_manifest,
                                     task_folder, verify_cached_files)
from reference.official import official_checksums, parse_reference


def _convert(source, downloaded: Downloaded, out: Path) -> list[int]:
    """Writes one array of a task to ``out`` from its downloaded file; returns the array's shape."""
    try:
        if source.key is None:
            return list(text_to_npy(downloaded.path, out, source.convert))
        rows = source.convert(npz_array(downloaded.path, source.key))
        np.save(out, rows)
        return list(rows.shape)
    except ValueError as error:
        raise FormatError(f"{downloaded.path.name}: {error}") from None


def _check_sizes(name: str, arrays: dict, reference_rows: int) -> None:
    shapes = {k: v["shape"] for k, v in arrays.items()}
    if shapes["x_train"][0] != shapes["y_train"][0]:
        raise FormatError(f"{name}: {shapes['x_train'][0]} training inputs but {shapes['y_train'][0]} labels")
    if "y_test" in shapes and shapes["y_test"][0] != shapes["x_test"][0]:
        raise FormatError(f"{name}: {shapes['x_test'][0]} test inputs but {shapes['y_test'][0]} test labels")
    if reference_rows != shapes["x_test"][0]:
        raise FormatError(f"{name}: the reference has {reference_rows} rows, the test set {shapes['x_test'][0]}")


def cached_manifest(name: str, cache: Path | str | None = None) -> dict | None:
    """The task's manifest if its cached arrays are complete and unchanged (every sha256 recomputed) and its
    checksums are still those trusted (official, or recorded at first use), else None."""
    try:
        manifest = read_manifest(name, cache)
        if manifest is None or manifest.get("version") != SPECS[name].version:
            return None
        verify_cached_files(name, cache, manifest, reference=True)
        official = official_checksums()
        records = TrustStore(resolve_cache(cache)).read()
    except DamagedFile:  # fetching again repairs it
        return None
    for url, entry in manifest["files"].items():
        trusted = official.get(url) or records.get(url, {}).get("sha256")
        if trusted is not None and trusted != entry["sha256"]:
            return None
    return manifest


def _confirmed_checksums(cache: Path) -> dict[str, dict]:
    """First-use records as the intact manifests of the fetched tasks hold them: ``{url: record}``."""
    confirmed = {}
    for name in SPECS:
        try:
            manifest = read_manifest(name, cache)
        except DamagedFile:
            continue
        if manifest is None or manifest["version"] != SPECS[name].version:
            continue
        for url, entry in manifest["files"].items():
            if entry["trust"] == "first use":
                confirmed[url] = {"sha256": entry["sha256"], "first_seen": manifest.get("fetched_at"),
                                  "restored_from": str(task_folder(name, cache) / MANIFEST)}
    return confirmed


def _heal_trust_store(trust: TrustStore, cache: Path, name: str, force: bool) -> None:
    """Rebuilds a damaged trust store from the manifests. Without ``force``, restores the records missing
    for the fetched tasks' files (a deleted store); with ``force``, forgets this task's first-use records
    that no manifest confirms (left by a fetch that failed before conversion, or by older versions)."""
    if trust.damaged():
        trust.rebuild(_confirmed_checksums(cache))
    if not force:
        records = trust.read()
        missing = {url: r["sha256"] for url, r in _confirmed_checksums(cache).items() if url not in records}
        if missing:
            trust.record_all(missing)
    else:
        confirmed, records = _confirmed_checksums(cache), trust.read()
        urls = [remote.official_url for remote in SPECS[name].remotes()]
        unconfirmed = [url for url in urls
                       if url in records and confirmed.get(url, {}).get("sha256") != records[url]["sha256"]]
        trust.forget(unconfirmed)


def fetch_task(name: str, cache: Path | str | None = None, data_url: str = DATA_URL,
               reference_url: str = REFERENCE_URL, progress=None, keep_downloads: bool = False,
               force: bool = False) -> tuple[dict, bool]:
    """Downloads, verifies and converts competition task ``name`` into the cache.

    Returns the task's manifest and whether anything was downloaded: a task already in the cache
    whose arrays all still match their checksums is not downloaded again (unless ``force``, which
    downloads every file anew). ``data_url`` and ``reference_url`` replace the official locations (a
    mirror: http or https, see :mod:`bench.download`); checksums are always those of the official files.
    Raises :class:`FetchError` (or FormatError) with one line.
    """
    spec = SPECS[name]
    check_source(data_url)
    check_source(reference_url)
    trust = TrustStore(resolve_cache(cache))
    _heal_trust_store(trust, resolve_cache(cache), name, force)
    steps = progress or no_progress  # the bars of the phases that are no download (``progress``'s, counting steps)
    if not force:
        checking = steps(total=None, desc=f"{name}: checking the cached arrays' sha256", unit_scale=False,
                         bar_format="{desc} [{elapsed}]")
        try:  # every cached array hashed again: seconds for an image task's hundreds of megabytes
            existing = cached_manifest(name, cache)
        finally:
            checking.close()
        if existing is not None:
            return existing, False
    cache = resolve_cache(cache)
    checksums = official_checksums()
    downloads = cache / "downloads"
    fetched: dict = {}
    for remote in spec.remotes():
        fetched[remote] = download(remote.url(data_url, reference_url), downloads / remote.file_name,
                                   checksums.get(remote.official_url), trust, remote.official_url, progress,
                                   fresh=force)

    final = task_folder(name, cache)
    guard_os(lambda: final.parent.mkdir(parents=True, exist_ok=True), final.parent)
    staging = Path(guard_os(lambda: tempfile.mkdtemp(dir=final.parent, prefix=f".{name}.staging-"), final.parent))
    converting = steps(total=len(spec.arrays) + 1, desc=f"{name}: converting the arrays and the reference",
                       unit="file", unit_scale=False)
    try:
        arrays = {}
        for array, source in spec.arrays.items():
            out = staging / f"{array}.npy"
            shape = guard_os(lambda: _convert(source, fetched[source.remote], out), staging)
            arrays[array] = {"shape": shape, "sha256": sha256_file(out)}
            converting.update(1)
        reference = parse_reference(fetched[spec.reference].path, spec.reference_key,
                                    spec.reference_transposed, spec.n_classes)
        converting.update(1)
        _check_sizes(name, arrays, len(reference))
        guard_os(lambda: np.save(staging / REFERENCE_ARRAY, reference), staging)
        ref_file = fetched[spec.reference]
        manifest = {
            "task": name, "version": spec.version, "arrays": arrays,
            "files": {remote.official_url: {"sha256": d.sha256, "trust": d.trust, "bytes": d.path.stat().st_size}
                      for remote, d in fetched.items()},
            "reference": {"url": spec.reference.official_url, "key": spec.reference_key, "sha256": ref_file.sha256,
                          "trust": ref_file.trust, "array": REFERENCE_ARRAY,
                          "array_sha256": sha256_file(staging / REFERENCE_ARRAY),
                          "shape": list(reference.shape)},
            "fetched_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "bdl_bench_version": bench.__version__,
        }
        guard_os(lambda: atomic_write_bytes(staging / MANIFEST, json_bytes(manifest)), staging)
        _install(staging, final)
        # Trust on first use: recorded only now, when every file has converted into the installed task.
        trust.record_all({remote.official_url: d.sha256 for remote, d in fetched.items() if d.unconfirmed})
    except FormatError as error:
        # The content was refused (an error page, another file): a download trusted on first use must not be
        # reused, nor its record (one left by a version that recorded before converting) keep refusing the
        # genuine file. Officially checksummed files are genuine and kept.
        first_use = [(remote, d) for remote, d in fetched.items() if d.trust == "first use"]
        for _, downloaded in first_use:
            downloaded.path.unlink(missing_ok=True)
        trust.forget([remote.official_url for remote, d in first_use if not d.unconfirmed])
        deleted = "; the downloads trusted on first use were deleted, fetch again (from another mirror if it recurs)"
        raise FormatError(f"{error}{deleted if first_use else ''}") from None
    finally:
        converting.close()
        shutil.rmtree(staging, ignore_errors=True)
    if not keep_downloads:
        for downloaded in fetched.values():
            downloaded.path.unlink(missing_ok=True)
    return manifest, True


def _install(staging: Path, final: Path) -> None:
    """Replaces ``final`` by ``staging`` with renames: a reader sees the old folder or the new one."""
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{staging.name}")
        guard_os(lambda: final.rename(old), final.parent)
    try:
        guard_os(lambda: staging.rename(final), final.parent)
    except BaseException:
        if old is not None:
            old.rename(final)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def describe_fetch(manifest: dict) -> str:
    """One line per file: its sha256 and whether it matched the official value or was trusted on first use."""
    lines = []
    for url, entry in manifest["files"].items():
        how = ("matches the official sha256" if entry["trust"] == "official"
               else "no official sha256 known: recorded at first download (trust on first use)")
        lines.append(f"  {url.rsplit('/', 1)[-1]}: sha256 {entry['sha256'][:16]}... {how}")
    return "\n".join(lines)
