"""The gate's comparison of a measurement with its baseline: budget fields exactly, metrics exactly (the baseline's
numerics) or as on another CPU kind (:mod:`leaderboard.gate`'s docstring), with each spread floored."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import scipy.stats
from tabulate import tabulate

from bench import drift
from bench.errors import BenchError
from bench.runner import environment, numerics_changes
from bench.tasks import Task, get_task
from leaderboard.ranking import PRIMARY, higher_is_better, mean_std
from leaderboard.store import OVERALL_BLOCK
from reference.store import load_reference


FAMILY_FALSE_ALARM = 0.01
"""Probability that an unchanged method on another machine fails the test of means (Bonferroni bound)."""

SEED_FLOOR = 0.25
"""Off the baseline's CPU, a metric compared seed by seed may move by this fraction of its seeds' standard deviation
(or by what another CPU kind's kernels move it, :data:`bench.drift.OTHER_KERNELS_FACTOR` times, where that is more):
across an Intel and an AMD CPU the largest move of such a metric was 0.04 of a standard deviation (a best epoch that
flipped on one CPU), and a change that moves a method by one standard deviation moves a seed by more than this 86% of
the time on each metric (docs/leaderboard.md)."""

PAIRED_LIMIT = 4.0
"""A metric is compared seed by seed off the baseline's CPU while what it may move there is at most this many of its
seeds' standard deviations (about the width of a prediction interval for one seed): a change that makes a run another
draw of a moved configuration still moves a seed beyond it often, where the test of two seeds' mean against the
baseline's would almost never flag it. Beyond, another CPU kind makes its seeds other draws, and only its mean is
tested (a primary metric on the whole test set) or nothing."""

EXACT_TOLERANCE = 1e-12
"""Exact mode: |now - baseline| <= this x max(1, |baseline|) (float64 summation round-off, nothing more)."""

FIDELITY_METRICS = frozenset({"agreement", "total_variation", "w1", "w2", "competition_w"})
"""Distances to the reference: flagged in both directions by the statistical check."""

BUDGET_FIELDS = ("epochs_used", "test_passes")

COUNT_METRICS = {"agreement", "accuracy"}

NOISE_FLOOR_FRACTION = 0.1

NUMERIC_FLOOR = 1e-6


def statistical_tolerance(n_baseline: int, n_compared: int) -> float:
    """The test of means' tolerance in standard errors: two-sided Bonferroni over ``n_compared`` metrics, t with
    n_baseline - 1 degrees of freedom (the variance is the baseline's alone)."""
    return float(scipy.stats.t.ppf(1 - FAMILY_FALSE_ALARM / (2 * max(n_compared, 1)), max(n_baseline - 1, 1)))


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


def block_sizes(task: Task) -> dict[str, int]:
    """Test points per block of ``task``, the whole test set's as :data:`OVERALL_BLOCK`."""
    return {OVERALL_BLOCK: task.n_test, **{b.name: b.stop - b.start for b in task.test_blocks}}


def summarise(measured: dict, other_kernels: dict | None = None) -> tuple[dict, dict]:
    """(runs, results): per method and task every seed's budget fields; per method, task, block and
    metric the seeds' values, mean, std (ddof 1), the floor of the std and, given ``other_kernels`` (the same runs
    measured with :data:`bench.executors.OTHER_KERNELS`), those runs' values."""
    runs: dict = {}
    results: dict = {}
    for method, by_task in measured.items():
        for task, per_seed in by_task.items():
            runs.setdefault(method, {})[task] = {name: [seed[name] for seed in per_seed] for name in BUDGET_FIELDS}
            gated = get_task(task)
            sizes = block_sizes(gated)
            noise_floor = load_reference(gated).metadata.get("noise_floor") or {}
            for block, metrics in per_seed[0]["metrics"].items():
                for metric in metrics:
                    values = [seed["metrics"][block][metric] for seed in per_seed]
                    mean, std = mean_std(values)
                    floor, floor_rule = spread_floor(metric, sizes[block], noise_floor.get(block), mean)
                    results.setdefault(method, {}).setdefault(task, {}).setdefault(block, {})[metric] = {
                        "values": values, "mean": mean, "std": std, "floor": floor, "floor_rule": floor_rule,
                        "floor_used": floor > std,
                        **({} if other_kernels is None else {"other_kernels": [
                            seed["metrics"][block][metric] for seed in other_kernels[method][task]]})}
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
    """One seed's metric that moved beyond what it may: round-off in exact mode, its allowance (:func:`seed_allowance`)
    off the baseline's CPU."""

    method: str
    task: str
    seed: int
    block: str
    metric: str
    baseline: float
    now: float
    allowed: float

    def row(self) -> dict:
        return {"method": self.method, "task": self.task, "seed": self.seed, "block": self.block,
                "metric": self.metric, "baseline": f"{self.baseline:.12g}", "now": f"{self.now:.12g}",
                "change": f"{self.now - self.baseline:+.3g}", "allowed": f"{self.allowed:.3g}"}


@dataclass(frozen=True)
class Finding:
    """Off the baseline's CPU: one metric's means, their standard error and the oriented z (positive = worse)."""

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
    """``exact`` or ``cross-CPU``."""
    tolerance: float
    budget_mismatches: list[BudgetMismatch]
    moves: list[Move] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    environment_changes: dict = field(default_factory=dict)
    n_compared: int = 0
    wall_seconds: float = 0.0
    seeds: tuple[int, int] = (0, 0)
    """Seeds measured now and seeds the baseline holds."""
    n_seed_by_seed: int = 0
    """Cross-CPU: metrics compared seed by seed (the rest of ``n_compared`` are the findings, tested by their means)."""
    n_chaotic: int = 0
    """Cross-CPU: metrics whose round-off grows chaotically and that are not a primary metric on the whole test set:
    not comparable off the baseline's CPU."""
    n_without_kernels: int = 0
    """Cross-CPU: metrics the baseline holds no other kernels' values for (format 2, a part measured by an older update,
    or a machine whose torch runs its default kernels): not compared seed by seed."""

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
                         f"must reproduce within {EXACT_TOLERANCE:g} x max(1, |value|)")
        else:
            without = (f"; {self.n_without_kernels} metrics the baseline holds no runs with other kernels for (format "
                       "2, or measured where torch runs its default kernels), compared by a primary metric's mean alone"
                       if self.n_without_kernels else "")
            lines.append(f"compared as on another CPU kind ({self.seeds[0]} seeds now, the baseline's {self.seeds[1]}): "
                         f"{self.n_seed_by_seed} metrics seed by seed, each within the larger of {SEED_FLOOR:g} of its "
                         f"seeds' standard deviation and {drift.OTHER_KERNELS_FACTOR:g} x what other kernels moved it; "
                         f"{len(self.findings)} primary metrics by the test of means (tolerance {self.tolerance:.2f} "
                         f"standard errors, the baseline's spread); {self.n_chaotic} other metrics not comparable off "
                         f"the baseline's CPU{without}")
        if self.moves:
            first = self.moves[0]
            lines.append(f"MOVED: first {first.method} on {first.task}, seed {first.seed}, block {first.block}, "
                         f"{first.metric}: {first.baseline:.12g} -> {first.now:.12g}; {len(self.moves)} values moved "
                         "in all (if the change is deliberate, rewrite the baseline with --update)")
            lines.append(tabulate([m.row() for m in self.moves[:10]], headers="keys"))
        for title, findings in (("FLAGGED", self.flagged), ("improved (not fidelity; consider --update)",
                                                           self.improvements)):
            if findings:
                lines.append(title)
                lines.append(tabulate([f.row() for f in findings], headers="keys"))
        if not self.n_compared:
            lines.append("NOTHING COMPARED: no metric of the baseline was measured again, so nothing was checked")
        verdict = "passed" if self.passed else "FAILED"
        problems = (f"{len(self.moves)} moved" if self.mode == "exact" else
                    f"{len(self.moves)} moved, {len(self.flagged)} flagged")
        lines.append(f"check {verdict} ({self.mode}): {self.n_compared} metrics compared, {problems}, "
                     f"{len(self.budget_mismatches)} budget mismatches, {self.wall_seconds:.0f} s")
        return "\n".join(lines)


def standard_error(stats: dict, n_baseline: int, n_now: int) -> float:
    """SE of the difference of the baseline's mean over ``n_baseline`` seeds and the mean now over ``n_now``, with the
    baseline's standard deviation (floored) for both: a change that makes a method erratic cannot widen its own test."""
    return max(stats["std"], stats["floor"]) * math.sqrt(1 / n_baseline + 1 / n_now)


def seed_allowance(stats: dict, metric: str, n_points: int) -> float | None:
    """How far a seed's ``metric`` (a block of ``n_points``) may move from the baseline's off the baseline's CPU, where
    it is compared seed by seed: :data:`SEED_FLOOR` of its seeds' standard deviation, :data:`bench.drift.
    OTHER_KERNELS_FACTOR` times the most another CPU kind's kernels moved a seed of it (the baseline's
    ``other_kernels``), round-off, whichever is most; None where that exceeds :data:`PAIRED_LIMIT` of the standard
    deviation (floored by round-off), or the baseline did not measure other kernels."""
    moved_by_kernels = stats.get("other_kernels")
    if moved_by_kernels is None:
        return None
    round_off = max(drift.allowed_drift(metric, value, n_points) for value in stats["values"])
    spread = max(stats["std"], stats["floor"], round_off)  # a metric its seeds barely move still moves by round-off
    kernels = max(abs(a - b) for a, b in zip(moved_by_kernels, stats["values"]))
    allowance = max(SEED_FLOOR * spread, drift.OTHER_KERNELS_FACTOR * kernels, round_off)
    return allowance if allowance <= PAIRED_LIMIT * spread else None


def compare(baseline: dict, measured: dict, tolerance: float | None = None, statistical: bool = False) -> Report:
    """Compares ``measured`` (as :func:`measure` returns it, for all of the baseline's seeds or its first few) with
    ``baseline``: exactly where what decides round-off is the baseline's, else (or with ``statistical``) as on another
    CPU kind: each metric that another CPU kind moves by little (:func:`seed_allowance`) seed by seed, each primary
    metric on the whole test set whose round-off grows chaotically by the test of its mean."""
    seeds = baseline["configuration"]["seeds"]
    # Seeds measured now: every (method, task) reran the same first ones (all of them without --seeds).
    n_now = next((len(per_seed) for by_task in measured.values() for per_seed in by_task.values()), len(seeds))
    changes = numerics_changes_since(baseline)
    mode = "cross-CPU" if statistical or changes else "exact"
    mismatches, moves, findings, n_compared, n_seed_by_seed, n_chaotic, n_without_kernels = [], [], [], 0, 0, 0, 0
    for method, by_task in measured.items():
        for task, per_seed in by_task.items():
            for name in BUDGET_FIELDS:
                for seed, expected, seed_run in zip(seeds, baseline["runs"][method][task][name], per_seed):
                    if seed_run[name] != expected:
                        mismatches.append(BudgetMismatch(method, task, seed, name, expected, seed_run[name]))
            gated = get_task(task)
            sizes, kind = block_sizes(gated), gated.kind
            for block, metrics in baseline["results"][method][task].items():
                for metric, stats in metrics.items():
                    observed = [seed_run["metrics"].get(block, {}).get(metric) for seed_run in per_seed]
                    if any(value is None for value in observed):
                        raise BenchError(f"{method} on {task} no longer reports {metric} for block {block}; "
                                         "if intended, rewrite the baseline with --update")
                    if mode == "exact":
                        allowed = [EXACT_TOLERANCE * max(1.0, abs(expected)) for expected in stats["values"]]
                    else:
                        allowance = seed_allowance(stats, metric, sizes[block])
                        n_without_kernels += "other_kernels" not in stats
                        if allowance is None:
                            if block == OVERALL_BLOCK and metric in PRIMARY[kind]:
                                n_compared += 1
                                findings.append(Finding(method, task, block, metric, stats["mean"],
                                                        mean_std(observed)[0],
                                                        standard_error(stats, len(seeds), n_now)))
                            else:
                                n_chaotic += 1
                            continue
                        allowed = [allowance] * len(seeds)
                        n_seed_by_seed += 1
                    n_compared += 1
                    moves += [Move(method, task, seed, block, metric, expected, value, limit)
                              for seed, expected, value, limit in zip(seeds, stats["values"], observed, allowed)
                              if abs(value - expected) > limit]
    if tolerance is None:
        tolerance = statistical_tolerance(len(seeds), len(findings))
    return Report(mode, tolerance, mismatches, moves, findings, changes, n_compared, seeds=(n_now, len(seeds)),
                  n_seed_by_seed=n_seed_by_seed, n_chaotic=n_chaotic, n_without_kernels=n_without_kernels)


def numerics_changes_since(baseline: dict) -> dict[str, tuple]:
    """What decides round-off and differs between the baseline's measurement and a measurement here now (the gate
    measures on the CPU, with this process's torch threads: ``check --threads``)."""
    return numerics_changes({**baseline["environment"], "device": baseline["configuration"].get("device", "cpu")},
                            {**environment(), "device": "cpu"})
