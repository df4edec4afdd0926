"""False alarms of the gate's test of means: fresh seeds of unchanged methods against the committed baseline.

    python benchmarks/gate_calibration.py [--sets 2] [--seeds N] [--workers W] [--out FILE.json]

Off the baseline's CPU, a primary metric whose round-off grows chaotically (another CPU kind makes its seeds other
draws) is tested by its mean: there another machine behaves like fresh seeds, so each set reruns the baseline's
configuration with seeds disjoint from the baseline's (10-19, 20-29, ...; with ``--seeds 2``, as CI reruns, 10-11,
12-13, ...) and compares it as on another CPU kind. Prints, per set, how many means were tested, the largest |z| among
them and how many the default (Bonferroni) tolerance flags: an unchanged method should flag none. (Fresh seeds are
another draw of every metric, so the metrics compared seed by seed, whose seeds another CPU kind keeps, move: their
calibration is ``benchmarks/cross_cpu_round_off.py``'s, against a real second CPU kind.) Each method runs with the baseline's
settings and from its source, as ``python -m bench check`` reruns it. ``--out`` keeps the result (every set's row,
the command, the baseline's sha256, the CPU and the date) as JSON: docs/leaderboard.md's table is written from
``benchmarks/results/gate-calibration.json`` (``python -m bench.docblocks --write``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import shlex
import sys
import time
from pathlib import Path

from bench import scripts
from bench.arguments import positive_whole
from bench.docblocks import calibration_table
from bench.errors import ConfigError
from bench.io import atomic_write_bytes, json_bytes
from bench.runner import environment
from leaderboard import gate


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--sets", type=positive_whole, default=2)
    parser.add_argument("--seeds", type=positive_whole, default=None, help="seeds per set (default: as many as the baseline's)")
    parser.add_argument("--workers", type=positive_whole, default=1)
    parser.add_argument("--baseline", type=Path, default=Path(__file__).parent / "baseline.json")
    parser.add_argument("--out", type=Path, help="JSON file that keeps the result")
    parser.add_argument("--method", nargs="+", default=[], dest="methods", metavar="SOURCE",
                        help="methods of one's own the baseline loads from package.module:ClassName, which a baseline "
                             "never imports unless named here (as `check --method`)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args()
    if min(args.sets, args.workers, 1 if args.seeds is None else args.seeds) < 1:
        parser.error(f"--sets, --seeds and --workers must be at least 1, got --sets {args.sets} --seeds {args.seeds} "
                     f"--workers {args.workers}")
    started = time.monotonic()
    rows = calibration(args.baseline, args.sets, args.seeds, args.workers, args.methods, args.quiet)
    print(calibration_table(rows))
    if args.out is not None:
        result = {"command": shlex.join(["python", "benchmarks/gate_calibration.py", *sys.argv[1:]]),
                  "baseline_sha256": hashlib.sha256(args.baseline.read_bytes()).hexdigest(),
                  "cpu": environment()["cpu"], "date": dt.date.today().isoformat(), "workers": args.workers,
                  "minutes": round((time.monotonic() - started) / 60, 1), "sets": rows}
        atomic_write_bytes(args.out, json_bytes(result))
        print(f"wrote {args.out}")


def calibration(path: Path, sets: int, seeds_per_set: int | None, workers: int,
                methods: list[str] | None = None, quiet: bool = False) -> list[dict]:
    """One row per set of fresh seeds (:data:`bench.docblocks.CALIBRATION_COLUMNS`), each said as it is done; the
    runs' progress bars on a terminal unless ``quiet``."""
    baseline = gate.load_baseline(path)
    config = baseline["configuration"]
    sources = gate.baseline_sources(baseline)
    unused = [given for given in methods or [] if given not in sources.values()]
    if unused:  # a mistyped source would otherwise be trusted silently, and the calibration run for minutes
        raise ConfigError(f"--method {unused[0]}: {path} measures no method from it (its methods come from "
                          f"{', '.join(sorted(set(sources.values())))})")
    gate.vet_sources(sources, list(sources), path, methods)
    held = len(config["seeds"])
    n = seeds_per_set or held
    rows = []
    for index in range(sets):
        seeds = list(range(held + index * n, held + (index + 1) * n))
        measured = gate.measure({m: list(by_task) for m, by_task in baseline["results"].items()}, seeds,
                                 config["budgets"], config.get("settings"), sources, workers=workers, quiet=quiet)
        report = gate.compare(baseline, measured, statistical=True)
        rows.append({"seeds": f"{seeds[0]}-{seeds[-1]}", "means": len(report.findings),
                     "tolerance": round(report.tolerance, 4),
                     "max_abs_z": round(max((abs(f.z) for f in report.findings), default=0.0), 4),
                     "flagged": len(report.flagged), "budget_mismatches": len(report.budget_mismatches)})
        print(f"set {index + 1} of {sets} (seeds {rows[-1]['seeds']}): {rows[-1]['flagged']} of {rows[-1]['means']} "
              "means flagged", flush=True)
    return rows


if __name__ == "__main__":
    scripts.run(main)
