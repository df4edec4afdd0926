"""Re-execution of a claim: rerun a finished run under the meter and compare it with what it recorded.

``python -m bench verify RUN_DIR`` reads the run's task, method, configuration, budget and
seed from ``result.json``, trains the method again under a fresh meter, and compares:

- ``epochs_used`` and ``test_passes``: always exactly (the budget the run claims is the one it used);
- ``resolved``, the settings the run says it used (automatic ones resolved), where the record has it: exactly;
- the predictions, when what decides the run's round-off (:data:`bench.runner.NUMERICS`: library versions, CPU,
  torch threads, device) and its bdl-bench version are the re-execution's: **bitwise**, since training is
  deterministic there. The re-execution runs on the CPU with this process's torch threads (``verify --threads``,
  default 1, as ``run``'s), not the record's: a run made with other threads is compared as below, and the line
  says which ``--threads`` would compare it bitwise (none where the run used more threads than this machine's
  cores, as bdl-bench runs at most one thread per core);
- otherwise the re-execution behaves like another seed, so the recorded predictive must be as close
  to the re-execution as seed-to-seed variation allows: its distance to the re-execution (mean total
  variation for classification, mean W1 for regression) at most ``CROSS_ENVIRONMENT_FACTOR`` times the
  distance between two re-executions with different seeds (the recorded one and ``seed + 1``);
- a folder that holds its record alone (``--no-predictions``, as the shipped results): the sha256 of the
  re-execution's predictions against the one recorded, where the run's numerics are the re-execution's; elsewhere
  it cannot be compared, and is reported not verified without training.

This answers "the budget is self-reported": a run trained longer than it claims, or whose predictions
were edited, does not reproduce. ``submit --verify`` verifies before inserting and the leaderboard
marks verified runs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from approximators import get_method
from approximators.base import recorded_config
from bench import metrics, records
from bench.errors import BenchError, ConfigError, DamagedFile, FailedElsewhere
from bench.executors import Isolations, isolates, usable_cores
from bench.runner import environment, fit_and_predict, metered, numerics_changes, planned, resolved_config
from bench.tasks import PREDICTIVE_SAMPLES, get_task

CROSS_ENVIRONMENT_FACTOR = 2.0
"""Another machine: recorded-to-rerun distance may be at most this times the rerun's seed-to-seed distance."""


class VerificationError(BenchError):
    """A run folder that cannot be re-executed (unreadable, another task version, an unknown setting)."""


@dataclass(frozen=True)
class Verification:
    folder: Path
    mode: str
    """``bitwise`` (what decides the run's round-off is the re-execution's) or ``cross-environment``."""
    passed: bool
    detail: str
    threads: int
    """torch's threads in the re-execution."""

    def line(self) -> str:
        return (f"{self.folder}: {'verified' if self.passed else 'NOT VERIFIED'} ({self.mode}, {self.threads} torch "
                f"thread{'s' if self.threads != 1 else ''}): {self.detail}")


def _recorded(folder: Path) -> dict:
    """The run's record, every field checked as ``submit`` checks it (:func:`records.checked_result`)."""
    try:
        return records.checked_result(folder)
    except DamagedFile as error:
        raise VerificationError(str(error)) from None


def _recorded_predictions(folder: Path, task, key: str) -> np.ndarray:
    """The run's predictions, read and checked against ``task`` as ``submit`` reads them (a regular file, bounded by
    the size the task's predictions take, the array's header checked before it is allocated)."""
    from leaderboard.submission import Expected, SubmissionError, read_predictions

    classification = task.kind == "classification"
    expected = Expected(task.name, task.kind, key, task.n_test, task.n_classes if classification else PREDICTIVE_SAMPLES)
    try:
        return read_predictions(folder / records.PREDICTIONS, expected)
    except SubmissionError as error:
        raise VerificationError(str(error)) from None


def _recorded_config(method, values: dict, folder: Path):
    """The method's config from a record's values (:func:`approximators.base.recorded_config`), or one line naming
    the folder."""
    try:
        return recorded_config(method, values)
    except ConfigError as error:
        raise ConfigError(f"{folder}: the recorded configuration does not fit {method.name}'s settings ({error})") \
            from None


def _distance(kind: str, a: np.ndarray, b: np.ndarray) -> float:
    return metrics.total_variation(a, b) if kind == "classification" else metrics.w1_distance(a, b)


def _method_of(result: dict, folder: Path, method: str | None):
    """The method class to re-execute the run with. A record names a method; it never chooses code to import:
    a method from ``package.module:ClassName`` is re-executed only when the caller names it (``method``)."""
    if method is not None:
        loaded = get_method(method)
        if loaded.name != result["method"]:
            raise VerificationError(f"{folder}: a run of {result['method']!r}, but {method} is {loaded.name!r}")
        return loaded
    source = result.get("method_source")
    try:
        return get_method(result["method"])
    except ConfigError:
        if not source:
            raise
        raise VerificationError(f"{folder}: its method came from {source}, and a run's record never chooses code to "
                                f"import; if you trust that code, pass --method {source}") from None


def _changes(result: dict) -> dict[str, tuple] | None:
    """What differs between the run's record and this re-execution (on the CPU, with this process's threads) among
    what decides round-off and bdl-bench's version, ``{field: (recorded, now)}``; None if the record does not say
    where it ran."""
    recorded = result.get("environment")
    if not isinstance(recorded, dict):
        return None
    now = environment()
    changes = numerics_changes({**recorded, "device": result.get("device")}, {**now, "device": "cpu"})
    if recorded.get("bdl-bench") != now["bdl-bench"]:  # other code may compute otherwise
        changes["bdl-bench"] = (recorded.get("bdl-bench"), now["bdl-bench"])
    return changes


def _not_bitwise(changes: dict[str, tuple] | None) -> str:
    """Why a re-execution here is not compared bitwise, and the ``--threads`` that would be where only threads differ."""
    if changes is None:
        return "the record does not say where the run ran"
    why = "recorded with other numerics: " + ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changes.items())
    threads, _ = changes.get("torch_threads", (None, None))
    if set(changes) == {"torch_threads"} and isinstance(threads, int) and not isinstance(threads, bool):
        cores = usable_cores()
        why += (f" (`--threads {threads}` compares it bitwise)" if 1 <= threads <= cores else
                f" (more threads than the {cores} usable core(s) here: not bitwise on this machine)")
    return why


def verify(folder: Path, cache: Path | None = None, method: str | None = None, isolate: bool = True,
           isolations: Isolations | None = None) -> Verification:
    """Re-executes the run in ``folder`` on the CPU, with this process's torch threads, and compares it with its
    record (``method``: the method to re-execute it with, as ``--method`` takes it; needed for a method loaded as
    ``package.module:ClassName``).

    A method that is not bdl-bench's (:func:`bench.executors.isolates`: ``method``, else the one the record names)
    is re-executed, with ``isolate``, in a process of its own (``isolations``', else a new one), as ``run`` runs it:
    whatever its code does there (``os._exit``, a crash) is raised here as
    :class:`~bench.errors.FailedElsewhere`, one line naming the method (exit 4). Without ``isolate`` (``--debug``),
    and for a built-in method, the re-execution runs in this process."""
    folder = Path(folder)
    name = method if method is not None else _recorded(folder)["method"]
    if not (isolate and isolates(name)):
        return _re_executed(folder, cache, method)
    with contextlib.ExitStack() as stack:
        isolations = isolations or stack.enter_context(Isolations(torch.get_num_threads()))
        outcome = isolations.of(name).call(_re_executed, folder, cache, method)
    if outcome.exit_code:
        raise FailedElsewhere(outcome.exit_code, outcome.failure)
    return outcome.result


def _re_executed(folder: Path, cache: Path | None, method: str | None) -> Verification:
    """:func:`verify` in this process."""
    result = _recorded(folder)
    task = get_task(result["task"], cache)
    if result["task_version"] != task.version or result["task_fingerprint"] != task.fingerprint():
        raise VerificationError(f"{folder}: made for {task.name} version {result['task_version']} with other data or "
                                f"settings than this installation's version {task.version}; it cannot be re-executed")
    digest = result.get("predictions_sha256")
    changes = _changes(result)
    if digest is not None and not (folder / records.PREDICTIONS).exists():
        recorded = None  # a record alone (--no-predictions): its predictions' sha256 is compared, bitwise only
        if changes != {}:
            return Verification(folder, "cross-environment", False,
                                f"holds its predictions' sha256 alone (no {records.PREDICTIONS}), which only a "
                                f"re-execution with the run's numerics can compare; not re-executed: "
                                f"{_not_bitwise(changes)}", torch.get_num_threads())
    else:
        recorded = _recorded_predictions(folder, task, result["reference"]["key"])
        try:
            records.check_predictions_recorded(folder, result, recorded)
        except DamagedFile as error:
            raise VerificationError(str(error)) from None
    method = _method_of(result, folder, method)
    config = _recorded_config(method, result["config"], folder)
    seed = result["seed"]

    def rerun(with_seed: int) -> tuple[np.ndarray, float, float, dict]:
        problem, data = metered(task, result["budget"])
        approximator = planned(method, config, problem, data)
        resolved = resolved_config(approximator, problem)
        predictions, _ = fit_and_predict(approximator, problem, data, with_seed)
        return predictions, data.meter.epochs_used, data.meter.test_passes, resolved

    predictions, epochs_used, test_passes, resolved = rerun(seed)
    budget_problems = [f"{name} {claimed:g} recorded, {actual:g} re-executed"
                       for name, claimed, actual in (("epochs_used", result["epochs_used"], epochs_used),
                                                     ("test_passes", result["test_passes"], test_passes))
                       if claimed != actual]
    if "resolved" in result and result["resolved"] != records.as_recorded(resolved):
        budget_problems.append(
            f"resolved settings {records.differences(result['resolved'], records.as_recorded(resolved))}")
    threads = torch.get_num_threads()
    if recorded is None:
        same = records.predictions_sha256(predictions) == digest
        detail = "predictions' sha256 equal" if same else "the re-executed predictions' sha256 differs from the record's"
        return Verification(folder, "bitwise", same and not budget_problems,
                            "; ".join([detail, *budget_problems]) + f"; epochs used {epochs_used:g}", threads)
    if predictions.shape != recorded.shape:
        return Verification(folder, "bitwise" if changes == {} else "cross-environment", False,
                            f"recorded predictions have shape {recorded.shape}, the re-execution {predictions.shape}",
                            threads)
    if changes == {}:
        differing = int(np.sum(predictions != recorded))
        detail = ("predictions bitwise equal" if not differing else
                  f"{differing} of {recorded.size} prediction values differ (largest by "
                  f"{np.max(np.abs(predictions - recorded)):.3g})")
        return Verification(folder, "bitwise", not differing and not budget_problems,
                            "; ".join([detail, *budget_problems]) + f"; epochs used {epochs_used:g}", threads)
    other, _, _, _ = rerun(seed + 1)
    to_record = _distance(task.kind, recorded, predictions)
    seed_to_seed = _distance(task.kind, other, predictions)
    passed = to_record <= CROSS_ENVIRONMENT_FACTOR * seed_to_seed and not budget_problems
    name = "TV" if task.kind == "classification" else "W1"
    detail = (f"{name}(recorded, re-executed) = {to_record:.4g}, {name} between re-executions with seeds {seed} and "
              f"{seed + 1} = {seed_to_seed:.4g} (allowed: x{CROSS_ENVIRONMENT_FACTOR:g})")
    return Verification(folder, "cross-environment", passed,
                        "; ".join([detail, *budget_problems, _not_bitwise(changes)]) + f"; epochs used {epochs_used:g}",
                        threads)

