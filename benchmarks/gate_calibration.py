"""False alarms of the gate's statistical mode: fresh seeds of unchanged methods against the committed baseline.

    python benchmarks/gate_calibration.py [--sets 2] [--seeds N] [--workers W]

Another machine behaves like fresh seeds, so each set reruns the baseline's configuration with seeds
disjoint from the baseline's (10-19, 20-29, ...; with ``--seeds 2``, as CI reruns, 10-11, 12-13, ...) and
compares it statistically. Prints, per set, the
largest |z| of a fidelity metric, the largest z (worse) of another metric, and how many metrics the
default (Bonferroni) tolerance flags: an unchanged method should flag none. Each method runs with the baseline's
settings and from its source, as ``python -m bench check`` reruns it.
"""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from bench import scripts
from bench.arguments import positive_whole
from bench.errors import BenchError
from leaderboard import gate


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--sets", type=positive_whole, default=2)
    parser.add_argument("--seeds", type=positive_whole, default=None, help="seeds per set (default: as many as the baseline's)")
    parser.add_argument("--workers", type=positive_whole, default=1)
    parser.add_argument("--baseline", type=Path, default=Path(__file__).parent / "baseline.json")
    parser.add_argument("--method", nargs="+", default=[], dest="methods", metavar="SOURCE",
                        help="methods of one's own the baseline loads from package.module:ClassName, which a baseline "
                             "never imports unless named here (as `check --method`)")
    args = parser.parse_args()
    if min(args.sets, args.workers, 1 if args.seeds is None else args.seeds) < 1:
        parser.error(f"--sets, --seeds and --workers must be at least 1, got --sets {args.sets} --seeds {args.seeds} "
                     f"--workers {args.workers}")
    try:
        print(calibration(args.baseline, args.sets, args.seeds, args.workers, args.methods))
    except BenchError as error:  # a damaged baseline or a failed run: one line, as the CLI reports it
        parser.exit(1, f"error: {error}\n")


def calibration(path: Path, sets: int, seeds_per_set: int | None, workers: int, methods: list[str] | None = None) -> str:
    baseline = gate.load_baseline(path)
    config = baseline["configuration"]
    sources = gate.baseline_sources(baseline)
    gate.vet_sources(sources, list(sources), path, methods)
    held = len(config["seeds"])
    n = seeds_per_set or held
    rows = []
    for index in range(sets):
        seeds = list(range(held + index * n, held + (index + 1) * n))
        measured = gate.measure({m: list(by_task) for m, by_task in baseline["results"].items()}, seeds,
                                 config["budgets"], config.get("settings"), sources, workers=workers)
        report = gate.compare(baseline, measured, statistical=True)
        fidelity = [abs(f.z) for f in report.findings if f.two_sided]
        others = [f.z for f in report.findings if not f.two_sided]
        rows.append({"seeds": f"{seeds[0]}-{seeds[-1]}", "metrics": report.n_compared,
                     "tolerance (SE)": f"{report.tolerance:.2f}", "max |z| fidelity": f"{max(fidelity):.2f}",
                     "max z others (worse)": f"{max(others):.2f}", "flagged": len(report.flagged),
                     "budget mismatches": len(report.budget_mismatches)})
    return tabulate(rows, headers="keys", tablefmt="github")


if __name__ == "__main__":
    scripts.run(main)
