"""The gate's baseline file: its options (``--budget``, ``--set``), how it is read and checked field by field (a file
anyone can edit), how it says to load each method, and its summary table."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from approximators import METHOD_NAME
from bench import records
from bench.arguments import NUMBER, SEED_LIMIT
from bench.budget import check_budget_size
from bench.errors import BenchError, DamagedFile, shown
from bench.io import read_json
from bench.tasks import all_task_names, get_task
from leaderboard.gate.statistics import BUDGET_FIELDS, block_sizes, seed_allowance
from leaderboard.ranking import PRIMARY, STD_DDOF, mean_std
from leaderboard.store import OVERALL_BLOCK


BASELINE_FORMAT = 3
"""3 adds, per metric, its values with another CPU kind's kernels (``other_kernels``); a file of format 2, without
them, is still read, and off its CPU compares only the primary metrics' means."""

READ_FORMATS = (2, 3)

DEFAULT_SEEDS = 10
"""Seeds per (method, task): the spread a check off the baseline's CPU judges by."""

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
        budgets[method] = checked_budget(value, f"--budget {text}")
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


def checked_budget(value: object, origin: str) -> float:
    try:
        return check_budget_size(value)
    except BenchError as error:
        raise BenchError(f"{origin}: {error}") from None


def load_baseline(path: Path) -> dict:
    try:
        baseline = read_json(Path(path), "baseline", f"create it again with `python -m bench check --update --baseline {path}`")
    except FileNotFoundError:
        raise BenchError(f"no baseline file {path}; create one with `python -m bench check --update --baseline {path}`") \
            from None
    except (OSError, ValueError) as error:
        raise BenchError(f"cannot read baseline {path}: {error}") from None
    records.refuse_rehearsal(baseline, path)  # a rehearsal's record given as a baseline is said to be one
    if not isinstance(baseline, dict) or baseline.get("format") not in READ_FORMATS:
        raise BenchError(f"{path}: not a baseline file of format {' or '.join(map(str, READ_FORMATS))}; rewrite it "
                         "with --update")
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
        checked_budget(budget, f"{path}: the budget of {method}")
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
    other = stats.get("other_kernels")
    if other is not None and not (isinstance(other, list) and len(other) == n_seeds
                                  and all(map(records.finite_number, other))):
        raise refuse(f"{where}: its other_kernels values must be {n_seeds} finite numbers, one per seed")
    if not all(records.finite_number(stats.get(key)) and stats[key] >= 0 for key in ("std", "floor")) \
            or not records.finite_number(stats.get("mean")):
        raise refuse(f"{where}: its mean, std and floor must be finite numbers (std and floor >= 0)")
    mean, std = mean_std(values)
    if not all(abs(stored - value) <= STORED_STATISTICS_TOLERANCE * max(1.0, abs(value))
               for stored, value in ((stats["mean"], mean), (stats["std"], std))):
        raise refuse(f"{where}: its mean {stats['mean']:.10g} and std {stats['std']:.10g} are not those of its values "
                     f"({mean:.10g}, {std:.10g})")


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


def describe_baseline(baseline: dict) -> str:
    rows = []
    configuration = baseline["configuration"]
    for method, by_task in baseline["results"].items():
        settings = configuration.get("settings", {}).get(method) or {}
        for task, blocks in by_task.items():
            gated = get_task(task)
            points, primary = block_sizes(gated)[OVERALL_BLOCK], PRIMARY[gated.kind]
            for metric, stats in blocks[OVERALL_BLOCK].items():
                allowance = seed_allowance(stats, metric, points)
                rows.append({"method": method, "task": task, "budget": f"{configuration['budgets'][method]:g}",
                             "settings": " ".join(f"{key}={value}" for key, value in settings.items()) or "defaults",
                             "metric": metric, "mean": f"{stats['mean']:.5g}",
                             f"std (ddof {STD_DDOF})": f"{stats['std']:.3g}", "floor": f"{stats['floor']:.3g}",
                             "floor used": "yes" if stats["floor_used"] else "",
                             "off this CPU": (f"each seed ± {allowance:.2g}" if allowance is not None else
                                              "its mean" if metric in primary else "")})
    n_seeds = len(baseline["configuration"]["seeds"])
    return (tabulate(rows, headers="keys") + f"\n{n_seeds} seeds, whole test set shown (every block is stored), "
            f"measured in {baseline['wall_seconds']:.0f} s")
