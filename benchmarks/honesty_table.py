"""The honesty probe for every method on every embedded task: rows through the network against rows charged.

    python benchmarks/honesty_table.py [--methods sgd de ...] [--tasks ...] [--settings] [--train-rows N]
                                       [--out FILE.json]

Each method runs at its ``check_budget`` with its default settings, seed 0 (see ``bench/honesty.py``); with
``--settings``, also over :func:`bench.honesty.setting_grid` (every count, flag and choice of the method moved
alone, then every real-valued setting at once), at 4 or 20 times the check budget where a setting needs more; a grid
point whose settings the method refuses (its own constraints) or where its code fails is listed as not probed, with
its one line. A method that is not bdl-bench's is probed in a process of its own (:class:`bench.executors.Isolated`),
so that whatever ends its code is its failure; a method that fails at its defaults is listed as not probed too, and
the other methods are still probed. Exit 1 when a probe is dishonest, else the code of the first failure at a
method's defaults (4 for the method's own), else 0. ``--out`` keeps the table
(:func:`bench.scripts.keep`); docs/honesty.md's is written from ``benchmarks/results/honesty.json``.
"""

from __future__ import annotations

import contextlib
import sys
import time

import torch
from tabulate import tabulate

from approximators import METHODS, get_method
from bench import executors, scripts
from bench.arguments import positive_whole
from bench.errors import EXIT_BAD_INPUT, EXIT_METHOD, FailedElsewhere, terminal_text
from bench.honesty import probe, probe_at_a_budget_it_fits, setting_grid
from bench.tasks import task_names


def main() -> int:
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
    # Every method is loaded (someone else's in a process of its own) before anything is probed: a name that loads
    # nothing is bad input, one line at once.
    executors.check_isolated(args.methods, [(task, ()) for task in args.tasks], args.threads,
                             spelling=scripts.LIST_OPTIONS)
    for method in args.methods:
        if not executors.isolates(method):
            get_method(method, scripts.LIST_OPTIONS)
    rows, unprobed, failures = [], [], []
    for method in args.methods:
        with contextlib.ExitStack() as stack:
            isolated = stack.enter_context(executors.Isolated(method, args.threads)) \
                if executors.isolates(method) else None

            def attempt(function, *arguments):
                """``function(*arguments)``'s outcome, run where ``method``'s code runs; a refusal (its settings, its
                constraints) or the method's failure is an outcome, anything else ends the script in one line."""
                outcome = isolated.call(function, *arguments) if isolated else executors.called(function, *arguments)
                if outcome.exit_code not in (0, EXIT_BAD_INPUT, EXIT_METHOD):
                    raise FailedElsewhere(outcome.exit_code, outcome.failure)
                return outcome

            for task in args.tasks:
                outcome = attempt(probe, method, task, None, 0, None, args.train_rows)
                if outcome.exit_code:
                    unprobed.append({"method": method, "task": task, "settings": "(defaults)",
                                     "why": outcome.failure})
                    failures.append((outcome.exit_code, f"{method} on {task}: {outcome.failure}"))
                    continue
                results = [outcome.result]
                grid = attempt(setting_grid, method, task) if args.settings else executors.Outcome([])
                for overrides in grid.result or []:
                    outcome = attempt(probe_at_a_budget_it_fits, method, task, overrides, args.train_rows)
                    if outcome.exit_code:  # a point the method's own constraints refuse, or where its code fails
                        unprobed.append({"method": method, "task": task, "settings": _settings(overrides.items()),
                                         "why": outcome.failure})
                    else:
                        results.append(outcome.result)
                for r in results:
                    rows.append({"method": method, "task": task, "settings": _settings(r.overrides),
                                 "budget": f"{r.budget:g}", "training rows through the network": r.train_rows,
                                 "epochs charged x N_train": f"{r.epochs_used:g} x {r.n_train} = {r.examples_charged}",
                                 "test rows": r.test_rows, "test passes x N_test": f"{r.test_passes:g} x {r.n_test}",
                                 "honest": "yes" if r.honest else "NO"})
                print(f"{method} {task}: {len(results)} probed", flush=True)
    print(tabulate(rows, headers="keys", tablefmt="github"))
    if unprobed:
        print(f"\nnot probed: {len(unprobed)} point(s) whose settings the method refused, or where it failed")
        print(tabulate(unprobed, headers="keys", tablefmt="github"))
    dishonest = sum(row["honest"] == "NO" for row in rows)
    print(f"\n{len(rows)} probes, {dishonest} dishonest, {len(unprobed)} not probed")
    scripts.keep(args.out, __file__, started, {"probes": rows, **({"not probed": unprobed} if unprobed else {})},
                 probes=len(rows), dishonest=dishonest, not_probed=len(unprobed))
    for _, line in failures:
        print(f"error: {terminal_text(line)}", file=sys.stderr)
    if dishonest:
        print(f"error: {dishonest} of {len(rows)} probes dishonest (marked NO above)", file=sys.stderr)
    return 1 if dishonest else (failures[0][0] if failures else 0)


def _settings(overrides) -> str:
    return " ".join(f"{k}={v}" for k, v in overrides) or "(defaults)"


if __name__ == "__main__":
    scripts.run(main)
