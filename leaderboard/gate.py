"""The CI fidelity gate: rerun a small fixed configuration and compare it with a committed baseline.

``update`` runs each method on each task (default: the embedded MLP tasks, :data:`bench.tasks.DEFAULT_TASKS`;
a later update with ``--task`` adds others for the methods it names) for seeds 0..n-1 (CPU) and writes the
baseline file: the configuration, the environment (package versions, platform, CPU, threads) and, per method and task,
every seed's ``epochs_used`` and ``test_passes`` and every seed's value of every metric of every test
block, with their mean and standard deviation (ddof = 1). The configuration is what the command line
chose: the methods (built-in, an installed plugin's name, or ``package.module:ClassName``; default
every built-in one), the tasks (default the embedded MLP tasks), the number of seeds, each method's budget
(``--budget [METHOD=]EPOCHS``; default its ``check_budget``) and settings (``--set [METHOD.]KEY=VALUE``;
default its defaults for the task). The file stores all of it, and how to load each method, so that a
plain ``check --baseline FILE`` reruns exactly that configuration.

``check`` reruns the baseline's configuration (or a subset of its methods and tasks) and compares:

1. **Budget, always exactly.** Every seed's ``epochs_used`` and ``test_passes`` must equal the
   baseline's: a meter that charges half of each batch changes no metric but fails here.
2. **Exact mode**, when what decides round-off is the baseline's (:data:`bench.runner.NUMERICS`: library
   versions, CPU, torch threads, device; not the kernel build or the core count): such runs are
   deterministic, so every seed's every metric must reproduce within float round-off
   (``EXACT_TOLERANCE`` x max(1, |value|)); the first value that moved is reported. Any change to what
   a method computes, in either direction, fails: accept a deliberate one with ``--update``.
3. **Statistical mode**, otherwise (or with ``--statistical``): another machine or library version
   behaves like fresh seeds. Per metric, z = (mean now - mean baseline) / SE, the pooled two-sample t
   statistic: with n_b baseline seeds and n_m seeds measured now (all of the baseline's, or its first
   ``--seeds``), each s floored (below),
   s_p^2 = ((n_b - 1) s_baseline^2 + (n_m - 1) s_now^2) / (n_b + n_m - 2) and
   SE = s_p sqrt(1 / n_b + 1 / n_m) (for n_b = n_m = n, sqrt((s_baseline^2 + s_now^2) / n)). Fidelity
   metrics (``FIDELITY_METRICS``) are flagged when |z| exceeds the tolerance in **either** direction:
   at small budgets a large "improvement" is as suspicious as a loss. Other metrics are flagged when
   worse. The default tolerance is the Bonferroni bound for a family-wise false-alarm rate
   ``FAMILY_FALSE_ALARM`` over the m metrics compared, under Student's t with n_b + n_m - 2 degrees of
   freedom: t^-1(1 - alpha / (2 m)). Fewer seeds now make a weaker check (a larger SE and tolerance)
   at the same false-alarm rate: CI, which reruns 2 seeds to stay within its time, is exact on the baseline's
   machine and this weaker statistical check on any other. A seed measured now that repeats a baseline
   seed under other round-off only correlates the two means, which shrinks the true SE of their
   difference: the test stays conservative.

The floor of a standard deviation only keeps a (near-)zero spread from flagging any change at all:

- ``agreement``, ``accuracy``: 1 / (test points in the block), the smallest change the metric can show;
- other metrics the reference's noise floor publishes (``total_variation``, ``w1``, ``w2``,
  ``competition_w``): ``NOISE_FLOOR_FRACTION`` of the noise floor's distance from a perfect score,
  a fraction of the Monte Carlo error of the reference itself;
- the rest (``nll``, ``ece``, ``rmse``, ``log_likelihood``, or any metric when the reference
  publishes no noise floor): ``NUMERIC_FLOOR`` x max(1, |mean|), above float64 summation round-off.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
import math
import os
import shlex
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import scipy.stats
from tabulate import tabulate

from approximators import METHOD_NAME, METHODS, get_method, resolve_config
from bench import executors, records
from bench.budget import DEFAULT_MAX_EPOCHS, check_budget_size, check_planned_epochs
from bench.errors import BenchError, DamagedFile, FailedElsewhere, cannot_write, shown
from bench.arguments import NUMBER, SEED_LIMIT
from bench.runner import RunSpec, environment, numerics_changes, run
from bench.tasks import DEFAULT_TASKS, all_task_names, get_task
from leaderboard.ranking import STD_DDOF, higher_is_better, mean_std
from leaderboard.store import OVERALL_BLOCK
from bench.io import atomic_write_bytes, file_to_write, json_bytes, read_json
from reference.store import load_reference

BASELINE_FORMAT = 2
DEFAULT_SEEDS = 10
"""Seeds per (method, task): with 10, the statistical tolerance is about 2.3 seed standard deviations."""
FAMILY_FALSE_ALARM = 0.01
"""Probability that an unchanged method on another machine fails the statistical check (Bonferroni bound)."""
EXACT_TOLERANCE = 1e-12
"""Exact mode: |now - baseline| <= this x max(1, |baseline|) (float64 summation round-off, nothing more)."""
FIDELITY_METRICS = frozenset({"agreement", "total_variation", "w1", "w2", "competition_w"})
"""Distances to the reference: flagged in both directions by the statistical check."""
BUDGET_FIELDS = ("epochs_used", "test_passes")
COUNT_METRICS = {"agreement", "accuracy"}
NOISE_FLOOR_FRACTION = 0.1
NUMERIC_FLOOR = 1e-6


def statistical_tolerance(n_baseline: int, n_now: int, n_compared: int) -> float:
    """The default tolerance in standard errors: two-sided Bonferroni over ``n_compared`` metrics, t with
    n_baseline + n_now - 2 degrees of freedom (the pooled variance's)."""
    return float(scipy.stats.t.ppf(1 - FAMILY_FALSE_ALARM / (2 * max(n_compared, 1)), n_baseline + n_now - 2))


def _checked_tolerance(tolerance: float | None) -> float | None:
    if tolerance is not None and not (math.isfinite(tolerance) and tolerance > 0):
        raise BenchError(f"--tolerance must be a positive number of standard errors, got {tolerance:g}")
    return tolerance


def measure(tasks_of: dict[str, list[str]], seeds: list[int], budgets: dict[str, float],
            settings: dict[str, dict[str, str]] | None = None, sources: dict[str, str] | None = None,
            workers: int = 1, threads: int = 1) -> dict:
    """Runs each method on its tasks (``{method: [task, ...]}``) with its budget, its ``settings`` (``--set``
    values; default none) and loaded from its ``sources`` entry (default its name):
    {method: {task: [per seed {"metrics": {block: {metric: value}}, "epochs_used", "test_passes"}]}}.

    ``workers`` > 1: the runs are shared out to that many spawned processes of ``threads`` torch threads each
    (:func:`bench.executors.run_in_workers`, as ``sweep --workers`` runs them). Each run seeds itself, so its result
    is the same bits wherever it runs; the first failure is reported once the runs under way have ended."""
    settings, sources = settings or {}, sources or {}
    with tempfile.TemporaryDirectory(prefix="bdl-bench-check-") as out:
        specs = {(method, task, seed): RunSpec(task=task, method=sources.get(method, method), budget=budgets[method],
                                               seed=seed, out=Path(out),
                                               overrides=tuple(settings.get(method, {}).items()))
                 for method, tasks in tasks_of.items() for task in tasks for seed in seeds}
        if workers > 1:
            results = _measured_in_workers(specs, workers, threads)
        else:
            results = {key: run(spec) for key, spec in specs.items()}
    measured: dict = {}
    for (method, task, _), result in results.items():
        measured.setdefault(method, {}).setdefault(task, []).append(
            {"metrics": {OVERALL_BLOCK: result["metrics"], **result["metrics_by_block"]},
             **{name: result[name] for name in BUDGET_FIELDS}})
    return measured


def _measured_in_workers(specs: dict[tuple, RunSpec], workers: int, threads: int) -> dict:
    """Every spec's result in ``workers`` processes, in the order of ``specs`` (the seeds' order), or the first
    failure as its process described it."""
    keys = {id(spec): key for key, spec in specs.items()}
    done, failures = {}, []

    def finished(spec: RunSpec, outcome) -> None:
        if outcome.result is None:
            failures.append(outcome)
        else:
            done[keys[id(spec)]] = outcome.result

    executors.run_in_workers(list(specs.values()), workers, threads, finished)
    if failures:
        raise FailedElsewhere(failures[0].exit_code, failures[0].failure)
    return {key: done[key] for key in specs}


def spread_floor(metric: str, block_size: int, noise_floor: dict | None, mean: float) -> tuple[float, str]:
    """The smallest standard deviation the gate uses for ``metric`` on a block of ``block_size`` test points, and why."""
    if metric in COUNT_METRICS:
        return 1.0 / block_size, f"1/{block_size} test points"
    floor_value = (noise_floor or {}).get(metric)
    if floor_value is not None and math.isfinite(floor_value):
        return NOISE_FLOOR_FRACTION * abs(floor_value), f"{NOISE_FLOOR_FRACTION:g} x reference noise floor"
    return NUMERIC_FLOOR * max(1.0, abs(mean)), f"{NUMERIC_FLOOR:g} x max(1, |mean|)"


def _block_sizes(task_name: str) -> dict[str, int]:
    task = get_task(task_name)
    return {OVERALL_BLOCK: task.n_test, **{b.name: b.stop - b.start for b in task.test_blocks}}


def summarise(measured: dict) -> tuple[dict, dict]:
    """(runs, results): per method and task every seed's budget fields; per method, task, block and
    metric the seeds' values, mean, std (ddof 1) and the floor of the std."""
    runs: dict = {}
    results: dict = {}
    for method, by_task in measured.items():
        for task, per_seed in by_task.items():
            runs.setdefault(method, {})[task] = {name: [seed[name] for seed in per_seed] for name in BUDGET_FIELDS}
            sizes = _block_sizes(task)
            noise_floor = load_reference(get_task(task)).metadata.get("noise_floor") or {}
            for block, metrics in per_seed[0]["metrics"].items():
                for metric in metrics:
                    values = [seed["metrics"][block][metric] for seed in per_seed]
                    mean, std = mean_std(values)
                    floor, floor_rule = spread_floor(metric, sizes[block], noise_floor.get(block), mean)
                    results.setdefault(method, {}).setdefault(task, {}).setdefault(block, {})[metric] = {
                        "values": values, "mean": mean, "std": std, "floor": floor, "floor_rule": floor_rule,
                        "floor_used": floor > std}
    return runs, results


EVERY_METHOD = ""
"""The key of a ``--budget`` or ``--set`` value given without a method: it applies to every method measured."""


def budget_options(texts: list[str] | None) -> dict[str, float]:
    """``--budget`` values, ``EPOCHS`` or ``METHOD=EPOCHS``: {method or :data:`EVERY_METHOD`: epochs}."""
    budgets: dict[str, float] = {}
    for text in texts or []:
        method, _, epochs = text.rpartition("=")
        if not NUMBER.fullmatch(epochs):
            raise BenchError(f"--budget {text}: write EPOCHS (every method) or METHOD=EPOCHS, the epochs in digits")
        value = float(epochs)
        if method in budgets:
            raise BenchError(f"--budget given twice for {method or 'every method'}")
        budgets[method] = _checked_budget(value, f"--budget {text}")
    return budgets


def setting_options(texts: list[str] | None) -> dict[str, dict[str, str]]:
    """``--set`` values, ``KEY=VALUE`` or ``METHOD.KEY=VALUE``: {method or :data:`EVERY_METHOD`: {key: value}}.
    A setting's name has no dot, so the last dot before ``=`` ends the method (``pkg.mod:Class.lr=0.1``)."""
    settings: dict[str, dict[str, str]] = {}
    for text in texts or []:
        target, equals, value = text.partition("=")
        method, _, key = target.rpartition(".")
        if not equals or not key:
            raise BenchError(f"--set {text}: write KEY=VALUE (every method) or METHOD.KEY=VALUE")
        if key in settings.get(method, {}):
            raise BenchError(f"--set {target} given twice")
        settings.setdefault(method, {})[key] = value
    return settings


def _checked_budget(value: object, origin: str) -> float:
    try:
        return check_budget_size(value)
    except BenchError as error:
        raise BenchError(f"{origin}: {error}") from None


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
    return given if given is not None else _checked_budget(method.check_budget, f"{method.name}'s check_budget")


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
           workers: int = 1, threads: int = 1) -> dict:
    """Measures the configuration and writes the baseline file atomically; returns its contents (``workers`` and
    ``threads``: as :func:`measure` takes them). The epochs it would
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
    loaded = _loaded(specs)
    aliases = {alias: name for name, (spec, _) in loaded.items() for alias in (name, spec)}
    own_budgets, own_settings = _by_name("--budget", budgets, aliases), _by_name("--set", settings, aliases)
    sources = {name: spec for name, (spec, _) in loaded.items()}
    budget_of = {name: _budget_of(method, own_budgets.get(name, budgets.get(EVERY_METHOD)))
                 for name, (_, method) in loaded.items()}
    check_planned_epochs(sum(budget_of.values()) * len(tasks) * n_seeds, max_epochs, f"updating {path}")
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
                       workers, threads)
    runs, results = summarise(measured)
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
        "rule": "budget fields always exact; exact per-seed metrics where the baseline's numerics match (versions, CPU, "
                "threads, device); otherwise "
                "|z| (fidelity metrics) or z (others, worse) above the Bonferroni-t tolerance, z in standard errors "
                "of the difference of means",
        "environment": environment(),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": round(wall_seconds, 1),
        "runs": runs,
        "results": results,
    }
    atomic_write_bytes(Path(path), json_bytes(baseline), "the baseline")
    return baseline


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
    changed = sorted(_numerics_changes(earlier))
    if changed:
        raise BenchError(f"{path} was measured in another environment ({', '.join(changed)} differ): extending it "
                         f"would mix environments and break its exact check; {whole}")
    return earlier


def load_baseline(path: Path) -> dict:
    try:
        baseline = read_json(Path(path), "baseline", f"create it again with `python -m bench check --update --baseline {path}`")
    except FileNotFoundError:
        raise BenchError(f"no baseline file {path}; create one with `python -m bench check --update --baseline {path}`") \
            from None
    except (OSError, ValueError) as error:
        raise BenchError(f"cannot read baseline {path}: {error}") from None
    if not isinstance(baseline, dict) or baseline.get("format") != BASELINE_FORMAT:
        raise BenchError(f"{path}: not a baseline file of format {BASELINE_FORMAT}; rewrite it with --update")
    _check_configuration(baseline, path)
    return baseline


def _check_configuration(baseline: dict, path: Path) -> None:
    """What a baseline asks to run and what it compares with, type- and range-checked before anything trains: one
    line naming the field (a baseline is a file anyone can edit, and a check that compares nothing must not pass)."""
    def refuse(what: str) -> BenchError:
        return BenchError(f"{path}: {what}; rewrite it with `python -m bench check --update --baseline {path}`")

    configuration = baseline.get("configuration")
    if not isinstance(configuration, dict) or not all(isinstance(baseline.get(k), dict) for k in ("results", "runs")):
        raise refuse("its configuration, results or runs are missing or not objects")
    seeds = configuration.get("seeds")
    if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) and not isinstance(s, bool)
                                                       and 0 <= s < SEED_LIMIT for s in seeds)
            and len(set(seeds)) == len(seeds)):
        raise refuse(f"its seeds must be distinct whole numbers in [0, 2^63), at least one; got {str(seeds)[:80]}")
    if len(seeds) <= STD_DDOF:
        raise refuse(f"it has {len(seeds)} seed(s); a standard deviation needs at least {STD_DDOF + 1}")
    for listed in ("methods", "tasks"):
        names = configuration.get(listed)
        if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)
                and len(set(names)) == len(names)):
            raise refuse(f"its {listed} must be a non-empty list of distinct names")
    unnamed = [name for name in configuration["methods"] if not METHOD_NAME.fullmatch(name)]
    if unnamed:
        raise refuse(f"{shown(unnamed[0])} is not a method's name")
    unknown = [task for task in configuration["tasks"] if task not in all_task_names()]
    if unknown:
        raise refuse(f"{shown(unknown[0])} is not a task (tasks: {', '.join(all_task_names())})")
    budgets = configuration.get("budgets")
    if not isinstance(budgets, dict) or set(budgets) != set(configuration["methods"]):
        raise refuse("its budgets must give one budget per method")
    for method, budget in budgets.items():
        _checked_budget(budget, f"{path}: the budget of {method}")
    settings = configuration.get("settings", {})
    if not (isinstance(settings, dict) and all(isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str)
                                                                          for k, x in v.items())
                                               for v in settings.values())):
        raise refuse("its settings must map each method to --set values as text")
    sources = configuration.get("sources", {})
    if not (isinstance(sources, dict) and all(isinstance(v, str) and v for v in sources.values())):
        raise refuse("its sources must map methods to how --methods named them")
    if not isinstance(baseline.get("environment"), dict):
        raise refuse("its environment is missing or not an object")
    try:
        records.check_environment(baseline["environment"], path)
    except DamagedFile as error:
        raise refuse(str(error).removeprefix(f"{path}: ")) from None
    _check_measurements(baseline, path, refuse)


def _check_measurements(baseline: dict, path: Path, refuse) -> None:
    """``results`` and ``runs``: every method and task of the configuration measured (and nothing else), each with
    every seed's budget fields and, per test block (the whole test set among them), at least one metric whose seeds'
    values are finite numbers whose mean and standard deviation are the ones stored."""
    configuration, results, runs = baseline["configuration"], baseline["results"], baseline["runs"]
    n_seeds = len(configuration["seeds"])
    if set(results) != set(configuration["methods"]) or set(runs) != set(results):
        raise refuse(f"its results and runs must hold exactly its methods ({', '.join(configuration['methods'])})")
    measured_tasks = set()
    for method, by_task in results.items():
        if not (isinstance(by_task, dict) and by_task and set(by_task) <= set(configuration["tasks"])
                and isinstance(runs[method], dict) and set(runs[method]) == set(by_task)):
            raise refuse(f"the results of {method} must hold one or more of its tasks, each with its runs")
        measured_tasks |= set(by_task)
        for task, blocks in by_task.items():
            where = f"{method} on {task}"
            budget_fields = runs[method][task]
            if not (isinstance(budget_fields, dict) and all(
                    isinstance(budget_fields.get(name), list) and len(budget_fields[name]) == n_seeds
                    and all(records.finite_number(v) and v >= 0 for v in budget_fields[name]) for name in BUDGET_FIELDS)):
                raise refuse(f"the runs of {where} must give {' and '.join(BUDGET_FIELDS)} for each of its {n_seeds} "
                             "seeds, as numbers >= 0")
            if not (isinstance(blocks, dict) and isinstance(blocks.get(OVERALL_BLOCK), dict)
                    and all(isinstance(metrics, dict) and metrics for metrics in blocks.values())):
                raise refuse(f"the results of {where} must hold the block {OVERALL_BLOCK!r} and metrics for every block")
            for block, metrics in blocks.items():
                for metric, stats in metrics.items():
                    if not (records.printable(block, records.MAX_NAME_CHARS)
                            and records.printable(metric, records.MAX_NAME_CHARS)):
                        raise refuse(f"the results of {where} name a block {shown(block)} or a metric {shown(metric)} "
                                     "that is not a name (printable text)")
                    _check_statistics(stats, n_seeds, f"{where}, block {block}, {metric}", refuse)
    missing = [task for task in configuration["tasks"] if task not in measured_tasks]
    if missing:
        raise refuse(f"no method's results hold its task {missing[0]}")


STORED_STATISTICS_TOLERANCE = 1e-9
"""A stored mean or standard deviation may differ from its seeds' values by this much relative (JSON keeps floats
exactly; the rest is room for another summation order)."""


def _check_statistics(stats, n_seeds: int, where: str, refuse) -> None:
    values = stats.get("values") if isinstance(stats, dict) else None
    if not (isinstance(values, list) and len(values) == n_seeds and all(map(records.finite_number, values))):
        raise refuse(f"{where}: its values must be {n_seeds} finite numbers, one per seed")
    if not all(records.finite_number(stats.get(key)) and stats[key] >= 0 for key in ("std", "floor")) \
            or not records.finite_number(stats.get("mean")):
        raise refuse(f"{where}: its mean, std and floor must be finite numbers (std and floor >= 0)")
    mean, std = mean_std(values)
    if not all(abs(stored - value) <= STORED_STATISTICS_TOLERANCE * max(1.0, abs(value))
               for stored, value in ((stats["mean"], mean), (stats["std"], std))):
        raise refuse(f"{where}: its mean {stats['mean']:.10g} and std {stats['std']:.10g} are not those of its values "
                     f"({mean:.10g}, {std:.10g})")


@dataclass(frozen=True)
class BudgetMismatch:
    method: str
    task: str
    seed: int
    field: str
    baseline: float
    now: float

    def row(self) -> dict:
        return {"method": self.method, "task": self.task, "seed": self.seed, "field": self.field,
                "baseline": f"{self.baseline:.10g}", "now": f"{self.now:.10g}"}


@dataclass(frozen=True)
class Move:
    """Exact mode: one seed's metric that no longer reproduces."""

    method: str
    task: str
    seed: int
    block: str
    metric: str
    baseline: float
    now: float

    def row(self) -> dict:
        return {"method": self.method, "task": self.task, "seed": self.seed, "block": self.block,
                "metric": self.metric, "baseline": f"{self.baseline:.12g}", "now": f"{self.now:.12g}",
                "change": f"{self.now - self.baseline:+.3g}"}


@dataclass(frozen=True)
class Finding:
    """Statistical mode: one metric's means, their standard error and the oriented z (positive = worse)."""

    method: str
    task: str
    block: str
    metric: str
    baseline_mean: float
    observed_mean: float
    standard_error: float

    @property
    def two_sided(self) -> bool:
        return self.metric in FIDELITY_METRICS

    @property
    def z(self) -> float:
        difference = self.observed_mean - self.baseline_mean
        return (-difference if higher_is_better(self.metric) else difference) / self.standard_error

    def flagged(self, tolerance: float) -> bool:
        return (abs(self.z) if self.two_sided else self.z) > tolerance

    def row(self) -> dict:
        return {"method": self.method, "task": self.task, "block": self.block, "metric": self.metric,
                "baseline": f"{self.baseline_mean:.5g}", "now": f"{self.observed_mean:.5g}",
                "SE": f"{self.standard_error:.3g}", "worse by (SE)": f"{self.z:+.2f}"}


@dataclass(frozen=True)
class Report:
    mode: str
    """``exact`` or ``statistical``."""
    tolerance: float
    budget_mismatches: list[BudgetMismatch]
    moves: list[Move] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    environment_changes: dict = field(default_factory=dict)
    n_compared: int = 0
    wall_seconds: float = 0.0
    seeds: tuple[int, int] = (0, 0)
    """Seeds measured now and seeds the baseline holds."""

    @property
    def flagged(self) -> list[Finding]:
        return [f for f in self.findings if f.flagged(self.tolerance)]

    @property
    def improvements(self) -> list[Finding]:
        """Metrics outside the fidelity set that improved beyond the tolerance: reported, not failed."""
        return [f for f in self.findings if not f.two_sided and -f.z > self.tolerance]

    @property
    def passed(self) -> bool:
        """Nothing moved, was flagged or charged differently, and something was compared: a gate that compared no
        metric has checked nothing, and fails."""
        return self.n_compared > 0 and not (self.budget_mismatches or self.moves or self.flagged)

    def text(self) -> str:
        lines = []
        if self.environment_changes:
            lines.append("what decides round-off differs from the baseline's: " + "; ".join(
                f"{k} {old} -> {new}" for k, (old, new) in self.environment_changes.items()))
        if self.budget_mismatches:
            lines.append("BUDGET: epochs used or test passes differ from the baseline (compared exactly)")
            lines.append(tabulate([m.row() for m in self.budget_mismatches], headers="keys"))
        if self.mode == "exact":
            lines.append(f"exact comparison (the baseline's versions, CPU, threads and device): every seed's metrics "
                         f"must reproduce "
                         f"within {EXACT_TOLERANCE:g} x max(1, |value|)")
            if self.moves:
                first = self.moves[0]
                lines.append(f"MOVED: first {first.method} on {first.task}, seed {first.seed}, block {first.block}, "
                             f"{first.metric}: {first.baseline:.12g} -> {first.now:.12g}; {len(self.moves)} values moved "
                             "in all (if the change is deliberate, rewrite the baseline with --update)")
                lines.append(tabulate([m.row() for m in self.moves[:10]], headers="keys"))
        else:
            lines.append(f"statistical comparison: tolerance {self.tolerance:.2f} standard errors of the difference of "
                         f"means ({self.seeds[0]} seeds now, the baseline's {self.seeds[1]}) over {self.n_compared} "
                         "metrics (fidelity metrics in both directions)")
            for title, findings in (("FLAGGED", self.flagged), ("improved (not fidelity; consider --update)",
                                                               self.improvements)):
                if findings:
                    lines.append(title)
                    lines.append(tabulate([f.row() for f in findings], headers="keys"))
        if not self.n_compared:
            lines.append("NOTHING COMPARED: no metric of the baseline was measured again, so nothing was checked")
        verdict = "passed" if self.passed else "FAILED"
        problems = len(self.moves) if self.mode == "exact" else len(self.flagged)
        lines.append(f"check {verdict} ({self.mode}): {self.n_compared} metrics compared, {problems} "
                     f"{'moved' if self.mode == 'exact' else 'flagged'}, {len(self.budget_mismatches)} budget "
                     f"mismatches, {self.wall_seconds:.0f} s")
        return "\n".join(lines)


def _subset(asked: list[str] | None, available: list[str], what: str, path: Path) -> list[str]:
    if not asked:
        return list(available)
    missing = [a for a in asked if a not in available]
    if missing:
        raise BenchError(f"{path} has no baseline for {what} {', '.join(missing)}; measure it with "
                         f"`python -m bench check --update --baseline {path} ...`")
    return list(asked)


def _standard_error(stats: dict, now_std: float | None, n_baseline: int, n_now: int) -> float:
    """SE of the difference of the baseline's mean over ``n_baseline`` seeds and the mean now over ``n_now``, from
    the pooled variance (both samples of one distribution under the null), every std floored by the baseline's
    floor; a single seed now adds no variance term (its std is undefined) but still counts in 1 / n_now."""
    s_base, s_now = max(stats["std"], stats["floor"]), max(now_std or 0.0, stats["floor"])
    pooled = ((n_baseline - 1) * s_base**2 + (n_now - 1) * s_now**2) / (n_baseline + n_now - 2)
    return math.sqrt(pooled * (1 / n_baseline + 1 / n_now))


def _load_gated(path: Path, name: str, source: str) -> None:
    """One line unless ``source`` (as the baseline says to load ``name``) loads the method named ``name``."""
    try:
        method = get_method(source)
    except BenchError as error:
        raise BenchError(f"{path} gates the method {name!r}, which cannot be loaded here ({error}); install the "
                         "package that provides it, or put its module on the Python path") from None
    if method.name != name:
        raise BenchError(f"{path} gates the method {name!r}, but {source} now loads a method named {method.name!r}")


def baseline_sources(baseline: dict) -> dict[str, str]:
    """How to load each method the baseline measured: ``{name: source}`` (files written before methods could come
    from outside bdl-bench load every method by its name)."""
    return {name: baseline["configuration"].get("sources", {}).get(name, name) for name in baseline["results"]}


def vet_sources(sources: dict[str, str], methods: list[str], path: Path, trusted: list[str] | None = None) -> None:
    """A baseline is a file anyone can edit, and it never chooses code to import: of the ``methods`` about to run, one
    whose source names a module (``package.module:ClassName``) is refused in one line, before anything is imported,
    unless the user's command line names it too (``trusted``: ``check --method`` as typed)."""
    for name in methods:
        source = sources[name]
        if ":" in source and source not in (trusted or []):
            raise BenchError(f"{path} gates the method {name!r} from {source}, code the file names; a baseline never "
                             f"chooses code to import: if you trust that code, pass --method {source}")


def check(path: Path, methods: list[str] | None = None, tasks: list[str] | None = None,
          tolerance: float | None = None, statistical: bool = False,
          max_epochs: float = DEFAULT_MAX_EPOCHS, workers: int = 1, threads: int = 1,
          seeds: int | None = None) -> Report:
    """Reruns the baseline's configuration for ``methods`` x ``tasks`` (default: all of the baseline's) and compares.
    ``methods`` by name or as the baseline's update named them (``package.module:ClassName``); ``workers`` and
    ``threads`` as :func:`measure` takes them. ``seeds``: only the baseline's first ``seeds`` seeds. In exact mode
    training is deterministic, so a change in what a method computes moves every seed's bits and a few seeds show
    it; in statistical mode fewer seeds give a weaker test of the means (the pooled t test of the module's
    docstring), so a check that must fit in CI's time still runs on a machine other than the baseline's."""
    baseline = load_baseline(path)
    tolerance = _checked_tolerance(tolerance)
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
                       sources, workers, threads)
    report = compare(baseline, measured, tolerance, statistical)
    return dataclasses.replace(report, wall_seconds=time.perf_counter() - started)


def compare(baseline: dict, measured: dict, tolerance: float | None = None, statistical: bool = False) -> Report:
    """Compares ``measured`` (as :func:`measure` returns it, for all of the baseline's seeds or its first few) with
    ``baseline``."""
    seeds = baseline["configuration"]["seeds"]
    # Seeds measured now: every (method, task) reran the same first ones (all of them without --seeds).
    n_now = next((len(per_seed) for by_task in measured.values() for per_seed in by_task.values()), len(seeds))
    changes = _numerics_changes(baseline)
    mode = "statistical" if statistical or changes else "exact"
    mismatches, moves, findings, n_compared = [], [], [], 0
    for method, by_task in measured.items():
        for task, per_seed in by_task.items():
            for name in BUDGET_FIELDS:
                for seed, expected, seed_run in zip(seeds, baseline["runs"][method][task][name], per_seed):
                    if seed_run[name] != expected:
                        mismatches.append(BudgetMismatch(method, task, seed, name, expected, seed_run[name]))
            for block, metrics in baseline["results"][method][task].items():
                for metric, stats in metrics.items():
                    n_compared += 1
                    observed = [seed_run["metrics"].get(block, {}).get(metric) for seed_run in per_seed]
                    if any(value is None for value in observed):
                        raise BenchError(f"{method} on {task} no longer reports {metric} for block {block}; "
                                         "if intended, rewrite the baseline with --update")
                    if mode == "exact":
                        moves += [Move(method, task, seed, block, metric, expected, value)
                                  for seed, expected, value in zip(seeds, stats["values"], observed)
                                  if abs(value - expected) > EXACT_TOLERANCE * max(1.0, abs(expected))]
                    else:
                        mean, std = mean_std(observed)
                        findings.append(Finding(method, task, block, metric, stats["mean"], mean,
                                                _standard_error(stats, std, len(seeds), n_now)))
    if tolerance is None:
        tolerance = statistical_tolerance(len(seeds), n_now, n_compared)
    return Report(mode, tolerance, mismatches, moves, findings, changes, n_compared, seeds=(n_now, len(seeds)))


def _numerics_changes(baseline: dict) -> dict[str, tuple]:
    """What decides round-off and differs between the baseline's measurement and a measurement here now (the gate
    measures on the CPU, with this process's torch threads: ``check --threads``)."""
    return numerics_changes({**baseline["environment"], "device": baseline["configuration"].get("device", "cpu")},
                            {**environment(), "device": "cpu"})


def describe_baseline(baseline: dict) -> str:
    rows = []
    configuration = baseline["configuration"]
    for method, by_task in baseline["results"].items():
        settings = configuration.get("settings", {}).get(method) or {}
        for task, blocks in by_task.items():
            for metric, stats in blocks[OVERALL_BLOCK].items():
                rows.append({"method": method, "task": task, "budget": f"{configuration['budgets'][method]:g}",
                             "settings": " ".join(f"{key}={value}" for key, value in settings.items()) or "defaults",
                             "metric": metric, "mean": f"{stats['mean']:.5g}",
                             f"std (ddof {STD_DDOF})": f"{stats['std']:.3g}", "floor": f"{stats['floor']:.3g}",
                             "floor used": "yes" if stats["floor_used"] else ""})
    n_seeds = len(baseline["configuration"]["seeds"])
    n_compared = sum(len(m) for by_task in baseline["results"].values() for blocks in by_task.values()
                     for m in blocks.values())
    return (tabulate(rows, headers="keys") + f"\n{n_seeds} seeds, whole test set shown (every block is stored), "
            f"measured in {baseline['wall_seconds']:.0f} s; statistical tolerance for a full check: "
            f"{statistical_tolerance(n_seeds, n_seeds, n_compared):.2f} standard errors")
