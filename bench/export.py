"""``python -m bench export-submission``: finished runs on competition tasks -> the competition's zip.

Each run folder's ``predictions.npz`` becomes the task's official file (``SUBMISSION_FILES``):
``numpy.savetxt`` text, probabilities ``(N_test, C)`` or, for UCI-Gap, 1000 samples per test point
``(256, 1000)`` (points x samples, the layout the organisers' scorer read). The files sit at the
root of the zip, which is written atomically and never replaces an existing file without ``force``.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from bench import records
from bench.errors import BenchError, DamagedFile
from bench.tasks import PREDICTIVE_SAMPLES
from bench.tasks.competition import OFFICIAL_TEST_ROWS, SPECS, SUBMISSION_FILES, read_manifest
from reference.official import official_checksums
from bench.io import atomic_write_bytes, file_to_write


def _run_record(folder: Path) -> dict:
    """The run's record, every field checked as ``submit`` checks it, of a competition task."""
    if not (folder / records.RESULT).exists():
        raise BenchError(f"{folder} holds no finished run ({records.RESULT} is missing)")
    result = records.checked_result(folder)
    task = result["task"]
    if task not in SUBMISSION_FILES:
        raise BenchError(f"{folder}: task {task!r} is not a competition task; submissions hold only "
                         f"{', '.join(SUBMISSION_FILES)}")
    return result


def _run_predictions(folder: Path, result: dict, rows: int, columns: int) -> np.ndarray:
    """The run's predictions ``(rows, columns)``, read as ``submit`` reads them (a regular file, bounded by the size
    they take, checked before the array is allocated, then as predictions of the task)."""
    from leaderboard.submission import Expected, SubmissionError, read_predictions

    spec = SPECS[result["task"]]
    expected = Expected(result["task"], "classification" if spec.reference_key == "probs" else "regression",
                        result["reference"]["key"], rows, columns)
    try:
        records.check_predictions_kept(folder, result, "a competition submission")
        predictions = read_predictions(folder / records.PREDICTIONS, expected)
        records.check_predictions_recorded(folder, result, predictions)
    except (SubmissionError, DamagedFile) as error:
        raise BenchError(str(error)) from None
    return predictions


def _expected_rows(task: str, result: dict, cache) -> int:
    """The fetched task's test size, after checking the run used exactly those data and that reference;
    the official size when the task is not fetched here."""
    manifest = read_manifest(task, cache)
    official = official_checksums().get(SPECS[task].reference.official_url)
    if official is not None and result["reference"]["sha256"] != official:
        raise BenchError(f"the {task} run was scored against a reference that is not the official one "
                         f"(sha256 {result['reference']['sha256'][:16]}...)")
    if manifest is None:
        return OFFICIAL_TEST_ROWS[task]
    if result["reference"]["sha256"] != manifest["reference"]["sha256"]:
        raise BenchError(f"the {task} run used a different reference from the one fetched in the cache")
    return manifest["reference"]["shape"][0]


def export_submission(run_folders: list[Path], out: Path, cache=None, force: bool = False) -> dict[str, str]:
    """Writes the zip; returns {file name in the zip: run folder}."""
    out = Path(out)
    file_to_write(out, "the --out zip")  # a folder, FIFO or device there: refused before anything is read
    if out.exists() and not force:
        raise BenchError(f"{out} exists; pass --force to replace it")
    files: dict[str, bytes] = {}
    sources: dict[str, str] = {}
    for folder in map(Path, run_folders):
        result = _run_record(folder)
        task = result["task"]
        name = SUBMISSION_FILES[task]
        if name in files:
            raise BenchError(f"two runs for task {task}: {sources[name]} and {folder}; a submission holds one per task")
        rows = _expected_rows(task, result, cache)
        spec = SPECS[task]
        columns = spec.n_classes if spec.reference_key == "probs" else PREDICTIVE_SAMPLES
        # written exactly as the run stored them (float64 as read)
        predictions = _run_predictions(folder, result, rows, columns)
        text = io.BytesIO()
        np.savetxt(text, predictions)
        files[name], sources[name] = text.getvalue(), str(folder)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    atomic_write_bytes(out, buffer.getvalue(), "the --out zip")
    return sources
