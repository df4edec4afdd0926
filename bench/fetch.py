"""``python -m bench fetch``: the only place anything is downloaded.

For a competition task: download every file it needs into ``<cache>/downloads/`` (resumable,
sha256-verified: :mod:`bench.download`), convert the data and the official reference once into
``.npy`` arrays in a staging folder beside ``<cache>/tasks/<task>/``, write the manifest (file
checksums and how they were trusted, array shapes and checksums) and only then move the staging
folder into place. A fetch that fails at any step leaves the previous state of the task's folder
untouched and removes its staging folder, so a task folder with a manifest is always complete.
The downloaded originals are deleted after conversion unless ``keep_downloads`` is set (the
CIFAR-10 text files alone take 4.4 GiB).
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from pathlib import Path

import numpy as np

import bench
from bench.download import Downloaded, TrustStore, guard_os, download, resolve_cache
from bench.errors import DamagedFile
from bench.formats import FormatError, npz_array, text_to_npy
from bench.io import atomic_write_bytes, json_bytes, sha256_file
from bench.tasks.competition import (DATA_URL, MANIFEST, REFERENCE_ARRAY, REFERENCE_URL, SPECS, read_manifest,
                                     task_folder)
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
    """The task's manifest if its cached arrays are complete and unchanged (every sha256 recomputed), else None."""
    folder = task_folder(name, cache)
    try:
        manifest = read_manifest(name, cache)
    except DamagedFile:  # fetching again repairs it
        return None
    if manifest is None or manifest.get("version") != SPECS[name].version:
        return None
    expected = {f"{array}.npy": entry["sha256"] for array, entry in manifest["arrays"].items()}
    expected[manifest["reference"]["array"]] = manifest["reference"]["array_sha256"]
    for file, sha256 in expected.items():
        if not (folder / file).exists() or sha256_file(folder / file) != sha256:
            return None
    return manifest


def fetch_task(name: str, cache: Path | str | None = None, data_url: str = DATA_URL,
               reference_url: str = REFERENCE_URL, progress=None, keep_downloads: bool = False,
               force: bool = False) -> tuple[dict, bool]:
    """Downloads, verifies and converts competition task ``name`` into the cache.

    Returns the task's manifest and whether anything was downloaded: a task already in the cache
    whose arrays all still match their checksums is not downloaded again (unless ``force``). ``data_url`` and ``reference_url`` replace the official locations (a
    mirror); checksums are always those of the official files. Raises :class:`FetchError` (or
    FormatError) with one line.
    """
    spec = SPECS[name]
    if not force:
        existing = cached_manifest(name, cache)
        if existing is not None:
            return existing, False
    cache = resolve_cache(cache)
    trust = TrustStore(cache)
    checksums = official_checksums()
    downloads = cache / "downloads"
    fetched: dict = {}
    for remote in spec.remotes():
        base = data_url if remote.base == "data" else reference_url
        fetched[remote] = download(base + remote.path, downloads / remote.file_name,
                                   checksums.get(remote.official_url), trust, remote.official_url, progress)

    final = task_folder(name, cache)
    guard_os(lambda: final.parent.mkdir(parents=True, exist_ok=True), final.parent)
    staging = Path(guard_os(lambda: tempfile.mkdtemp(dir=final.parent, prefix=f".{name}.staging-"), final.parent))
    try:
        arrays = {}
        for array, source in spec.arrays.items():
            out = staging / f"{array}.npy"
            shape = guard_os(lambda: _convert(source, fetched[source.remote], out), staging)
            arrays[array] = {"shape": shape, "sha256": sha256_file(out)}
        reference = parse_reference(fetched[spec.reference].path, spec.reference_key,
                                    spec.reference_transposed, spec.n_classes)
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
    finally:
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
