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

Pinning (``pins``: ``fetch --expect-sha256 FILE=SHA256`` or ``--checksums FILE``): a file with no official sha256 is
checked against the one the user supplied (a lab's checksums of its shared mirror) and then trusted as ``pinned``
(:mod:`bench.trust`), in the manifest and the cache's store. A file that does not match is not kept as trusted: a
download is deleted, and a task already fetched from it is removed from the cache with its first-use records
(:class:`~bench.errors.CheckFailed`, exit 1). A fetch that fails after some of the task's files were downloaded says
which stay in ``<cache>/downloads/``, their size, and that the next fetch reuses them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

import bench
from bench.download import (Downloaded, FetchError, TrustStore, check_source, guard_os, download, no_progress,
                            resolve_cache)
from bench.errors import CheckFailed, ConfigError, DamagedFile, terminal_text
from bench.formats import FormatError, npz_array, text_to_npy
from bench.io import atomic_write_bytes, json_bytes, sha256_file
from bench.tasks.competition import (DATA_URL, MANIFEST, REFERENCE_ARRAY, REFERENCE_URL, SPECS, Remote,
                                     read_manifest, task_folder, verify_cached_files)
from bench.trust import FIRST_USE, MEANING, OFFICIAL, PINNED
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
            if entry["trust"] in (FIRST_USE, PINNED):
                confirmed[url] = {"sha256": entry["sha256"], "first_seen": manifest.get("fetched_at"),
                                  "trust": entry["trust"], "restored_from": str(task_folder(name, cache) / MANIFEST)}
    return confirmed


def _heal_trust_store(trust: TrustStore, cache: Path, name: str, force: bool) -> None:
    """Rebuilds a damaged trust store from the manifests. Without ``force``, restores the records missing
    for the fetched tasks' files (a deleted store); with ``force``, forgets this task's first-use records
    that no manifest confirms (left by a fetch that failed before conversion, or by older versions)."""
    if trust.damaged():
        trust.rebuild(_confirmed_checksums(cache))
    if not force:
        records, confirmed = trust.read(), _confirmed_checksums(cache)
        missing = {url: r["sha256"] for url, r in confirmed.items() if url not in records}
        if missing:
            trust.record_all(missing, pinned={url for url in missing if confirmed[url]["trust"] == PINNED})
    else:
        confirmed, records = _confirmed_checksums(cache), trust.read()
        urls = [remote.official_url for remote in SPECS[name].remotes()]
        unconfirmed = [url for url in urls
                       if url in records and confirmed.get(url, {}).get("sha256") != records[url]["sha256"]]
        trust.forget(unconfirmed)


def fetch_task(name: str, cache: Path | str | None = None, data_url: str = DATA_URL,
               reference_url: str = REFERENCE_URL, progress=None, keep_downloads: bool = False,
               force: bool = False, pins: dict[str, str] | None = None) -> tuple[dict, bool]:
    """Downloads, verifies and converts competition task ``name`` into the cache.

    Returns the task's manifest and whether anything was downloaded: a task already in the cache
    whose arrays all still match their checksums is not downloaded again (unless ``force``, which
    downloads every file anew). ``data_url`` and ``reference_url`` replace the official locations (a
    mirror: http or https, see :mod:`bench.download`); checksums are always those of the official files.
    ``pins``: sha256 values the user supplied, by official URL (:func:`pins_of`; those of other tasks' files are
    ignored): the files they name are checked against them and trusted as ``pinned``.
    Raises :class:`FetchError` (or FormatError, or CheckFailed for a file that is not the pinned one) with one line.
    """
    spec = SPECS[name]
    pins = {remote.official_url: pins[remote.official_url] for remote in spec.remotes()
            if remote.official_url in (pins or {})}
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
            return _pinned_in_place(name, resolve_cache(cache), existing, pins, trust), False
    cache = resolve_cache(cache)
    checksums = official_checksums()
    _check_pins_against_official(pins, checksums)
    downloads = cache / "downloads"
    fetched: dict = {}
    for remote in spec.remotes():
        try:
            fetched[remote] = download(remote.url(data_url, reference_url), downloads / remote.file_name,
                                       checksums.get(remote.official_url), trust, remote.official_url, progress,
                                       fresh=force, pinned_sha256=pins.get(remote.official_url))
        except (FetchError, CheckFailed) as error:
            raise type(error)(f"{error}{_kept_downloads(name, downloads, fetched)}") from None

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
        # Trust on first use (or pinned): recorded only now, when every file has converted into the installed task.
        trust.record_all({remote.official_url: d.sha256 for remote, d in fetched.items() if d.unconfirmed},
                         pinned={remote.official_url for remote, d in fetched.items() if d.trust == PINNED})
    except FormatError as error:
        # The content was refused (an error page, another file): a download trusted on first use must not be
        # reused, nor its record (one left by a version that recorded before converting) keep refusing the
        # genuine file. Officially checksummed files are genuine and kept.
        first_use = [(remote, d) for remote, d in fetched.items() if d.trust == FIRST_USE]
        for _, downloaded in first_use:
            downloaded.path.unlink(missing_ok=True)
        trust.forget([remote.official_url for remote, d in first_use if not d.unconfirmed])
        deleted = "; the downloads trusted on first use were deleted, fetch again (from another mirror if it recurs)"
        raise FormatError(f"{error}{deleted if first_use else ''}{_kept_downloads(name, downloads, fetched)}") \
            from None
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
    """One line per file: its sha256 and how it is trusted (:data:`bench.trust.MEANING`)."""
    return "\n".join(f"  {url.rsplit('/', 1)[-1]}: sha256 {entry['sha256'][:16]}... {entry['trust']}: "
                     f"{MEANING[entry['trust']]}" for url, entry in manifest["files"].items())


def _size_text(size: int) -> str:
    return (f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB" if size >= 2**20
            else f"{size:,} bytes")


def _kept_downloads(name: str, downloads: Path, fetched: dict) -> str:
    """What a failed fetch of task ``name`` leaves in ``downloads``: the task's files ``fetched`` so far (each a
    :class:`Downloaded`) and their size, and that the next fetch reuses them; "" for none."""
    kept = [d.path for d in fetched.values() if d.path.exists()]
    if not kept:
        return ""
    size = sum(path.stat().st_size for path in kept)
    return (f"; {len(kept)} download(s) of {name} ({_size_text(size)}) stay in {terminal_text(downloads)}: "
            f"{', '.join(terminal_text(path.name) for path in kept)}; fetching again reuses them, or delete them to "
            "free the space")


def _check_pins_against_official(pins: dict[str, str], official: dict[str, str]) -> None:
    """A supplied sha256 of a file with an official one must be that one (the file is checked against it)."""
    for url, sha256 in pins.items():
        if url in official and official[url] != sha256:
            raise CheckFailed(f"{url}: the sha256 you supplied ({sha256[:16]}...) is not the organisers' published "
                              f"one ({official[url][:16]}...); nothing was downloaded: check where your checksum "
                              "came from")


def _pinned_in_place(name: str, cache: Path, manifest: dict, pins: dict[str, str], trust: TrustStore) -> dict:
    """The already fetched task's manifest with ``pins`` applied: each pinned file whose recorded sha256 matches is
    trusted as ``pinned`` from now on (manifest and store rewritten); one that does not is not kept as trusted (the
    task is removed from the cache with its first-use records and any kept download, :class:`CheckFailed`)."""
    _check_pins_against_official(pins, official_checksums())
    files = manifest["files"]
    for url, sha256 in pins.items():
        if files[url]["sha256"] != sha256:
            shutil.rmtree(task_folder(name, cache), ignore_errors=True)
            trust.forget([u for u, entry in files.items() if entry["trust"] != OFFICIAL])
            for remote in SPECS[name].remotes():
                (cache / "downloads" / remote.file_name).unlink(missing_ok=True)
            raise CheckFailed(f"{url}: the fetched file's sha256 {files[url]['sha256'][:16]}... does not match the "
                              f"one you supplied ({sha256[:16]}...); the {name} task converted from it was removed "
                              f"from the cache: fetch it again from a mirror serving the file you have the "
                              "checksum of")
    newly = [url for url in pins if files[url]["trust"] == FIRST_USE]
    if not newly:
        return manifest
    manifest = json.loads(json.dumps(manifest))
    for url in newly:
        manifest["files"][url]["trust"] = PINNED
        if manifest["reference"]["url"] == url:
            manifest["reference"]["trust"] = PINNED
    folder = task_folder(name, cache)
    guard_os(lambda: atomic_write_bytes(folder / MANIFEST, json_bytes(manifest)), folder)
    trust.record_all({url: files[url]["sha256"] for url in newly}, pinned=set(newly))
    return manifest


SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def _matching_files(name: str) -> list[Remote]:
    """The competition files ``name`` names: its official URL, its path under its base URL, or the end of that path
    (whole components: ``cifar_probs.csv``, ``eval_data/cifar_probs.csv``), as ``sha256sum`` lists a mirror's files."""
    name = name.removeprefix("./")
    remotes = {remote.official_url: remote for spec in SPECS.values() for remote in spec.remotes()}
    return [remote for url, remote in remotes.items()
            if name in (url, remote.path) or remote.path.endswith("/" + name)]


def pins_of(expected: list[str], checksums_file: Path | None = None) -> dict[str, str]:
    """The sha256 values a user supplied, by official URL: each ``FILE=SHA256`` of ``expected`` (``fetch
    --expect-sha256``), then each line ``SHA256  FILE`` of ``checksums_file`` (``sha256sum``'s format; lines naming no
    competition file are skipped, as a mirror's list holds others). One :class:`ConfigError` line for a malformed
    value, a name that is no competition file's (in ``expected``) or several's, or two values for one file."""
    named: list[tuple[str, str, str]] = []
    for item in expected:
        file, sep, sha256 = item.rpartition("=")
        if not sep or not file:
            raise ConfigError(f"--expect-sha256 takes FILE=SHA256, got {terminal_text(item)!r}")
        named.append((file.strip(), sha256.strip(), "--expect-sha256"))
    if checksums_file is not None:
        from bench.io import open_regular_file

        with open_regular_file(Path(checksums_file), "checksums file", "give a sha256sum-format file") as f:
            text = f.read(1 << 20).decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            sha256, _, file = line.strip().partition(" ")
            named.append((file.strip().lstrip("*"), sha256, f"{checksums_file}, line {number}"))
    pins: dict[str, str] = {}
    for file, sha256, where in named:
        if not SHA256.fullmatch(sha256):
            raise ConfigError(f"{terminal_text(where)}: {terminal_text(sha256)!r} is not a sha256 (64 hexadecimal "
                              "digits)")
        matches = _matching_files(file)
        if len(matches) > 1:
            raise ConfigError(f"{terminal_text(where)}: {terminal_text(file)!r} names several competition files "
                              f"({', '.join(m.path for m in matches)}); give more of its path")
        if not matches:
            if where == "--expect-sha256":
                raise ConfigError(f"--expect-sha256: {terminal_text(file)!r} is no competition task's file; name it "
                                  "by its path on the mirror (as eval-phase/eval_data/cifar_probs.csv) or its file "
                                  "name")
            continue
        url = matches[0].official_url
        if pins.get(url, sha256.lower()) != sha256.lower():
            raise ConfigError(f"{terminal_text(where)}: a second, different sha256 for {matches[0].path}")
        pins[url] = sha256.lower()
    return pins
