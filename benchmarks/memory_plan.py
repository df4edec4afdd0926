"""How the memory plan (:func:`approximators.base.memory_needs`) compares with what runs hold: each case is run in a
fresh process, and its peak resident memory after the predictive, less what was resident just before ``fit`` and
the libraries' code it read (:func:`_grown`), is divided by what the plan counted. The plan means to count no more than a run holds (it refuses only what cannot
fit) and not much less: a ratio peak / plan of at least 1 and at most :data:`HIGHEST_RATIO`.

    python benchmarks/memory_plan.py [--cases de:toy-gap:members=20000:20000 ...]
    python benchmarks/memory_plan.py --competition [--tasks cifar10 ...] [--methods sgd ...] \\
        [--out benchmarks/results/memory-plan.json]

A case is ``METHOD:TASK:SETTING=VALUE:BUDGET``; the default cases multiply members or chains until the run holds
hundreds of MB, so that what Python and PyTorch hold anyway does not decide the ratio. ``--competition`` measures the
five competition models on generated data of their official sizes (``bench.tasks.competition.generated_task``: the
official training and test rows) with each method of :data:`COMPETITION_METHODS`, every pass over the training rows
cut to :data:`MEASURED_STEPS` minibatches (a fraction of an epoch; why that reaches the whole run's peak: see
:data:`MEASURED_STEPS`). It took 36 minutes on one core of a shared machine, mostly the predictive over CIFAR-10-C's
50,000 test rows; with ``--out`` each case is kept as it ends, and the same command run again resumes after the cases
kept. One thread.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import scripts  # noqa: E402
from bench.errors import BenchError  # noqa: E402

DEFAULT_CASES = ["de:toy-gap:members=20000:20000", "de:digits:members=2000:2000", "de:digits-cnn:members=300:300",
                 "de:digits-lstm:members=100:100", "sgld:toy-gap:chains=2000:2000", "ae:toy-gap:epochs=1:2000"]

COMPETITION_TASKS = ("cifar10", "cifar10c", "imdb", "dermamnist", "uci-gap")

COMPETITION_METHODS = {
    "sgd": (1.0, {}),
    "sae": (2.0, {"chains": "2", "members_per_chain": "1", "first_epochs": "1"}),
    "swag": (4.0, {"samples": "1"}),
    "laplace": (2.0, {}),
}
"""Method -> (budget, settings) of its measured runs: the smallest budget its rule accepts, with settings that keep
the measurement short without changing what the run holds at once. ``sae``: two chains of one member trained
together (vectorised: two networks at once, the plan's ``networks``), each after one epoch; ``swag``: one draw of the
predictive instead of 30 (each draw is one more pass over the test set of the same shapes, and the classification
average it adds to is allocated once: more draws take longer, not more memory)."""

MEASURED_STEPS = 3
"""Minibatches each pass over the training rows takes in a measured competition run (the training engine's epochs
and Laplace's curvature pass), instead of the tens of thousands of rows of the official sets: a fraction of an epoch.
It reaches the whole run's peak because every minibatch step allocates tensors of the same shapes (the peak of a step
is reached by the first, and the next two show that the allocator reuses it rather than grows), and everything else
the run holds is allocated at its full size whatever the rows each epoch reads: the training set itself (generated
at the official size), the networks' state, the members, the schedules for the whole budget, and the predictive over
all the official test rows."""

HIGHEST_RATIO = 1.5
"""The most a competition run may hold at its peak per byte the plan counted (``tests/benchmarks/test_memory_plan.py``
fails above it, and below 1)."""

COLUMNS = ("task", "model", "method", "settings", "budget", "plan (MiB)", "peak (MiB)", "peak / plan")
"""The kept table's columns (``benchmarks/results/memory-plan.json``, table ``competition``)."""


def resident_bytes() -> int:
    """This process's resident memory now (Linux's ``/proc/self/statm``)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def restart_peak() -> None:
    """Sets this process's peak resident memory (``VmHWM``) to what is resident now (Linux >= 4.0), so that the peak
    read after a run is the run's, not one that loading the libraries and the task reached before it."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(field + ":"))


def peak_bytes() -> int:
    return _status_bytes("VmHWM")


def file_bytes() -> int:
    """This process's resident pages of mapped files (``RssFile``: the libraries' code, above all)."""
    return _status_bytes("RssFile")


def _grown(approximator, problem, data) -> int:
    """Fits ``approximator`` and computes its predictive: how much the peak resident memory grew over what was
    resident before, less the pages of mapped files the run made resident (the libraries' code it ran for the first
    time in this process: 4 to 8 MiB, by the kernels a method runs, shared between processes and dropped by the
    system when memory is short, never a reason a run does not fit; a file's pages stay resident once read, so their
    growth at the end bounds what they added to the peak)."""
    import gc

    import torch

    from bench.memory import release_freed_memory

    gc.collect()
    release_freed_memory()  # as the run's predictive will: what was freed before it is not the run's to give back
    restart_peak()
    before, files = resident_bytes(), file_bytes()
    approximator.fit(problem, data, torch.Generator().manual_seed(0))
    approximator.predictive()
    return peak_bytes() - before - (file_bytes() - files)


def measure(case: str) -> dict:
    """Runs ``case`` here (this process is fresh): the plan's bytes and the growth of the peak resident memory."""
    import torch

    from approximators import METHODS, resolve_config
    from approximators.base import memory_needs
    from bench.runner import metered, planned
    from bench.tasks import get_task

    torch.set_num_threads(1)
    method, task, setting, budget = case.split(":")
    key, value = setting.split("=")
    cls = METHODS[method]
    problem, data = metered(get_task(task), float(budget))
    approximator = planned(cls, resolve_config(cls, task, {key: value}), problem, data)
    plan = memory_needs(approximator, float(budget), problem)[2].device
    grown = _grown(approximator, problem, data)
    return {"case": case, "plan (MiB)": round(plan / 2**20), "measured (MiB)": round(grown / 2**20),
            "measured / plan": round(grown / plan, 2)}


class _FewRows:
    """The metered training data as Laplace's curvature pass reads them, ending after ``rows`` rows."""

    def __init__(self, data, rows: int):
        self._data, self.n_train = data, min(rows, data.n_train)

    def batch(self, *args, **kwargs):
        return self._data.batch(*args, **kwargs)


def _cut_training_passes(batch_size: int) -> None:
    """Cuts every pass over the training rows of this process's runs to :data:`MEASURED_STEPS` minibatches (after
    the run was planned: the plan is the official run's)."""
    import torch

    from approximators import engine, laplace

    rows = MEASURED_STEPS * batch_size
    run, curvature, steps = engine.run, laplace._curvature_epoch, engine.steps_per_epoch
    # What a method plans by steps per epoch (SWAG's snapshots, the samplers' schedules) then fits the short epochs.
    engine.steps_per_epoch = lambda n_rows, size: min(steps(n_rows, size), MEASURED_STEPS)

    def short_run(objective, rule, params, data, *args, **kwargs):
        chosen = kwargs.pop("rows", None)
        chosen = torch.arange(data.n_train) if chosen is None else chosen
        return run(objective, rule, params, data, *args, rows=chosen[:rows], **kwargs)

    engine.run = short_run
    laplace._curvature_epoch = lambda problem, data, *args, **kwargs: curvature(problem, _FewRows(data, rows), *args,
                                                                                **kwargs)


def planned_case(method: str, task):
    """A competition case's run of ``method`` on ``task`` (a :class:`~bench.tasks.Task`) with
    :data:`COMPETITION_METHODS`'s budget and settings, planned: (approximator, problem, data, the plan's bytes for
    the CPU)."""
    from approximators import METHODS, resolve_config
    from approximators.base import memory_needs
    from bench.runner import metered, planned

    budget, settings = COMPETITION_METHODS[method]
    cls = METHODS[method]
    problem, data = metered(task, budget)
    approximator = planned(cls, resolve_config(cls, task.name, settings), problem, data)
    return approximator, problem, data, memory_needs(approximator, budget, problem)[2].device


def measure_competition(case: str) -> dict:
    """Runs competition case ``METHOD:TASK`` here (this process is fresh) on generated data of the official sizes:
    its row of the kept table."""
    import torch

    from bench.tasks.competition import SPECS, generated_task

    torch.set_num_threads(1)
    method, task = case.split(":")
    approximator, problem, data, plan = planned_case(method, generated_task(task))
    _cut_training_passes(approximator.config.batch_size)
    grown = _grown(approximator, problem, data)
    budget, settings = COMPETITION_METHODS[method]
    return dict(zip(COLUMNS, (task, SPECS[task].architecture.split(" (")[0], method,
                              " ".join(f"{key}={value}" for key, value in settings.items()) or "(defaults)", budget,
                              round(plan / 2**20, 1), round(grown / 2**20, 1), round(grown / plan, 2))))


def _fresh(flag: str, case: str) -> dict:
    done = subprocess.run([sys.executable, __file__, flag, case], capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        said = done.stderr.strip().splitlines()
        why = said[-1].removeprefix("error: ") if said else f"exit code {done.returncode}"
        raise BenchError(f"case {case}: {why}")
    return json.loads(done.stdout)


def _kept_rows(path: Path | None) -> tuple[list[dict], float]:
    """The rows a previous run of the command kept at ``path`` (to resume after them), and its minutes."""
    if path is None or not path.exists():
        return [], 0.0
    from bench.io import read_json

    kept = read_json(path, "the memory plan's kept measurement", f"remove {path} to measure every case again")
    table = kept.get("tables", {}).get("competition", {})
    if table.get("columns") != list(COLUMNS):
        return [], 0.0
    return [dict(zip(COLUMNS, row)) for row in table["rows"]], float(kept.get("minutes", 0.0))


def competition(args: argparse.Namespace) -> None:
    from tabulate import tabulate

    cases = [(task, method) for task in args.tasks for method in args.methods]
    rows, minutes = _kept_rows(args.out)
    started = time.monotonic() - 60 * minutes
    done = {(row["task"], row["method"]) for row in rows}
    if done:
        print(f"resuming: {len(done)} case(s) kept in {args.out}")
    for task, method in cases:
        if (task, method) in done:
            continue
        rows.append(_fresh("--one-competition", f"{method}:{task}"))
        print(f"{task} {method}: peak / plan {rows[-1]['peak / plan']:.2f}", flush=True)
        scripts.keep(args.out, __file__, started, {"competition": rows}, steps_per_training_pass=MEASURED_STEPS)
    print(tabulate(rows, headers="keys"))


def main() -> None:
    parser = scripts.parser(__file__, __doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=DEFAULT_CASES)
    parser.add_argument("--competition", action="store_true",
                        help="the competition models on generated data of their official sizes, each method of "
                             "COMPETITION_METHODS")
    parser.add_argument("--tasks", nargs="+", choices=COMPETITION_TASKS, default=list(COMPETITION_TASKS))
    parser.add_argument("--methods", nargs="+", choices=sorted(COMPETITION_METHODS), default=list(COMPETITION_METHODS))
    scripts.out_option(parser)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # one case, measured in this fresh process
    parser.add_argument("--one-competition", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    if args.one_competition:
        print(json.dumps(measure_competition(args.one_competition)))
        return
    if args.competition:
        competition(args)
        return
    from tabulate import tabulate

    rows = []
    for case in args.cases:
        if case.count(":") != 3 or "=" not in case.split(":")[2]:
            raise BenchError(f"--cases {case!r}: expected METHOD:TASK:SETTING=VALUE:BUDGET")
        rows.append(_fresh("--one", case))
    print(tabulate(rows, headers="keys"))


if __name__ == "__main__":
    scripts.run(main)
