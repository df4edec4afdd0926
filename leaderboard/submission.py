"""Turning a submission into leaderboard rows without trusting any number the submitter wrote.

Two kinds of submission:

- a run folder written by ``python -m bench`` (``predictions.npz`` + ``result.json``). The task,
  its version and fingerprint, the reference's sha256 and the budget claim are checked; the
  predictions are read with size limits, validated against the task (shape, finite values,
  probability rows, sample count) and **every metric is recomputed**; a ``result.json`` whose
  metrics differ from the recomputed ones by more than ``METRIC_TOLERANCE`` is refused, naming the
  metric and the difference. The stored numbers are always the recomputed ones.
- a competition submission zip: the official files (``OFFICIAL_FILES``), numpy ``savetxt`` text with
  one row per test point, scored at a budget the submitter declares (the epochs used are unknown).
  Members are read in memory, never extracted; names that are not plain official file names (paths,
  ``..``) are refused, and every member's size is bounded before and while it is read.

A run's label (``result.json``'s ``label``, absent in older records; ``submit --label`` for a zip) is null or 1 to
``MAX_LABEL_CHARS`` printable characters, not only spaces, as ``run --label`` takes it. It names the configuration
and is not part of the run's identity: how the store keeps it unambiguous is described in :mod:`leaderboard.store`.

Every failure raises a :class:`bench.errors.BenchError` with one line; nothing here touches the store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import io
import json
import math
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterator

import numpy as np

from bench import metrics, records
from bench.budget import budget_label
from bench.errors import BenchError, ConfigError, DamagedFile, DoesNotFit, shown, terminal_text
from bench.io import open_regular_file, read_regular_file
from bench.records import MAX_NAME_CHARS
from bench.runner import score
from bench.tasks import PREDICTIVE_SAMPLES, Task, get_task
from bench.tasks.competition import SUBMISSION_FILES, files_trust
from leaderboard import reliability
from leaderboard.store import OVERALL_BLOCK, RunRow
from reference.store import Reference, load_reference

OFFICIAL_FILES: dict[str, str] = {file: task for task, file in SUBMISSION_FILES.items()}
"""Official competition file name -> task name."""

METRIC_TOLERANCE = 1e-9
"""Claimed and recomputed metrics may differ by this much, absolute plus relative: both come from the
same float64 predictions and code, so only summation-order round-off (~1e-16) separates them."""

NPY_HEADER_SLACK = 1 << 16
"""Room for the ``.npy`` header and zip bookkeeping above the raw float64 bytes of the predictions."""
TEXT_BYTES_PER_NUMBER = 32
"""``savetxt``'s default ``%.18e`` is 24 characters plus a delimiter; 32 leaves room for signs and spaces."""
MAX_ZIP_BYTES = 1 << 30
MAX_NOTES_CHARS = 10_000

HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
"""The ``.npy`` header versions accepted, each with numpy's public reader (which bounds the header's length)."""


class SubmissionError(BenchError):
    """A submission that cannot be accepted; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Expected:
    """What a task's predictions must be: array ``key`` of shape ``(n_test, width)``
    (``probs``: width = classes; ``samples``: width = ``PREDICTIVE_SAMPLES``)."""

    task: str
    kind: str
    key: str
    n_test: int
    width: int

    @classmethod
    def of(cls, task: Task, reference: Reference) -> Expected:
        width = reference.array.shape[1] if task.kind == "classification" else PREDICTIVE_SAMPLES
        return cls(task.name, task.kind, reference.key, task.n_test, width)

    @property
    def max_npz_bytes(self) -> int:
        return self.n_test * self.width * 8 + NPY_HEADER_SLACK

    @property
    def max_text_bytes(self) -> int:
        return self.n_test * self.width * TEXT_BYTES_PER_NUMBER + NPY_HEADER_SLACK


def available_task(name: str, cache: Path | None = None) -> Task:
    """The task (a competition task from ``cache``: its fetched data and official reference)."""
    try:
        return get_task(name, cache)
    except ConfigError:
        raise SubmissionError(f"task {name} is not available in this installation of bdl-bench") from None


def validate_predictions(array: np.ndarray, expected: Expected, source: str) -> np.ndarray:
    """Checks ``array`` against the task; returns it as float64 ``(n_test, width)``.

    Raises:
        SubmissionError: not real numbers, wrong shape, non-finite values, or rows that are not
            probabilities (for classification).
    """
    try:
        metrics.validate_predictive(array, expected.key, (expected.n_test, expected.width), source, expected.task)
    except metrics.MetricInputError as error:
        raise SubmissionError(str(error)) from None
    return np.asarray(array, dtype=np.float64)


def read_npy(f: BinaryIO, expected: Expected, source: str) -> np.ndarray:
    """The array of an ``.npy`` stream whose header is checked against ``expected`` (dtype and shape) before
    anything is allocated; exactly the bytes the header implies are read, never more."""
    try:
        version = np.lib.format.read_magic(f)
        if version not in HEADER_READERS:
            raise SubmissionError(f"{source}: .npy format version {version} (bdl-bench writes 1.0; 2.0 is accepted)")
        shape, fortran_order, dtype = HEADER_READERS[version](f)
    except ValueError as error:
        raise SubmissionError(f"{source}: not a readable .npy header ({error})") from None
    shape_needed = (expected.n_test, expected.width)
    if dtype.hasobject or dtype.kind not in "fiu" or shape != shape_needed:
        raise SubmissionError(f"{source}: holds {dtype} of shape {shape}; {expected.task} needs {expected.key} of "
                              f"shape {shape_needed}, real numbers")
    nbytes = math.prod(shape) * dtype.itemsize
    data = f.read(nbytes + 1)  # one byte more: a longer stream is refused, and a zip member's CRC is checked at its end
    if len(data) != nbytes:
        raise SubmissionError(f"{source}: holds {len(data)}{'+' if len(data) > nbytes else ''} bytes of data, its "
                              f"header says {nbytes}")
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran_order else "C")


@contextlib.contextmanager
def _opening(path: Path, missing: str) -> Iterator[None]:
    """Turns each way a submitted file cannot be opened (absent, not a regular file, unreadable) into one
    :class:`SubmissionError` line; ``missing`` says what an absent file means."""
    try:
        yield
    except FileNotFoundError:
        raise SubmissionError(f"{path}: {missing}") from None
    except DamagedFile as error:
        raise SubmissionError(str(error)) from None
    except OSError as error:
        raise SubmissionError(f"{path}: cannot be read ({error.strerror or error})") from None


def read_predictions(path: Path, expected: Expected) -> np.ndarray:
    """Reads a run's ``predictions.npz`` (one array ``expected.key``): a regular file, read up to the size the
    task's predictions can take, its array header checked before the array is allocated."""
    repair = f"a run folder holds {records.PREDICTIONS} and {records.RESULT} as bdl-bench wrote them"
    with _opening(path, f"missing; {repair}"):
        data = read_regular_file(path, expected.max_npz_bytes, "predictions file", repair)
    member = f"{expected.key}.npy"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [info.filename for info in archive.infolist()]
            if names != [member]:
                raise SubmissionError(f"{path}: must hold exactly one array {expected.key!r}, holds {names}")
            with archive.open(member) as f:
                array = read_npy(f, expected, f"{path}:{member}")
    except SubmissionError:
        raise
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, KeyError) as error:
        raise SubmissionError(f"{path}: not a readable .npz file ({error})") from None
    return validate_predictions(array, expected, str(path))


def read_result(folder: Path) -> dict:
    """``result.json`` of a run folder, every field checked as ``verify`` checks it (:func:`records.checked_result`)."""
    try:
        return records.checked_result(folder)
    except DamagedFile as error:
        raise SubmissionError(str(error)) from None


def check_label(label, source: str) -> None:
    """A competition zip's ``--label`` as a run's (:func:`bench.records.check_label`)."""
    try:
        records.check_label(label, source)
    except DamagedFile as error:
        raise SubmissionError(str(error)) from None


def check_budget_range(budget: float, source: str) -> None:
    """A competition zip's declared budget as a run's (:func:`bench.records.check_budget_range`)."""
    try:
        records.check_budget_range(budget, source)
    except DamagedFile as error:
        raise SubmissionError(str(error)) from None


def check_claimed_metrics(claimed: dict, recomputed: dict, where: str) -> None:
    """Refuses missing, extra or different metrics, naming the first one and the difference."""
    if set(claimed) != set(recomputed):
        missing, extra = sorted(set(recomputed) - set(claimed)), sorted(set(claimed) - set(recomputed))
        raise SubmissionError(f"{where}: metrics do not match the recomputed set (missing {missing}, unexpected {extra})")
    for name, value in recomputed.items():
        claim = claimed[name]
        if not records.finite_number(claim):
            raise SubmissionError(f"{where}: {name} = {claim!r} is not a finite number")
        if abs(claim - value) > METRIC_TOLERANCE * (1 + abs(value)):
            raise SubmissionError(f"{where}: claims {name} = {claim:.10g} but the predictions give {value:.10g} "
                                  f"(difference {claim - value:+.3g})")


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def complete_config(method: str, config: dict) -> dict:
    """A built-in method's recorded configuration with every setting it runs with: a setting the record lacks (an
    older record, or one edited) at its default, a whole number given for a float as that float
    (:func:`~approximators.base.recorded_config`). One run is one configuration, however its record spells it, so its
    entry's hash (:func:`config_hash`) is the same. Another method's configuration as recorded (its class runs only in
    a process of its own)."""
    from approximators import METHODS
    from approximators.base import recorded_config

    built_in = METHODS.get(method)
    return config if built_in is None else records.as_recorded(dataclasses.asdict(recorded_config(built_in, config)))


def _reliability(task: Task, predictions: np.ndarray) -> dict | None:
    if task.y_test is None:
        return None
    labels = task.y_test.numpy()
    if task.kind == "classification":
        return reliability.confidence_bins(metrics.validate_probabilities(predictions), labels)
    return reliability.quantile_coverage(predictions, labels.astype(np.float64))


def scored(task: Task, reference: Reference, predictions: np.ndarray) -> dict[str, dict[str, float]]:
    """Every metric of ``predictions`` against ``reference``, on the whole test set and on each block."""
    overall, by_block = score(task, predictions, reference)
    return {OVERALL_BLOCK: overall, **by_block}


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def check_submitter(name: str, notes: str) -> None:
    if not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise SubmissionError(f"the submitter's name must be 1 to {MAX_NAME_CHARS} printable characters")
    if len(notes) > MAX_NOTES_CHARS:
        raise SubmissionError(f"notes are limited to {MAX_NOTES_CHARS} characters")
    unprintable = next((ch for ch in notes if not (ch.isprintable() or ch == "\n")), None)
    if unprintable is not None:  # terminal escapes, bidirectional overrides: they would reach terminals and pages
        raise SubmissionError(f"notes must be printable text and line breaks; they hold {unprintable!r} "
                              f"(U+{ord(unprintable):04X})")


def check_method_name(method: str, source: str) -> None:
    if not method or len(method) > MAX_NAME_CHARS or not method.isprintable():
        raise SubmissionError(f"{source}: the method name must be 1 to {MAX_NAME_CHARS} printable characters")


@dataclass(frozen=True)
class CheckedRun:
    """A run folder whose every claim was checked against this installation (:func:`checked_run`): its record, task and
    reference, its predictions (None for a record alone, ``--no-predictions``) and the metrics they give per block
    (None likewise)."""

    folder: Path
    result: dict
    task: Task
    reference: Reference
    predictions: np.ndarray | None
    scored: dict[str, dict[str, float]] | None

    @property
    def trust(self) -> dict:
        """How the files it was checked against are trusted here: the reference and the fetched data (the cache's
        manifest; :func:`bench.tasks.competition.files_trust`)."""
        return files_trust(self.task, self.reference.sha256)


CURRENT_CLAIMS = ("predictions_sha256", "resolved", "environment")
"""Claims :func:`bench.records.check_record` lets a record of an older version lack (null), which every record made
for a task's current fingerprint (2026-11-27 on) holds: removing one would switch off its check."""


def checked_run(folder: Path, cache: Path | None = None, needs: str | None = None) -> CheckedRun:
    """The one validator of a run folder, for ``submit``, ``verify`` and ``export-submission`` alike: a record one
    refuses, all refuse, with the same line. Checked in order, each failure one :class:`SubmissionError` line:

    - every field of the record, in type and range (:func:`bench.records.checked_result`);
    - the task: available here (a competition task fetched), of the recorded version and fingerprint (data, settings
      and what its network computes);
    - the claims every record of the current fingerprint makes (:data:`CURRENT_CLAIMS`) are there;
    - the run could exist: a built-in method's budget rule accepts the budget with the recorded settings, which
      resolve to the recorded ``resolved`` ones (planned as ``run`` plans, no training: :func:`resolved_settings`);
    - the reference: the recorded sha256 and key are the installed reference's, the noise floor its (none for an
      official reference);
    - the predictions: present (where ``needs``, what is being done, needs them; else a record alone passes), valid
      predictions of the task, and the ones the record's sha256 names;
    - a record alone: its metrics agree with each other (:func:`check_claims_agree`: identities every predictive
      satisfies);
    - every metric the record claims, on the whole test set and on each block: recomputed from the predictions and
      the reference, equal to ``METRIC_TOLERANCE``.

    What a record alone claims of its predictions (their sha256, the metrics) only a re-execution can check
    (:func:`bench.verify.verify`)."""
    folder = Path(folder)
    result = read_result(folder)
    source = str(folder / records.RESULT)
    try:
        task = available_task(result["task"], cache)
    except BenchError as error:  # not installed, or not fetched: the record's line, from every reader alike
        raise SubmissionError(f"{source}: {error}") from None
    if result["task_version"] != task.version or result["task_fingerprint"] != task.fingerprint():
        raise SubmissionError(f"{source}: made for {task.name} version {result['task_version']} with other data, "
                              f"settings or network than this installation's version {task.version}; rerun it")
    dropped = [name for name in CURRENT_CLAIMS if result.get(name) is None]
    if dropped:  # only a record older than the fingerprint it names lacks them: one with claims removed
        raise SubmissionError(f"{source}: holds no {', '.join(dropped)}, which every record made for {task.name}'s "
                              "fingerprint holds: edited after the run; rerun it")
    reference = load_reference(task)
    if result["reference"]["sha256"] != reference.sha256:
        claimed = result["reference"]["sha256"]
        shown_chars = 16 if claimed[:16] != reference.sha256[:16] else 64  # two equal prefixes would say nothing
        raise SubmissionError(f"{source}: scored against reference sha256 {terminal_text(claimed[:shown_chars])}"
                              f"{'...' if shown_chars < 64 else ''}, but the registry's {task.name} reference is "
                              f"{reference.sha256[:shown_chars]}{'...' if shown_chars < 64 else ''}")
    if result["reference"]["key"] != reference.key:
        key = terminal_text(result["reference"]["key"])
        raise SubmissionError(f"{source}: scored against the reference's array {key!r}, but the registry's "
                              f"{task.name} reference holds {reference.key!r}")
    if result.get("noise_floor") != reference.noise_floor:  # null where the reference publishes none (official)
        raise SubmissionError(f"{source}: claims another noise floor than its reference publishes "
                              f"({records.differences(result.get('noise_floor'), reference.noise_floor)})")
    _check_plan(result, task, source)
    if result.get("predictions_sha256") and not (folder / records.PREDICTIONS).exists() and needs is None:
        check_claims_agree(result, task, reference, source)  # with predictions, every metric is recomputed below
        return CheckedRun(folder, result, task, reference, None, None)
    try:
        records.check_predictions_kept(folder, result, needs or "checking its claims")
        predictions = read_predictions(folder / records.PREDICTIONS, Expected.of(task, reference))
        records.check_predictions_recorded(folder, result, predictions)
    except DamagedFile as error:
        raise SubmissionError(str(error)) from None
    found = scored(task, reference, predictions)
    check_scored_claims(result, found, source)
    return CheckedRun(folder, result, task, reference, predictions, found)


def resolved_settings(method_name: str, config: dict, task: Task, budget: float) -> dict | None:
    """The settings a built-in method run with ``config`` (as a record holds it) at ``budget`` epochs on ``task`` uses,
    automatic ones resolved, as a record holds them: planned as ``run`` plans a run, before any training (None for a
    method that is not bdl-bench's, whose code runs only in a process of its own: its re-execution says). A budget
    the method's rule refuses is one :class:`SubmissionError` line, a run that cannot exist; this machine's memory
    refuses nothing (a run made on a larger one is no less real)."""
    from approximators import METHODS
    from approximators.base import recorded_config
    from bench.runner import metered, planned, resolved_config

    method = METHODS.get(method_name)
    if method is None:
        return None
    settings = recorded_config(method, config)
    problem, data = metered(task, float(budget))
    try:
        approximator = planned(method, settings, problem, data)
    except DoesNotFit:
        approximator = method(settings)
    except BenchError as error:
        raise SubmissionError(f"a run that cannot exist: {error}") from None
    return records.as_recorded(resolved_config(approximator, problem))


def _check_plan(result: dict, task: Task, source: str) -> None:
    """The record's budget is one its method's rule accepts with its settings, and its ``resolved`` settings are the
    ones its ``config`` resolves to at that budget (:func:`resolved_settings`): an edit of one setting in either is
    refused before any re-execution."""
    try:
        resolved = resolved_settings(result["method"], result["config"], task, result["budget"])
    except SubmissionError as error:
        raise SubmissionError(f"{source}: {error}") from None
    if resolved is not None and result["resolved"] != resolved:
        raise SubmissionError(f"{source}: records resolved settings its configuration does not resolve to at budget "
                              f"{float(result['budget']):g} ({records.differences(result['resolved'], resolved)})")
    if resolved is not None:
        _check_cost(result, task, source)


def _check_cost(result: dict, task: Task, source: str) -> None:
    """A built-in method's record claims the epochs its settings spend at its budget, as its budget rule fixes them
    before training (:func:`bench.costs.planned_cost`; for ``hmc`` only its bounds), and the test passes its settings
    fix (where they do): a record claiming another cost (0, -0.0, one epoch of two) was edited after its run."""
    from approximators import METHODS
    from approximators.base import recorded_config
    from bench.costs import planned_cost, refused_cost, refused_passes

    method, budget, claimed = METHODS[result["method"]], float(result["budget"]), result["epochs_used"]
    try:
        cost = planned_cost(method(recorded_config(method, result["config"])), budget, task.n_train)
    except BenchError as error:  # the budget rule refused it: said above already, as a run that cannot exist
        raise SubmissionError(f"{source}: a run that cannot exist: {error}") from None
    if cost is None:
        return
    if refused_passes(result["test_passes"], cost):
        raise SubmissionError(f"{source}: claims {shown(result['test_passes'])} test passes, but {method.name} with "
                              f"these settings evaluates {cost.test_passes:g} networks on the test inputs (its "
                              "settings fix it before training): edited after the run; rerun it")
    if not refused_cost(claimed, cost):
        return
    if cost.exact:
        raise SubmissionError(f"{source}: claims {shown(claimed)} epochs used, but {method.name} with these settings "
                              f"spends {cost.most:g} of a budget of {budget:g} (its budget rule fixes it before "
                              "training): edited after the run; rerun it")
    raise SubmissionError(f"{source}: claims {shown(claimed)} epochs used, outside the {cost.least:g} to "
                          f"{cost.most:g} that {method.name} with these settings can spend of a budget of {budget:g} "
                          f"(only bounds are checked: {cost.why}): edited after the run; rerun it")


CLAIMS_ROUND_OFF = 1e-9
"""How far apart two sides of an identity between a record's metrics may be (float64 summation in another order)."""

MEAN_METRICS = frozenset({"agreement", "total_variation", "accuracy", "nll", "w1", "w2", "competition_w",
                          "log_likelihood"})
"""Metrics that are means over test points: on the whole test set, the mean of the blocks' weighted by their sizes."""


def _tiling(task: Task) -> list:
    """Test blocks that cover the test set once, in order (none where the blocks do not)."""
    tiles, start = [], 0
    for block in sorted(task.test_blocks, key=lambda b: (b.start, b.stop)):
        if block.start == start and block.stop > start:
            tiles.append(block)
            start = block.stop
    return tiles if tiles and start == task.n_test else []


def check_claims_agree(result: dict, task: Task, reference: Reference, source: str) -> None:
    """The identities every honest record's metrics satisfy, whatever trained it and wherever: on every block, W2 >= W1
    (per point, by Jensen's inequality), the competition's score is -W1, and accuracy lies within the disagreement
    (1 - agreement) of the reference's own accuracy; on the whole test set, each mean over points is the mean of a tiling
    of blocks weighted by their sizes (RMSE's square likewise), and ECE at most theirs. A record alone claims its metrics
    without predictions that recompute them; one claim edited alone breaks an identity, refused in one line here, on any
    CPU, before any re-execution."""
    scopes = {OVERALL_BLOCK: result["metrics"], **result["metrics_by_block"]}
    rows = {OVERALL_BLOCK: slice(None), **{b.name: slice(b.start, b.stop) for b in task.test_blocks}}
    labels = None if task.y_test is None else task.y_test.numpy()

    def close(a: float, b: float, scale: float) -> bool:
        return abs(a - b) <= CLAIMS_ROUND_OFF * max(scale, 1e-300)

    def refuse(block: str, what: str) -> SubmissionError:
        where = "metrics" if block == OVERALL_BLOCK else f"metrics_by_block[{block!r}]"
        return SubmissionError(f"{source}: its {where} contradict each other: {what}; no predictive gives them")

    for block, claims in scopes.items():
        if not isinstance(claims, dict) or not all(records.finite_number(v) for v in claims.values()):
            continue  # the claims' grammar is checked where they are compared
        if "w1" in claims and "w2" in claims and claims["w2"] < claims["w1"] - CLAIMS_ROUND_OFF * abs(claims["w1"]):
            raise refuse(block, f"W2 {claims['w2']:.6g} below W1 {claims['w1']:.6g} (W2 >= W1 at every point)")
        if "w1" in claims and "competition_w" in claims and not close(claims["competition_w"], -claims["w1"],
                                                                       abs(claims["w1"])):
            raise refuse(block, f"competition_w {claims['competition_w']:.10g} is not -W1 ({-claims['w1']:.10g})")
        if {"accuracy", "agreement"} <= set(claims) and labels is not None and block in rows:
            # the reference's rows as agreement reads them (renormalised): a near-tie breaks the same way
            reference_rows = metrics.validate_probabilities(reference.array[rows[block]], "the reference")
            reference_accuracy = float(np.mean(reference_rows.argmax(axis=1) == labels[rows[block]]))
            if abs(claims["accuracy"] - reference_accuracy) > 1 - claims["agreement"] + CLAIMS_ROUND_OFF:
                raise refuse(block, f"accuracy {claims['accuracy']:.6g} is further from the reference's "
                                    f"{reference_accuracy:.6g} than its disagreement 1 - {claims['agreement']:.6g} allows")
    tiles = _tiling(task)
    if not tiles or not all(isinstance(scopes.get(b.name), dict) for b in tiles):
        return
    weights = {b.name: (b.stop - b.start) / task.n_test for b in tiles}
    whole = result["metrics"]
    for metric in whole:
        parts = [scopes[name].get(metric) for name in weights]
        if not all(records.finite_number(v) for v in [whole[metric], *parts]):
            continue
        if metric in MEAN_METRICS or metric == "rmse":
            power = 2 if metric == "rmse" else 1
            combined = sum(w * v**power for w, v in zip(weights.values(), parts)) ** (1 / power)
            if not close(whole[metric], combined, sum(w * abs(v) for w, v in zip(weights.values(), parts))):
                raise refuse(OVERALL_BLOCK, f"{metric} {whole[metric]:.10g} on the whole test set, but its blocks "
                                            f"{', '.join(weights)} give {combined:.10g}")
        elif metric == "ece":
            bound = sum(w * v for w, v in zip(weights.values(), parts))
            if whole[metric] > bound * (1 + CLAIMS_ROUND_OFF) + CLAIMS_ROUND_OFF:
                raise refuse(OVERALL_BLOCK, f"ECE {whole[metric]:.6g} on the whole test set above the {bound:.6g} "
                                            "its blocks bound it by")


def check_scored_claims(result: dict, scored: dict[str, dict[str, float]], source: str) -> None:
    """The record's metrics, on the whole test set and each block, are ``scored``'s (:func:`check_claimed_metrics`)."""
    check_claimed_metrics(result["metrics"], scored[OVERALL_BLOCK], f"{source} metrics")
    if set(result["metrics_by_block"]) != set(scored) - {OVERALL_BLOCK}:
        raise SubmissionError(f"{source}: metrics_by_block has blocks {sorted(result['metrics_by_block'])}, the task "
                              f"has {sorted(set(scored) - {OVERALL_BLOCK})}")
    for block, claimed in result["metrics_by_block"].items():
        if not isinstance(claimed, dict):
            raise SubmissionError(f"{source}: metrics_by_block[{block!r}] is not an object")
        check_claimed_metrics(claimed, scored[block], f"{source} metrics_by_block[{block!r}]")


def score_run(folder: Path, submitter: str, notes: str = "", cache: Path | None = None) -> RunRow:
    """Validates (:func:`checked_run`) and re-scores one run folder; returns the row to store (recomputed metrics
    only), not verified (:func:`bench.verify.verified_row` re-executes it and marks it so)."""
    folder = Path(folder)
    check_submitter(submitter, notes)
    run = checked_run(folder, cache, needs="submitting (which re-scores the predictions)")
    result, task, reference, predictions = run.result, run.task, run.reference, run.predictions
    config = complete_config(result["method"], result["config"])
    return RunRow(
        task=task.name, task_version=task.version, task_fingerprint=task.fingerprint(), task_kind=task.kind,
        method=result["method"], budget=float(result["budget"]), seed=result["seed"],
        reference_sha256=reference.sha256, config_hash=config_hash(config), config=config,
        source="run", predictions_sha256=records.predictions_sha256(predictions),
        epochs_used=float(result["epochs_used"]), test_passes=float(result["test_passes"]),
        wall_seconds=float(result["wall_seconds"]), device=result["device"], versions=result["versions"],
        noise_floor=reference.metadata.get("noise_floor"), reliability=_reliability(task, predictions),
        noise_floor_spread=reference.metadata.get("noise_floor_spread"),
        submitter=submitter, notes=notes, finished_at=str(result.get("finished_at", "")) or None,
        submitted_at=_now(), metrics=run.scored, verified=False, verification=None,
        architecture_change=result.get("architecture_change"), label=result.get("label"),
        warnings=records.method_warnings(result), trust=run.trust)


def _safe_member_name(name: str, archive: Path) -> str:
    path = PurePosixPath(name)
    if "\\" in name or path.is_absolute() or ".." in path.parts or len(path.parts) != 1:
        raise SubmissionError(f"{archive}: refusing member {name!r}: a submission holds only plain file names, no paths")
    return name


def _read_text_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, source: str) -> np.ndarray:
    if info.file_size > limit:
        raise SubmissionError(f"{source}: unpacks to {info.file_size} bytes, more than the {limit} it can need")
    try:
        with archive.open(info) as f:
            data = f.read(limit + 1)  # the header's size may lie; never read past the limit
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as error:
        raise SubmissionError(f"{source}: a damaged zip member ({error})") from None
    if len(data) > limit:
        raise SubmissionError(f"{source}: unpacks to more than the {limit} bytes it can need")
    try:
        text = data.decode("ascii")
        first_line = text.split("\n", 1)[0]
        return np.loadtxt(io.StringIO(text), delimiter="," if "," in first_line else None, ndmin=2,
                          dtype=np.float64)
    except (UnicodeDecodeError, ValueError) as error:
        raise SubmissionError(f"{source}: not numpy text of numbers ({str(error).splitlines()[0]})") from None


def score_competition_zip(path: Path, method: str, budget: float, seed: int, submitter: str, notes: str = "",
                          file_tasks: dict[str, str] = OFFICIAL_FILES, cache: Path | None = None,
                          label: str | None = None) -> list[RunRow]:
    """Scores each official file of a competition zip against its task at the declared ``budget``; every row
    carries ``label``."""
    path = Path(path)
    check_submitter(submitter, notes)
    check_method_name(method, str(path))
    check_label(label, str(path))
    check_budget_range(budget, str(path))
    with _opening(path, "no such file"):
        file = open_regular_file(path, "submission", "submit a .zip file of the official prediction files")
    try:
        if os.fstat(file.fileno()).st_size > MAX_ZIP_BYTES:
            raise SubmissionError(f"{path}: larger than {MAX_ZIP_BYTES} bytes")
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError) as error:
        file.close()
        raise SubmissionError(f"{path}: not a readable zip file ({error})") from None
    except SubmissionError:
        file.close()
        raise
    rows = []
    with file, archive:
        infos = [info for info in archive.infolist() if not info.is_dir()]
        names = [_safe_member_name(info.filename, path) for info in infos]
        unknown = sorted(set(names) - set(file_tasks))
        if unknown or not names or len(set(names)) != len(names):
            raise SubmissionError(f"{path}: holds {names}; a submission holds each of the official files at most "
                                  f"once: {', '.join(file_tasks)}")
        for info in infos:
            source = f"{path}:{info.filename}"
            task = available_task(file_tasks[info.filename], cache)
            reference = load_reference(task)
            expected = Expected.of(task, reference)
            predictions = validate_predictions(
                _read_text_member(archive, info, expected.max_text_bytes, source), expected, source)
            config = {}
            rows.append(RunRow(
                task=task.name, task_version=task.version, task_fingerprint=task.fingerprint(), task_kind=task.kind,
                method=method, budget=float(budget), seed=seed, reference_sha256=reference.sha256,
                config_hash=config_hash(config), config=config, source="competition-zip",
                predictions_sha256=records.predictions_sha256(predictions), epochs_used=None,
                test_passes=None, wall_seconds=None, device=None, versions={},
                noise_floor=reference.metadata.get("noise_floor"), reliability=_reliability(task, predictions),
                noise_floor_spread=reference.metadata.get("noise_floor_spread"),
                submitter=submitter, notes=notes, finished_at=None, submitted_at=_now(),
                metrics=scored(task, reference, predictions), label=label,
                trust=files_trust(task, reference.sha256)))
    return rows


def run_folders(paths: list[Path]) -> list[Path]:
    """Each path that is a run folder, or every run folder below a path that is not (sorted); a folder named twice
    (``runs runs/x``, a link to it) once, where first named."""
    folders = []
    for path in map(Path, paths):
        if (path / records.RESULT).is_file():
            folders.append(path)
        elif path.is_dir():
            found = sorted(result.parent for result in path.rglob(records.RESULT))
            if not found:
                raise SubmissionError(f"{path}: holds no run folder (no {records.RESULT} in it or below it)")
            folders.extend(found)
        else:
            raise SubmissionError(f"{path}: not a run folder, a folder of runs, or a .zip")
    unique: dict[Path, Path] = {}
    for folder in folders:
        unique.setdefault(folder.resolve(), folder)
    return list(unique.values())


def _named_otherwise(folder: Path, result: dict) -> str:
    """What the names of ``folder`` and the folders above it say otherwise than its record, as bdl-bench names a run
    folder (``<task>/<method>/budget-<B>/seed-<S>``, :func:`bench.records.run_folder`): a folder named ``seed-...``
    names its seed, and under one named ``budget-...`` the two above name its method and task; a folder named
    otherwise names no run (a copy made by hand), and nothing is compared. Empty where they agree."""
    if not folder.name.startswith("seed-"):
        return ""
    named = [("seed", folder.name, f"seed-{result['seed']}")]
    if folder.parent.name.startswith("budget-"):
        named += [("budget", folder.parent.name, f"budget-{budget_label(float(result['budget']))}"),
                  ("method", folder.parent.parent.name, result["method"]),
                  ("task", folder.parent.parent.parent.name, result["task"])]
    return ", ".join(f"its folder names {what} {terminal_text(have)!r} where its record's is "
                     f"{terminal_text(want)!r}" for what, have, want in named if have != want)


def check_folders_name_their_runs(folders: list[Path]) -> None:
    """Refuses a submission's run folders (:func:`run_folders`) in one :class:`SubmissionError` line where a folder's
    path names another task, method, budget or seed than its record (:func:`_named_otherwise`: a record copied into
    another run's folder), or two folders hold the same run (task, method, budget, seed, settings and code: a copy),
    which would count one run twice."""
    seen: dict[tuple, Path] = {}
    for folder in map(Path, folders):
        result = read_result(folder)
        otherwise = _named_otherwise(Path(os.path.abspath(folder)), result)
        if otherwise:
            raise SubmissionError(f"{folder / records.RESULT}: {otherwise}: a record copied into another run's "
                                  "folder; submit the folder its run wrote")
        key = (result["task"], result["method"], float(result["budget"]), result["seed"],
               json.dumps(result["config"], sort_keys=True), result.get("method_source"))
        if key in seen:
            raise SubmissionError(f"{folder}: the same run (task, method, budget, seed and settings) as {seen[key]}; "
                                  "one run counts once: submit one of the two folders")
        seen[key] = folder


class InstalledReferences:
    """This installation's tasks and references for one board, each task built, its fingerprint (a hash of its data)
    computed and its reference loaded once however many rows ask: the shipped store alone is some 1,500 records of
    five tasks, and :func:`leaderboard.shipped.rows` and :func:`with_current_floors` both ask for every one."""

    def __init__(self):
        self._known: dict[str, tuple[Task, Reference, str] | BenchError] = {}

    def of(self, name: str) -> tuple[Task, Reference, str]:
        """``name``'s task, its reference and its fingerprint, or the :class:`BenchError` that refused them, raised
        again for every row that asks."""
        if name not in self._known:
            try:
                task = get_task(name)
                self._known[name] = (task, load_reference(task), task.fingerprint())
            except BenchError as error:
                self._known[name] = error
        known = self._known[name]
        if isinstance(known, BenchError):
            raise known
        return known


def with_current_floors(rows: list[RunRow], installed: InstalledReferences | None = None) -> list[RunRow]:
    """``rows`` with the noise floor, and its spread, of the reference installed here wherever they were scored
    against it (the floor a row stored is the one its reference published when it was submitted; a reference's floor
    can be recomputed to a better definition while its predictive, and so every score, stays the same), and the trust
    of their files said (``unknown`` for a fetched task's row stored without it). ``installed``:
    the tasks and references already loaded for this board, shared with :func:`leaderboard.shipped.rows`."""
    from bench.tasks import EMBEDDED
    from bench.trust import OURS, UNKNOWN

    installed = InstalledReferences() if installed is None else installed
    floors: dict[tuple[str, str], tuple[dict | None, dict | None]] = {}
    refreshed = []
    for row in rows:
        key = (row.task, row.reference_sha256)
        if key not in floors:
            try:  # an official reference publishes no floor, and checking its task's data would read gigabytes
                reference = installed.of(row.task)[1] if row.task in EMBEDDED else None
            except BenchError:  # a reference that is not this installation's (stale): the row keeps its own
                reference = None
            floors[key] = (reference.noise_floor, reference.noise_floor_spread) \
                if reference is not None and reference.sha256 == row.reference_sha256 \
                else (row.noise_floor, row.noise_floor_spread)
        floor, spread = floors[key]
        trust = row.trust
        if trust is None:  # a row stored before rows said how their files were trusted: an installed task's reference
            # is ours (submit checked its sha256 against the registry); a fetched task's files' trust is not known
            trust = {"reference": {"trust": OURS if row.task in EMBEDDED else UNKNOWN, "sha256": row.reference_sha256},
                     "data": {}}
        refreshed.append(dataclasses.replace(row, noise_floor=floor, noise_floor_spread=spread, trust=trust))
    return refreshed
