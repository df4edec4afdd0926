"""A baseline is a file anyone can edit: ``check`` reads every field it compares with (results, runs, environment,
tasks) as well as what it reruns, and refuses a damaged one in one line before anything trains. A baseline it
accepts compares at least one metric, and a check that compares none fails."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.errors import EXIT_BAD_INPUT, BenchError
from leaderboard import gate
from tests.reliability.test_error_boundary import assert_one_line

PROJECT_BASELINE = Path(__file__).parents[2] / "benchmarks" / "baseline.json"


def small_baseline() -> dict:
    """The project's baseline cut to sgd on toy-gap: a genuine file, measured by ``check --update``."""
    baseline = json.loads(PROJECT_BASELINE.read_text())
    configuration = baseline["configuration"]
    configuration.update(methods=["sgd"], tasks=["toy-gap"], budgets={"sgd": configuration["budgets"]["sgd"]},
                         settings={"sgd": configuration["settings"].get("sgd", {})},
                         sources={"sgd": configuration["sources"].get("sgd", "sgd")})
    baseline["results"] = {"sgd": {"toy-gap": baseline["results"]["sgd"]["toy-gap"]}}
    baseline["runs"] = {"sgd": {"toy-gap": baseline["runs"]["sgd"]["toy-gap"]}}
    return baseline


def remeasured(baseline: dict) -> dict:
    """What :func:`gate.measure` returns for an unchanged method: every seed's values exactly as the baseline's."""
    n = len(baseline["configuration"]["seeds"])
    return {method: {task: [{"metrics": {block: {metric: stats["values"][i] for metric, stats in metrics.items()}
                                         for block, metrics in blocks.items()},
                             **{name: baseline["runs"][method][task][name][i] for name in gate.BUDGET_FIELDS}}
                            for i in range(n)]
                     for task, blocks in by_task.items()}
            for method, by_task in baseline["results"].items()}


@pytest.fixture
def nothing_trains(monkeypatch):
    """Fails the test if the check gets as far as measuring."""
    def measure(*_args, **_kwargs):
        raise AssertionError("the check measured a baseline it should have refused")
    monkeypatch.setattr(gate.runs, "measure", measure)


def _set(baseline: dict, path: tuple, value) -> dict:
    edited = copy.deepcopy(baseline)
    target = edited
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return edited


DELETE = object()
STATS = ("results", "sgd", "toy-gap", "all", "w1")
PATHS = [("environment",), ("environment", "torch_threads"), ("environment", "cpu"), ("results",),
         ("results", "sgd"), ("results", "sgd", "toy-gap"), ("results", "sgd", "toy-gap", "all"), STATS,
         (*STATS, "values"), (*STATS, "mean"), (*STATS, "std"), (*STATS, "floor"), ("runs",), ("runs", "sgd"),
         ("runs", "sgd", "toy-gap"), ("runs", "sgd", "toy-gap", "epochs_used"), ("runs", "sgd", "toy-gap", "test_passes"),
         ("configuration", "tasks"), ("configuration", "methods"), ("configuration", "seeds"),
         ("configuration", "budgets", "sgd"), ("configuration", "sources")]
HOSTILE = st.sampled_from([DELETE, math.inf, math.nan, -1.0, 0, 10**400, "x", None, True, [], {}, [1.0], ["x", "y"],
                           [math.nan] * 10, [0.5] * 9, [0.5] * 11, ["../../etc"], ["uci-gap"], ["toy-gap", "toy-gap"],
                           ["sgd", "de"], {"toy-gap": {}}, {"sgd": {}}])
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), value=st.one_of(HOSTILE, JSON))
def test_an_edited_baseline_is_refused_in_one_line_or_compares_something(tmp_path, path, value):
    """Property: whatever a field of a baseline holds, loading it is one BenchError line, or the baseline it accepts
    compares at least one metric, and an unchanged method passes it (no TypeError, no silent pass on nothing)."""
    baseline = _set(small_baseline(), path, value)
    file = tmp_path / "baseline.json"
    file.write_text(json.dumps(baseline))
    try:
        loaded = gate.load_baseline(file)
    except BenchError as error:
        assert "\n" not in str(error) and str(file) in str(error)
        return
    report = gate.compare(loaded, remeasured(loaded))
    assert report.n_compared > 0 and report.passed, report.text()


@pytest.mark.parametrize("path, value, fragment", [
    (("environment",), [1], "its environment is missing or not an object"),
    (("environment", "cpu"), ["a list"], "environment must map"),
    ((*STATS, "values"), ["x", "y"], "its values must be 10 finite numbers"),
    ((*STATS, "values"), [math.nan] * 10, "its values must be 10 finite numbers"),
    ((*STATS, "values"), [0.5] * 9, "its values must be 10 finite numbers"),
    ((*STATS, "mean"), math.inf, "its mean, std and floor must be finite numbers"),
    ((*STATS, "mean"), 0.5, "are not those of its values"),
    (("runs", "sgd", "toy-gap", "epochs_used"), ["20", "20"], "the runs of sgd on toy-gap must give epochs_used"),
    (("runs", "sgd", "toy-gap", "epochs_used"), [20.0], "the runs of sgd on toy-gap must give epochs_used"),
    (("results", "sgd"), {}, "the results of sgd must hold one or more of its tasks"),
    (("results", "sgd", "toy-gap", "all"), {}, "must hold the block 'all' and metrics for every block"),
    (("configuration", "tasks"), ["../../etc"], "'../../etc' is not a task"),
    (("configuration", "tasks"), ["uci-gap"], "the results of sgd must hold one or more of its tasks"),
    (("configuration", "tasks"), ["toy-gap", "digits"], "no method's results hold its task digits"),
    (("configuration", "methods"), ["../x"], "'../x' is not a method's name"),
])
def test_each_kind_of_damaged_baseline_is_one_line_before_anything_trains(tmp_path, run_cli, nothing_trains, path,
                                                                          value, fragment):
    file = tmp_path / "baseline.json"
    file.write_text(json.dumps(_set(small_baseline(), path, value)))
    code, _, err = run_cli("check", "--baseline", file)
    assert_one_line(code, err, EXIT_BAD_INPUT, str(file), fragment)


def test_a_check_of_methods_and_tasks_without_results_is_refused_not_passed(tmp_path, run_cli, nothing_trains):
    baseline = small_baseline()
    baseline["configuration"]["tasks"].append("digits")
    baseline["configuration"]["methods"].append("de")
    baseline["configuration"]["budgets"]["de"] = 10.0
    de = json.loads(PROJECT_BASELINE.read_text())
    baseline["results"]["de"] = {"digits": de["results"]["de"]["digits"]}
    baseline["runs"]["de"] = {"digits": de["runs"]["de"]["digits"]}
    file = tmp_path / "baseline.json"
    file.write_text(json.dumps(baseline))
    code, _, err = run_cli("check", "--baseline", file, "--method", "sgd", "--task", "digits")
    assert_one_line(code, err, EXIT_BAD_INPUT, "holds no results for sgd on digits: the check would compare nothing")


def test_a_report_that_compared_nothing_fails():
    report = gate.compare(small_baseline(), {})
    assert report.n_compared == 0 and not report.passed
    assert "NOTHING COMPARED" in report.text() and "check FAILED" in report.text()


def test_an_honest_remeasurement_passes_the_small_baseline():
    """The fixture the property edits is itself accepted and passes: the property's refusals are the edits'."""
    baseline = small_baseline()
    report = gate.compare(baseline, remeasured(baseline))
    assert report.passed and report.n_compared == 5


def _passes() -> int:
    """An update measures every run twice where this machine has other kernels to run (natively, then with them)."""
    from bench.executors import other_kernels_differ

    return 2 if other_kernels_differ() else 1


@pytest.mark.parametrize("seeds, budget, planned", [("60000", "2", 120_000), ("1000000000", "2", 2_000_000_000),
                                                    ("3", "40000", 120_000)])
def test_an_update_beyond_max_epochs_is_refused_before_anything_is_measured(tmp_path, run_cli, nothing_trains, seeds,
                                                                            budget, planned):
    code, _, err = run_cli("check", "--update", "--baseline", tmp_path / "new.json", "--method", "sgd", "--task",
                           "toy-gap", "--budget", budget, "--seeds", seeds)
    assert_one_line(code, err, EXIT_BAD_INPUT,
                    f"would train {planned * _passes():,} epochs in all, more than --max-epochs 100,000")
    assert not (tmp_path / "new.json").exists()


def test_an_update_plans_every_task_it_measures(tmp_path, run_cli, nothing_trains):
    """Issue 48: every planning test used one task, so a plan that forgot the number of tasks passed. 30,000 seeds
    at 2 epochs are 60,000 epochs on one task, within the bound; on two tasks, 120,000, beyond it (halved where each
    run is measured twice, natively and with other kernels)."""
    seeds = 30000 // _passes()
    code, _, err = run_cli("check", "--update", "--baseline", tmp_path / "new.json", "--method", "sgd", "--task",
                           "toy-gap", "diabetes-gap", "--budget", "2", "--seeds", str(seeds))
    assert_one_line(code, err, EXIT_BAD_INPUT, "would train 120,000 epochs in all, more than --max-epochs 100,000")


def test_a_check_plans_every_method_and_task_it_reruns(tmp_path, run_cli, nothing_trains):
    """A check reruns budget x seeds for each method on each of its tasks: budgets of 3,000 (sgd) and 2,001 (de)
    epochs over 10 seeds on two tasks are 100,020 epochs, beyond the bound; a plan that forgot the tasks (50,010)
    or a method (60,000 or 40,020) would let it train."""
    edited = json.loads((Path(__file__).parents[2] / "benchmarks" / "baseline.json").read_text())
    assert len(edited["configuration"]["seeds"]) == 10
    edited["configuration"]["budgets"].update({"sgd": 3000.0, "de": 2001.0})
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(edited))
    code, _, err = run_cli("check", "--baseline", path, "--method", "sgd", "de", "--task", "toy-gap", "diabetes-gap",
                           "--statistical")
    assert_one_line(code, err, EXIT_BAD_INPUT, "would train 100,020 epochs in all, more than --max-epochs 100,000")


def test_an_update_within_max_epochs_measures(tmp_path, run_cli, monkeypatch):
    """--max-epochs raises the bound for --update as for a check: the same update is then measured."""
    measured = []
    monkeypatch.setattr(gate.runs, "measure", lambda *args, **kwargs: measured.append(args) or {})
    monkeypatch.setattr(gate.runs, "summarise", lambda *_measured: ({}, {}))
    code, _, err = run_cli("check", "--update", "--baseline", tmp_path / "new.json", "--method", "sgd", "--task",
                           "toy-gap", "--budget", "2", "--seeds", "60000", "--max-epochs", str(120000 * _passes()))
    assert measured and measured[0][1] == list(range(60000)), err


def test_seeds_beyond_what_a_seed_holds_are_refused(tmp_path, run_cli, nothing_trains):
    code, _, err = run_cli("check", "--update", "--baseline", tmp_path / "new.json", "--method", "sgd", "--task",
                           "toy-gap", "--seeds", str(10**30))
    assert_one_line(code, err, EXIT_BAD_INPUT, "--seeds must be at least 2", "at most 2^63")


@pytest.mark.parametrize("statistic", ["mean", "std"])
@pytest.mark.parametrize("factor, refused", [(0.9, False), (1.1, True)])
def test_each_stored_statistic_is_held_to_its_values_on_each_side_of_the_tolerance(tmp_path, statistic, factor,
                                                                                   refused):
    """The stored mean and the stored standard deviation, each alone, edited by 0.9 x the 1e-9 x max(1, |value|) a
    summation order allows is loaded; by 1.1 x it is refused in one line."""
    baseline = small_baseline()
    stats = baseline
    for key in STATS:
        stats = stats[key]
    edited = _set(baseline, (*STATS, statistic), stats[statistic] + factor * 1e-9 * max(1.0, abs(stats[statistic])))
    file = tmp_path / "baseline.json"
    file.write_text(json.dumps(edited))
    if refused:
        with pytest.raises(BenchError, match="are not those of its values"):
            gate.load_baseline(file)
    else:
        gate.load_baseline(file)


@pytest.mark.parametrize("path, value", [((*STATS, "std"), -0.1), ((*STATS, "floor"), -0.1), ((*STATS, "std"), "x"),
                                         ((*STATS, "floor"), math.inf), ((*STATS, "mean"), "0.5")])
def test_a_negative_or_non_numeric_mean_std_or_floor_is_refused(tmp_path, path, value):
    file = tmp_path / "baseline.json"
    file.write_text(json.dumps(_set(small_baseline(), path, value)))
    with pytest.raises(BenchError, match=r"its mean, std and floor must be finite numbers \(std and floor >= 0\)"):
        gate.load_baseline(file)


@pytest.mark.parametrize("field", ["epochs_used", "test_passes"])
def test_each_budget_field_of_the_runs_is_one_per_seed(tmp_path, field):
    file = tmp_path / "baseline.json"
    file.write_text(json.dumps(_set(small_baseline(), ("runs", "sgd", "toy-gap", field), [20.0])))
    with pytest.raises(BenchError, match="the runs of sgd on toy-gap must give epochs_used and test_passes"):
        gate.load_baseline(file)
