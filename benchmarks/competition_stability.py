"""Do the competition defaults train at all? Short runs on random data of each task's official shapes.

    python benchmarks/competition_stability.py [--methods swag ... mfvi] [--tasks cifar10c ...] [--seeds 0 1 2]

The competition defaults of the SWAG and SG-MCMC methods are their authors' CIFAR settings, taken to
models they were not published for (no batch norm here); those of VOGN and MFVI are untuned. A default that diverges within a few
epochs on random inputs and labels of the task's official shapes (``--rows`` rows, the short runs of
``competition_cost.py``) is lowered by the rule of ``tune_trajectory.py``: down the rate grid to the
largest rate that trains on every seed, then one grid step more, so the default sits a grid step
from divergence. Nothing here looks at any reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from competition_cost import SHORT_RUNS  # noqa: E402
from tune_trajectory import grid  # noqa: E402

from approximators import METHODS, resolve_config  # noqa: E402
from bench import scripts
from bench.arguments import positive_whole, seed_number
from bench.errors import TrainingDiverged  # noqa: E402
from bench.runner import metered  # noqa: E402
from bench.tasks.competition import SPECS, generated_task  # noqa: E402


def trains(method: str, task_name: str, rows: int, seed: int, lr: float | None = None) -> bool:
    budget, settings = SHORT_RUNS[method]
    settings = {k: str(v) for k, v in settings.items()} | ({} if lr is None else {"lr": str(lr)})
    cls = METHODS[method]
    problem, data = metered(generated_task(task_name, rows, seed=seed), budget)
    try:
        cls(resolve_config(cls, task_name, settings)).fit(problem, data, torch.Generator().manual_seed(seed))
    except TrainingDiverged:
        return False
    return True


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", choices=list(METHODS),
                        default=["swag", "sgld", "csgmcmc", "vogn", "mfvi"])
    parser.add_argument("--tasks", nargs="+", choices=list(SPECS), default=list(SPECS))
    parser.add_argument("--seeds", type=seed_number, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rows", type=positive_whole, default=512)
    args = parser.parse_args()
    rows = []
    for method in args.methods:
        for task_name in args.tasks:
            default = resolve_config(METHODS[method], task_name, None).lr
            row = {"method": method, "task": task_name, "default lr": default,
                   "trains on seeds": sum(trains(method, task_name, args.rows, s) for s in args.seeds)}
            if row["trains on seeds"] < len(args.seeds):
                rates = grid(method)
                stable = next((lr for lr in sorted((g for g in rates if g < default), reverse=True)
                               if all(trains(method, task_name, args.rows, s, lr) for s in args.seeds)), None)
                below = [g for g in rates if stable is not None and g < stable]
                row["largest lr that trains"] = stable
                row["rule's lr (a grid step below)"] = max(below) if below else None
            rows.append(row)
    print(f"short runs of competition_cost.py on {args.rows} random rows, seeds {args.seeds}")
    print(tabulate(rows, headers="keys"))


if __name__ == "__main__":
    scripts.run(main)
