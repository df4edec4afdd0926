"""Re-execution of a claim: rerun a finished run under the meter and compare it with what it recorded.

``python -m bench verify RUN_DIR`` first checks every claim of the record that needs no training, with the one
validator ``submit`` and ``export-submission`` use (:func:`leaderboard.submission.checked_run`: its fields, the
task's version and fingerprint, the reference's identity, the predictions' sha256 and every metric on the whole test
set and each block, recomputed), so that a record one refuses, all refuse, with the same line. It then reads the
run's task, method, configuration, budget and seed from ``result.json``, trains the method again under a fresh
meter, and compares:

- ``epochs_used`` and ``test_passes``: always exactly (the budget the run claims is the one it used);
- ``resolved``, the settings the run says it used (automatic ones resolved): exactly;
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
- a folder that holds its record alone (``--no-predictions``, as the shipped results): where the run's numerics are
  the re-execution's, the sha256 of the re-execution's predictions against the one recorded, and the record's metrics
  against those predictions'; elsewhere (another CPU kind) the record's fidelity metrics against the re-execution's,
  equal to round-off (``CROSS_CPU_ROUND_OFF``, mode ``cross-environment, round-off``), or, where round-off grew
  chaotically as in long sampler runs, no further apart than two seeds of the configuration, measured by re-executing
  it with ``CROSS_CPU_SEEDS`` other seeds (mode ``cross-environment, statistical against 4 re-executed seeds``).

This answers "the budget is self-reported": a run trained longer than it claims, or whose predictions
were edited, does not reproduce. ``submit --verify`` verifies before inserting and the leaderboard
marks verified runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from approximators import get_method
from approximators.base import recorded_config
from approximators.boundary import users_code
from bench import metrics, records
from bench.errors import BenchError, ConfigError, DamagedFile, FailedElsewhere, shown
from bench.executors import Isolations, isolates, usable_cores
from bench.runner import environment, fit_and_predict, metered, numerics_changes, planned, resolved_config
from leaderboard.store import RunRow
from leaderboard.submission import SubmissionError, check_scored_claims, checked_run, score_run, scored

CROSS_ENVIRONMENT_FACTOR = 2.0
"""Another machine: recorded-to-rerun distance may be at most this times the rerun's seed-to-seed distance."""
CROSS_CPU_ROUND_OFF = 1e-4
"""A record kept alone, re-executed where round-off differs: its fidelity metrics may differ from the re-execution's
by this much relative to max(1, |value|) and still be the same run. Measured between two CPU kinds' gate baselines
of one code (``benchmarks/cross_cpu_round_off.py``; the figures in docs/notebook/verification.md): it lies in the gap
between the configurations whose round-off stayed round-off and those where it grew chaotically (which the
statistical comparison takes), and far under the smallest seed-to-seed spread of any metric, so what it lets
through moves no rank."""
CROSS_CPU_LEVEL = 0.01
"""The false-alarm rate of the statistical comparison of a record kept alone with its configuration's seeds."""
CROSS_CPU_SEEDS = 4
"""Seeds re-executed to measure how far apart two seeds of a configuration are, where a record kept alone moved
beyond round-off on another CPU kind (4: a t quantile of 5.8 at 3 degrees of freedom, where 2 seeds would give 127)."""


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


def verified_row(folder: Path, submitter: str, notes: str = "", cache: Path | None = None, method: str | None = None,
                 isolate: bool = True, isolations: Isolations | None = None) -> RunRow:
    """The leaderboard row of the run in ``folder``, validated and re-scored (:func:`leaderboard.submission.score_run`:
    the cheap checks first), then re-executed (:func:`verify`, which takes ``method``, ``isolate`` and ``isolations``)
    and refused unless it reproduces; the row records how it was verified."""
    row = score_run(folder, submitter, notes, cache)
    verification = verify(folder, cache, method, isolate, isolations)
    if not verification.passed:
        raise SubmissionError(f"{folder}: does not reproduce under re-execution ({verification.detail})")
    return dataclasses.replace(row, verified=True, verification=verification.mode)


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
    try:  # every claim the record makes that needs no re-execution, as submit and export-submission check them
        run = checked_run(folder, cache)
    except SubmissionError as error:
        raise VerificationError(str(error)) from None
    result, task, recorded = run.result, run.task, run.predictions
    digest = result.get("predictions_sha256")
    changes = _changes(result)
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
    with users_code(method, "architecture_change"):
        change = method.architecture_change(config)
    budget_problems = [f"{name} {claimed:g} recorded, {actual:g} re-executed"
                       for name, claimed, actual in (("epochs_used", result["epochs_used"], epochs_used),
                                                     ("test_passes", result["test_passes"], test_passes))
                       if claimed != actual]
    if result.get("architecture_change") != change:
        budget_problems.append(f"architecture_change {shown(result.get('architecture_change'))} recorded, "
                               f"{shown(change)} re-executed")
    if result["resolved"] != records.as_recorded(resolved):  # a method of one's own: the validator cannot plan it
        budget_problems.append(
            f"resolved settings {records.differences(result['resolved'], records.as_recorded(resolved))}")
    threads = torch.get_num_threads()
    if recorded is None and changes != {}:
        return _alone_elsewhere(folder, run, predictions, budget_problems, changes, epochs_used, threads, rerun)
    if recorded is None:
        same = records.predictions_sha256(predictions) == digest
        detail = "predictions' sha256 equal" if same else "the re-executed predictions' sha256 differs from the record's"
        if same:  # the record's metrics, from the predictions it names (bit for bit the re-executed ones)
            try:
                check_scored_claims(result, scored(task, run.reference, predictions), str(folder / records.RESULT))
                detail += ", every metric recomputed as recorded"
            except SubmissionError as error:
                budget_problems.append(str(error))
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



def _metric_values(scored: dict[str, dict[str, float]]) -> dict[tuple[str, str], float]:
    """Every (block, metric) of a run's scores, the whole test set's as block ``all``."""
    return {(block, name): value for block, values in scored.items() for name, value in values.items()}


def _claims(result: dict) -> dict[tuple[str, str], object]:
    return _metric_values({"all": result["metrics"], **result["metrics_by_block"]})


def _alone_elsewhere(folder: Path, run, predictions: np.ndarray, budget_problems: list[str],
                     changes: dict[str, tuple], epochs_used: float, threads: int, rerun) -> Verification:
    """A record kept alone (its predictions' sha256 and metrics), made where round-off differs. Every metric it claims,
    on the whole test set and on each block, must be the re-execution's to :data:`CROSS_CPU_ROUND_OFF` (short runs,
    whose round-off stays round-off); else, where round-off grew chaotically (long sampler runs), the record and the
    re-execution must be two runs of one seed, no further apart than two seeds of the configuration: the
    configuration is re-executed here with :data:`CROSS_CPU_SEEDS` other seeds, and on every metric |recorded -
    re-executed| must lie within the two-sided t quantile at ``CROSS_CPU_LEVEL`` (Bonferroni over the metrics,
    ``CROSS_CPU_SEEDS`` - 1 degrees of freedom) of sqrt(2) times their standard deviation. Nothing of the spread comes
    from a file: records beside it are as editable as this one."""
    import scipy.stats

    result = run.result
    now = _metric_values(scored(run.task, run.reference, predictions))
    claimed = _claims(result)
    if set(claimed) != set(now) or not all(records.finite_number(value) for value in claimed.values()):
        return Verification(folder, "cross-environment", False, "the record's metrics are not the ones its task "
                            f"gives ({len(claimed)} claimed, {len(now)} computed); {_not_bitwise(changes)}", threads)
    gaps = {key: abs(now[key] - claimed[key]) / max(1.0, abs(claimed[key])) for key in now}
    worst = max(gaps.values())
    if worst <= CROSS_CPU_ROUND_OFF:
        detail = (f"every re-executed metric equals the record's to round-off (largest relative difference "
                  f"{worst:.2g}, allowed {CROSS_CPU_ROUND_OFF:g})")
        return Verification(folder, "cross-environment, round-off", not budget_problems,
                            "; ".join([detail, *budget_problems, _not_bitwise(changes)])
                            + f"; epochs used {epochs_used:g}", threads)
    seed = result["seed"]
    others = [_metric_values(scored(run.task, run.reference, rerun(seed + k)[0]))
              for k in range(1, CROSS_CPU_SEEDS + 1)]
    quantile = float(scipy.stats.t.ppf(1 - CROSS_CPU_LEVEL / (2 * len(now)), CROSS_CPU_SEEDS - 1))
    outside = []
    for key, value in now.items():
        allowed = quantile * math.sqrt(2) * float(np.std([other[key] for other in others], ddof=1))
        if abs(claimed[key] - value) > allowed:
            outside.append(f"{key[1]} on {key[0]} recorded {claimed[key]:.5g}, re-executed {value:.5g}, allowed "
                           f"± {allowed:.3g}")
    detail = (f"round-off grew beyond {CROSS_CPU_ROUND_OFF:g} (largest relative difference {worst:.2g}); against the "
              f"spread of {CROSS_CPU_SEEDS} seeds re-executed here the record and its re-execution are "
              + ("two runs of one seed" if not outside else "not two runs of one seed: " + "; ".join(outside[:3])
                 + (f" (and {len(outside) - 3} more)" if len(outside) > 3 else "")))
    return Verification(folder, f"cross-environment, statistical against {CROSS_CPU_SEEDS} re-executed seeds",
                        not outside and not budget_problems,
                        "; ".join([detail, *budget_problems, _not_bitwise(changes)]) + f"; epochs used {epochs_used:g}",
                        threads)
