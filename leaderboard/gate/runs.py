"""The gate's runs: measuring a configuration (in worker processes or here), writing a baseline (``update``) and
checking against one (``check``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import os
import shlex
import tempfile
import time
from pathlib import Path


from approximators import METHODS, get_method, resolve_config
from bench import drift, executors
from bench.budget import DEFAULT_MAX_EPOCHS, check_planned_epochs
from bench.errors import BenchError, FailedElsewhere, cannot_write, shown
from bench.progress import Progress, run_title
from bench.arguments import SEED_LIMIT
from bench.runner import RunSpec, environment
from bench.tasks import DEFAULT_TASKS, get_task
from leaderboard.ranking import STD_DDOF
from leaderboard.store import OVERALL_BLOCK
from bench.io import atomic_write_bytes, file_to_write, json_bytes
from reference.store import load_reference
from leaderboard.gate.baseline import (BASELINE_FORMAT, DEFAULT_SEEDS, EVERY_METHOD, baseline_sources, checked_budget,
                                      load_baseline, vet_sources)
from leaderboard.gate.statistics import (BUDGET_FIELDS, PAIRED_LIMIT, SEED_FLOOR, Report, checked_tolerance, compare,
                                        numerics_changes_since, summarise)


def measure(tasks_of: dict[str, list[str]], seeds: list[int], budgets: dict[str, float],
            settings: dict[str, dict[str, str]] | None = None, sources: dict[str, str] | None = None,
            workers: int = 1, threads: int = 1, quiet: bool = False, kernels: dict[str, str] | None = None) -> dict:
    """Runs each method on its tasks (``{method: [task, ...]}``) with its budget, its ``settings`` (``--set``
    values; default none) and loaded from its ``sources`` entry (default its name):
    {method: {task: [per seed {"metrics": {block: {metric: value}}, "epochs_used", "test_passes"}]}}.

    ``workers`` > 1: the runs are shared out to that many spawned processes of ``threads`` torch threads each
    (:func:`bench.executors.run_in_workers`, as ``sweep --workers`` runs them). Each run seeds itself, so its result
    is the same bits wherever it runs; the first failure is reported once the runs under way have ended. Progress:
    a bar of runs done and, for runs in this process, one of the current run's epochs (:class:`bench.progress.Progress`:
    on a terminal only, none with ``quiet``). ``kernels``: variables that choose torch's kernels
    (:data:`bench.executors.OTHER_KERNELS`), set in worker processes (one at least) before torch loads."""
    settings, sources = settings or {}, sources or {}
    with tempfile.TemporaryDirectory(prefix="bdl-bench-check-") as out:
        specs = {(method, task, seed): RunSpec(task=task, method=sources.get(method, method), budget=budgets[method],
                                               seed=seed, out=Path(out),
                                               overrides=tuple(settings.get(method, {}).items()))
                 for method, tasks in tasks_of.items() for task in tasks for seed in seeds}
        with Progress(len(specs), quiet, "check") as progress:
            results = _measured(specs, workers, threads, progress, kernels)
    measured: dict = {}
    for (method, task, _), result in results.items():
        measured.setdefault(method, {}).setdefault(task, []).append(
            {"metrics": {OVERALL_BLOCK: result["metrics"], **result["metrics_by_block"]},
             **{name: result[name] for name in BUDGET_FIELDS}})
    return measured


def _measured(specs: dict[tuple, RunSpec], workers: int, threads: int, progress: Progress,
              kernels: dict[str, str] | None = None) -> dict:
    """Every spec's result, in the order of ``specs`` (the seeds' order), or the first failure as the process that
    ran it described it; each finished run is counted on ``progress``. With one worker, one run after another
    (:func:`bench.executors.run_in_process`: a built-in method's in this process, someone else's in a process of its
    own, so that whatever ends its code, ``os._exit``, a crash, a ``KeyboardInterrupt`` of its own, a thread left
    running, is one line and never a silent exit of the gate), and the first failure ends the measurement; with
    more, in ``workers`` processes (:func:`bench.executors.run_in_workers`), the runs under way finishing first."""
    keys = {id(spec): key for key, spec in specs.items()}
    done, failures = {}, []

    def title(spec: RunSpec) -> str:
        method, task, seed = keys[id(spec)]
        return run_title(task, method, spec.budget, seed)

    def finished(spec: RunSpec, outcome) -> None:
        progress.finished(title(spec), outcome.result is None)
        if outcome.result is None:
            failures.append(outcome)
            if workers == 1:
                raise FailedElsewhere(outcome.exit_code, outcome.failure)
        else:
            done[keys[id(spec)]] = outcome.result

    if workers > 1 or kernels:
        executors.run_in_workers(list(specs.values()), workers, threads, finished, kernels=kernels)
    else:
        executors.run_in_process(list(specs.values()), threads, finished,
                                 lambda spec: progress.epochs(title(spec), spec.budget))
    if failures:
        raise FailedElsewhere(failures[0].exit_code, failures[0].failure)
    return {key: done[key] for key in specs}


def _loaded(specs: list[str]) -> dict[str, tuple[str, type]]:
    """{name: (how it was named, class)} for each method named as ``--method`` takes it (one line for any
    that cannot be loaded, or for two that are one method)."""
    loaded: dict[str, tuple[str, type]] = {}
    for spec in specs:
        method = get_method(spec)
        if method.name in loaded:
            raise BenchError(f"--method names {method.name!r} twice ({loaded[method.name][0]} and {spec})")
        loaded[method.name] = (spec, method)
    return loaded


def _budget_of(method: type, given: float | None) -> float:
    """The budget ``method`` is measured with: the one given, else its ``check_budget`` (a user's class may
    declare anything there, so it is checked like a budget on the command line)."""
    return given if given is not None else checked_budget(method.check_budget, f"{method.name}'s check_budget")


def _by_name(option: str, values: dict, aliases: dict[str, str]) -> dict:
    """``values`` of ``option`` keyed by method names (each given by name or as --method named it); the value
    for every method is left out."""
    by_name: dict = {}
    for key, value in values.items():
        if key == EVERY_METHOD:
            continue
        if key not in aliases:
            raise BenchError(f"{option} names {key}, which this update does not measure "
                             f"({', '.join(dict.fromkeys(aliases.values()))}); add it to --method")
        if aliases[key] in by_name:
            raise BenchError(f"{option} given twice for {aliases[key]}")
        by_name[aliases[key]] = value
    return by_name


def _check_writable(path: Path) -> None:
    """One line, before minutes of measuring, unless the baseline can be written where asked: its folder takes a
    new file (the atomic write's temporary) and an existing baseline is writable."""
    path = file_to_write(path, "the baseline")  # a folder, FIFO or device there: refused before measuring
    folder = path.parent if str(path.parent) else Path(".")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".bdl-bench-write-test-"):
            pass
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(errno.EACCES, "permission denied", str(path))
    except FileNotFoundError:
        raise BenchError(f"cannot write the baseline {path}: the folder {folder} does not exist; create it first") \
            from None
    except OSError as error:
        raise cannot_write(f"cannot write the baseline {path}", error,
                           "nothing was measured, choose a writable path") from None


def update(path: Path, methods: list[str] | None = None, tasks: list[str] | None = None,
           seeds: int | None = None, budgets: dict[str, float] | None = None,
           settings: dict[str, dict[str, str]] | None = None, max_epochs: float = DEFAULT_MAX_EPOCHS,
           workers: int = 1, threads: int = 1, quiet: bool = False) -> dict:
    """Measures the configuration and writes the baseline file atomically; returns its contents (``workers``,
    ``threads`` and ``quiet``: as :func:`measure` takes them). The epochs it would
    train (budgets x tasks x seeds) are planned first: beyond ``max_epochs`` (``--max-epochs``) it is one line
    before anything is loaded or trained.

    ``methods``: as ``--method`` takes them; default the methods ``budgets`` or ``settings`` name, else every
    built-in one. ``budgets`` and ``settings`` (as :func:`budget_options` and :func:`setting_options` return
    them): per method or for every method; default each method's ``check_budget`` and its defaults.

    Without methods and tasks the file is rewritten whole. With either, an existing baseline is extended:
    the measured (method, task) pairs replace theirs and every other pair is kept, which is sound only when
    the existing file was measured with the same seeds in this environment, and each method measured again
    with the budget and settings of its tasks left as they were (else one line says what to do).
    """
    _check_writable(Path(path))
    budgets, settings = dict(budgets or {}), dict(settings or {})
    named = [method for method in [*budgets, *settings] if method != EVERY_METHOD]
    partial = bool(methods or named or tasks)
    specs = list(dict.fromkeys(methods or named or METHODS))
    tasks = list(dict.fromkeys(get_task(task).name for task in tasks or DEFAULT_TASKS))
    n_seeds = DEFAULT_SEEDS if seeds is None else seeds
    if not STD_DDOF < n_seeds <= SEED_LIMIT:  # seeds 0..n-1 lie in [0, 2^63)
        raise BenchError(f"--seeds must be at least {STD_DDOF + 1} to measure a standard deviation and at most 2^63, "
                         f"got {shown(n_seeds)}")
    # Someone else's code is first loaded in a process of its own, where whatever ends it is one line, its failure.
    executors.check_isolated(specs, [(task, ()) for task in tasks], threads)
    loaded = _loaded(specs)
    aliases = {alias: name for name, (spec, _) in loaded.items() for alias in (name, spec)}
    own_budgets, own_settings = _by_name("--budget", budgets, aliases), _by_name("--set", settings, aliases)
    sources = {name: spec for name, (spec, _) in loaded.items()}
    budget_of = {name: _budget_of(method, own_budgets.get(name, budgets.get(EVERY_METHOD)))
                 for name, (_, method) in loaded.items()}
    passes = 2 if executors.other_kernels_differ() else 1  # natively, then with another CPU kind's kernels
    check_planned_epochs(sum(budget_of.values()) * len(tasks) * n_seeds * passes, max_epochs, f"updating {path}")
    settings_of = {name: {**settings.get(EVERY_METHOD, {}), **own_settings.get(name, {})} for name in loaded}
    for task in tasks:
        load_reference(get_task(task))
        for name, (_, method) in loaded.items():
            resolve_config(method, task, settings_of[name])  # an unknown or out-of-bounds setting fails before any run
    earlier = _extendable(path, n_seeds) if partial and Path(path).exists() else None
    if earlier is not None:
        _check_kept_tasks(path, earlier, tasks, budget_of, settings_of)
    started = time.perf_counter()
    measured = measure({name: tasks for name in loaded}, list(range(n_seeds)), budget_of, settings_of, sources,
                       workers, threads, quiet)
    # The same runs with another CPU kind's kernels: how far each metric's round-off grows, what a check off this
    # CPU allows it (leaderboard.gate.statistics.seed_allowance). None where this machine has no other kernels.
    other = (measure({name: tasks for name in loaded}, list(range(n_seeds)), budget_of, settings_of, sources,
                     workers, threads, quiet, kernels=executors.OTHER_KERNELS) if passes == 2 else None)
    runs, results = summarise(measured, other)
    command = shlex.join([
        "python", "-m", "bench", "check", "--update", "--baseline", str(path), "--method", *specs,
        *[part for task in tasks for part in ("--task", task)], "--seeds", str(n_seeds),
        *[part for method, epochs in budgets.items() for part in ("--budget", _qualified(method, "=", f"{epochs:g}"))],
        *[part for method, values in settings.items() for key, value in values.items()
          for part in ("--set", _qualified(method, ".", f"{key}={value}"))]])
    seconds = time.perf_counter() - started
    commands, command_seconds = [command], [round(seconds, 1)]
    wall_seconds = seconds
    names = list(loaded)
    if earlier is not None:
        configuration = earlier["configuration"]
        for method, by_task in earlier["results"].items():
            for task in by_task:
                if task not in results.get(method, {}):
                    results.setdefault(method, {})[task] = by_task[task]
                    runs.setdefault(method, {})[task] = earlier["runs"][method][task]
        names = [*configuration["methods"], *(m for m in names if m not in configuration["methods"])]
        tasks = [*configuration["tasks"], *(t for t in tasks if t not in configuration["tasks"])]
        budget_of = {**configuration["budgets"], **budget_of}
        settings_of = {**configuration.get("settings", {}), **settings_of}
        sources = {**configuration.get("sources", {}), **sources}
        # The same command again re-measures exactly what it measured before: it replaces its earlier entry and time
        # (a baseline without "command_seconds" can only add its total; "command": files before merging).
        earlier_commands = earlier.get("commands", [earlier.get("command")])
        earlier_seconds = earlier.get("command_seconds")
        if earlier_seconds is None:
            wall_seconds += earlier["wall_seconds"]
            kept = [(c, None) for c in earlier_commands]
        else:
            kept = [(c, s) for c, s in zip(earlier_commands, earlier_seconds) if _spelt_now(c) != command]
            wall_seconds += sum(s for _, s in kept)
        commands = [*(c for c, _ in kept), command]
        command_seconds = None if earlier_seconds is None else [*(s for _, s in kept), round(seconds, 1)]
    baseline = {
        "format": BASELINE_FORMAT,
        "commands": commands,
        **({} if command_seconds is None else {"command_seconds": command_seconds}),
        "configuration": {"methods": names, "tasks": tasks, "seeds": list(range(n_seeds)), "budgets": budget_of,
                          "settings": settings_of, "sources": sources, "device": "cpu",
                          "method_settings": "each method's defaults for the task, then its settings"},
        "std_ddof": STD_DDOF,
        "rule": RULE,
        "environment": environment(),
        "other_kernels": None if other is None else executors.OTHER_KERNELS,
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": round(wall_seconds, 1),
        "runs": runs,
        "results": results,
    }
    atomic_write_bytes(Path(path), json_bytes(baseline), "the baseline")
    return baseline


RULE = (f"budget fields always exact; exact per-seed metrics where the baseline's numerics match (versions, CPU, "
        f"threads, device); otherwise each metric seed by seed within max({SEED_FLOOR:g} sd, "
        f"{drift.OTHER_KERNELS_FACTOR:g} x what other kernels moved it, round-off) where that is at most "
        f"{PAIRED_LIMIT:g} sd, else a primary metric on the whole test set by |z| above the Bonferroni-t tolerance, z "
        "in standard errors of the difference of means with the baseline's sd")
"""How a baseline is compared, as it says itself."""


def _spelt_now(command: str) -> str:
    """A stored update command as :func:`update` writes it now: ``--methods``, the option's earlier name, is
    ``--method`` (the same command measures the same configuration whichever name it used)."""
    return shlex.join("--method" if part == "--methods" else part for part in shlex.split(command))


def _qualified(method: str, separator: str, value: str) -> str:
    """A ``--budget`` or ``--set`` value as the command line takes it: for one method, or for every method."""
    return value if method == EVERY_METHOD else f"{method}{separator}{value}"


def _check_kept_tasks(path: Path, earlier: dict, tasks: list[str], budgets: dict[str, float],
                      settings: dict[str, dict[str, str]]) -> None:
    """One line if a method measured again would keep tasks of ``earlier`` measured with another budget or
    other settings than the configuration now stored for it (its check would rerun them differently)."""
    configuration = earlier["configuration"]
    for name in budgets:
        kept = [task for task in earlier["results"].get(name, {}) if task not in tasks]
        before = (configuration["budgets"].get(name), configuration.get("settings", {}).get(name, {}))
        if kept and before != (budgets[name], settings[name]):
            raise BenchError(
                f"{path} measured {name} on {', '.join(kept)} with budget {before[0]:g} and settings "
                f"{before[1] or 'none'}, this update with budget {budgets[name]:g} and settings "
                f"{settings[name] or 'none'}: measure those tasks again too ({' '.join(f'--task {t}' for t in kept)}) "
                f"or keep the budget and settings")


def _extendable(path: Path, n_seeds: int) -> dict:
    """The existing baseline at ``path`` if a partial update may extend it, else a one-line error."""
    earlier = load_baseline(path)
    whole = f"rewrite it whole with `python -m bench check --update --baseline {path}` (no --method or --task)"
    if len(earlier["configuration"]["seeds"]) != n_seeds:
        raise BenchError(f"{path} was measured with {len(earlier['configuration']['seeds'])} seeds, this update "
                         f"with {n_seeds}: one baseline cannot mix them; pass --seeds "
                         f"{len(earlier['configuration']['seeds'])} or {whole}")
    changed = sorted(numerics_changes_since(earlier))
    if changed:
        raise BenchError(f"{path} was measured in another environment ({', '.join(changed)} differ): extending it "
                         f"would mix environments and break its exact check; {whole}")
    return earlier


def _subset(asked: list[str] | None, available: list[str], what: str, path: Path) -> list[str]:
    if not asked:
        return list(available)
    missing = [a for a in asked if a not in available]
    if missing:
        raise BenchError(f"{path} has no baseline for {what} {', '.join(missing)}; measure it with "
                         f"`python -m bench check --update --baseline {path} ...`")
    return list(asked)


def _load_gated(path: Path, name: str, source: str) -> None:
    """One line unless ``source`` (as the baseline says to load ``name``) loads the method named ``name``."""
    try:
        method = get_method(source)
    except BenchError as error:
        raise BenchError(f"{path} gates the method {name!r}, which cannot be loaded here ({error}); install the "
                         "package that provides it, or put its module on the Python path") from None
    if method.name != name:
        raise BenchError(f"{path} gates the method {name!r}, but {source} now loads a method named {method.name!r}")


def _load_gated_elsewhere(path: Path, methods: list[str], sources: dict[str, str], threads: int) -> None:
    """:func:`_load_gated` for those of ``methods`` that are someone else's code, first in a process of its own: a
    module that ends its process when imported is one line, its failure, not a silent end of the gate."""
    foreign = [method for method in methods if executors.isolates(sources[method])]
    if not foreign:
        return
    with executors.Isolated(sources[foreign[0]], threads) as isolated:
        for method in foreign:
            outcome = isolated.call(_load_gated, path, method, sources[method])
            if outcome.exit_code:
                raise FailedElsewhere(outcome.exit_code, outcome.failure)


def check(path: Path, methods: list[str] | None = None, tasks: list[str] | None = None,
          tolerance: float | None = None, statistical: bool = False,
          max_epochs: float = DEFAULT_MAX_EPOCHS, workers: int = 1, threads: int = 1,
          seeds: int | None = None, quiet: bool = False) -> Report:
    """Reruns the baseline's configuration for ``methods`` x ``tasks`` (default: all of the baseline's) and compares.
    ``methods`` by name or as the baseline's update named them (``package.module:ClassName``); ``workers`` and
    ``threads`` (and ``quiet``) as :func:`measure` takes them. ``seeds``: only the baseline's first ``seeds`` seeds. In exact mode
    training is deterministic, so a change in what a method computes moves every seed's bits and a few seeds show
    it; off the baseline's CPU each seed is compared within what another CPU kind moves it, and the test of means
    that remains for chaotic configurations is weaker with fewer seeds (the package's docstring)."""
    baseline = load_baseline(path)
    tolerance = checked_tolerance(tolerance)
    configuration = baseline["configuration"]
    if seeds is not None:
        held = len(configuration["seeds"])
        if seeds > held:
            raise BenchError(f"--seeds {seeds}: {path} holds {held} seeds; a check reruns at most those")
    sources = baseline_sources(baseline)
    aliases = {**{source: name for name, source in sources.items()}, **{name: name for name in sources}}
    trusted = methods
    methods = _subset([aliases.get(m, m) for m in methods or []], list(baseline["results"]), "method", path)
    vet_sources(sources, methods, path, trusted)
    tasks = _subset(tasks, configuration["tasks"], "task", path)
    _load_gated_elsewhere(path, methods, sources, threads)
    for method in methods:
        _load_gated(path, method, sources[method])
    started = time.perf_counter()
    tasks_of = {m: [t for t in tasks if t in baseline["results"][m]] for m in methods}
    tasks_of = {m: ts for m, ts in tasks_of.items() if ts}
    if not tasks_of:
        raise BenchError(f"{path} holds no results for {', '.join(methods)} on {', '.join(tasks)}: the check would "
                         "compare nothing; choose methods and tasks it measured (`python -m bench check --baseline "
                         f"{path}` without --methods and --task checks all of them)")
    rerun = configuration["seeds"][:seeds]  # all of them without --seeds
    check_planned_epochs(sum(configuration["budgets"][m] * len(ts) for m, ts in tasks_of.items())
                         * len(rerun), max_epochs, f"checking {path}")
    measured = measure(tasks_of, rerun, configuration["budgets"], configuration.get("settings"),
                       sources, workers, threads, quiet)
    report = compare(baseline, measured, tolerance, statistical)
    return dataclasses.replace(report, wall_seconds=time.perf_counter() - started)
