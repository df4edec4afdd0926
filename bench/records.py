"""Run folders: ``<out>/<task>/<method>/budget-<B>/seed-<S>/`` holding ``predictions.npz`` and ``result.json``.

``result.json`` is written last, so its presence marks a finished run; both files are written
atomically (temporary file in the same folder, then rename), and a finished run is never
overwritten unless the caller asks for it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.errors import BenchError
from bench.io import atomic_write_bytes, json_bytes, npz_bytes, read_json

RESULT = "result.json"
PREDICTIONS = "predictions.npz"


def run_folder(out: Path, task: str, method: str, budget: float, seed: int) -> Path:
    return Path(out) / task / method / f"budget-{budget:g}" / f"seed-{seed}"


def check_writable(folder: Path, force: bool) -> None:
    """Fails early (before any training) if the run exists or the folder cannot be written."""
    if (folder / RESULT).exists() and not force:
        raise BenchError(f"{folder} already holds a finished run; pass --force to overwrite it")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise BenchError(f"cannot write to output folder {folder}: {error.strerror or error}") from None


def write_run(folder: Path, key: str, predictions: np.ndarray, result: dict) -> None:
    atomic_write_bytes(folder / PREDICTIONS, npz_bytes(**{key: predictions}))
    atomic_write_bytes(folder / RESULT, json_bytes(result))


def read_result(folder: Path) -> dict:
    return read_json(Path(folder) / RESULT, "run record", "run it again with --force to replace it")
