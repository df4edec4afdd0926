"""How the memory plan (:meth:`approximators.base.Footprint.bytes`) compares with what runs hold: each case is run in
a fresh process, and its peak resident memory after the predictive, less what was resident just before ``fit``, is
divided by what the plan counted. The plan means to count no more than a run holds (it refuses only what cannot
fit): a ratio of at least 1; on ``de`` with many members on ``digits`` it comes close to 1.

    python benchmarks/memory_plan.py [--cases de:toy-gap:members=20000:20000 ...]

A case is ``METHOD:TASK:SETTING=VALUE:BUDGET``; the default cases multiply members or chains until the run holds
hundreds of MB, so that what Python and PyTorch hold anyway does not decide the ratio. One thread.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import scripts  # noqa: E402
from bench.errors import BenchError  # noqa: E402

DEFAULT_CASES = ["de:toy-gap:members=20000:20000", "de:digits:members=2000:2000", "de:digits-cnn:members=300:300",
                 "de:digits-lstm:members=100:100", "sgld:toy-gap:chains=2000:2000", "ae:toy-gap:epochs=1:2000"]


def resident_bytes() -> int:
    """This process's resident memory now (Linux's ``/proc/self/statm``)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def restart_peak() -> None:
    """Sets this process's peak resident memory (``VmHWM``) to what is resident now (Linux >= 4.0), so that the peak
    read after a run is the run's, not one that loading the libraries and the task reached before it."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")


def peak_bytes() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def measure(case: str) -> dict:
    """Runs ``case`` here (this process is fresh): the plan's bytes and the growth of the peak resident memory."""
    import torch

    from approximators import METHODS, resolve_config
    from approximators.base import PROBE_ROWS, activations_per_row
    from bench.runner import metered, planned
    from bench.tasks import get_task

    torch.set_num_threads(1)
    method, task, setting, budget = case.split(":")
    key, value = setting.split("=")
    cls = METHODS[method]
    problem, data = metered(get_task(task), float(budget))
    approximator = planned(cls, resolve_config(cls, task, {key: value}), problem, data)
    n_params = sum(p.numel() for p in problem.model_factory().parameters())
    plan = approximator.footprint(float(budget), data.n_train).bytes(
        n_params, *activations_per_row(problem.model_factory, problem.x_test[:PROBE_ROWS]), problem.x_test.shape[0])
    restart_peak()
    before = resident_bytes()
    approximator.fit(problem, data, torch.Generator().manual_seed(0))
    approximator.predictive()
    grown = peak_bytes() - before
    return {"case": case, "plan (MiB)": round(plan / 2**20), "measured (MiB)": round(grown / 2**20),
            "measured / plan": round(grown / plan, 2)}


def main() -> None:
    parser = scripts.parser(__file__, __doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=DEFAULT_CASES)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # one case, measured in this fresh process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    from tabulate import tabulate

    rows = []
    for case in args.cases:
        if case.count(":") != 3 or "=" not in case.split(":")[2]:
            raise BenchError(f"--cases {case!r}: expected METHOD:TASK:SETTING=VALUE:BUDGET")
        done = subprocess.run([sys.executable, __file__, "--one", case], capture_output=True, text=True, cwd=ROOT)
        if done.returncode:
            said = done.stderr.strip().splitlines()
            why = said[-1].removeprefix("error: ") if said else f"exit code {done.returncode}"
            raise BenchError(f"case {case}: {why}")
        rows.append(json.loads(done.stdout))
    print(tabulate(rows, headers="keys"))


if __name__ == "__main__":
    scripts.run(main)
