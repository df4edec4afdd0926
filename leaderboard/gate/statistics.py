"""The gate's comparison of a measurement with its baseline: budget fields exactly, metrics exactly or by the pooled
t test of the package's docstring (:mod:`leaderboard.gate`), with each spread floored."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import scipy.stats
from tabulate import tabulate

from bench.errors import BenchError
from bench.runner import environment, numerics_changes
from bench.tasks import get_task
from leaderboard.ranking import higher_is_better, mean_std
from leaderboard.store import OVERALL_BLOCK
from reference.store import load_reference


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


def checked_tolerance(tolerance: float | None) -> float | None:
    if tolerance is not None and not (math.isfinite(tolerance) and tolerance > 0):
        raise BenchError(f"--tolerance must be a positive number of standard errors, got {tolerance:g}")
    return tolerance


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


def standard_error(stats: dict, now_std: float | None, n_baseline: int, n_now: int) -> float:
    """SE of the difference of the baseline's mean over ``n_baseline`` seeds and the mean now over ``n_now``, from
    the pooled variance (both samples of one distribution under the null), every std floored by the baseline's
    floor; a single seed now adds no variance term (its std is undefined) but still counts in 1 / n_now."""
    s_base, s_now = max(stats["std"], stats["floor"]), max(now_std or 0.0, stats["floor"])
    pooled = ((n_baseline - 1) * s_base**2 + (n_now - 1) * s_now**2) / (n_baseline + n_now - 2)
    return math.sqrt(pooled * (1 / n_baseline + 1 / n_now))


def compare(baseline: dict, measured: dict, tolerance: float | None = None, statistical: bool = False) -> Report:
    """Compares ``measured`` (as :func:`measure` returns it, for all of the baseline's seeds or its first few) with
    ``baseline``."""
    seeds = baseline["configuration"]["seeds"]
    # Seeds measured now: every (method, task) reran the same first ones (all of them without --seeds).
    n_now = next((len(per_seed) for by_task in measured.values() for per_seed in by_task.values()), len(seeds))
    changes = numerics_changes_since(baseline)
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
                                                standard_error(stats, std, len(seeds), n_now)))
    if tolerance is None:
        tolerance = statistical_tolerance(len(seeds), n_now, n_compared)
    return Report(mode, tolerance, mismatches, moves, findings, changes, n_compared, seeds=(n_now, len(seeds)))


def numerics_changes_since(baseline: dict) -> dict[str, tuple]:
    """What decides round-off and differs between the baseline's measurement and a measurement here now (the gate
    measures on the CPU, with this process's torch threads: ``check --threads``)."""
    return numerics_changes({**baseline["environment"], "device": baseline["configuration"].get("device", "cpu")},
                            {**environment(), "device": "cpu"})
