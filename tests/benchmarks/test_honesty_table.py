"""benchmarks/honesty_table.py with a user's method: a grid point its own constraints refuse is listed as not
probed, in its own words, and the other points are probed (the grid once ended in a traceback there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = textwrap.dedent('''
    from dataclasses import dataclass
    from typing import ClassVar

    from approximators.map import MAP, MAPConfig


    @dataclass(frozen=True)
    class OrderedConfig(MAPConfig):
        low: float = 0.1
        high: float = 0.2
        free: float = 1.0  # no declared interval
        BOUNDS: ClassVar[dict] = {**MAPConfig.BOUNDS, "low": "(0, 1)", "high": "(0, 0.8)"}
        AT_MOST: ClassVar[dict] = {**MAPConfig.AT_MOST, "low": ("high", "the low mark is never above the high one")}


    class Ordered(MAP):
        name = "ordered"
        summary = "sgd with two ordered marks it ignores"
        Config = OrderedConfig


    class Exits(MAP):
        name = "exits"
        summary = "ends its process in its fit"

        def fit(self, problem, data, generator):
            import os
            os._exit(0)
''')


def _honesty_table(tmp_path, *methods, out=None):
    (tmp_path / "ordered_plugin.py").write_text(PLUGIN)
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "honesty_table.py"), "--methods", *methods,
                           "--tasks", "toy-gap", "--settings", "--train-rows", "64",
                           *(["--out", str(out)] if out else [])], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
                                         "OMP_NUM_THREADS": "1"})


def test_a_grid_point_the_method_refuses_is_listed_as_not_probed(tmp_path, monkeypatch, capsys, benchmark_script,
                                                                 plugins_in_process):
    """In the test's process (the script's main, the method not in a process of its own): what is listed is the
    subject here, not how a method's process ends (the next test's)."""
    (tmp_path / "ordered_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "honesty.json"
    monkeypatch.setattr(sys, "argv", ["honesty_table.py", "--methods", "ordered_plugin:Ordered", "--tasks", "toy-gap",
                                      "--settings", "--train-rows", "64", "--out", str(out)])
    try:
        code = benchmark_script("honesty_table").main()
    finally:
        sys.modules.pop("ordered_plugin", None)  # this test's file, gone with its folder
    stdout, stderr = capsys.readouterr()
    assert code == 0 and not stderr, stderr
    kept = json.loads(out.read_text())
    rows = kept["tables"]["not probed"]["rows"]
    columns = kept["tables"]["not probed"]["columns"]
    refused = [dict(zip(columns, row)) for row in rows]
    assert len(refused) == kept["not_probed"] == 1, refused
    assert "low=0.5" in refused[0]["settings"] and "high=0.4" in refused[0]["settings"], refused
    assert refused[0]["why"].endswith("low (0.5) must not exceed high (0.4): the low mark is never above the high one")
    assert kept["probes"] >= 2 and kept["dishonest"] == 0, kept["probes"]
    assert f"{kept['probes']} probes, 0 dishonest, 1 not probed" in stdout


def test_a_method_that_ends_its_process_is_its_failure_and_the_others_are_still_probed(tmp_path):
    """The probe ran a user's method in the script's own process: os._exit(0) in its fit ended the script with exit
    0 and no word, and a method that raised ended it before the next method was probed."""
    done = _honesty_table(tmp_path, "ordered_plugin:Exits", "ordered_plugin:Ordered")
    assert done.returncode == 4, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        "error: ordered_plugin:Exits on toy-gap: method 'exits': its process ended with exit code 0 in its fit"), \
        done.stderr
    assert "ordered_plugin:Ordered toy-gap: 3 probed" in done.stdout, done.stdout


def test_a_method_that_does_not_load_is_named_by_the_script_s_own_option(tmp_path):
    """The script's option is --methods; its line once said --method, the CLI's."""
    done = _honesty_table(tmp_path, "sgd", "no_such_plugin:Method")
    assert done.returncode == 2 and done.stderr == ("error: --methods no_such_plugin:Method: cannot import "
                                                    "no_such_plugin (No module named 'no_such_plugin')\n"), done.stderr
