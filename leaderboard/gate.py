"""The CI fidelity gate: rerun a small fixed configuration and compare every metric with a baseline.

``update`` runs each method on each embedded task for seeds 0..n-1 (CPU, the budgets of
``CHECK_BUDGETS``) and writes the baseline file: the configuration, the package versions and, per
(method, task, test block, metric), every seed's value, their mean and their standard deviation
(ddof = 1): the measured seed-to-seed spread. ``check`` reruns exactly the baseline's configuration
and flags a **regression** when the mean over seeds is worse than the baseline's mean by more than
``tolerance`` x spread, where spread = max(std, floor). The floor only guards against a spread of
(nearly) zero, where any change at all would trip the gate:

- ``agreement``, ``accuracy``: 1 / (test points in the block), the smallest change the metric can show;
- other metrics the reference's noise floor publishes (``total_variation``, ``w1``, ``w2``,
  ``competition_w``): ``NOISE_FLOOR_FRACTION`` of the noise floor's distance from a perfect score,
  a fraction of the Monte Carlo error of the reference itself;
- the rest (``nll``, ``ece``, ``rmse``, ``log_likelihood``, or any metric when the reference
  publishes no noise floor): ``NUMERIC_FLOOR`` x max(1, |mean|), above float64 summation round-off.

Training is deterministic for a fixed seed on one machine, so an unchanged method reproduces the
baseline; on another machine or library version the seeds behave like fresh ones, which the spread
covers.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tabulate import tabulate

import bench
from approximators import METHODS, get_method
from bench.errors import BenchError
from bench.runner import RunSpec, run
from bench.tasks import EMBEDDED, get_task
from leaderboard.ranking import STD_DDOF, higher_is_better, mean_std
from leaderboard.store import OVERALL_BLOCK
from reference.store import atomic_write_bytes, json_bytes, load_reference

BASELINE_FORMAT = 1
DEFAULT_TOLERANCE = 3.0
DEFAULT_SEEDS = 5
CHECK_BUDGETS = {"sgd": 20, "de": 100, "ae": 200, "sae": 120}
"""Epochs per method: each method's smallest sensible configuration (``ae``: two members of 100
epochs; ``sae``: one chain, 100 epochs then ten members of 2 epochs), so a check stays fast on a CPU."""
DEFAULT_CHECK_BUDGET = 200.0
"""For a method the table above does not know yet."""
COUNT_METRICS = {"agreement", "accuracy"}
NOISE_FLOOR_FRACTION = 0.1
NUMERIC_FLOOR = 1e-6


def _checked_tolerance(tolerance: float | None, default: float) -> float:
    if tolerance is None:
        return default
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise BenchError(f"--tolerance must be a positive number of standard deviations, got {tolerance:g}")
    return tolerance


def measure(methods: list[str], tasks: list[str], seeds: list[int], budgets: dict[str, float]) -> dict:
    """{method: {task: [per seed {block: {metric: value}}]}}, runs written to a temporary folder."""
    measured: dict = {}
    with tempfile.TemporaryDirectory(prefix="bdl-bench-check-") as out:
        for method in methods:
            for task in tasks:
                per_seed = []
                for seed in seeds:
                    result = run(RunSpec(task=task, method=method, budget=budgets[method], seed=seed, out=Path(out)))
                    per_seed.append({OVERALL_BLOCK: result["metrics"], **result["metrics_by_block"]})
                measured.setdefault(method, {})[task] = per_seed
    return measured


def spread_floor(metric: str, block_size: int, noise_floor: dict | None, mean: float) -> tuple[float, str]:
    """The smallest spread the gate uses for ``metric`` on a block of ``block_size`` test points, and why."""
    if metric in COUNT_METRICS:
        return 1.0 / block_size, f"1/{block_size} test points"
    floor_value = (noise_floor or {}).get(metric)
    if floor_value is not None and math.isfinite(floor_value):
        return NOISE_FLOOR_FRACTION * abs(floor_value), f"{NOISE_FLOOR_FRACTION:g} x reference noise floor"
    return NUMERIC_FLOOR * max(1.0, abs(mean)), f"{NUMERIC_FLOOR:g} x max(1, |mean|)"


def _block_sizes(task_name: str) -> dict[str, int]:
    task = get_task(task_name)
    return {OVERALL_BLOCK: task.n_test, **{b.name: b.stop - b.start for b in task.test_blocks}}


def summarise(measured: dict) -> dict:
    """Per method, task, block and metric: the seeds' values, mean, std (ddof 1), floor and spread used."""
    summary: dict = {}
    for method, by_task in measured.items():
        for task, per_seed in by_task.items():
            sizes = _block_sizes(task)
            noise_floor = load_reference(get_task(task)).metadata.get("noise_floor") or {}
            for block in per_seed[0]:
                for metric in per_seed[0][block]:
                    values = [seed_metrics[block][metric] for seed_metrics in per_seed]
                    mean, std = mean_std(values)
                    floor, floor_rule = spread_floor(metric, sizes[block], noise_floor.get(block), mean)
                    summary.setdefault(method, {}).setdefault(task, {}).setdefault(block, {})[metric] = {
                        "values": values, "mean": mean, "std": std, "floor": floor, "floor_rule": floor_rule,
                        "spread": max(std, floor), "floor_used": floor > std}
    return summary


def _versions() -> dict:
    return {"bdl-bench": bench.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "platform": platform.platform()}


def update(path: Path, methods: list[str] | None = None, tasks: list[str] | None = None, seeds: int | None = None,
           tolerance: float | None = None) -> dict:
    """Measures the configuration and writes the baseline file atomically; returns its contents."""
    tolerance = _checked_tolerance(tolerance, DEFAULT_TOLERANCE)
    methods = methods or list(METHODS)
    tasks = tasks or list(EMBEDDED)
    n_seeds = DEFAULT_SEEDS if seeds is None else seeds
    if n_seeds <= STD_DDOF:
        raise BenchError(f"--seeds must be at least {STD_DDOF + 1} to measure a standard deviation, got {n_seeds}")
    for method in methods:
        get_method(method)
    for task in tasks:
        load_reference(get_task(task))
    budgets = {m: float(CHECK_BUDGETS.get(m, DEFAULT_CHECK_BUDGET)) for m in methods}
    started = time.perf_counter()
    measured = measure(methods, tasks, list(range(n_seeds)), budgets)
    baseline = {
        "format": BASELINE_FORMAT,
        "command": " ".join(["python -m bench check --update", f"--baseline {path}", f"--methods {' '.join(methods)}",
                             *[f"--task {t}" for t in tasks], f"--seeds {n_seeds}",
                             f"--tolerance {tolerance:g}"]),
        "configuration": {"methods": methods, "tasks": tasks, "seeds": list(range(n_seeds)), "budgets": budgets,
                          "device": "cpu", "method_settings": "each method's defaults for the task"},
        "tolerance": tolerance,
        "std_ddof": STD_DDOF,
        "rule": "regression when the mean over seeds is worse than the baseline mean by more than tolerance x spread; "
                "spread = max(std over seeds, floor)",
        "versions": _versions(),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "results": summarise(measured),
    }
    atomic_write_bytes(Path(path), json_bytes(baseline))
    return baseline


def load_baseline(path: Path) -> dict:
    try:
        baseline = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BenchError(f"no baseline file {path}; create one with `python -m bench check --update --baseline {path}`") \
            from None
    except (OSError, ValueError) as error:
        raise BenchError(f"cannot read baseline {path}: {error}") from None
    if not isinstance(baseline, dict) or baseline.get("format") != BASELINE_FORMAT:
        raise BenchError(f"{path}: not a baseline file of format {BASELINE_FORMAT}; rewrite it with --update")
    return baseline


@dataclass(frozen=True)
class Finding:
    method: str
    task: str
    block: str
    metric: str
    baseline_mean: float
    spread: float
    observed_mean: float

    @property
    def worse_by(self) -> float:
        """Positive when the observed mean is worse than the baseline's, in the metric's units."""
        difference = self.observed_mean - self.baseline_mean
        return -difference if higher_is_better(self.metric) else difference

    def row(self) -> dict:
        return {"method": self.method, "task": self.task, "block": self.block, "metric": self.metric,
                "baseline": f"{self.baseline_mean:.5g}", "spread": f"{self.spread:.3g}",
                "now": f"{self.observed_mean:.5g}", "worse by (spreads)": f"{self.worse_by / self.spread:+.2f}"}


@dataclass(frozen=True)
class Report:
    tolerance: float
    findings: list[Finding]
    wall_seconds: float
    version_changes: dict

    @property
    def regressions(self) -> list[Finding]:
        return [f for f in self.findings if f.worse_by > self.tolerance * f.spread]

    @property
    def improvements(self) -> list[Finding]:
        return [f for f in self.findings if -f.worse_by > self.tolerance * f.spread]

    @property
    def passed(self) -> bool:
        return not self.regressions

    def text(self) -> str:
        lines = []
        if self.version_changes:
            lines.append("versions differ from the baseline's: " + ", ".join(
                f"{k} {old} -> {new}" for k, (old, new) in self.version_changes.items()))
        for title, findings in (("REGRESSIONS", self.regressions), ("improvements (consider --update)",
                                                                   self.improvements)):
            if findings:
                lines.append(f"{title}: worse (or better) than the baseline mean by more than "
                             f"{self.tolerance:g} x spread")
                lines.append(tabulate([f.row() for f in findings], headers="keys"))
        verdict = "FAILED" if self.regressions else "passed"
        lines.append(f"check {verdict}: {len(self.findings)} metrics compared, {len(self.regressions)} regressions, "
                     f"{len(self.improvements)} improvements, tolerance {self.tolerance:g} x spread, "
                     f"{self.wall_seconds:.0f} s")
        return "\n".join(lines)


def check(path: Path, methods: list[str] | None = None, tolerance: float | None = None) -> Report:
    """Reruns the baseline's configuration for ``methods`` (default: all of the baseline's) and compares."""
    baseline = load_baseline(path)
    config = baseline["configuration"]
    methods = methods or config["methods"]
    missing = [m for m in methods if m not in baseline["results"]]
    if missing:
        raise BenchError(f"{path} has no baseline for {', '.join(missing)}; measure it with "
                         f"`python -m bench check --update --baseline {path} --methods ...`")
    for method in methods:
        get_method(method)
    tolerance = _checked_tolerance(tolerance, baseline["tolerance"])
    started = time.perf_counter()
    measured = measure(methods, config["tasks"], config["seeds"], config["budgets"])
    findings = []
    for method in methods:
        for task, blocks in baseline["results"][method].items():
            per_seed = measured[method][task]
            for block, metrics in blocks.items():
                for metric, stats in metrics.items():
                    observed = [seed_metrics.get(block, {}).get(metric) for seed_metrics in per_seed]
                    if any(value is None for value in observed):
                        raise BenchError(f"{method} on {task} no longer reports {metric} for block {block}; "
                                         "if intended, rewrite the baseline with --update")
                    findings.append(Finding(method, task, block, metric, stats["mean"], stats["spread"],
                                            float(np.mean(observed))))
    now = _versions()
    changes = {k: (v, now.get(k)) for k, v in baseline["versions"].items() if now.get(k) != v}
    return Report(tolerance, findings, time.perf_counter() - started, changes)


def describe_baseline(baseline: dict) -> str:
    rows = []
    for method, by_task in baseline["results"].items():
        for task, blocks in by_task.items():
            for metric, stats in blocks[OVERALL_BLOCK].items():
                rows.append({"method": method, "task": task, "metric": metric, "mean": f"{stats['mean']:.5g}",
                             f"std (ddof {STD_DDOF})": f"{stats['std']:.3g}", "floor": f"{stats['floor']:.3g}",
                             "floor used": "yes" if stats["floor_used"] else ""})
    n_seeds = len(baseline["configuration"]["seeds"])
    return (tabulate(rows, headers="keys") + f"\n{n_seeds} seeds, whole test set shown (every block is stored), "
            f"measured in {baseline['wall_seconds']:.0f} s")
