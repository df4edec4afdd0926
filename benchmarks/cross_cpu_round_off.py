"""How far two CPU kinds' runs of one configuration and seed drift apart: the measurement behind
``bench.verify.CROSS_CPU_ROUND_OFF``.

Two gate baselines (``python -m bench check --update``) of the same code, measured on different CPU kinds, hold every
method's metrics for the same seeds. Per configuration (method, task), the largest relative difference
|before - after| / max(1, |before|) over its seeds and compared metrics says whether its round-off stayed round-off
or grew chaotically; beside it, the seeds' own spread (the smallest standard deviation relative to max(1, |mean|)
over the metrics) says what a difference of that size would matter. A tolerance is sound where it covers the runs
whose round-off stayed round-off and lies far below every configuration's seed-to-seed spread, so that an edit it
lets through could move no rank.

    git show 938a965:benchmarks/baseline.json > /tmp/intel-baseline.json   # an Intel Xeon's (AVX-512)
    python benchmarks/cross_cpu_round_off.py --before /tmp/intel-baseline.json --after benchmarks/baseline.json \\
        --task toy-gap diabetes-gap --reference-free digits

``--task``: tasks whose reference is the same in both (every metric compared); ``--reference-free``: tasks whose
reference changed between the two, compared on the metrics that do not read it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tabulate import tabulate

from bench import scripts

READS_THE_REFERENCE = {"agreement", "total_variation", "w1", "w2", "competition_w"}
"""Metrics computed against the reference posterior; the others (accuracy, nll, ece, rmse, log_likelihood) read the
test labels alone."""
TOLERANCES = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(1.0, abs(a))


def compare(before: dict, after: dict, tasks: list[str], reference_free: list[str]) -> list[dict]:
    """One row per configuration both baselines measured at the same budget and seeds: its largest cross-CPU
    relative difference and its seeds' smallest relative spread, over the compared metrics of the whole test set."""
    rows = []
    budgets = (before["configuration"]["budgets"], after["configuration"]["budgets"])
    same_seeds = before["configuration"]["seeds"] == after["configuration"]["seeds"]
    if not same_seeds:
        raise SystemExit("error: the two baselines measured different seeds; nothing to compare seed by seed")
    for method in sorted(after["results"]):
        if budgets[0].get(method) != budgets[1].get(method):
            continue
        for task in [*tasks, *reference_free]:
            if task not in after["results"][method] or task not in before["results"].get(method, {}):
                continue
            drift, spread = 0.0, math.inf
            for metric, now in after["results"][method][task]["all"].items():
                if task in reference_free and metric in READS_THE_REFERENCE:
                    continue
                then = before["results"][method][task]["all"][metric]["values"]
                drift = max(drift, *(relative(a, b) for a, b in zip(then, now["values"], strict=True)))
                spread = min(spread, now["std"] / max(1.0, abs(now["mean"])))
            rows.append({"method": method, "task": task, "budget": budgets[1][method], "cross-CPU drift": drift,
                         "seed spread": spread})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = scripts.parser(__file__, __doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="a baseline measured on one CPU kind")
    parser.add_argument("--after", type=Path, required=True, help="the same code's baseline on another CPU kind")
    parser.add_argument("--task", nargs="+", default=[], help="tasks whose reference both baselines share")
    parser.add_argument("--reference-free", nargs="+", default=[],
                        help="tasks whose reference changed between the two: only metrics that do not read it")
    args = parser.parse_args(argv)
    before, after = (json.loads(path.read_text()) for path in (args.before, args.after))
    print(f"before: {before['environment']['cpu_id']} ({before['environment']['cpu_capability']}); "
          f"after: {after['environment']['cpu_id']} ({after['environment']['cpu_capability']})")
    rows = sorted(compare(before, after, args.task, args.reference_free), key=lambda row: row["cross-CPU drift"])
    print(tabulate([{**row, "cross-CPU drift": f"{row['cross-CPU drift']:.1e}",
                     "seed spread": f"{row['seed spread']:.1e}"} for row in rows], headers="keys"))
    drifts = [row["cross-CPU drift"] for row in rows]
    print(f"\n{len(rows)} configurations; smallest seed spread {min(row['seed spread'] for row in rows):.1e}")
    for tolerance in TOLERANCES:
        print(f"within {tolerance:g}: {sum(d <= tolerance for d in drifts)} of {len(drifts)}")


if __name__ == "__main__":
    scripts.run(main)
