"""The honesty probe for every method on every embedded task: rows through the network against rows charged.

    python benchmarks/honesty_table.py [--methods sgd de ...]

Each method runs at its ``check_budget`` with its default settings, seed 0 (see ``bench/honesty.py``).
"""

from __future__ import annotations

import argparse

from tabulate import tabulate

from approximators import METHODS
from bench.honesty import probe
from bench.tasks import task_names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    args = parser.parse_args()
    rows = []
    for method in args.methods:
        for task in task_names():
            r = probe(method, task)
            rows.append({"method": method, "task": task, "budget": f"{r.budget:g}",
                         "training rows through the network": r.train_rows,
                         "epochs charged x N_train": f"{r.epochs_used:g} x {r.n_train} = {r.examples_charged}",
                         "test rows": r.test_rows, "test passes x N_test": f"{r.test_passes:g} x {r.n_test}",
                         "honest": "yes" if r.honest else "NO"})
    print(tabulate(rows, headers="keys", tablefmt="github"))


if __name__ == "__main__":
    main()
