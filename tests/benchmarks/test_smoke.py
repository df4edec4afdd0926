"""Every benchmark script runs (issue 48, item 6): each with the smallest arguments that still exercise its work, in
a process of its own as a user runs it, exits 0 with a result on standard output and nothing on standard error
that a traceback would leave. (``--help`` alone once passed a script whose parser could not be built.) Scripts
with tests of their own: cross_cpu_round_off, floor_calibration (its kept results), memory_plan, resume_check,
nuts_crosscheck and hmc_speed (the NumPyro ones need the crosscheck extra)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import docblocks

ROOT = Path(__file__).resolve().parents[2]

RUNS = {
    "competition_cost": ["--tasks", "uci-gap", "--rows", "16", "--methods", "sgd"],
    "competition_stability": ["--tasks", "uci-gap", "--methods", "sgd", "--seeds", "0", "--rows", "16"],
    "converged_gap linear": ["linear", "--methods", "sgd", "--budgets", "10", "--seeds", "1", "--rows", "16"],
    "converged_gap embedded": ["embedded", "--methods", "sgd", "--tasks", "toy-gap", "--budgets", "2",
                               "--converged", "4", "--out", "{tmp}/converged"],
    "converged_gap elbo": ["elbo", "--methods", "mfvi", "--task", "toy-gap", "--budgets", "2"],
    "cost": ["--epochs", "2", "--repeats", "1", "--methods", "sgd", "--no-hmc", "--tasks", "toy-gap"],
    "fidelity_table": ["--budgets", "10", "--seeds", "0", "--methods", "sgd", "--tasks", "toy-gap", "--out",
                       "{tmp}/fidelity"],
    "floor_calibration": ["--replicates", "2", "--seeds", "2", "--out", "{tmp}/floor-calibration.json"],
    "floor_simulation": ["--replicates-regression", "2", "--replicates-classification", "2", "--draws", "20"],
    "honesty_table": ["--methods", "sgd", "--tasks", "toy-gap"],
    "laplace_predictive_speed": ["--tasks", "toy-gap", "--rows", "16", "--repeats", "1"],
    "peers": ["--models", "digits", "--epochs", "4", "--repeats", "1", "--quick"],
    "per_example_cost": ["--tasks", "uci-gap", "--batch", "4", "--repeats", "1"],
    "predictive_draws": ["--tasks", "toy-gap", "--draws", "2"],
    "profiles": ["--cases", "sgd", "--models", "toy-gap", "--epochs", "4", "--repeats", "1", "--quick"],
    "sweep_timing": ["--methods", "sgd", "--tasks", "toy-gap", "--budgets", "2", "--seeds", "0"],
    "tune_anchored": ["--trials", "1", "--tasks", "toy-gap"],
    "tune_trajectory": ["sgd", "--budget", "10", "--seeds", "0", "--tasks", "toy-gap"],
    "vectorised_members": ["--epochs", "1", "--repeats", "1", "--methods", "ae", "--tasks", "toy-gap"],
    "wasserstein_speed": ["--repeats", "1"],
}


def _script(case: str) -> str:
    return case.split()[0]


def _run(script: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{script}.py"),
                           *(arg.replace("{tmp}", str(tmp_path)) for arg in args)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize("case", sorted(RUNS))
def test_a_benchmark_script_runs(case, tmp_path):
    done = _run(_script(case), RUNS[case], tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stdout.strip(), "the script printed no result"


def test_gate_calibration_runs_against_a_baseline_of_its_own(tmp_path, run_cli):
    """The calibration reruns a baseline with fresh seeds: here one made for it, sgd on toy-gap at 2 epochs (made in
    this process: the baseline is the script's input, not what is tested; the script itself runs as a user runs it)."""
    code, _, err = run_cli("check", "--update", "--baseline", tmp_path / "b.json", "--method", "sgd", "--task",
                           "toy-gap", "--budget", "2", "--seeds", "2")
    assert code == 0, err
    done = _run("gate_calibration", ["--sets", "1", "--seeds", "2", "--baseline", "{tmp}/b.json", "--out",
                                     "{tmp}/calibration.json"], tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    kept = json.loads((tmp_path / "calibration.json").read_text())
    assert [row["seeds"] for row in kept["sets"]] == ["2-3"] and kept["sets"][0]["flagged"] == 0
    assert kept["baseline_sha256"] == hashlib.sha256((tmp_path / "b.json").read_bytes()).hexdigest()
    assert docblocks.calibration_table(kept["sets"]) in done.stdout


def test_every_script_is_run_by_a_test():
    """A new script gets its smoke test: here, or in a test of its own."""
    scripts = {path.stem for path in (ROOT / "benchmarks").glob("*.py") if "__main__" in path.read_text()}
    own = {"cross_cpu_round_off", "memory_plan", "nuts_crosscheck", "hmc_speed", "gate_calibration", "gpu_check",
           "resume_check"}
    assert scripts - own == {_script(case) for case in RUNS}
