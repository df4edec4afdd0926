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
- otherwise (the run was made on another CPU kind, or with other libraries or threads) its metrics, on the whole
  test set and each block (recomputed from its predictions where it holds them, else as it claims them), against the
  re-execution's, as :func:`verify_many` describes: to round-off (:mod:`bench.drift`) where they agree so (mode
  ``cross-environment, round-off``); else its configuration is re-executed here on :data:`CROSS_CPU_SEEDS` seeds
  natively and with another CPU kind's kernels (:data:`bench.executors.OTHER_KERNELS`). Where every one of them
  reproduces to round-off, so must the record, and it does not: refused. Where round-off grows chaotically in it, the
  record is one draw of its configuration, tested against the seeds re-executed here (a prediction interval per
  metric), and the records of one configuration verified together are tested together (the mean of their primary
  metrics against the mean of their seeds re-executed), which is what a rank rests on (mode ``cross-environment,
  statistical against N re-executed seeds``).

This answers "the budget is self-reported": a run trained longer than it claims, or whose predictions
were edited, does not reproduce. ``submit --verify`` verifies before inserting and the leaderboard
marks verified runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager

import numpy as np
import torch

from approximators import get_method
from approximators.base import recorded_config
from approximators.boundary import users_code
from bench import drift, records
from bench.errors import BenchError, ConfigError, DamagedFile, FailedElsewhere, MethodFailed, describe_failure, shown
from bench.executors import OTHER_KERNELS, Isolated, Isolations, isolates, other_kernels_differ, usable_cores
from bench.progress import current_observer, run_title
from bench.runner import environment, fit_and_predict, metered, numerics_changes, planned, resolved_config
from bench.trust import summary
from leaderboard.gate.statistics import block_sizes
from leaderboard.ranking import PRIMARY
from leaderboard.store import RunRow
from leaderboard.submission import (SubmissionError, check_folders_name_their_runs, check_scored_claims, checked_run,
                                   score_run, scored)

CROSS_CPU_LEVEL = 0.01
"""Where a record made elsewhere is judged against its configuration's seeds re-executed here: the chance that an
honest record is refused by its prediction interval, and that a configuration's honest records are refused by the
test of their mean."""
CROSS_CPU_SEEDS = 10
"""How many seeds of a configuration are re-executed here (its records' own, then the next ones), natively and with
other kernels, when a record made elsewhere is not its re-execution to round-off. With 10, a record's prediction
interval at ``CROSS_CPU_LEVEL`` is ± 4.3 seed standard deviations on a regression task's 4 metrics and ± 5.7 on a
classification task's 25 (t at 9 degrees of freedom, Bonferroni over them); with the 4 seeds of earlier releases it was
± 13 to 23."""


class VerificationError(BenchError):
    """A run folder that cannot be re-executed (unreadable, another task version, an unknown setting)."""


@dataclass(frozen=True)
class Verification:
    folder: Path
    mode: str
    """``bitwise`` (what decides the run's round-off is the re-execution's), ``cross-environment, round-off`` or
    ``cross-environment, statistical against N re-executed seeds``."""
    passed: bool
    detail: str
    threads: int
    """torch's threads in the re-execution."""
    trust: str = ""
    """How the files it was verified against (the reference, the fetched data) are trusted
    (:func:`bench.trust.summary`)."""

    def line(self) -> str:
        return (f"{self.folder}: {'verified' if self.passed else 'NOT VERIFIED'} ({self.mode}, {self.threads} torch "
                f"thread{'s' if self.threads != 1 else ''}): {self.detail}"
                + (f"; scored against {self.trust}" if self.trust else ""))


OWN_SEED = "its own seed"
NATIVE_SEED = "a seed of its configuration, natively"
OTHER_KERNELS_SEED = "a seed of its configuration, with another CPU kind's kernels"


@dataclass(frozen=True)
class Reexecution:
    """One training :func:`verify_many` runs, as a progress bar and a log name it: the run folder it verifies, the
    run's task, method and budget, the seed trained and ``how`` (:data:`OWN_SEED`: the run itself; :data:`NATIVE_SEED`
    or :data:`OTHER_KERNELS_SEED`: a seed of its configuration, to judge a record made elsewhere by)."""

    folder: Path
    task: str
    method: str
    budget: float
    seed: int
    how: str

    @property
    def title(self) -> str:
        return run_title(self.task, self.method, self.budget, self.seed)

    def line(self, seconds: float, failure: str | None = None) -> str:
        """What the log and the terminal say of it once it ended (``failure``: how it ended without a result, e.g.
        ``interrupted``; None where it ended with one)."""
        return (f"{self.folder}: {self.title} ({self.how}): "
                + (f"re-executed in {seconds:.1f} s" if failure is None else f"{failure} after {seconds:.1f} s"))


Reexecuting = Callable[[Reexecution], ContextManager]
"""What a caller of :func:`verify_many` puts around each re-execution (a bar of its epochs, a line in a log)."""


@dataclass(frozen=True)
class _Elsewhere:
    """A run made where round-off differs from here (another CPU kind, other libraries or threads), re-executed here:
    its metrics per (block, metric), as claimed (recomputed from its predictions where it holds them) and as
    re-executed, and what :func:`verify_many` needs to judge it with its configuration's other records."""

    folder: Path
    configuration: tuple
    """What makes two records runs of one configuration: task, method (and where it was loaded from), budget and
    resolved settings."""
    kind: str
    seed: int
    claimed: dict
    now: dict
    sizes: dict
    """Test points per block (``all`` the whole test set)."""
    method_source: str
    problems: tuple
    """What else does not reproduce (the budget used, the settings), each a refusal."""
    changes: dict | None
    epochs_used: float
    threads: int
    trust: str

    def verdict(self, mode: str, passed: bool, detail: str) -> Verification:
        return Verification(self.folder, mode, passed and not self.problems,
                            "; ".join([detail, *self.problems, _not_bitwise(self.changes)])
                            + f"; epochs used {self.epochs_used:g}", self.threads, self.trust)


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


def planned_epochs(folders: list[Path], method: str | None = None, damaged_count_nothing: bool = False) -> float:
    """The most epochs verifying ``folders`` may train: each record's budget, and for the records of a configuration
    made elsewhere (round-off differs), :data:`CROSS_CPU_SEEDS` seeds re-executed natively (their own among them) and as
    many with other kernels, where they are not their re-executions to round-off (``method`` as :func:`verify_many`
    takes it, which decides the configurations). Each record checked first as
    verify checks it (:func:`records.checked_result`); a damaged one counts nothing here with
    ``damaged_count_nothing`` (it is refused in its turn)."""
    total, elsewhere = 0.0, {}
    for folder in folders:
        try:
            result = records.checked_result(folder)
        except DamagedFile:
            if not damaged_count_nothing:
                raise
            continue
        total += result["budget"]
        if _changes(result) != {}:
            elsewhere.setdefault(_configuration(result, method), set()).add(result["seed"])
    return total + sum(budget * (max(0, CROSS_CPU_SEEDS - len(seeds)) + CROSS_CPU_SEEDS)
                       for (_, _, _, budget, _), seeds in elsewhere.items())


def _configuration(result: dict, method: str | None) -> tuple:
    """What makes records runs of one configuration, judged together (:func:`verify_many`): task, method and where it
    is loaded from (``method``, as ``--method`` names it, else the record's source), budget and resolved settings."""
    return (result["task"], result["method"], method or result.get("method_source") or "", float(result["budget"]),
            json.dumps(result.get("resolved"), sort_keys=True))


def verified_rows(folders: list[Path], submitter: str, notes: str = "", cache: Path | None = None,
                  method: str | None = None, isolate: bool = True, isolations: Isolations | None = None,
                  on_verdict: Callable[[Verification], None] | None = None,
                  on_reexecution: Reexecuting | None = None) -> list[RunRow]:
    """The leaderboard rows of the runs in ``folders``, each validated and re-scored (:func:`leaderboard.submission.
    score_run`: the cheap checks first), then re-executed together (:func:`verify_many`, which takes ``method``,
    ``isolate``, ``isolations``, ``on_verdict`` and ``on_reexecution``) and refused unless every one reproduces (a
    folder whose path names another run than its record, or one run in two folders, is refused before re-executing
    any: :func:`leaderboard.submission.check_folders_name_their_runs`); each
    row records how it was verified."""
    rows = [score_run(folder, submitter, notes, cache) for folder in folders]
    check_folders_name_their_runs(folders)  # a record in another run's folder, or a run twice: before re-executing
    verifications = verify_many(folders, cache, method, isolate, isolations, on_verdict=on_verdict,
                                on_reexecution=on_reexecution)
    for verification in verifications:
        if not verification.passed:
            raise SubmissionError(f"{verification.folder}: does not reproduce under re-execution "
                                  f"({verification.detail})")
    return [dataclasses.replace(row, verified=True, verification=verification.mode)
            for row, verification in zip(rows, verifications)]


def verify(folder: Path, cache: Path | None = None, method: str | None = None, isolate: bool = True,
           isolations: Isolations | None = None) -> Verification:
    """:func:`verify_many` of one folder: its failure raised."""
    return verify_many([Path(folder)], cache, method, isolate, isolations)[0]


def verify_many(folders: list[Path], cache: Path | None = None, method: str | None = None, isolate: bool = True,
                isolations: Isolations | None = None,
                on_refused: Callable[[Path, BaseException], None] | None = None,
                on_verdict: Callable[[Verification], None] | None = None,
                on_reexecution: Reexecuting | None = None) -> list[Verification]:
    """Re-executes each run in ``folders`` on the CPU, with this process's torch threads, and compares it with its
    record (``method``: the method to re-execute it with, as ``--method`` takes it; needed for a method loaded as
    ``package.module:ClassName``); the verdicts in the folders' order, each passed to ``on_verdict`` as it is known.
    Each training it runs (the run's own seed, and the seeds of a configuration made elsewhere below) happens inside
    ``on_reexecution(Reexecution(...))``, where given: a run trained in this process reports its epochs and phases to
    the progress observer that puts in place (:func:`bench.progress.observed`).

    A record made elsewhere (round-off differs: another CPU kind, other libraries or threads) whose every metric is
    its re-execution's to round-off (:func:`bench.drift.within_round_off`) verifies so (mode ``cross-environment,
    round-off``). The others are judged with every record made elsewhere of their configuration among ``folders``:
    its seeds (theirs, then the next ones, up to :data:`CROSS_CPU_SEEDS`) are re-executed here, natively and with
    another CPU kind's kernels (:data:`bench.executors.OTHER_KERNELS`, in a process of its own), and each metric of
    each record (but ``competition_w``, which is -W1) is held to the tighter of

    - **what other kernels move it**: within :data:`bench.drift.OTHER_KERNELS_FACTOR` times the most any of those seeds moved
      with the other kernels (at least round-off) of its own seed's re-execution. Where round-off stays round-off in
      the configuration this is round-off, on any CPU kind; where it grows a little (a long run's last digits), a
      little more;
    - **the seeds' prediction interval**: where round-off grows chaotically a record is one draw of its
      configuration, within the two-sided t interval at ``CROSS_CPU_LEVEL`` (Bonferroni over the metrics, N - 1
      degrees of freedom for N seeds), mean ± t s sqrt(1 + 1/N), of the seeds re-executed here; and where two or
      more of its records are verified together, the mean of their primary metrics judged so
      (:data:`leaderboard.ranking.PRIMARY`, on the whole test set and each block) must lie within the t interval of
      the mean of their own seeds re-executed here, ± t s sqrt(2 / n) (Bonferroni over those metrics), or all of
      them are refused: what a rank rests on.

    Every spread comes from re-executions here, never from what records beside it claim (mode ``cross-environment,
    statistical against N re-executed seeds``).

    A method that is not bdl-bench's (:func:`bench.executors.isolates`: ``method``, else the one the record names)
    is re-executed, with ``isolate``, in a process of its own (``isolations``', else a new one), as ``run`` runs it:
    whatever its code does there (``os._exit``, a crash) is raised here as
    :class:`~bench.errors.FailedElsewhere`, one line naming the method (exit 4). Without ``isolate`` (``--debug``),
    and for a built-in method, the re-execution runs in this process. A folder that cannot be verified (refused by
    the validator, a method that fails) raises, or is passed to ``on_refused`` with the error and left out."""
    verdicts: dict[Path, Verification] = {}
    elsewhere: list[_Elsewhere] = []

    def refused(folder: Path, error: BaseException) -> None:
        if on_refused is None:
            raise error
        on_refused(folder, error)

    def decided(verification: Verification) -> None:
        verdicts[verification.folder] = verification
        if on_verdict is not None:
            on_verdict(verification)

    with contextlib.ExitStack() as stack:
        if isolations is None:
            isolations = stack.enter_context(Isolations(torch.get_num_threads()))
        for folder in map(Path, folders):
            try:
                with _reexecuting(on_reexecution, folder, None, OWN_SEED):
                    outcome = _in_place(folder, cache, method, isolate, isolations, _first_look, folder, cache,
                                        method)
            except (MethodFailed, FailedElsewhere, BenchError) as error:
                refused(folder, error)
                continue
            if isinstance(outcome, Verification):
                decided(outcome)
            else:
                elsewhere.append(outcome)
        groups: dict[tuple, list[_Elsewhere]] = {}
        for record in elsewhere:
            groups.setdefault(record.configuration, []).append(record)
        for group in groups.values():
            try:
                judged = _judged(group, cache, method, isolate, isolations, on_reexecution)
            except (MethodFailed, FailedElsewhere, BenchError) as error:
                code, line = describe_failure(error)
                comparing = FailedElsewhere(code, "re-executing its configuration's seeds to compare it with, "
                                                  f"natively or with other kernels: {line}")
                for record in group:
                    refused(record.folder, comparing)
                continue
            for verification in judged:
                decided(verification)
    return [verdicts[Path(folder)] for folder in folders if Path(folder) in verdicts]


def _reexecuting(on_reexecution: Reexecuting | None, folder: Path, seed: int | None, how: str) -> ContextManager:
    """``on_reexecution`` of the run in ``folder`` trained with ``seed`` (None: its own), else nothing; a record that
    cannot be read raises its one line (:class:`VerificationError`), as its verification would."""
    if on_reexecution is None:
        return contextlib.nullcontext()
    result = _recorded(folder)
    return on_reexecution(Reexecution(folder, result["task"], result["method"], float(result["budget"]),
                                      result["seed"] if seed is None else seed, how))


def _in_place(folder: Path, cache: Path | None, method: str | None, isolate: bool, isolations: Isolations,
              function, *args):
    """``function(*args)`` where the run's method is re-executed: in a process of its own for a method that is not
    bdl-bench's (with ``isolate``), its failure raised here as :class:`~bench.errors.FailedElsewhere`; else here."""
    name = method if method is not None else _recorded(folder)["method"]
    if not (isolate and isolates(name)):
        return function(*args)
    outcome = isolations.of(name).call(function, *args)
    if outcome.exit_code:
        raise FailedElsewhere(outcome.exit_code, outcome.failure)
    return outcome.result


def _seed_metrics(folder: Path, cache: Path | None, method: str | None, seed: int) -> dict[tuple[str, str], float]:
    """The run's configuration re-executed with ``seed`` here: every metric, per (block, metric)."""
    run = checked_run(folder, cache)
    approximator_class = _method_of(run.result, folder, method)
    predictions, _, _ = _trained(run, approximator_class, _recorded_config(approximator_class, run.result["config"],
                                                                           folder), seed)
    return _metric_values(scored(run.task, run.reference, predictions))


def _trained(run, approximator_class, config, seed: int) -> tuple[np.ndarray, object, dict]:
    """The run's configuration trained again with ``seed`` under a fresh meter: (predictions, the meter, the settings
    its plan resolved). Its epochs go to the progress observer in place, if any (a bar of this re-execution)."""
    problem, data = metered(run.task, run.result["budget"], on_progress=current_observer())
    approximator = planned(approximator_class, config, problem, data)
    resolved = resolved_config(approximator, problem)
    predictions, _ = fit_and_predict(approximator, problem, data, seed)
    return predictions, data.meter, resolved


def _first_look(folder: Path, cache: Path | None, method: str | None) -> "Verification | _Elsewhere":
    """The run re-executed with its own seed: the verdict where it was made with this machine's numerics (bitwise),
    else what :func:`verify_many` judges it by with its configuration's other records."""
    try:  # every claim the record makes that needs no re-execution, as submit and export-submission check them
        run = checked_run(folder, cache)
    except SubmissionError as error:
        raise VerificationError(str(error)) from None
    result, task, recorded = run.result, run.task, run.predictions
    digest = result.get("predictions_sha256")
    changes = _changes(result)
    approximator_class = _method_of(result, folder, method)
    config = _recorded_config(approximator_class, result["config"], folder)
    seed = result["seed"]
    predictions, meter, resolved = _trained(run, approximator_class, config, seed)
    epochs_used, test_passes = meter.epochs_used, meter.test_passes
    with users_code(approximator_class, "architecture_change"):
        change = approximator_class.architecture_change(config)
    problems = [f"{name} {claimed:g} recorded, {actual:g} re-executed"
                for name, claimed, actual in (("epochs_used", result["epochs_used"], epochs_used),
                                              ("test_passes", result["test_passes"], test_passes))
                if claimed != actual]
    if result.get("architecture_change") != change:
        problems.append(f"architecture_change {shown(result.get('architecture_change'))} recorded, "
                        f"{shown(change)} re-executed")
    if result["resolved"] != records.as_recorded(resolved):  # a method of one's own: the validator cannot plan it
        problems.append(f"resolved settings {records.differences(result['resolved'], records.as_recorded(resolved))}")
    threads, trust = torch.get_num_threads(), summary(run.trust)
    if changes == {} and recorded is None:
        same = records.predictions_sha256(predictions) == digest
        detail = "predictions' sha256 equal" if same else "the re-executed predictions' sha256 differs from the record's"
        if same:  # the record's metrics, from the predictions it names (bit for bit the re-executed ones)
            try:
                check_scored_claims(result, scored(task, run.reference, predictions), str(folder / records.RESULT))
                detail += ", every metric recomputed as recorded"
            except SubmissionError as error:
                problems.append(str(error))
        return Verification(folder, "bitwise", same and not problems,
                            "; ".join([detail, *problems]) + f"; epochs used {epochs_used:g}", threads, trust)
    if changes == {}:
        differing = int(np.sum(predictions != recorded))
        detail = ("predictions bitwise equal" if not differing else
                  f"{differing} of {recorded.size} prediction values differ (largest by "
                  f"{np.max(np.abs(predictions - recorded)):.3g})")
        return Verification(folder, "bitwise", not differing and not problems,
                            "; ".join([detail, *problems]) + f"; epochs used {epochs_used:g}", threads, trust)
    now = _metric_values(scored(task, run.reference, predictions))
    claimed = _claims(result) if recorded is None else _metric_values(run.scored)
    if set(claimed) != set(now) or not all(records.finite_number(value) for value in claimed.values()):
        return Verification(folder, "cross-environment", False, "the record's metrics are not the ones its task "
                            f"gives ({len(claimed)} claimed, {len(now)} computed); {_not_bitwise(changes)}", threads,
                            trust)
    sizes = block_sizes(task)
    return _Elsewhere(folder, _configuration(result, method), task.kind, seed, claimed, now, sizes,
                      method or result.get("method_source") or result["method"], tuple(problems), changes,
                      epochs_used, threads, trust)


def _metric_values(scored: dict[str, dict[str, float]]) -> dict[tuple[str, str], float]:
    """Every (block, metric) of a run's scores, the whole test set's as block ``all``."""
    return {(block, name): value for block, values in scored.items() for name, value in values.items()}


def _claims(result: dict) -> dict[tuple[str, str], object]:
    return _metric_values({"all": result["metrics"], **result["metrics_by_block"]})


def _next_seeds(taken: list[int], count: int) -> list[int]:
    """``count`` seeds after the largest of ``taken``, none of them taken."""
    seeds, seed = [], max(taken)
    while len(seeds) < count:
        seed += 1
        if seed not in taken:
            seeds.append(seed)
    return seeds


def _judged(group: list[_Elsewhere], cache: Path | None, method: str | None, isolate: bool,
            isolations: Isolations, on_reexecution: Reexecuting | None = None) -> list[Verification]:
    """The verdicts of one configuration's records made elsewhere (:func:`verify_many`): its seeds re-executed here
    and with other kernels where a record is not its re-execution to round-off, then :func:`judged`."""
    first = group[0]
    claims = [(record.seed, record.claimed) for record in group]
    native = {record.seed: record.now for record in group}
    moved = None
    if not all(within_round_off(claimed, native[seed], first.sizes) for seed, claimed in claims):
        for seed in _next_seeds(sorted(native), max(0, CROSS_CPU_SEEDS - len(native))):
            with _reexecuting(on_reexecution, first.folder, seed, NATIVE_SEED):
                native[seed] = _in_place(first.folder, cache, method, isolate, isolations, _seed_metrics,
                                         first.folder, cache, method, seed)
        moved = _moved_with_other_kernels(first, native, cache, method, on_reexecution)
    mode, judgements = judged(claims, native, moved, first.sizes, first.kind)
    return [record.verdict(mode, judgement.passed, judgement.detail) for record, judgement in zip(group, judgements)]


@dataclass(frozen=True)
class Judgement:
    passed: bool
    detail: str


def within_round_off(claimed: dict, now: dict, sizes: dict[str, int]) -> bool:
    """Whether every metric ``claimed`` (per (block, metric)) is ``now``'s to round-off (:mod:`bench.drift`)."""
    return all(drift.within_round_off(metric, claimed[(block, metric)], value, sizes[block])
               for (block, metric), value in now.items())


def judged(claims: list[tuple[int, dict]], native: dict[int, dict], moved: dict | None, sizes: dict[str, int],
           kind: str) -> tuple[str, list[Judgement]]:
    """:func:`verify_many`'s judgement, from numbers alone: the mode and each record's verdict, for the records of one
    configuration made elsewhere (``claims``: (seed, metric values per (block, metric))), its seeds re-executed here
    (``native``: seed -> values; each record's seed among them, ten or more where a record is not its seed's to
    round-off) and the most other kernels moved each metric over them (``moved``; None: no other kernels here).
    ``sizes``: test points per block; ``kind``: the task's (which metrics are primary)."""
    import scipy.stats

    if all(within_round_off(claimed, native[seed], sizes) for seed, claimed in claims):
        return "cross-environment, round-off", [Judgement(True, "every re-executed metric equals the record's to "
                                                                "round-off")] * len(claims)
    n_seeds = len(native)
    sample = native[claims[0][0]]
    keys = [key for key in sample if not (key[1] == "competition_w" and (key[0], "w1") in sample)]
    quantile = float(scipy.stats.t.ppf(1 - CROSS_CPU_LEVEL / (2 * len(keys)), n_seeds - 1))
    limits = {}
    for key in keys:
        values = [native[seed][key] for seed in native]
        mean = float(np.mean(values))
        std = max(float(np.std(values, ddof=1)), drift.allowed_drift(key[1], mean, sizes[key[0]]))
        limits[key] = (mean, quantile * std * math.sqrt(1 + 1 / n_seeds), std)
    paired = {key: drift.OTHER_KERNELS_FACTOR * moved[key] for key in keys} if moved is not None else {}
    paired = {key: allowance for key, allowance in paired.items() if allowance < limits[key][1]}
    how = (f"{len(paired)} of {len(keys)} metrics held to {drift.OTHER_KERNELS_FACTOR:g} x the most any of {n_seeds} "
           "seeds re-executed here moved with another CPU kind's kernels, the others to the seeds' prediction interval"
           if moved is not None else "the seeds' prediction interval: no other kernels to re-execute with on this "
           "machine, whose CPU capability is torch's default")
    group_line = _group_line(claims, native, limits, paired, n_seeds, kind)
    judgements = []
    for seed, claimed_values in claims:
        outside = []
        for key in keys:
            claimed, now = claimed_values[key], native[seed][key]
            allowed_here = max(drift.allowed_drift(key[1], max(abs(claimed), abs(now)), sizes[key[0]]),
                               paired.get(key, 0.0))
            if key in paired:
                if abs(claimed - now) > allowed_here:
                    outside.append(f"{key[1]} on {key[0]} recorded {claimed:.6g}, re-executed {now:.6g}, allowed "
                                   f"± {allowed_here:.3g}")
            elif abs(claimed - now) > allowed_here and abs(claimed - limits[key][0]) > limits[key][1]:
                outside.append(f"{key[1]} on {key[0]} recorded {claimed:.5g}, the seeds' mean {limits[key][0]:.5g} "
                               f"± {limits[key][1]:.3g}")
        detail = (f"against {n_seeds} seeds of its configuration re-executed here ({how}) the record is "
                  + ("one of its runs" if not outside else "not one of its runs: " + "; ".join(outside[:3])
                     + (f" (and {len(outside) - 3} more)" if len(outside) > 3 else "")))
        judgements.append(Judgement(not outside and not group_line,
                                    "; ".join([detail, *([group_line] if group_line else [])])))
    return f"cross-environment, statistical against {n_seeds} re-executed seeds", judgements


def _group_line(claims: list[tuple[int, dict]], native: dict[int, dict], limits: dict, paired: dict, n_seeds: int,
                kind: str) -> str:
    """Where two or more records of the configuration are verified together, the test of their mean on each primary
    metric judged by the seeds' spread (those held to the other kernels' drift are held record by record), over the
    records' distinct seeds (those of one seed averaged: one draw): one line saying which moved, else ""."""
    import scipy.stats

    primary = [key for key in limits if key[1] in PRIMARY[kind] and key not in paired]
    by_seed: dict[int, list[dict]] = {}
    for seed, claimed in claims:  # records of one seed (copies, or runs of it on several machines) are one draw
        by_seed.setdefault(seed, []).append(claimed)
    if len(by_seed) < 2 or not primary:
        return ""
    quantile = float(scipy.stats.t.ppf(1 - CROSS_CPU_LEVEL / (2 * len(primary)), n_seeds - 1))
    for key in primary:
        mean_claimed = float(np.mean([np.mean([claimed[key] for claimed in of_seed]) for of_seed in by_seed.values()]))
        mean_here = float(np.mean([native[seed][key] for seed in by_seed]))
        allowed = quantile * limits[key][2] * math.sqrt(2 / len(by_seed))
        if abs(mean_claimed - mean_here) > allowed:
            return (f"the {len(by_seed)} seeds' records' mean {key[1]} on {key[0]} is {mean_claimed:.6g}, their seeds "
                    f"re-executed here average {mean_here:.6g}, allowed ± {allowed:.3g}: together they are not the "
                    "configuration's runs")
    return ""


def _moved_with_other_kernels(first: _Elsewhere, native: dict[int, dict], cache: Path | None, method: str | None,
                              on_reexecution: Reexecuting | None = None) -> dict[tuple[str, str], float] | None:
    """Per metric, the most any seed of ``native`` moved when re-executed with another CPU kind's kernels (one after
    another, in one process of its own started with :data:`bench.executors.OTHER_KERNELS`); None where this machine has
    no other kernels to run (its CPU capability is torch's default)."""
    if not other_kernels_differ():
        return None
    name = method if method is not None else first.method_source
    most: dict[tuple[str, str], float] = {}
    with Isolated(name if isolates(name) else None, torch.get_num_threads(), OTHER_KERNELS) as other:
        for seed, values in native.items():
            with _reexecuting(on_reexecution, first.folder, seed, OTHER_KERNELS_SEED):
                outcome = other.call(_seed_metrics, first.folder, cache, method, seed)
            if outcome.exit_code:
                raise FailedElsewhere(outcome.exit_code, outcome.failure)
            for key, value in values.items():
                most[key] = max(most.get(key, 0.0), abs(outcome.result[key] - value))
    return most
