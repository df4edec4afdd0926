"""benchmarks/cross_cpu_round_off.py: the drift between two CPU kinds' baselines, per configuration, beside its
seeds' spread (the measurement behind bench.verify.CROSS_CPU_ROUND_OFF)."""

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "cross_cpu_round_off.py"


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
            metric: {"values": v, "mean": sum(v) / len(v),
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
    rows = script.compare(before, after, ["toy-gap"], ["digits"])
    assert [(r["method"], r["task"]) for r in rows] == [("sgd", "toy-gap"), ("sgd", "digits")]  # hmc's budget moved
    toy, digits = rows
    assert toy["cross-CPU drift"] == pytest.approx(0.002 / 2.0)  # relative to max(1, |value|), the largest
    assert digits["cross-CPU drift"] == pytest.approx(1e-4)  # the changed reference's agreement is not compared
    # the smallest spread relative to max(1, |mean|): w1's 0.2003 / sqrt 2, not rmse's 1.998 / sqrt 2 / 3.001
    assert toy["seed spread"] == pytest.approx(0.2003 / 2 ** 0.5)


def test_baselines_of_different_seeds_are_refused(script):
    with pytest.raises(SystemExit, match="different seeds"):
        script.compare(baseline({}, {}, seeds=(0, 1)), baseline({}, {}, seeds=(0, 2)), [], [])
