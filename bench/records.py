"""Run folders: ``<out>/<task>/<method>/budget-<B>/seed-<S>/`` holding ``predictions.npz`` and ``result.json``.

A folder's name carries the run's exact budget (2 and 2.0000001 never share one); its record carries the
configuration, and a finished run of another configuration is refused with both shown, never replaced
(``--force`` replaces it on purpose). While a run works it holds an exclusive lock on its folder
(``flock`` on ``.lock``), so a second run into the same folder fails at once instead of racing it.
``result.json`` is written last, so its presence marks a finished run; both files are written
atomically (temporary file in the same folder, then rename). The record holds the sha256 of the predictions
(``predictions_sha256``), so a folder may keep the record alone (``--no-predictions``: the shipped results,
:mod:`leaderboard.shipped`) and still be verified bitwise.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Iterator

import numpy as np

from bench.arguments import SEED_LIMIT
from bench.budget import budget_label
from bench.errors import COMMAND_LINE, BenchError, ConfigError, DamagedFile, Spelling, cannot_write, shown
from bench.io import atomic_write_bytes, exclusive, json_bytes, json_depth, npz_bytes, read_json, read_npz
from bench.trust import FETCHED_LEVELS, RECORDED_LEVELS

RESULT = "result.json"
PREDICTIONS = "predictions.npz"
LOCK = ".lock"

def run_folder(out: Path, task: str, method: str, budget: float, seed: int) -> Path:
    return Path(out) / task / method / f"budget-{budget_label(budget)}" / f"seed-{seed}"


def differences(held: dict, wanted: dict) -> str:
    """What differs between two configurations, ``key: value there, value here`` per key (``held``: a record's,
    or anything not a dict, as an edited record may hold)."""
    if not isinstance(held, dict) or not isinstance(wanted, dict):
        return f"{shown(held)} there, {shown(wanted)} here"
    keys = sorted(set(held) | set(wanted), key=str)
    return "; ".join(f"{k}: {held.get(k, '(unset)')!r} there, {wanted.get(k, '(unset)')!r} here"
                     for k in keys if held.get(k) != wanted.get(k))


def as_recorded(values: dict) -> dict:
    """``values`` (a resolved configuration) as a run record holds them, through JSON: what a record is compared with."""
    return json.loads(json_bytes(values))


ANY_SOURCE = object()
"""What :func:`finished_with` takes for a run whose method's code is not compared."""


def finished_with(folder: Path, config: dict | None = None, spelling: Spelling = COMMAND_LINE,
                  source: str | None | object = ANY_SOURCE) -> bool:
    """Whether ``folder`` holds a finished run; one of another configuration than ``config`` (when given), or
    whose record holds no configuration, or made by other code than ``source`` (when given: the method's
    ``package.module:ClassName``, None for a built-in one, as :func:`approximators.method_source` gives it; two
    classes may share a method's name), is refused, naming what differs, in ``spelling``'s words (the command
    line's ``--force`` or the API's ``force=True``). Changes nothing."""
    if not (folder / RESULT).exists():
        return False
    record = read_result(folder)
    held = record.get("config")
    wanted = as_recorded(config) if config is not None else None
    force = spelling.given("force", True) if spelling.python else spelling.option("force")
    if wanted is not None and held != wanted:
        if not isinstance(held, dict):  # a damaged record: nothing to compare, nothing to reuse
            raise BenchError(f"{folder} already holds a finished run; pass {force} to overwrite it")
        raise BenchError(f"{folder} already holds a finished run of another configuration ("
                         f"{differences(held, wanted)}); choose another {spelling.option('out')}, or pass {force} to "
                         "replace it")
    if source is not ANY_SOURCE and record.get("method_source") != source:
        raise BenchError(f"{folder} already holds a finished run of another method's code "
                         f"({_source_text(record.get('method_source'))}, not {_source_text(source)}); choose another "
                         f"{spelling.option('out')}, or pass {force} to replace it")
    return True


def _source_text(source: object) -> str:
    return "bdl-bench's own" if source is None else shown(source)


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
        raise cannot_write(f"cannot write to output folder {folder}", error) from None


@contextlib.contextmanager
def claimed(folder: Path, force: bool, config: dict | None = None) -> Iterator[None]:
    """Holds ``folder`` for one run: checked writable, locked against other runs until the block ends,
    and checked again under the lock (a run that finished while this one waited is not replaced)."""
    check_writable(folder, force, config)
    with exclusive(folder / LOCK, busy=f"{folder} is in use by another run; wait for it to finish or choose another "
                                      f"--out", unwritable=f"cannot write to output folder {folder}"):
        check_unfinished(folder, force, config)
        yield


def read_predictions_array(folder: Path, result: dict) -> np.ndarray:
    """The array of a run's ``predictions.npz`` under the record's reference key; a missing, damaged or keyless file
    is one :class:`DamagedFile` line naming it (:func:`bench.io.read_npz`)."""
    path = Path(folder) / PREDICTIONS
    repair = "run it again with --force to replace it"
    arrays = read_npz(path, "run's predictions", repair)
    key = result["reference"]["key"]
    if key not in arrays:
        raise DamagedFile(f"{path}: the run's predictions hold no array {shown(key)}, which its record names; {repair}")
    return arrays[key]


def predictions_sha256(predictions: np.ndarray) -> str:
    """The sha256 of a predictive's float64 values in C order: what a record says its predictions were (a run written
    without ``predictions.npz``, as the shipped results are, keeps only this; ``verify`` compares it bitwise)."""
    return hashlib.sha256(np.ascontiguousarray(predictions, dtype=np.float64).tobytes()).hexdigest()


def check_predictions_kept(folder: Path, result: dict, needs: str) -> None:
    """A folder holding its record alone (``--no-predictions``) is one line saying so: ``needs`` (what is being done)
    needs the predictions themselves."""
    if result.get("predictions_sha256") and not (Path(folder) / PREDICTIONS).exists():
        raise DamagedFile(f"{folder}: holds its record alone (written with --no-predictions); {needs} needs its "
                          "predictions: run it again without --no-predictions")


def check_predictions_recorded(folder: Path, result: dict, predictions: np.ndarray) -> None:
    """The predictions read from ``folder`` are the ones its record's sha256 names (a record without one, from an
    older version, names none)."""
    if result.get("predictions_sha256") not in (None, predictions_sha256(predictions)):
        raise DamagedFile(f"{folder}: {PREDICTIONS} does not hold the predictions its record's sha256 names: they "
                          "changed after the run")


def write_run(folder: Path, key: str, predictions: np.ndarray, result: dict, keep_predictions: bool = True) -> None:
    """Writes the run's predictions (unless not ``keep_predictions``), then its record, each atomically; first checks
    the record as it will be read back with the validator ``verify``, ``submit`` and ``export-submission`` read it by
    (:func:`check_record`), so that what ``run`` writes they take (one it would refuse is a bug here, exit 70)."""
    if keep_predictions:  # first: should the record be refused, the predictions are kept (the run stays unfinished)
        atomic_write_bytes(folder / PREDICTIONS, npz_bytes(**{key: predictions}))
    record = json_bytes(result)
    try:
        check_record(json.loads(record), Path(folder) / RESULT)
    except DamagedFile as error:
        raise RuntimeError(f"bdl-bench would write a run record its own validator refuses ({error})") from None
    atomic_write_bytes(folder / RESULT, record)


def read_result(folder: Path) -> dict:
    """``result.json`` of ``folder`` as written, a JSON object (:func:`checked_result` also checks every field)."""
    return read_json(Path(folder) / RESULT, "run record", "run it again with --force to replace it")


MAX_RESULT_BYTES = 2 * 2**20
"""The largest run record read back: a method's report takes at most 1 MiB of it (``bench.runner.MAX_REPORT_BYTES``),
everything else some kilobytes."""
MAX_RESULT_DEPTH = 16
"""Nesting of a run record: bdl-bench's own go three levels deep (metrics by block by metric), a method's report a
few more."""
MAX_NAME_CHARS = 200
"""The longest name a record or a submission may give (device, versions, method source, submitter)."""
MAX_VERSIONS = 32
MAX_TIMESTAMP_CHARS = 64
MAX_ARCHITECTURE_CHANGE_CHARS = 1000
TASK_VERSION_LIMIT = 2**31
MAX_ENVIRONMENT_FIELDS = 32
INTEGER_LIMIT = 2**63
"""A whole number a record holds (a setting, a count in its environment) lies in [-2^63, 2^63): what a tensor index,
a count or the database's integer columns hold."""

METHOD_SOURCE = re.compile(r"\w+(\.\w+)*:(\w+|<locals>)(\.(\w+|<locals>))*")
"""How a record says where a method outside bdl-bench came from: ``package.module:ClassName``, as
:func:`approximators.method_source` writes it (the class's qualified name, ``make.<locals>.Mine`` for a class defined
in a function, which ``run`` records too though it cannot be loaded again)."""

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "task": (str,), "task_version": (int,), "task_fingerprint": (str,), "method": (str,),
    "budget": (int, float), "epochs_used": (int, float), "test_passes": (int, float), "seed": (int,),
    "metrics": (dict,), "metrics_by_block": (dict,), "wall_seconds": (int, float), "device": (str,),
    "config": (dict,), "versions": (dict,), "reference": (dict,),
}
"""The fields every run record holds, and their JSON types (a bool is never a number)."""

OPTIONAL_FIELD_TYPES: dict[str, tuple[type, ...]] = {"environment": (dict,), "resolved": (dict,),
                                                      "noise_floor": (dict,), "rehearsal": (dict,),
                                                      "resumed": (list,), "trust": (dict,)}
"""Fields a record holds as null or of these types (records of older versions lack them); the optional text fields
(label, method_source, finished_at, architecture_change) are checked as text of their own length."""


MAX_WARNING_CHARS = 2000
"""The longest warning of its own run a method's record may carry (the board shows each)."""


def method_warnings(result: dict) -> tuple[str, ...]:
    """What the method warned of its own run (a checked record's ``method_report["warnings"]``), in its order."""
    return tuple((result.get("method_report") or {}).get("warnings") or ())


def printable(value, limit: int) -> bool:
    """Whether ``value`` is 1 to ``limit`` printable characters: no control character or terminal escape."""
    return isinstance(value, str) and 0 < len(value) <= limit and value.isprintable()


def finite_number(value) -> bool:
    """Whether ``value`` (from JSON) is a finite number a float can hold: a float neither NaN nor infinite, or a whole
    number within float's range (compared, never converted: one of 400 digits would overflow any arithmetic with a
    float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return -sys.float_info.max <= value <= sys.float_info.max  # False for NaN and the infinities


MAX_LABEL_CHARS = 100
"""The longest label a run takes (it is shown in table cells and plot legends)."""

SHIPPED_LABEL = "shipped"
"""The leaderboard's label of the results shipped with bdl-bench (:mod:`leaderboard.shipped`), which no run takes."""


def check_label(label, source: str) -> None:
    """``label`` is None (no label) or 1 to ``MAX_LABEL_CHARS`` printable characters, not only spaces, as ``run
    --label`` takes it (it is shown in table cells and plot legends), and not :data:`SHIPPED_LABEL`."""
    if label is not None and not (printable(label, MAX_LABEL_CHARS) and label.strip()):
        raise DamagedFile(f"{source}: a label must be 1 to {MAX_LABEL_CHARS} printable characters, not only spaces")
    if label is not None and label.strip().casefold() == SHIPPED_LABEL:
        raise DamagedFile(f"{source}: the label {SHIPPED_LABEL!r} marks the results shipped with bdl-bench; choose "
                          "another")


def check_budget_range(budget, source: str) -> None:
    """A budget as a run takes it: a number of epochs in (0, MAX_BUDGET_EPOCHS] (compared, never converted)."""
    from bench.errors import number_text
    from bench.limits import MAX_BUDGET_EPOCHS

    if not (finite_number(budget) and 0 < budget <= MAX_BUDGET_EPOCHS):
        raise DamagedFile(f"{source}: the budget must be a number of epochs in (0, {number_text(MAX_BUDGET_EPOCHS)}], "
                          f"got {shown(budget)}")


def checked_result(folder: Path) -> dict:
    """The run record of ``folder`` with every field checked before anything uses it, the one validator of ``verify``
    and ``submit`` (a record is a file anyone can edit): a regular file of at most :data:`MAX_RESULT_BYTES`, nested at
    most :data:`MAX_RESULT_DEPTH` levels, each field of its type and range (:func:`check_record`). Anything else is one
    :class:`~bench.errors.DamagedFile` line naming the file."""
    path = Path(folder) / RESULT
    try:
        result = read_json(path, "run record", "submit or verify a run folder as bdl-bench wrote it",
                           limit=MAX_RESULT_BYTES)
    except FileNotFoundError:
        raise DamagedFile(f"{folder}: not a run folder (no {RESULT})") from None
    except OSError as error:
        raise DamagedFile(f"{path}: the run record cannot be read ({error.strerror or error})") from None
    check_record(result, path)
    refuse_rehearsal(result, folder)
    return result


class NotAResult(DamagedFile):
    """A rehearsal's record (``run --rehearse``), refused by every reader that takes a result (``submit``,
    ``export-submission``, ``verify``, ``check``) in one line, exit 2, as they refuse a damaged record: it is sound,
    but it trained on generated data and was scored against a generated reference."""


def is_rehearsal(result: dict) -> bool:
    """Whether a run record is a rehearsal's (:mod:`bench.rehearsal`)."""
    return isinstance(result, dict) and result.get("rehearsal") is not None


def refuse_rehearsal(result: dict, source: Path | str) -> None:
    """One :class:`NotAResult` line for a rehearsal's record ``result`` (read from ``source``)."""
    if is_rehearsal(result):
        raise NotAResult(f"{source}: a rehearsal's record ({shown(result.get('task'))} on generated data, scored "
                         "against a stand-in reference), not a result: submit, export-submission, verify and check "
                         "never take one; run the task without --rehearse for a result")


def check_record(result: dict, path: Path) -> None:
    """Every field of a run record in its type and range, so that nothing downstream (a re-execution, the store, a
    planned budget) meets a value it would fail on; one :class:`~bench.errors.DamagedFile` line naming ``path``."""
    depth = json_depth(result)
    if depth > MAX_RESULT_DEPTH:
        raise DamagedFile(f"{path}: nested {depth} levels deep, more than the {MAX_RESULT_DEPTH} a run record has")
    for field, types in FIELD_TYPES.items():
        value = result.get(field)
        if isinstance(value, bool) or not isinstance(value, types):
            raise DamagedFile(f"{path}: field {field!r} is missing or not a {'/'.join(t.__name__ for t in types)}")
    for field, types in OPTIONAL_FIELD_TYPES.items():
        value = result.get(field)
        if value is not None and not isinstance(value, types):
            raise DamagedFile(f"{path}: field {field!r} must be null or a {'/'.join(t.__name__ for t in types)}")
    for field in ("sha256", "key"):
        if not isinstance(result["reference"].get(field), str):
            raise DamagedFile(f"{path}: field 'reference.{field}' is missing or not a string")
    if not 0 <= result["seed"] < SEED_LIMIT:
        raise DamagedFile(f"{path}: seed {shown(result['seed'])} lies outside [0, 2^63)")
    if not 0 <= result["task_version"] < TASK_VERSION_LIMIT:
        raise DamagedFile(f"{path}: task_version {shown(result['task_version'])} lies outside [0, 2^31)")
    check_budget_range(result["budget"], str(path))
    epochs_used, test_passes = result["epochs_used"], result["test_passes"]
    if not (finite_number(epochs_used) and 0 <= epochs_used <= result["budget"]):  # 0: a method that read no data
        raise DamagedFile(f"{path}: claims {shown(epochs_used)} epochs used, outside [0, {result['budget']:g}], the "
                          "budget's limit")
    if not (finite_number(test_passes) and test_passes >= 0):
        raise DamagedFile(f"{path}: test_passes must be a non-negative number, got {shown(test_passes)}")
    if not (finite_number(result["wall_seconds"]) and result["wall_seconds"] >= 0):
        raise DamagedFile(f"{path}: wall_seconds must be a finite number of seconds >= 0, got "
                          f"{shown(result['wall_seconds'])}")
    if not printable(result["device"], MAX_NAME_CHARS):
        raise DamagedFile(f"{path}: device must be 1 to {MAX_NAME_CHARS} printable characters")
    versions = result["versions"]
    if len(versions) > MAX_VERSIONS or not all(printable(k, MAX_NAME_CHARS) and printable(v, MAX_NAME_CHARS)
                                               for k, v in versions.items()):
        raise DamagedFile(f"{path}: versions must map at most {MAX_VERSIONS} names to version strings of 1 to "
                          f"{MAX_NAME_CHARS} printable characters")
    check_environment(result.get("environment"), path)
    check_label(result.get("label"), str(path))
    environment = result.get("environment") or {}
    disagreeing = sorted(name for name, version in versions.items() if environment.get(name, version) != version)
    if disagreeing:  # both written by one run from one installation
        pairs = ", ".join(f"{shown(versions[name])} against {shown(environment[name])}" for name in disagreeing)
        raise DamagedFile(f"{path}: versions and environment name other versions of {', '.join(disagreeing)} "
                          f"({pairs})")
    finished = result.get("finished_at")
    if finished is not None and not (printable(finished, MAX_TIMESTAMP_CHARS) and _iso_timestamp(finished)):
        raise DamagedFile(f"{path}: finished_at must be null or an ISO 8601 timestamp (as 2026-11-28T04:30:00+00:00) "
                          f"of 1 to {MAX_TIMESTAMP_CHARS} printable characters")
    change = result.get("architecture_change")
    if change is not None and not printable(change, MAX_ARCHITECTURE_CHANGE_CHARS):
        raise DamagedFile(f"{path}: architecture_change must be null or 1 to {MAX_ARCHITECTURE_CHANGE_CHARS} "
                          "printable characters")
    blocks = {"metrics": result["metrics"], **{f"metrics_by_block[{name!r}]": values
                                              for name, values in result["metrics_by_block"].items()}}
    for where, values in blocks.items():
        if not isinstance(values, dict) or not all(printable(name, MAX_NAME_CHARS) and finite_number(value)
                                                   for name, value in values.items()):
            raise DamagedFile(f"{path}: {where} must map metric names to finite numbers")
    floor = result.get("noise_floor") or {}
    if not all(printable(block, MAX_NAME_CHARS) and isinstance(values, dict)
               and all(printable(name, MAX_NAME_CHARS) and (value is None or finite_number(value))
                       for name, value in values.items()) for block, values in floor.items()):
        raise DamagedFile(f"{path}: noise_floor must map blocks to metric names to finite numbers or null")
    report = result.get("method_report")
    if report is not None and not isinstance(report, dict):
        raise DamagedFile(f"{path}: method_report must be null or a table")
    warned = (report or {}).get("warnings")
    if warned is not None and not (isinstance(warned, list) and all(printable(w, MAX_WARNING_CHARS) for w in warned)):
        raise DamagedFile(f"{path}: method_report.warnings must be a list of 1 to {MAX_WARNING_CHARS} printable "
                          "characters each")
    digest = result.get("predictions_sha256")
    if digest is not None and not (isinstance(digest, str) and SHA256_HEX.fullmatch(digest)):
        raise DamagedFile(f"{path}: predictions_sha256 must be null or 64 lowercase hexadecimal digits")
    _check_rehearsal(result.get("rehearsal"), path)
    _check_resumed(result.get("resumed"), result["epochs_used"], path)
    _check_trust(result.get("trust"), path)
    _check_method(result, path)


REHEARSAL_FIELDS = {"train_rows": False, "test_rows": False, "official_train_rows": False,
                    "official_test_rows": False, "peak_resident_bytes": False, "peak_cuda_bytes": True}
"""What a rehearsal's record says of it (:func:`bench.rehearsal.described`): each field a whole number of at least 1
(a count of rows or bytes), or null where marked True (no GPU)."""


MAX_RESUMES = 10_000
"""The most resumes a record lists (a run stopped every five minutes for a month is 8,640)."""


def _check_resumed(resumed, epochs_used, path: Path) -> None:
    """A record's ``resumed``: absent or null (a run trained in one go), else each time it continued from its checkpoint
    (:mod:`bench.checkpoint`), in order: ``{"from_epochs": the epochs charged when the checkpoint was written,
    "same_numerics": whether it resumed where it had run (bit for bit as an uninterrupted run)}``."""
    if resumed is None:
        return
    previous = 0
    for entry in resumed if len(resumed) <= MAX_RESUMES else [None]:
        if not (isinstance(entry, dict) and set(entry) == {"from_epochs", "same_numerics"}
                and finite_number(entry["from_epochs"]) and previous <= entry["from_epochs"] <= epochs_used
                and isinstance(entry["same_numerics"], bool)):
            raise DamagedFile(f"{path}: resumed must be null or at most {MAX_RESUMES:,} entries of from_epochs (in "
                              "order, at most the epochs used) and same_numerics (true or false)")
        previous = entry["from_epochs"]


MAX_TRUSTED_FILES = 16
"""The most data files a record's ``trust`` lists (a competition task has at most four)."""
MAX_URL_CHARS = 300
"""The longest URL of a data file a record's ``trust`` names (the official ones are under 100 characters)."""


def _check_trust(trust, path: Path) -> None:
    """A record's ``trust`` (:func:`bench.tasks.competition.files_trust`): absent or null in a record of an older
    version (its readers say ``unknown``), else how the reference it was scored against and each fetched data file, by
    URL, were trusted (:mod:`bench.trust`), each with its sha256. Its form only: ``submit`` stores the trust of the
    submitter's own files (:attr:`leaderboard.submission.CheckedRun.trust`), not the record's word."""
    if trust is None:
        return

    def sound(entry, levels) -> bool:
        return (isinstance(entry, dict) and set(entry) == {"trust", "sha256"} and entry["trust"] in levels
                and isinstance(entry["sha256"], str) and SHA256_HEX.fullmatch(entry["sha256"]) is not None)

    data = trust.get("data")
    if not (set(trust) == {"reference", "data"} and sound(trust["reference"], RECORDED_LEVELS)
            and isinstance(data, dict) and len(data) <= MAX_TRUSTED_FILES
            and all(printable(url, MAX_URL_CHARS) and sound(entry, FETCHED_LEVELS) for url, entry in data.items())):
        raise DamagedFile(f"{path}: trust must be null or hold the reference's and at most {MAX_TRUSTED_FILES} data "
                          f"files' trust levels ({', '.join(RECORDED_LEVELS)}) with their sha256")


def _check_rehearsal(rehearsal, path: Path) -> None:
    """A record's ``rehearsal``: absent or null (a run of the real task), else :data:`REHEARSAL_FIELDS`, exactly."""
    if rehearsal is None:
        return
    if set(rehearsal) != set(REHEARSAL_FIELDS) or not all(
            (value is None and REHEARSAL_FIELDS[name]) or (isinstance(value, int) and not isinstance(value, bool)
                                                          and 1 <= value < INTEGER_LIMIT)
            for name, value in rehearsal.items()):
        raise DamagedFile(f"{path}: rehearsal must be null or hold {', '.join(REHEARSAL_FIELDS)}: whole numbers of at "
                          "least 1 (peak_cuda_bytes null off a GPU)")


def _iso_timestamp(text: str) -> bool:
    """Whether ``text`` is a date and time as ``datetime.isoformat`` writes it (what ``run`` records)."""
    import datetime as dt

    try:
        dt.datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


COUNTS = ("torch_threads", "cpu_count")
"""The environment's fields that count (threads, cores), as :func:`bench.runner.environment` records them."""


def check_environment(environment: dict | None, path: Path) -> None:
    """The recorded environment (what ``verify`` and ``check`` compare): names mapped to printable text (empty where
    the platform does not say, as ``libc`` on some systems), whole numbers or null."""
    if environment is None:
        return
    if len(environment) > MAX_ENVIRONMENT_FIELDS or not all(
            printable(key, MAX_NAME_CHARS) and (value is None or value == "" or printable(value, MAX_NAME_CHARS) or (
                isinstance(value, int) and not isinstance(value, bool) and -INTEGER_LIMIT <= value < INTEGER_LIMIT))
            for key, value in environment.items()):
        raise DamagedFile(f"{path}: environment must map at most {MAX_ENVIRONMENT_FIELDS} names to printable text of "
                          f"at most {MAX_NAME_CHARS} characters, whole numbers or null")
    for name in COUNTS:  # compared with this machine's counts: "1" is not 1, and would read as "1 -> 1"
        value = environment.get(name)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise DamagedFile(f"{path}: environment.{name} must be null or a whole number of at least 1, got "
                              f"{shown(value)}")


def _check_settings_values(values: dict, field: str, path: Path) -> None:
    """``config`` or ``resolved``: setting names mapped to what a setting holds (int, float, bool or printable
    text), every number finite and every whole number within 64 bits."""
    for key, value in values.items():
        fits = isinstance(value, (bool, str)) and (not isinstance(value, str) or value == "" or value.isprintable()) \
            or finite_number(value) and (not isinstance(value, int) or -INTEGER_LIMIT <= value < INTEGER_LIMIT)
        if not (isinstance(key, str) and key.isidentifier() and fits):
            raise DamagedFile(f"{path}: {field} must map setting names to numbers (finite, whole ones within 64 bits), "
                              f"true/false or printable text; {shown(key)} holds {shown(value)}")


def _check_method(result: dict, path: Path) -> None:
    """The method: a name as a method class has it; a built-in one's configuration checked as ``--set`` values are
    (its settings, their types, bounds, choices and order); another's must say where it came from."""
    from approximators import METHOD_NAME, METHODS
    from approximators.base import recorded_config

    method, source = result["method"], result.get("method_source")
    if not METHOD_NAME.fullmatch(method):
        raise DamagedFile(f"{path}: the method name must be 1 to 100 letters, digits, '.', '_', '+' or '-', starting "
                          f"with a letter or digit (as a method class names itself); got {shown(method)}")
    for field in ("config", "resolved"):
        if result.get(field) is not None:
            _check_settings_values(result[field], field, path)
    if source is not None and not (printable(source, MAX_NAME_CHARS) and METHOD_SOURCE.fullmatch(source)):
        raise DamagedFile(f"{path}: method_source must be null or package.module:ClassName of 1 to {MAX_NAME_CHARS} "
                          "characters")
    built_in = METHODS.get(method)
    if built_in is not None:
        if source is not None:
            raise DamagedFile(f"{path}: {method} is a built-in method, whose runs record no method_source (this record "
                              f"says {shown(source)})")
        try:
            config = recorded_config(built_in, result["config"])
        except ConfigError as error:
            raise DamagedFile(f"{path}: the recorded configuration does not fit {method}'s settings ({error})") \
                from None
        change = built_in.architecture_change(config)
        if result.get("architecture_change") != change:
            raise DamagedFile(f"{path}: {method} with these settings " + (
                "leaves the task's network as it is" if change is None else f"changes the task's network ({change})")
                + f", but the record says {shown(result.get('architecture_change'))} (architecture_change); rerun it "
                "with this version of bdl-bench")
    elif source is None:
        raise DamagedFile(f"{path}: {method!r} is not a method of this installation, and the record names no "
                          "method_source (package.module:ClassName) that it came from")
