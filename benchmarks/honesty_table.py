"""The honesty probe for every method on every embedded task: rows through the network against rows charged.

    python benchmarks/honesty_table.py [--methods sgd de ...] [--tasks ...] [--settings] [--train-rows N]
                                       [--out FILE.json]

Each method runs at its ``check_budget`` with its default settings, seed 0 (see ``bench/honesty.py``); with
``--settings``, also over :func:`bench.honesty.setting_grid` (every count, flag and choice of the method moved
alone, then every real-valued setting at once), at 4 or 20 times the check budget where a setting needs more; a grid
point whose settings the method refuses (its own constraints) or where its code fails is listed as not probed, with
its one line. ``--out`` keeps the table
(:func:`bench.scripts.keep`); docs/honesty.md's is written from ``benchmarks/results/honesty.json``.
"""

from __future__ import annotations

import time

import torch
from tabulate import tabulate

from approximators import METHODS
from bench import scripts
from bench.arguments import positive_whole
from bench.errors import ConfigError, MethodFailed, describe_failure
from bench.honesty import probe, probe_at_a_budget_it_fits, setting_grid
from bench.tasks import task_names


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), help="built-in or plugin methods")
    parser.add_argument("--tasks", nargs="+", default=task_names(), choices=task_names())
    parser.add_argument("--settings", action="store_true", help="also probe the grid of non-default settings")
    parser.add_argument("--train-rows", type=positive_whole, help="only the first rows of each training set (faster)")
    parser.add_argument("--threads", type=positive_whole, default=1)
    scripts.out_option(parser)
    args = parser.parse_args()
    started = time.monotonic()
    torch.set_num_threads(args.threads)
    rows, unprobed = [], []
    for method in args.methods:
        for task in args.tasks:
            results = [probe(method, task, train_rows=args.train_rows)]
            for overrides in setting_grid(method, task) if args.settings else []:
                try:
                    results.append(probe_at_a_budget_it_fits(method, task, overrides, args.train_rows))
                except (ConfigError, MethodFailed) as refusal:  # a pair the method's own constraints refuse
                    unprobed.append({"method": method, "task": task, "settings": _settings(overrides.items()),
                                     "why": describe_failure(refusal)[1]})
            for r in results:
                rows.append({"method": method, "task": task, "settings": _settings(r.overrides),
                             "budget": f"{r.budget:g}", "training rows through the network": r.train_rows,
                             "epochs charged x N_train": f"{r.epochs_used:g} x {r.n_train} = {r.examples_charged}",
                             "test rows": r.test_rows, "test passes x N_test": f"{r.test_passes:g} x {r.n_test}",
                             "honest": "yes" if r.honest else "NO"})
            print(f"{method} {task}: {len(results)} probed", flush=True)
    print(tabulate(rows, headers="keys", tablefmt="github"))
    if unprobed:
        print(f"\nnot probed: the settings of {len(unprobed)} grid point(s) were refused, or the method failed there")
        print(tabulate(unprobed, headers="keys", tablefmt="github"))
    dishonest = sum(row["honest"] == "NO" for row in rows)
    print(f"\n{len(rows)} probes, {dishonest} dishonest, {len(unprobed)} not probed")
    scripts.keep(args.out, __file__, started, {"probes": rows, **({"not probed": unprobed} if unprobed else {})},
                 probes=len(rows), dishonest=dishonest, not_probed=len(unprobed))


def _settings(overrides) -> str:
    return " ".join(f"{k}={v}" for k, v in overrides) or "(defaults)"


if __name__ == "__main__":
    scripts.run(main)
