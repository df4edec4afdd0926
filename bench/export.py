"""``python -m bench export-submission``: finished runs on competition tasks -> the competition's zip.

Every claim of each run's record is first checked as ``submit`` and ``verify`` check it, against the task fetched
into the cache (:func:`leaderboard.submission.checked_run`). Each run folder's ``predictions.npz`` then becomes the
task's official file (``SUBMISSION_FILES``):
``numpy.savetxt`` text, probabilities ``(N_test, C)`` or, for UCI-Gap, 1000 samples per test point
``(256, 1000)`` (points x samples, the layout the organisers' scorer read). The files sit at the
root of the zip, which is written atomically and never replaces an existing file without ``force``. Each file comes
with how the files its run was scored against are trusted here (:mod:`bench.trust`), which the command prints: the
competition's zip has no place for it.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from bench import records
from bench.errors import BenchError
from bench.tasks.competition import SPECS, SUBMISSION_FILES, read_manifest
from reference.official import official_checksums
from bench.io import atomic_write_bytes, file_to_write


def _checked_predictions(folder: Path, cache) -> tuple[str, np.ndarray, dict]:
    """The task and predictions of the run in ``folder``, a run of a competition task whose every claim was checked as
    ``submit`` and ``verify`` check it (:func:`leaderboard.submission.checked_run`, with the same lines), against the
    task fetched into ``cache`` and its official reference; and how that reference and the data are trusted here
    (``trust``, as a record holds it)."""
    from leaderboard.submission import SubmissionError, checked_run

    if not (folder / records.RESULT).exists():
        raise BenchError(f"{folder} holds no finished run ({records.RESULT} is missing)")
    task = records.checked_result(folder)["task"]
    if task not in SUBMISSION_FILES:
        raise BenchError(f"{folder}: task {task!r} is not a competition task; submissions hold only "
                         f"{', '.join(SUBMISSION_FILES)}")
    if read_manifest(task, cache) is None:
        raise BenchError(f"{folder}: export-submission checks every claim of the run against {task}'s data and "
                         f"official reference, as submit and verify do; fetch them first: `python -m bench fetch "
                         f"--task {task}` (with the --cache the run used)")
    try:
        run = checked_run(folder, cache, needs="a competition submission")
    except SubmissionError as error:
        raise BenchError(str(error)) from None
    official = official_checksums().get(SPECS[task].reference.official_url)
    if official is not None and run.reference.sha256 != official:
        raise BenchError(f"the {task} run was scored against a reference that is not the official one "
                         f"(sha256 {run.reference.sha256[:16]}...)")
    return task, run.predictions, run.trust


def export_submission(run_folders: list[Path], out: Path, cache=None,
                      force: bool = False) -> dict[str, tuple[str, dict]]:
    """Writes the zip; returns {file name in the zip: (run folder, how the files it was scored against are trusted)}."""
    out = Path(out)
    file_to_write(out, "the --out zip")  # a folder, FIFO or device there: refused before anything is read
    if out.exists() and not force:
        raise BenchError(f"{out} exists; pass --force to replace it")
    files: dict[str, bytes] = {}
    sources: dict[str, tuple[str, dict]] = {}
    for folder in map(Path, run_folders):
        task, predictions, trust = _checked_predictions(folder, cache)  # written exactly as the run stored them
        name = SUBMISSION_FILES[task]
        if name in files:
            raise BenchError(f"two runs for task {task}: {sources[name][0]} and {folder}; a submission holds one per "
                             "task")
        text = io.BytesIO()
        np.savetxt(text, predictions)
        files[name], sources[name] = text.getvalue(), (str(folder), trust)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    atomic_write_bytes(out, buffer.getvalue(), "the --out zip")
    return sources
