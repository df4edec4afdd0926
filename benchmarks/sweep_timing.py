"""Wall time of one sweep under each executor, and a sweep resumed after SIGKILL.

    python benchmarks/sweep_timing.py [--methods sgd de] [--tasks toy-gap diabetes-gap digits]
                                      [--budgets 5 10] [--seeds 0 1 2]

Each measurement runs ``python -m bench sweep ... --quiet`` as a fresh process into a fresh folder (so start-up,
imports and worker start-up are counted, as a user sees them):

- ``--workers 1``: one run after another in the sweep's process (1 torch thread per run, the default);
- ``--workers 1 --threads 2``: the same with 2 threads per run (its results may differ in round-off);
- ``--workers 2``: two worker processes of 1 thread each;
- ``--executor ray``: a local Ray instance the sweep starts and stops (its start-up counted);
- ``--executor ray --ray-address``: a Ray head started beforehand (``ray start --head``; its start-up not counted);
- ``--workers 2`` killed with SIGKILL once about half of its runs finished, then the same command again.

Every run's metrics and predictions are compared with the ``--workers 1`` sweep's: the executors must give
the same bytes, and the resumed sweep must skip exactly the runs that had finished when it was killed.
The Ray rows are left out when ray is not installed (``pip install -e '.[ray]'``). ``ray stop`` ends the head
started here, with every other Ray instance of this user on this machine.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from bench import scripts
from bench.sweep import plan
from bench.arguments import budget_epochs, seed_number
from bench.errors import FailedElsewhere
from bench.tasks import task_names

ROOT = Path(__file__).resolve().parents[1]
RAY_PORT = 6391


def finished_runs(out: Path) -> dict[str, tuple[dict, bytes]]:
    """Each finished run under ``out`` by folder: its metrics and the bytes of its predictions."""
    from bench import records

    return {str(p.parent.relative_to(out)): (records.read_result(p.parent)["metrics"],
                                             (p.parent / records.PREDICTIONS).read_bytes())
            for p in sorted(out.rglob(records.RESULT))}


def sweep(grid: list[str], out: Path, *options: str, env: dict | None = None) -> tuple[float, str]:
    """Runs the sweep to its end; returns its wall seconds and its standard output."""
    command = [sys.executable, "-m", "bench", "sweep", *grid, "--out", str(out), "--quiet", *options]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:  # the sweep's own line, and its exit code
        lines = done.stderr.strip().splitlines() or [f"exited with code {done.returncode}"]
        raise FailedElsewhere(done.returncode, f"{shlex.join(command)}: {lines[-1].removeprefix('error: ')}")
    return seconds, done.stdout


def killed_then_resumed(grid: list[str], out: Path, total: int) -> dict:
    """A --workers 2 sweep killed with SIGKILL once half of its runs finished, then run again to its end."""
    command = [sys.executable, "-m", "bench", "sweep", *grid, "--out", str(out), "--quiet", "--workers", "2"]
    started = time.perf_counter()
    killed = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while len(list(out.rglob("result.json"))) < total // 2 and killed.poll() is None:
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    until_kill = time.perf_counter() - started
    time.sleep(1.0)  # the orphaned workers notice within half a second and stop (their runs stay unfinished)
    at_kill = len(list(out.rglob("result.json")))
    seconds, printed = sweep(grid, out, "--workers", "2")
    skipped = int(re.search(r"(\d+) finished earlier \(skipped\)", printed).group(1))
    return {"until_kill": until_kill, "at_kill": at_kill, "skipped": skipped, "resumed": seconds}


def ray_installed() -> bool:
    from bench import optional

    return optional.installed("ray")


def ray_head() -> tuple[str, dict]:
    """Starts a 2-CPU Ray head on this machine; its address and the environment a driver needs to join it."""
    env = {**os.environ, "RAY_AUTH_MODE": "token"}  # Ray >= 2.59 starts a local head with token authentication
    subprocess.run([str(Path(sys.executable).parent / "ray"), "start", "--head", f"--port={RAY_PORT}", "--num-cpus=2",
                    "--include-dashboard=false", "--disable-usage-stats"], check=True, capture_output=True, env=env)
    return f"127.0.0.1:{RAY_PORT}", env


def main() -> None:
    parser = scripts.parser(__file__, __doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=["sgd", "de"])
    parser.add_argument("--tasks", nargs="+", choices=task_names(), default=["toy-gap", "diabetes-gap", "digits"])
    parser.add_argument("--budgets", nargs="+", type=budget_epochs, default=[5.0, 10.0])
    parser.add_argument("--seeds", nargs="+", type=seed_number, default=[0, 1, 2])
    args = parser.parse_args()
    grid = ["--method", *args.methods, "--task", *args.tasks, "--budget", *(f"{b:g}" for b in args.budgets),
            "--seed", *map(str, args.seeds)]
    work = Path(tempfile.mkdtemp(prefix="sweep-timing-"))
    rows, reference = [], None
    try:
        # The sweeps' own plan, so that what they would refuse is refused at once in the script's words (someone
        # else's method loaded in a process of its own, as the sweeps load it); it writes nothing.
        total = len(plan(args.methods, args.tasks, args.budgets, args.seeds, [], work / "plan",
                         spelling=scripts.LIST_OPTIONS))
        plans = [("--workers 1", []), ("--workers 1 --threads 2", ["--threads", "2"]),
                 ("--workers 2", ["--workers", "2"]), ("--executor ray (local, started by the sweep)", ["--executor", "ray"])]
        for name, options in plans:
            if "ray" in name and not ray_installed():
                rows.append({"executor": name, "wall s": "ray not installed"})
                continue
            out = work / re.sub(r"\W+", "-", name)
            seconds, _ = sweep(grid, out, *options)
            runs = finished_runs(out)
            reference = reference or runs
            differ = sum(runs[k] != reference[k] for k in reference)
            rows.append({"executor": name, "runs": len(runs), "wall s": f"{seconds:.1f}",
                         "s per run": f"{seconds / len(runs):.2f}", "runs differing from --workers 1": differ})
        if not ray_installed():
            rows.append({"executor": "--executor ray --ray-address", "wall s": "ray not installed"})
        else:
            address, env = ray_head()
            try:
                out = work / "ray-head"
                seconds, _ = sweep(grid, out, "--executor", "ray", "--ray-address", address, env=env)
                runs = finished_runs(out)
                rows.append({"executor": f"--executor ray --ray-address {address} (head already up)",
                             "runs": len(runs), "wall s": f"{seconds:.1f}", "s per run": f"{seconds / len(runs):.2f}",
                             "runs differing from --workers 1": sum(runs[k] != reference[k] for k in reference)})
            finally:
                subprocess.run([str(Path(sys.executable).parent / "ray"), "stop"], capture_output=True)
        resumed = killed_then_resumed(grid, work / "killed", total)
        runs = finished_runs(work / "killed")
        print(tabulate(rows, headers="keys"))
        print(f"\nSIGKILL of `sweep --workers 2` after {resumed['until_kill']:.1f} s with {resumed['at_kill']} of "
              f"{total} runs finished; the same command again skipped {resumed['skipped']} and finished the rest in "
              f"{resumed['resumed']:.1f} s; {len(runs)} runs, {sum(runs[k] != reference[k] for k in reference)} "
              "differing from the uninterrupted --workers 1 sweep")
        print(f"sweep: {' '.join(grid)} ({total} runs); {os.cpu_count()} CPU cores")
    finally:
        shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    scripts.run(main)
