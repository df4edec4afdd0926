"""benchmarks/cross_cpu_round_off.py: the drift between two CPU kinds' baselines, per configuration, and what verify
and the gate make of it (the measurement behind bench.drift and docs/leaderboard.md's cross-CPU tables)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_same_to_round_off

ROOT = Path(__file__).resolve().parents[2]
PATH = ROOT / "benchmarks" / "cross_cpu_round_off.py"
KEPT = ROOT / "benchmarks" / "results" / "cross-cpu.json"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("cross_cpu_round_off", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def baseline(values: dict, budgets: dict, seeds=(0, 1)) -> dict:
    """``values``: {(method, task): {metric: [per seed]}}."""
    results = {}
    for (method, task), metrics in values.items():
        results.setdefault(method, {})[task] = {"all": {
            metric: {"values": v, "mean": sum(v) / len(v), "floor": 0.0,
                     "std": (sum((x - sum(v) / len(v)) ** 2 for x in v) / (len(v) - 1)) ** 0.5}
            for metric, v in metrics.items()}}
    return {"configuration": {"budgets": budgets, "seeds": list(seeds)}, "results": results}


def test_drift_is_the_largest_relative_difference_and_reference_metrics_of_a_changed_reference_are_left_out(script):
    before = baseline({("sgd", "toy-gap"): {"w1": [0.5, 0.7], "rmse": [2.0, 4.0]},
                       ("sgd", "digits"): {"agreement": [0.9, 0.8], "nll": [0.3, 0.5]},
                       ("hmc", "toy-gap"): {"w1": [0.5, 0.6]}}, {"sgd": 20.0, "hmc": 100.0})
    after = baseline({("sgd", "toy-gap"): {"w1": [0.5, 0.7003], "rmse": [2.002, 4.0]},
                      ("sgd", "digits"): {"agreement": [0.1, 0.2], "nll": [0.3, 0.5001]},
                      ("hmc", "toy-gap"): {"w1": [0.9, 0.6]}}, {"sgd": 20.0, "hmc": 200.0})
    rows = script.drift_rows(before, after, ["toy-gap"], ["digits"])
    assert [(r["method"], r["task"]) for r in rows] == [("sgd", "toy-gap"), ("sgd", "digits")]  # hmc's budget moved
    toy, digits = rows
    assert toy["drift (relative)"] == pytest.approx(0.002 / 2.002)  # relative to the larger value, the largest
    assert digits["drift (relative)"] == pytest.approx(0.0001 / 0.5001)  # the changed reference's agreement left out
    assert toy["drift (sd)"] == pytest.approx(0.0003 / (0.2003 / 2 ** 0.5))  # w1's: in its seeds' spread, the largest
    assert toy["seed spread (relative)"] == pytest.approx((0.2003 / 2 ** 0.5) / 0.60015)


def test_baselines_of_different_seeds_are_refused(script):
    with pytest.raises(SystemExit, match="different seeds"):
        script.drift_rows(baseline({}, {}, seeds=(0, 1)), baseline({}, {}, seeds=(0, 2)), [], [])


def test_the_kept_result_is_what_the_committed_baselines_give(script, tmp_path, monkeypatch):
    """docs/leaderboard.md's cross-CPU tables are written from benchmarks/results/cross-cpu.json: recomputed here from
    the committed baselines by the kept command (to round-off: another CPU kind may move a t quantile's last bits)."""
    import shlex

    kept = json.loads(KEPT.read_text())
    arguments = shlex.split(kept["command"])[2:]
    out = arguments.index("--out")
    arguments[out + 1] = str(tmp_path / "cross-cpu.json")
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["cross_cpu_round_off.py", *arguments])
    script.main(arguments)
    again = json.loads((tmp_path / "cross-cpu.json").read_text())
    assert_same_to_round_off(again["tables"], kept["tables"])
    assert again["elsewhere"] == kept["elsewhere"] and again["here"] == kept["here"]
    alarms = dict(zip(kept["tables"]["gate-false-alarms"]["columns"], kept["tables"]["gate-false-alarms"]["rows"][0]))
    assert (alarms["moved"], alarms["flagged"]) == (0, 0), "CI's check passes the other CPU kind's unchanged runs"
