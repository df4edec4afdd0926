"""Fidelity of methods at several budgets and seeds on the embedded tasks (the SAE paper's Table 2, here).

    python benchmarks/fidelity_table.py [--methods ae sae ...] [--budgets 200 500 1000] [--seeds 0 1 2] [--out runs-table]
                                        [--tasks ...] [--compact]

Runs are written (and reused when already finished: the sweep resumes) under ``--out``; the table
shows mean ± standard deviation over seeds (ddof = 1) of the fidelity metrics, next to the
reference's noise floor. A finished run scored against another version of its task's reference (the
reference was regenerated since) is scored again from its saved predictions against the shipped one, and
the table says how many were. ``--compact`` prints one row per method and one column per task and budget, of
the distance docs/methods.md shows (W1 for regression, total variation for classification), in Markdown.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from tabulate import tabulate

from bench import records, scripts
from bench.arguments import budget_epochs, seed_number
from bench.runner import RunSpec, run, score
from bench.tasks import get_task, task_names
from reference.store import load_reference

FIDELITY = {"classification": ("agreement", "total_variation"), "regression": ("w1", "w2")}


RESCORED: list[Path] = []


def result_of(spec: RunSpec) -> dict:
    folder = records.run_folder(spec.out, spec.task, spec.method, spec.budget, spec.seed)
    if not (folder / records.RESULT).exists():
        return run(spec)
    result = records.read_result(folder)
    task = get_task(spec.task)
    reference = shipped_reference(spec.task)
    if result["reference"]["sha256"] == reference.sha256:
        return result
    with np.load(folder / records.PREDICTIONS, allow_pickle=False) as npz:
        predictions = npz[result["reference"]["key"]]
    overall, by_block = score(task, predictions, reference)
    RESCORED.append(folder)
    return {**result, "metrics": overall, "metrics_by_block": by_block, "noise_floor": reference.noise_floor}


@functools.lru_cache(maxsize=None)
def shipped_reference(task_name: str):
    """The shipped reference, loaded (and its checksum verified) once per task rather than once per run."""
    return load_reference(get_task(task_name))


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--budgets", type=budget_epochs, nargs="+", default=[200, 500, 1000])
    parser.add_argument("--seeds", type=seed_number, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=["ae", "sae"])
    parser.add_argument("--out", type=Path, default=Path("runs-table"))
    parser.add_argument("--tasks", nargs="+", default=task_names(), choices=task_names())
    parser.add_argument("--compact", action="store_true")
    args = parser.parse_args()
    if args.compact:
        compact(args)
        return
    rows = []
    for task_name in args.tasks:
        task = get_task(task_name)
        names = FIDELITY[task.kind]
        for budget in args.budgets:
            floor = None
            for method in args.methods:
                results = [result_of(RunSpec(task_name, method, budget, seed, out=args.out)) for seed in args.seeds]
                floor = results[0]["noise_floor"]["all"]
                row = {"task": task_name, "budget": f"{budget:g}", "method": method,
                       "epochs": f"{results[0]['epochs_used']:g}"}
                for metric in names:
                    values = np.array([r["metrics"][metric] for r in results])
                    row[metric] = f"{values.mean():.4f} ± {values.std(ddof=1):.4f}"
                rows.append(row)
            rows.append({"task": task_name, "budget": f"{budget:g}", "method": "noise floor", "epochs": "",
                         **{metric: f"{floor[metric]:.4f}" for metric in names}})
    print(f"mean ± std over seeds {args.seeds} (ddof=1)" + rescored_note())
    print(tabulate(rows, headers="keys"))


DISTANCE = {"classification": "total_variation", "regression": "w1"}


def compact(args) -> None:
    columns = [(task, budget) for task in args.tasks for budget in args.budgets]
    rows, floors = [], {}
    for method in args.methods:
        row = {"method": f"`{method}`"}
        for task_name, budget in columns:
            results = [result_of(RunSpec(task_name, method, budget, seed, out=args.out)) for seed in args.seeds]
            metric = DISTANCE[get_task(task_name).kind]
            values = np.array([r["metrics"][metric] for r in results])
            row[f"{task_name} {budget:g}"] = f"{values.mean():.3f}±{values.std(ddof=1):.3f}"
            floors[task_name] = results[0]["noise_floor"]["all"][metric]
        rows.append(row)
    print(f"mean ± std over seeds {args.seeds} (ddof=1); noise floors: "
          + ", ".join(f"{task} {floor:.3f}" for task, floor in floors.items()) + rescored_note())
    print(tabulate(rows, headers="keys", tablefmt="github"))


def rescored_note() -> str:
    return f"; {len(RESCORED)} runs scored again against the shipped reference" if RESCORED else ""


if __name__ == "__main__":
    scripts.run(main)
