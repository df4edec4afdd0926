"""A sweep: every combination of methods, tasks, budgets, seeds and setting variants, each one run of
:func:`bench.runner.run` into its usual run folder.

Variants: ``--set KEY=VALUE`` given with several values of one key sweeps over them, and several swept keys
make every combination. A run folder's name holds task, method, budget and seed only, so when a sweep has more
than one variant each variant writes under its own folder level, named by its swept values
(``<out>/lr=0.01/toy-gap/sgd/budget-10/seed-0``): a variant's tree is exactly what
``run --out <out>/lr=0.01 --set lr=0.01`` writes, and two variants can never share a run folder.

Resumption: every planned run is checked before the first one trains. A finished run of the same configuration
is skipped (so a sweep stopped by Ctrl-C, SIGTERM or SIGKILL resumes where it stopped: records are written
atomically, ``result.json`` last, so an interrupted run is simply unfinished); a finished run of another
configuration, or two variants giving a method the same configuration, stop the sweep in one line.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote

from approximators import method_source, resolve_config, resolve_method
from bench import executors, records, rehearsal as rehearsals
from bench.budget import budget_label
from bench.checkpoint import DEFAULT_EVERY_SECONDS
from bench.errors import COMMAND_LINE, ConfigError, Spelling
from bench.executors import Outcome
from bench.interrupts import sigterm_as_interrupt
from bench.progress import Progress, run_title
from bench.runner import RunSpec, resolve_device
from bench.tasks import COMPETITION, default_task_names, get_task


@dataclass(frozen=True)
class Variant:
    """One combination of setting values; ``name`` is its folder level (None when the sweep has one variant)."""

    overrides: tuple[tuple[str, str], ...]
    name: str | None


def variants(settings: list[tuple[str, str]]) -> list[Variant]:
    """Every combination of the values given per key (in the order given, a repeated value once). The name holds
    only the swept keys, each value percent-encoded so that it is one folder name and no two variants share it."""
    values: dict[str, list[str]] = {}
    for key, value in settings:
        values.setdefault(key, [])
        if value not in values[key]:
            values[key].append(value)
    swept = [key for key, given in values.items() if len(given) > 1]
    combinations = [tuple(zip(values, chosen)) for chosen in itertools.product(*values.values())]
    return [Variant(overrides, ",".join(f"{key}={quote(value, safe='')}" for key, value in overrides
                                        if key in swept) or None)
            for overrides in combinations]


@dataclass(frozen=True)
class PlannedRun:
    spec: RunSpec
    method: str
    """The method's own name (``spec.method`` is as given, e.g. ``package.module:ClassName``)."""
    variant: str | None
    folder: Path
    finished: bool
    """Finished earlier with the same configuration: skipped."""

    @property
    def title(self) -> str:
        return run_title(rehearsals.label(self.spec.task, self.spec.rehearsal), self.method, self.spec.budget,
                         self.spec.seed, self.variant)


def _normalised(config) -> dict:
    """A config as its run record holds it (through JSON): what a finished run's record is compared with, and
    what tells two variants' configurations apart."""
    return records.as_recorded(asdict(config))


def plan(methods: list, tasks: list[str] | None, budgets: list[float], seeds: list[int],
         settings: list[tuple[str, str]], out: Path, device: str = "cpu", cache: Path | None = None,
         command: str | None = None, force: bool = False, spelling: Spelling = COMMAND_LINE,
         isolate: bool = True, isolated: "executors.Isolated | None" = None,
         keep_predictions: bool = True, rehearsal: rehearsals.Rehearsal | None = None,
         checkpoint_every: float | None = DEFAULT_EVERY_SECONDS) -> list[PlannedRun]:
    """Every run of the sweep, checked before any trains: methods (names, or classes from Python), tasks and
    settings exist, no two variants give a method the same configuration, and no run folder holds a finished run of
    another configuration (``force``: every run trains, replacing what its folder holds). ``spelling``: how a
    failure names what was given. ``isolate``: a method that is not bdl-bench's, named by a string, is loaded and
    its settings resolved in a process of its own first (:func:`bench.executors.check_isolated`; in ``isolated``
    when given, a process :func:`execute` can then run the method's runs in). ``keep_predictions`` and ``rehearsal``
    (rehearsals of competition tasks, by default all five): as :class:`~bench.runner.RunSpec` takes them."""
    out = Path(out).absolute()  # before any method's code runs: a working directory it changes moves nothing
    cache = None if cache is None else Path(cache).absolute()
    # A built-in or unknown name (and a class from Python) is resolved before any task's data loads; someone else's
    # named method only after its own process has loaded it.
    loaded = {given: resolve_method(given, spelling) for given in dict.fromkeys(methods)
              if not (isolate and executors.isolates(given))}
    if rehearsal is None:
        task_list = list(dict.fromkeys(get_task(task, cache).name for task in tasks or default_task_names()))
    else:  # generated, never loaded
        task_list = list(dict.fromkeys(tasks or COMPETITION))
        rehearsals.check(task_list, rehearsal)
    if isolate:
        executors.check_isolated(methods, [(task, variant.overrides) for variant in variants(settings)
                                           for task in task_list], isolated=isolated, spelling=spelling)
    resolved: dict[str, tuple[object, type]] = {}
    for given in dict.fromkeys(methods):
        method = loaded[given] if given in loaded else resolve_method(given, spelling)
        first = resolved.setdefault(method.name, (given, method))
        if first[1] is not method:
            named = [spelling.given("method", getattr(each, "__qualname__", each)) for each in (first[0], given)]
            raise ConfigError(f"{named[0]} and {named[1]} are two methods named {method.name!r}; their runs would "
                              f"share run folders; sweep them separately with different {spelling.option('out')}")
    budget_list, seed_list = list(dict.fromkeys(map(float, budgets))), list(dict.fromkeys(seeds))
    runs, configs = [], {}
    for variant in variants(settings):
        root = Path(out) / variant.name if variant.name else Path(out)
        for name, (given, method) in resolved.items():
            for task in task_list:
                config = _normalised(resolve_config(method, task, dict(variant.overrides), spelling))
                same = configs.setdefault((name, task, json.dumps(config, sort_keys=True)), variant.name)
                if same != variant.name:
                    raise ConfigError(f"variants {same} and {variant.name} give {name} on {task} the same "
                                      "configuration; give each value of a setting once")
                for budget, seed in itertools.product(budget_list, seed_list):
                    folder = rehearsals.run_folder(root, task, name, budget, seed, rehearsal)
                    spec = RunSpec(task=task, method=given, budget=budget, seed=seed, device=device, out=root,
                                   overrides=variant.overrides, force=force, cache=cache, command=command,
                                   keep_predictions=keep_predictions, rehearsal=rehearsal,
                                   checkpoint_every=checkpoint_every)
                    finished = not force and records.finished_with(folder, config, spelling, method_source(method))
                    runs.append(PlannedRun(spec, name, variant.name, folder, finished))
    return runs


def feasible(runs: list[PlannedRun], cache: Path | None = None) -> tuple[list[PlannedRun], list[str]]:
    """The planned runs whose method's budget rule accepts their budget, and one line per (method, task, budget,
    variant) it refuses (SAE below its first member's epochs, cSG-MCMC below a cycle that can keep its samples), as
    ``--skip-infeasible`` leaves them out. Only bdl-bench's methods and classes given from Python are asked here (as
    ``run`` plans them, before any training); a method run in a process of its own
    (:func:`bench.executors.isolates`) is left to its runs."""
    from bench.errors import BudgetExhausted
    from bench.runner import metered, planned, task_of

    refused: dict[tuple, str | None] = {}
    kept, lines = [], []
    for run in runs:
        key = (run.method, run.spec.task, run.spec.budget, run.variant)
        if key not in refused:
            refused[key] = None
            if not executors.isolates(run.spec.method):
                method = resolve_method(run.spec.method)
                task = get_task(run.spec.task, cache) if run.spec.rehearsal is None else task_of(run.spec)
                try:
                    planned(method, resolve_config(method, task.name, dict(run.spec.overrides)),
                            *metered(task, run.spec.budget))
                except BudgetExhausted as error:
                    refused[key] = str(error)
                    variant = f" [{run.variant}]" if run.variant else ""
                    lines.append(f"skipped: {run.spec.task} {run.method} budget {budget_label(run.spec.budget)}"
                                 f"{variant}, every seed: {error}")
        if refused[key] is None:
            kept.append(run)
    return kept, lines


def check_executor(executor: str, workers: int | None, threads: int, ray_address: str | None,
                   spelling: Spelling = COMMAND_LINE) -> None:
    """Refuses option combinations that cannot mean what they say, and a local plan that oversubscribes cores."""
    option = spelling.option
    if executor == "ray":
        if workers is not None:
            raise ConfigError(f"{option('workers')} sets the local executor's processes; on Ray each run is a task of "
                              f"{option('threads')} CPUs and the cluster decides how many run at once")
        return
    if ray_address is not None:
        raise ConfigError(f"{option('ray_address')} is for {spelling.given('executor', 'ray')}")
    cores = executors.usable_cores()
    if (workers or 1) * threads > cores:
        raise ConfigError(f"{spelling.given('workers', workers or 1)} x {spelling.given('threads', threads)} would run "
                          f"{(workers or 1) * threads} threads on {cores} CPU cores and oversubscribe them; lower "
                          f"{option('workers')} or {option('threads')}")


def execute(runs: list[PlannedRun], executor: str = "local", workers: int | None = None, threads: int = 1,
            ray_address: str | None = None, quiet: bool = False, isolate: bool = True,
            spare: "executors.Isolated | None" = None) -> dict[PlannedRun, Outcome]:
    """Trains every unfinished run of ``runs``; returns each one's outcome (failures included, in any order).
    Runs done / total are shown as they finish, and the epochs of the current run when it runs one after another.
    ``isolate``: one after another, a method that is not bdl-bench's runs in a process of its own
    (:func:`bench.executors.isolates`; off, in this process, where ``--debug`` reaches its traceback). ``spare``: such
    a process started already (:func:`plan`'s), used by a local executor."""
    check_executor(executor, workers, threads, ray_address)
    todo = [run for run in runs if not run.finished]
    by_spec = {run.spec: run for run in todo}
    outcomes: dict[PlannedRun, Outcome] = {}
    devices = {run.spec.device for run in todo}
    if executor == "local":
        for device in devices:  # --device cuda without a GPU is one line before anything trains
            resolve_device(device)
    what = "rehearsals" if any(run.spec.rehearsal for run in todo) else "sweep"
    with Progress(len(todo), quiet, what) as progress, sigterm_as_interrupt():
        def finished(spec: RunSpec, outcome: Outcome) -> None:
            outcomes[by_spec[spec]] = outcome
            progress.finished(by_spec[spec].title, outcome.result is None)

        specs = [run.spec for run in todo]
        if executor == "ray":
            executors.run_on_ray(specs, threads, 1 if "cuda" in devices else 0, ray_address, finished)
        elif (workers or 1) == 1:
            executors.run_in_process(specs, threads, finished,
                                     lambda spec: progress.epochs(by_spec[spec].title, spec.budget), isolate, spare)
        else:
            executors.run_in_workers(specs, workers, threads, finished, spare)
    return outcomes


def finished_records(runs: list[PlannedRun], outcomes: dict[PlannedRun, Outcome]) -> list[tuple[PlannedRun, dict]]:
    """Each finished run of ``runs`` with its record, in the plan's order: the record of a run trained now from its
    outcome, of one finished earlier (skipped) from its folder; failed runs are left out."""
    return [(run, outcomes[run].result if run in outcomes else records.read_result(run.folder)) for run in runs
            if run.finished or outcomes[run].result is not None]
