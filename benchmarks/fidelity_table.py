"""Fidelity of methods at several budgets and seeds on the embedded tasks (the SAE paper's Table 2, here).

    python benchmarks/fidelity_table.py [--methods ae sae ...] [--budgets 200 500 1000] [--seeds 0 1 2] [--out runs-table]
                                        [--tasks ...] [--compact] [--threads 1] [--quiet]

Runs are written (and reused when already finished: the sweep resumes) under ``--out`` by ``python -m bench sweep``'s
engine (:mod:`bench.sweep`: a method that is not bdl-bench's runs in a process of its own, a failed run is one line
and the other runs go on, progress on a terminal unless ``--quiet``). The table shows mean ± standard deviation over
seeds (ddof = 1) of the fidelity metrics, next to the reference's noise floor, and "failed" where a seed's run
failed (then the exit code is the failure's, 4 for a method's own, after the table). A finished run scored against
another version of its task's reference (the reference was regenerated since) is scored again from its saved
predictions against the shipped one, and the table says how many were. ``--compact`` prints one row per method and
one column per task and budget, of the distance docs/methods.md shows (W1 for regression, total variation for
classification), in Markdown.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import torch
from tabulate import tabulate

from bench import records, scripts, sweep
from bench.arguments import budget_epochs, positive_whole, seed_number
from bench.errors import terminal_text
from bench.runner import score
from bench.tasks import get_task, task_names
from reference.store import load_reference

FIDELITY = {"classification": ("agreement", "total_variation"), "regression": ("w1", "w2")}


def rescored(folder: Path, result: dict) -> tuple[dict, bool]:
    """A finished run's record, scored again from its saved predictions against the shipped reference when it was
    scored against another (the reference was regenerated since); whether it was."""
    task = get_task(result["task"])
    reference = shipped_reference(task.name)
    if result["reference"]["sha256"] == reference.sha256:
        return result, False
    predictions = records.read_predictions_array(folder, result)
    overall, by_block = score(task, predictions, reference)
    return {**result, "metrics": overall, "metrics_by_block": by_block, "noise_floor": reference.noise_floor}, True


@functools.lru_cache(maxsize=None)
def shipped_reference(task_name: str):
    """The shipped reference, loaded (and its checksum verified) once per task rather than once per run."""
    return load_reference(get_task(task_name))


def measured(args) -> tuple[dict[tuple[str, str, float], list[dict]], int, list[tuple[int, str]]]:
    """Every run of the table, trained where not finished under ``args.out``: {(task, method as given, budget):
    [record of each seed that finished]}, how many were scored again, and (exit code, line) of each failed run."""
    runs = sweep.plan(args.methods, args.tasks, args.budgets, args.seeds, [], args.out, spelling=scripts.LIST_OPTIONS)
    torch.set_num_threads(args.threads)
    outcomes = sweep.execute(runs, threads=args.threads, quiet=args.quiet)
    cells: dict[tuple[str, str, float], list[dict]] = {}
    n_rescored = 0
    for run, record in sweep.finished_records(runs, outcomes):
        record, again = rescored(run.folder, record)
        n_rescored += again
        cells.setdefault((run.spec.task, run.spec.method, run.spec.budget), []).append(record)
    failures = [(outcomes[run].exit_code, f"{run.folder}: {outcomes[run].failure}") for run in runs
                if run in outcomes and outcomes[run].result is None]
    return cells, n_rescored, failures


def main() -> int:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--budgets", type=budget_epochs, nargs="+", default=[200, 500, 1000])
    parser.add_argument("--seeds", type=seed_number, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=["ae", "sae"])
    parser.add_argument("--out", type=Path, default=Path("runs-table"))
    parser.add_argument("--tasks", nargs="+", default=task_names(), choices=task_names())
    parser.add_argument("--compact", action="store_true")
    parser.add_argument("--threads", type=positive_whole, default=1, help="torch threads of each run")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args()
    cells, n_rescored, failures = measured(args)
    (compact if args.compact else full)(args, cells, n_rescored)
    for _, line in failures:
        print(f"error: {terminal_text(line)}", file=sys.stderr)
    return max((code for code, _ in failures), default=0)


def _spread(args, results: list[dict], metric: str, places: int, separator: str) -> str:
    """Mean and standard deviation over the seeds, or "failed" where a seed's run failed."""
    if len(results) < len(set(args.seeds)):
        return f"failed ({len(set(args.seeds)) - len(results)} of {len(set(args.seeds))} seeds)"
    values = np.array([r["metrics"][metric] for r in results])
    return f"{values.mean():.{places}f}{separator}{values.std(ddof=1):.{places}f}"


def full(args, cells, n_rescored: int) -> None:
    rows = []
    for task_name in args.tasks:
        names = FIDELITY[get_task(task_name).kind]
        floor = shipped_reference(task_name).noise_floor["all"]
        for budget in args.budgets:
            for method in args.methods:
                results = cells.get((task_name, method, budget), [])
                row = {"task": task_name, "budget": f"{budget:g}", "method": method,
                       "epochs": f"{results[0]['epochs_used']:g}" if results else ""}
                for metric in names:
                    row[metric] = _spread(args, results, metric, 4, " ± ")
                rows.append(row)
            rows.append({"task": task_name, "budget": f"{budget:g}", "method": "noise floor", "epochs": "",
                         **{metric: f"{floor[metric]:.4f}" for metric in names}})
    print(f"mean ± std over seeds {args.seeds} (ddof=1)" + rescored_note(n_rescored))
    print(tabulate(rows, headers="keys"))


DISTANCE = {"classification": "total_variation", "regression": "w1"}


def compact(args, cells, n_rescored: int) -> None:
    rows = []
    for method in args.methods:
        row = {"method": f"`{method}`"}
        for task_name in args.tasks:
            for budget in args.budgets:
                results = cells.get((task_name, method, budget), [])
                row[f"{task_name} {budget:g}"] = _spread(args, results, DISTANCE[get_task(task_name).kind], 3, "±")
        rows.append(row)
    floors = {task: shipped_reference(task).noise_floor["all"][DISTANCE[get_task(task).kind]] for task in args.tasks}
    print(f"mean ± std over seeds {args.seeds} (ddof=1); noise floors: "
          + ", ".join(f"{task} {floor:.3f}" for task, floor in floors.items()) + rescored_note(n_rescored))
    print(tabulate(rows, headers="keys", tablefmt="github"))


def rescored_note(n_rescored: int) -> str:
    return f"; {n_rescored} runs scored again against the shipped reference" if n_rescored else ""


if __name__ == "__main__":
    scripts.run(main)
