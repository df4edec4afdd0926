"""Runs stopped by SIGTERM half way and run again with the same command: the time they take, and the same predictions.

    python benchmarks/resume_check.py [--methods swag sae csgmcmc vogn hmc] [--out FILE]

For each method, on ``digits`` with its defaults and a budget of about half a minute here (:data:`BUDGETS`): the
command line ``python -m bench --method M --budget B --task digits`` run once uninterrupted (T seconds, process start
to end), then once more into another folder, stopped by SIGTERM after T / 2 seconds (exit 143, its checkpoint
written), then the same command again, which resumes. The table gives each run's CPU seconds (what a shared machine
disturbs least; the wall seconds beside them), their ratio, which is about the share of the budget left to train when
the stop came (the stopped run's training is not repeated; the process's start and the replay toward the resume
point cost the rest), whether the resumed run said so, and whether its predictions equal the uninterrupted run's bit
for bit (their sha256 in the records). It also gives, for each competition model with ``sgd`` and ``sae`` on generated
data (a rehearsal's), the seconds to write one checkpoint, as a share of the default interval between checkpoints
(``bench.checkpoint.DEFAULT_EVERY_SECONDS``).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench import checkpoint, records, scripts
from bench.arguments import positive_whole

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = {"swag": 2000, "sae": 3000, "csgmcmc": 2000, "vogn": 2000, "hmc": 30000}
"""Each method's budget on ``digits``: an uninterrupted run of some 30 to 60 seconds on one core, so that its start
(imports, loading the task) is a small part of it."""
WAIT_SECONDS = 3600
"""The longest one command of the check may take (a bound on every wait)."""


def _command(method: str, budget: float, out: Path) -> list[str]:
    return [sys.executable, "-m", "bench", "--method", method, "--budget", f"{budget:g}", "--task", "digits",
            "--out", str(out), "--quiet", "--checkpoint-every", "1h"]


def _timed(command: list[str], stop_after: float | None = None,
           folder: Path | None = None) -> tuple[float, float, int, str]:
    """Seconds from start to end, CPU seconds, the exit code and standard error of ``command``, stopped by SIGTERM
    after ``stop_after`` seconds when given, and at least a second after its run holds ``folder`` (its run trains:
    on a busy machine its start may take longer than the whole run took before). The CPU seconds (user and system, of the process and what it waited for)
    are what a shared machine disturbs least: one thread computes the same whatever else runs."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        if stop_after is not None:
            deadline = started + WAIT_SECONDS
            while folder is not None and not (folder / records.LOCK).exists() and process.poll() is None \
                    and time.perf_counter() < deadline:
                time.sleep(0.05)
            try:
                process.wait(timeout=max(stop_after - (time.perf_counter() - started), 1.0))
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=WAIT_SECONDS)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, process.returncode, err


def resume_row(method: str, budget: float, root: Path) -> dict:
    whole_wall, whole_cpu, code, err = _timed(_command(method, budget, root / "whole"))
    if code != 0:
        raise RuntimeError(f"{method}: the uninterrupted run failed: {err.strip().splitlines()[-1:]}")
    stopped = root / "stopped"
    _, _, code, err = _timed(_command(method, budget, stopped), stop_after=whole_wall / 2,
                             folder=records.run_folder(stopped, "digits", method, budget, 0))
    if code != 143:
        raise RuntimeError(f"{method}: the run stopped half way ended with {code}, not 143: {err.strip()[-300:]}")
    resumed_wall, resumed_cpu, code, err = _timed(_command(method, budget, stopped))
    if code != 0:
        raise RuntimeError(f"{method}: the resumed run failed: {err.strip().splitlines()[-1:]}")
    whole = records.read_result(records.run_folder(root / "whole", "digits", method, budget, 0))
    resumed = records.read_result(records.run_folder(stopped, "digits", method, budget, 0))
    start = resumed["resumed"][0]["from_epochs"] if resumed.get("resumed") else 0.0
    return {"method": method, "budget": budget, "uninterrupted (CPU s)": whole_cpu, "resumed (CPU s)": resumed_cpu,
            "resumed / uninterrupted": resumed_cpu / whole_cpu, "budget left to train": 1 - start / budget,
            "wall s (uninterrupted, resumed)": f"{whole_wall:.0f}, {resumed_wall:.0f}",
            "said so": "yes" if "resuming from its checkpoint" in err else "no",
            "same predictions": "yes" if resumed["predictions_sha256"] == whole["predictions_sha256"] else "NO"}


def write_cost_rows(rows_to_train: int) -> list[dict]:
    """Seconds to write one checkpoint of ``sgd`` and ``sae`` on each competition model (generated data), as a share
    of the default interval."""
    from bench import rehearsal
    from bench.runner import RunSpec, run

    rows = []
    for task in ("cifar10", "cifar10c", "imdb", "dermamnist", "uci-gap"):
        for method, settings in (("sgd", ()), ("sae", (("first_epochs", "1"), ("sequential_epochs", "1")))):
            writes: list[float] = []
            original = checkpoint.write_point

            def timed_write(*args, **kwargs):
                started = time.perf_counter()
                path = original(*args, **kwargs)
                writes.append(time.perf_counter() - started)
                return path

            checkpoint.write_point = timed_write
            try:
                with tempfile.TemporaryDirectory() as out:
                    spec = RunSpec(task=task, method=method, budget=2, out=Path(out), overrides=settings,
                                   checkpoint_every=1.0, rehearsal=rehearsal.Rehearsal(rows=rows_to_train))
                    checkpoint.Tape.stop_after_steps = 3
                    try:
                        run(spec)
                    except checkpoint.Stopped as stop:
                        size = stop.path.stat().st_size
            finally:
                checkpoint.write_point, checkpoint.Tape.stop_after_steps = original, None
            rows.append({"task": task, "method": method, "checkpoint (MB)": round(size / 2**20, 1),
                         "write (s)": max(writes),
                         "share of the default interval": max(writes) / checkpoint.DEFAULT_EVERY_SECONDS})
    return rows


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(BUDGETS), choices=list(BUDGETS))
    parser.add_argument("--rehearse-rows", type=positive_whole, default=256,
                        help="training rows of the generated competition data for the write cost")
    scripts.out_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as work:
        resumes = [resume_row(method, BUDGETS[method], Path(work) / method) for method in args.methods]
    for row in resumes:
        print(row, flush=True)
    costs = write_cost_rows(args.rehearse_rows)
    for row in costs:
        print(row, flush=True)
    scripts.keep(args.out, __file__, started, {"resume": resumes, "write-cost": costs})


if __name__ == "__main__":
    scripts.run(main)
