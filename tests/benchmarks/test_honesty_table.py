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
''')


def test_a_grid_point_the_method_refuses_is_listed_as_not_probed(tmp_path):
    (tmp_path / "ordered_plugin.py").write_text(PLUGIN)
    out = tmp_path / "honesty.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "honesty_table.py"), "--methods",
                           "ordered_plugin:Ordered", "--tasks", "toy-gap", "--settings", "--train-rows", "64",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
                               "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0 and not done.stderr, done.stderr
    kept = json.loads(out.read_text())
    rows = kept["tables"]["not probed"]["rows"]
    columns = kept["tables"]["not probed"]["columns"]
    refused = [dict(zip(columns, row)) for row in rows]
    assert len(refused) == kept["not_probed"] == 1, refused
    assert "low=0.5" in refused[0]["settings"] and "high=0.4" in refused[0]["settings"], refused
    assert refused[0]["why"].endswith("low (0.5) must not exceed high (0.4): the low mark is never above the high one")
    assert kept["probes"] >= 2 and kept["dishonest"] == 0, kept["probes"]
    assert f"{kept['probes']} probes, 0 dishonest, 1 not probed" in done.stdout
