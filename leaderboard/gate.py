"""The CI fidelity gate: rerun a small fixed configuration and compare it with a committed baseline.

``update`` runs each method on each embedded task for seeds 0..n-1 (CPU, each method's
``check_budget`` and default settings) and writes the baseline file: the configuration, the
environment (package versions, platform, CPU, threads) and, per method and task, every seed's
``epochs_used`` and ``test_passes`` and every seed's value of every metric of every test block, with
their mean and standard deviation (ddof = 1).

``check`` reruns the baseline's configuration (or a subset of its methods and tasks) and compares:

1. **Budget, always exactly.** Every seed's ``epochs_used`` and ``test_passes`` must equal the
   baseline's: a meter that charges half of each batch changes no metric but fails here.
2. **Exact mode**, when the environment is the baseline's: runs on one machine with the same
   versions are deterministic, so every seed's every metric must reproduce within float round-off
   (``EXACT_TOLERANCE`` x max(1, |value|)); the first value that moved is reported. Any change to what
   a method computes, in either direction, fails: accept a deliberate one with ``--update``.
3. **Statistical mode**, otherwise (or with ``--statistical``): another machine or library version
   behaves like fresh seeds. Per metric, z = (mean now - mean baseline) / SE with
   SE = sqrt((s_baseline^2 + s_now^2) / n), the standard error of the difference of the two means over
   n seeds, each s floored (below). Fidelity metrics (``FIDELITY_METRICS``) are flagged when |z|
   exceeds the tolerance in **either** direction: at small budgets a large "improvement" is as
   suspicious as a loss. Other metrics are flagged when worse. The default tolerance is the
   Bonferroni bound for a family-wise false-alarm rate ``FAMILY_FALSE_ALARM`` over the m metrics
   compared, under Student's t with 2(n - 1) degrees of freedom: t^-1(1 - alpha / (2 m)).

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
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import scipy.stats
from tabulate import tabulate

from approximators import METHODS, get_method
from bench.errors import BenchError
from bench.runner import RunSpec, environment, run
from bench.tasks import EMBEDDED, get_task
from leaderboard.ranking import STD_DDOF, higher_is_better, mean_std
from leaderboard.store import OVERALL_BLOCK
from bench.io import atomic_write_bytes, json_bytes, read_json
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


def statistical_tolerance(n_seeds: int, n_compared: int) -> float:
    """The default tolerance in standard errors: two-sided Bonferroni over ``n_compared`` metrics, t with 2(n-1) dof."""
    return float(scipy.stats.t.ppf(1 - FAMILY_FALSE_ALARM / (2 * max(n_compared, 1)), 2 * (n_seeds - 1)))


def _checked_tolerance(tolerance: float | None) -> float | None:
    if tolerance is not None and not (math.isfinite(tolerance) and tolerance > 0):
        raise BenchError(f"--tolerance must be a positive number of standard errors, got {tolerance:g}")
    return tolerance


def measure(tasks_of: dict[str, list[str]], seeds: list[int], budgets: dict[str, float]) -> dict:
    """Runs each method on its tasks (``{method: [task, ...]}``):
    {method: {task: [per seed {"metrics": {block: {metric: value}}, "epochs_used", "test_passes"}]}}."""
    measured: dict = {}
    with tempfile.TemporaryDirectory(prefix="bdl-bench-check-") as out:
        for method, tasks in tasks_of.items():
            for task in tasks:
                per_seed = []
                for seed in seeds:
                    result = run(RunSpec(task=task, method=method, budget=budgets[method], seed=seed, out=Path(out)))
                    per_seed.append({"metrics": {OVERALL_BLOCK: result["metrics"], **result["metrics_by_block"]},
                                     **{name: result[name] for name in BUDGET_FIELDS}})
                measured.setdefault(method, {})[task] = per_seed
    return measured


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


def update(path: Path, methods: list[str] | None = None, tasks: list[str] | None = None,
           seeds: int | None = None) -> dict:
    """Measures the configuration and writes the baseline file atomically; returns its contents.

    Without ``methods`` and ``tasks`` the file is rewritten whole. With either, an existing baseline
    is extended: the measured (method, task) pairs replace theirs and every other pair is kept, which
    is sound only when the existing file was measured with the same seeds in this environment (else
    one line says to rewrite it whole).
    """
    partial = bool(methods or tasks)
    methods = methods or list(METHODS)
    tasks = tasks or list(EMBEDDED)
    n_seeds = DEFAULT_SEEDS if seeds is None else seeds
    if n_seeds <= STD_DDOF:
        raise BenchError(f"--seeds must be at least {STD_DDOF + 1} to measure a standard deviation, got {n_seeds}")
    earlier = _extendable(path, n_seeds) if partial and Path(path).exists() else None
    budgets = {m: float(get_method(m).check_budget) for m in methods}
    for task in tasks:
        load_reference(get_task(task))
    started = time.perf_counter()
    measured = measure({m: tasks for m in methods}, list(range(n_seeds)), budgets)
    runs, results = summarise(measured)
    command = " ".join(["python -m bench check --update", f"--baseline {path}", f"--methods {' '.join(methods)}",
                        *[f"--task {t}" for t in tasks], f"--seeds {n_seeds}"])
    wall_seconds = time.perf_counter() - started
    commands = [command]
    if earlier is not None:
        for method, by_task in earlier["results"].items():
            for task in by_task:
                if task not in results.get(method, {}):
                    results.setdefault(method, {})[task] = by_task[task]
                    runs.setdefault(method, {})[task] = earlier["runs"][method][task]
        methods = [*earlier["configuration"]["methods"], *(m for m in methods if m not in earlier["configuration"]["methods"])]
        tasks = [*earlier["configuration"]["tasks"], *(t for t in tasks if t not in earlier["configuration"]["tasks"])]
        budgets = {**earlier["configuration"]["budgets"], **budgets}
        commands = [*earlier.get("commands", [earlier.get("command")]), command]  # "command": files before merging
        wall_seconds += earlier["wall_seconds"]
    baseline = {
        "format": BASELINE_FORMAT,
        "commands": commands,
        "configuration": {"methods": methods, "tasks": tasks, "seeds": list(range(n_seeds)), "budgets": budgets,
                          "device": "cpu", "method_settings": "each method's defaults for the task"},
        "std_ddof": STD_DDOF,
        "rule": "budget fields always exact; exact per-seed metrics in the baseline's environment; otherwise "
                "|z| (fidelity metrics) or z (others, worse) above the Bonferroni-t tolerance, z in standard errors "
                "of the difference of means",
        "environment": environment(),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": round(wall_seconds, 1),
        "runs": runs,
        "results": results,
    }
    atomic_write_bytes(Path(path), json_bytes(baseline))
    return baseline


def _extendable(path: Path, n_seeds: int) -> dict:
    """The existing baseline at ``path`` if a partial update may extend it, else a one-line error."""
    earlier = load_baseline(path)
    whole = f"rewrite it whole with `python -m bench check --update --baseline {path}` (no --methods or --task)"
    if len(earlier["configuration"]["seeds"]) != n_seeds:
        raise BenchError(f"{path} was measured with {len(earlier['configuration']['seeds'])} seeds, this update "
                         f"with {n_seeds}: one baseline cannot mix them; pass --seeds "
                         f"{len(earlier['configuration']['seeds'])} or {whole}")
    changed = sorted(k for k, v in earlier["environment"].items() if environment().get(k) != v)
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
    return baseline


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

    @property
    def flagged(self) -> list[Finding]:
        return [f for f in self.findings if f.flagged(self.tolerance)]

    @property
    def improvements(self) -> list[Finding]:
        """Metrics outside the fidelity set that improved beyond the tolerance: reported, not failed."""
        return [f for f in self.findings if not f.two_sided and -f.z > self.tolerance]

    @property
    def passed(self) -> bool:
        return not (self.budget_mismatches or self.moves or self.flagged)

    def text(self) -> str:
        lines = []
        if self.environment_changes:
            lines.append("environment differs from the baseline's: " + "; ".join(
                f"{k} {old} -> {new}" for k, (old, new) in self.environment_changes.items()))
        if self.budget_mismatches:
            lines.append("BUDGET: epochs used or test passes differ from the baseline (compared exactly)")
            lines.append(tabulate([m.row() for m in self.budget_mismatches], headers="keys"))
        if self.mode == "exact":
            lines.append(f"exact comparison (the baseline's environment): every seed's metrics must reproduce "
                         f"within {EXACT_TOLERANCE:g} x max(1, |value|)")
            if self.moves:
                first = self.moves[0]
                lines.append(f"MOVED: first {first.method} on {first.task}, seed {first.seed}, block {first.block}, "
                             f"{first.metric}: {first.baseline:.12g} -> {first.now:.12g}; {len(self.moves)} values moved "
                             "in all (if the change is deliberate, rewrite the baseline with --update)")
                lines.append(tabulate([m.row() for m in self.moves[:10]], headers="keys"))
        else:
            lines.append(f"statistical comparison: tolerance {self.tolerance:.2f} standard errors of the difference of "
                         f"means over {self.n_compared} metrics (fidelity metrics in both directions)")
            for title, findings in (("FLAGGED", self.flagged), ("improved (not fidelity; consider --update)",
                                                               self.improvements)):
                if findings:
                    lines.append(title)
                    lines.append(tabulate([f.row() for f in findings], headers="keys"))
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


def _standard_error(stats: dict, now_std: float | None, n: int) -> float:
    """SE of the difference of two means over ``n`` seeds each, every std floored by the baseline's floor."""
    s_base, s_now = max(stats["std"], stats["floor"]), max(now_std or 0.0, stats["floor"])
    return math.sqrt((s_base**2 + s_now**2) / n)


def check(path: Path, methods: list[str] | None = None, tasks: list[str] | None = None,
          tolerance: float | None = None, statistical: bool = False) -> Report:
    """Reruns the baseline's configuration for ``methods`` x ``tasks`` (default: all of the baseline's) and compares."""
    baseline = load_baseline(path)
    tolerance = _checked_tolerance(tolerance)
    methods = _subset(methods, list(baseline["results"]), "method", path)
    tasks = _subset(tasks, baseline["configuration"]["tasks"], "task", path)
    for method in methods:
        get_method(method)
    started = time.perf_counter()
    tasks_of = {m: [t for t in tasks if t in baseline["results"][m]] for m in methods}
    measured = measure(tasks_of, baseline["configuration"]["seeds"], baseline["configuration"]["budgets"])
    report = compare(baseline, measured, tolerance, statistical)
    return dataclasses.replace(report, wall_seconds=time.perf_counter() - started)


def compare(baseline: dict, measured: dict, tolerance: float | None = None, statistical: bool = False) -> Report:
    """Compares ``measured`` (as :func:`measure` returns it, for the baseline's seeds) with ``baseline``."""
    seeds = baseline["configuration"]["seeds"]
    now_env = environment()
    changes = {k: (v, now_env.get(k)) for k, v in baseline["environment"].items() if now_env.get(k) != v}
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
                                                _standard_error(stats, std, len(seeds))))
    if tolerance is None:
        tolerance = statistical_tolerance(len(seeds), n_compared)
    return Report(mode, tolerance, mismatches, moves, findings, changes, n_compared)


def describe_baseline(baseline: dict) -> str:
    rows = []
    for method, by_task in baseline["results"].items():
        for task, blocks in by_task.items():
            for metric, stats in blocks[OVERALL_BLOCK].items():
                rows.append({"method": method, "task": task, "metric": metric, "mean": f"{stats['mean']:.5g}",
                             f"std (ddof {STD_DDOF})": f"{stats['std']:.3g}", "floor": f"{stats['floor']:.3g}",
                             "floor used": "yes" if stats["floor_used"] else ""})
    n_seeds = len(baseline["configuration"]["seeds"])
    n_compared = sum(len(m) for by_task in baseline["results"].values() for blocks in by_task.values()
                     for m in blocks.values())
    return (tabulate(rows, headers="keys") + f"\n{n_seeds} seeds, whole test set shown (every block is stored), "
            f"measured in {baseline['wall_seconds']:.0f} s; statistical tolerance for a full check: "
            f"{statistical_tolerance(n_seeds, n_compared):.2f} standard errors")
