"""benchmarks/fidelity_table.py runs through the sweep's engine: a user's method that ends its process, or raises,
is its own failure in one line per run, and the other methods' rows are still measured (the script ran every method
in its own process, so os._exit(0) ended it with exit 0 and no word, and a raise ended it before the next method)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = textwrap.dedent('''
    import os

    from approximators.map import MAP


    class Exits(MAP):
        name = "exits"
        summary = "ends its process in its fit"

        def fit(self, problem, data, generator):
            os._exit(0)


    class Raises(MAP):
        name = "raises"
        summary = "raises in its fit"

        def fit(self, problem, data, generator):
            raise RuntimeError("boom")
''')


def test_a_failing_method_is_its_own_line_and_the_other_rows_are_measured(tmp_path):
    (tmp_path / "failing_plugin.py").write_text(PLUGIN)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fidelity_table.py"), "--methods",
                           "failing_plugin:Exits", "failing_plugin:Raises", "sgd", "--budgets", "1", "--seeds", "0", "1",
                           "--tasks", "toy-gap", "--out", str(tmp_path / "runs"), "--quiet"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
                               "OMP_NUM_THREADS": "1"})
    assert done.returncode == 4, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 4 and all(line.startswith("error: ") for line in lines), done.stderr
    assert sum("method 'exits': its process ended with exit code 0 in its fit" in line for line in lines) == 2
    assert sum("method 'raises' failed in its fit: RuntimeError: boom" in line for line in lines) == 2
    rows = {line.split()[2]: line for line in done.stdout.splitlines() if line.startswith("toy-gap")}
    assert "failed (2 of 2 seeds)" in rows["failing_plugin:Exits"] and "±" in rows["sgd"], done.stdout


def test_a_method_that_does_not_load_is_named_by_the_script_s_own_option(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fidelity_table.py"), "--methods", "sgd",
                           "no_such_plugin:Method", "--budgets", "1", "--seeds", "0", "--tasks", "toy-gap", "--out",
                           str(tmp_path / "runs"), "--quiet"], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2 and done.stderr == ("error: --methods no_such_plugin:Method: cannot import "
                                                    "no_such_plugin (No module named 'no_such_plugin')\n"), done.stderr
    assert not (tmp_path / "runs").exists()
