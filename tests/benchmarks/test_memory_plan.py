"""benchmarks/memory_plan.py: the memory plan against what runs hold, each case in a fresh process. The plan means to
count no more than a run holds (it refuses only what cannot fit): what a run holds at its peak, over what was
resident before it, must be at least what it planned."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATH = ROOT / "benchmarks" / "memory_plan.py"


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="a run's peak is read from Linux's /proc")
@pytest.mark.parametrize("case", ["de:toy-gap:members=4000:4000", "de:digits-cnn:members=60:60"])
def test_a_run_holds_at_least_what_it_planned(case):
    done = subprocess.run([sys.executable, str(PATH), "--one", case], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    assert measured["plan (MiB)"] > 0 and measured["measured / plan"] >= 1, measured


def test_a_malformed_case_is_one_line():
    done = subprocess.run([sys.executable, str(PATH), "--cases", "de:toy-gap"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "METHOD:TASK:SETTING=VALUE:BUDGET" in done.stderr
