"""benchmarks/hmc_speed.py: the NumPyro peer it times is the sampler the docs describe (fixed-step HMC with the
reference's step size), not one NumPyro's defaults make of it."""

import importlib
import sys
from pathlib import Path

import pytest

from bench.tasks import get_task

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_numpyro_s_hmc_takes_the_step_size_it_is_given_and_moves():
    """Issue 48: built without trajectory_length=None, NumPyro's HMC took steps of 2 pi / num_steps (its default
    trajectory length over the steps) and accepted nothing (acceptance 0.000 on both tasks)."""
    pytest.importorskip("numpyro", reason="the crosscheck extra: pip install -e '.[crosscheck]'")
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    script = importlib.import_module("hmc_speed")
    task = get_task("toy-gap")
    eps = script.step_size_of(task)
    theirs = script.Theirs(task, "float64", chains=2, steps=20, eps=eps, iterations=20)
    theirs(20)
    states = theirs.states
    assert abs(float(states.adapt_state.step_size[0]) - eps) <= 1e-12 * eps
    assert float(states.mean_accept_prob.min()) > 0.3, states.mean_accept_prob


def test_without_the_extra_the_script_says_so_in_one_line():
    """It imported JAX at the top: without the extra, every run (even one with a bad argument) was a traceback."""
    import subprocess

    blocked = ("import runpy, sys; sys.modules['jax'] = None; sys.argv = [sys.argv[1], '--tasks', 'toy-gap']; "
               "runpy.run_path(sys.argv[0], run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", blocked, str(BENCHMARKS / "hmc_speed.py")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stderr == ("error: timing NumPyro needs the optional extra, which lacks jax "
                                                    "here: pip install -e \".[crosscheck]\"\n"), done.stderr
