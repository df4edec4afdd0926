"""Run folders: ``<out>/<task>/<method>/budget-<B>/seed-<S>/`` holding ``predictions.npz`` and ``result.json``.

A folder's name carries the run's exact budget (2 and 2.0000001 never share one); its record carries the
configuration, and a finished run of another configuration is refused with both shown, never replaced
(``--force`` replaces it on purpose). While a run works it holds an exclusive lock on its folder
(``flock`` on ``.lock``), so a second run into the same folder fails at once instead of racing it.
``result.json`` is written last, so its presence marks a finished run; both files are written
atomically (temporary file in the same folder, then rename).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator

import numpy as np

from bench.errors import COMMAND_LINE, BenchError, Spelling, shown
from bench.io import atomic_write_bytes, exclusive, json_bytes, npz_bytes, read_json

RESULT = "result.json"
PREDICTIONS = "predictions.npz"
LOCK = ".lock"

SEED_LIMIT = 2**63
"""Seeds lie in [0, 2^63): torch's generators and the leaderboard's integer columns hold them."""


def budget_label(budget: float) -> str:
    """The budget as a folder name, exactly: an integer as is, any other float by its shortest round-trip repr."""
    budget = float(budget)
    return str(int(budget)) if budget.is_integer() else repr(budget)


def run_folder(out: Path, task: str, method: str, budget: float, seed: int) -> Path:
    return Path(out) / task / method / f"budget-{budget_label(budget)}" / f"seed-{seed}"


def differences(held: dict, wanted: dict) -> str:
    """What differs between two configurations, ``key: value there, value here`` per key (``held``: a record's,
    or anything not a dict, as an edited record may hold)."""
    if not isinstance(held, dict):
        return f"{shown(held)} there, {shown(wanted)} here"
    keys = sorted(set(held) | set(wanted), key=str)
    return "; ".join(f"{k}: {held.get(k, '(unset)')!r} there, {wanted.get(k, '(unset)')!r} here"
                     for k in keys if held.get(k) != wanted.get(k))


def as_recorded(values: dict) -> dict:
    """``values`` (a resolved configuration) as a run record holds them, through JSON: what a record is compared with."""
    return json.loads(json_bytes(values))


def finished_with(folder: Path, config: dict | None = None, spelling: Spelling = COMMAND_LINE) -> bool:
    """Whether ``folder`` holds a finished run; one of another configuration than ``config`` (when given), or
    whose record holds no configuration, is refused, naming what differs, in ``spelling``'s words (the command
    line's ``--force`` or the API's ``force=True``). Changes nothing."""
    if not (folder / RESULT).exists():
        return False
    held = read_result(folder).get("config")
    wanted = as_recorded(config) if config is not None else None
    if wanted is not None and held != wanted:
        force = spelling.given("force", True) if spelling.python else spelling.option("force")
        if not isinstance(held, dict):  # a damaged record: nothing to compare, nothing to reuse
            raise BenchError(f"{folder} already holds a finished run; pass {force} to overwrite it")
        raise BenchError(f"{folder} already holds a finished run of another configuration ("
                         f"{differences(held, wanted)}); choose another {spelling.option('out')}, or pass {force} to "
                         "replace it")
    return True


def check_unfinished(folder: Path, force: bool, config: dict | None = None) -> None:
    """Fails if ``folder`` holds a finished run and ``force`` is off, naming what differs from ``config``
    when the configurations differ (:func:`finished_with`); changes nothing."""
    if not force and finished_with(folder, config):
        raise BenchError(f"{folder} already holds a finished run; pass --force (force=True from Python) to "
                         "overwrite it")


def check_writable(folder: Path, force: bool, config: dict | None = None) -> None:
    """Fails early (before any training) if the folder holds a finished run (:func:`check_unfinished`)
    or cannot be written; creates it."""
    check_unfinished(folder, force, config)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise BenchError(f"cannot write to output folder {folder}: {error.strerror or error}") from None


@contextlib.contextmanager
def claimed(folder: Path, force: bool, config: dict | None = None) -> Iterator[None]:
    """Holds ``folder`` for one run: checked writable, locked against other runs until the block ends,
    and checked again under the lock (a run that finished while this one waited is not replaced)."""
    check_writable(folder, force, config)
    with exclusive(folder / LOCK, busy=f"{folder} is in use by another run; wait for it to finish or choose another "
                                      f"--out", unwritable=f"cannot write to output folder {folder}"):
        check_unfinished(folder, force, config)
        yield


def write_run(folder: Path, key: str, predictions: np.ndarray, result: dict) -> None:
    atomic_write_bytes(folder / PREDICTIONS, npz_bytes(**{key: predictions}))
    atomic_write_bytes(folder / RESULT, json_bytes(result))


def read_result(folder: Path) -> dict:
    return read_json(Path(folder) / RESULT, "run record", "run it again with --force to replace it")
