"""The organisers' HMC references for the competition tasks: parsing, checksums and loading.

These references were computed on hundreds of TPUs (Izmailov et al. 2021) and cannot be regenerated
here; they are trusted through their sha256. ``official_checksums.json`` holds the official value of
every file whose value is known; a reference without one is trusted on first use (its sha256 is
recorded in the cache's ``checksums.json`` at the first fetch, and every later fetch must match).
The organisers published no noise floor (the agreement between independent HMC runs), so
``noise_floor`` is None for these references.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.download import TrustStore, default_cache
from bench.io import read_json
from bench.errors import DamagedFile, ReferenceMismatch
from bench.formats import FormatError, read_text_matrix
from bench.tasks import PREDICTIVE_SAMPLES, Task
from bench.tasks.competition import cached_sha256, fetch_hint, read_manifest, repair_hint
from reference.format import Reference, checked_entry, read_array

OFFICIAL_CHECKSUMS_FILE = Path(__file__).parent / "official_checksums.json"

OFFICIAL_SIZES = {
    "https://raw.githubusercontent.com/izmailovpavel/neurips_bdl_starter_kit/main/data/cifar10/probs.csv": 2_500_000,
    "https://raw.githubusercontent.com/izmailovpavel/neurips_bdl_starter_kit/main/data/imdb/probs.csv": 1_250_000,
    "https://raw.githubusercontent.com/izmailovpavel/neurips_bdl_starter_kit/main/eval-phase/eval_data/medmnist_probs.csv":
        350_000,
}
"""Official URL -> size in bytes, for the files whose size is known: the three starter-kit references with an official
sha256, as the starter kit's git tree lists them (``git ls-tree -l`` at commit af42869, whose blobs have exactly the
sha256 values of ``official_checksums.json``). The organisers' bucket lists no sizes; a file's size is otherwise
learnt at its first fetch (the manifest's ``bytes``). Used to check a mirror (:mod:`bench.mirror`)."""

PROBABILITY_SUM_TOLERANCE = 1e-5
"""Rows of an official probability file sum to 1 within about 2e-7 (18 significant digits, float32 softmax)."""


def official_checksums() -> dict[str, str]:
    """Official URL -> sha256, for the files whose official value is known."""
    return read_json(OFFICIAL_CHECKSUMS_FILE, "table of official checksums", "reinstall bdl-bench (it is part of the package)")


def parse_reference(path: Path, key: str, transposed: bool = False, n_classes: int | None = None) -> np.ndarray:
    """Reads an official reference text file into ``probs`` ``(N_test, C)`` or ``samples`` ``(N_test, 1000)``.

    ``transposed``: the file stores samples x points (``uci_samples.csv``). Raises FormatError
    unless the values are finite, probability rows are non-negative and sum to 1, and there are
    1000 samples per point.
    """
    array = read_text_matrix(path)
    if transposed:
        array = np.ascontiguousarray(array.T)
    if not np.isfinite(array).all():
        raise FormatError(f"{path.name}: holds non-finite values")
    if key == "probs":
        if n_classes is not None and array.shape[1] != n_classes:
            raise FormatError(f"{path.name}: {array.shape[1]} columns, expected {n_classes} class probabilities")
        worst = np.abs(array.sum(1) - 1).max()
        if array.min() < 0 or worst > PROBABILITY_SUM_TOLERANCE:
            raise FormatError(f"{path.name}: rows are not probabilities (worst row sum off by {worst:.2e})")
    elif array.shape[1] != PREDICTIVE_SAMPLES:
        raise FormatError(f"{path.name}: {array.shape[1]} samples per test point, expected {PREDICTIVE_SAMPLES}")
    return array


def load_official_reference(task: Task) -> Reference:
    """The reference fetched with ``task`` into its ``data_folder``, verified.

    Checks that the downloaded file's sha256 is the official one (or the one first recorded), that
    the converted array is the one the fetch wrote, and that its shape fits the task.
    """
    cache = task.data_folder.parents[1]
    refetch = repair_hint(task.name, cache)
    entry = checked_entry(read_manifest(task.name, cache).get("reference"),
                          ("url", "sha256", "array", "array_sha256", "key", "trust"),
                          f"the {task.name} manifest's reference entry", refetch)
    expected = official_checksums().get(entry["url"])
    if expected is None:
        trust = TrustStore(cache)
        expected = trust.read(refetch).get(entry["url"], {}).get("sha256")
        if expected is None:  # the record was deleted: a fetch restores it from the manifest
            raise ReferenceMismatch(
                f"reference unregistered: no checksum of the {task.name} reference is recorded in {trust.path}; "
                f"{fetch_hint(task.name, None if cache == default_cache() else cache)}")
    if expected != entry["sha256"]:
        raise ReferenceMismatch(
            f"reference mismatch: the fetched {task.name} reference has sha256 {entry['sha256'][:16]}..., "
            f"expected {str(expected)[:16]}...; {refetch}")
    path = task.data_folder / entry["array"]
    try:
        actual = cached_sha256(path, "reference array", refetch)
    except DamagedFile:  # missing, or not a regular file
        actual = None
    if actual != entry["array_sha256"]:
        raise ReferenceMismatch(f"reference corrupted: {path} is missing or was changed after the fetch; {refetch}")
    _, array = read_array(path, refetch)
    expected_columns = task.n_classes if entry["key"] == "probs" else PREDICTIVE_SAMPLES
    if array.shape != (task.n_test, expected_columns):
        raise ReferenceMismatch(
            f"reference mismatch: {task.name} reference has shape {array.shape}, the task needs "
            f"({task.n_test}, {expected_columns}); {refetch}")
    metadata = {"official": True, "url": entry["url"], "trust": entry["trust"], "noise_floor": None,
                "task_fingerprint": task.fingerprint(),
                "note": "HMC reference published by the competition organisers (Izmailov et al. 2021)"}
    return Reference(task.name, entry["key"], array, metadata, entry["sha256"])
