"""The CI gate against the committed baseline (never one computed from the code under test).

Each end-to-end test reruns ``de`` on ``toy-gap`` (10 seeds, a few seconds) and compares it with
``benchmarks/baseline.json``: the unchanged method passes, and realistic bugs fail it for the right
reason (a changed per-task default in both modes, a meter that charges half of each batch on the
budget check alone, a change too small for the statistics in exact mode).
"""

import json
from pathlib import Path

import pytest

from approximators.map import MAP_DEFAULTS
from bench.budget import MeteredData
from bench.tasks import EMBEDDED
from leaderboard import gate

BASELINE = Path(__file__).parents[2] / "benchmarks" / "baseline.json"
SUBSET = ("--methods", "de", "--task", "toy-gap")


def _same_environment() -> bool:
    return json.loads(BASELINE.read_text())["environment"] == gate.environment()


def test_committed_baseline_records_every_seed_the_budget_and_the_environment():
    content = json.loads(BASELINE.read_text())
    assert content["format"] == gate.BASELINE_FORMAT
    assert content["configuration"]["seeds"] == list(range(gate.DEFAULT_SEEDS))
    from approximators import METHODS
    # every registered method is gated, at its check budget
    assert content["configuration"]["budgets"] == {name: float(cls.check_budget) for name, cls in METHODS.items()}
    assert all(set(content["results"][name]) == set(EMBEDDED) for name in METHODS)  # also after partial updates
    runs = content["runs"]["de"]["toy-gap"]
    assert runs["epochs_used"] == [100.0] * gate.DEFAULT_SEEDS and len(runs["test_passes"]) == gate.DEFAULT_SEEDS
    w2 = content["results"]["de"]["toy-gap"]["all"]["w2"]
    assert len(w2["values"]) == gate.DEFAULT_SEEDS and w2["std"] > 0
    assert {"torch", "platform", "cpu", "torch_threads"} <= set(content["environment"])


@pytest.mark.parametrize("statistical", [False, True])
def test_unchanged_method_passes(statistical, run_cli):
    code, out, err = run_cli("check", "--baseline", BASELINE, *SUBSET, *(["--statistical"] if statistical else []))
    assert code == 0, out + err
    mode = "statistical" if statistical or not _same_environment() else "exact"
    assert f"check passed ({mode})" in out and "0 budget mismatches" in out


@pytest.mark.parametrize("statistical", [False, True])
def test_a_changed_per_task_learning_rate_fails_in_both_modes(statistical, monkeypatch, run_cli):
    monkeypatch.setitem(MAP_DEFAULTS, "toy-gap", {**MAP_DEFAULTS["toy-gap"], "lr": 1e-3})
    code, out, _ = run_cli("check", "--baseline", BASELINE, *SUBSET, *(["--statistical"] if statistical else []))
    assert code == 1 and "check FAILED" in out
    assert ("FLAGGED" in out and " w2 " in out) if statistical or not _same_environment() else "MOVED: first de" in out


def test_a_meter_that_charges_half_of_each_batch_fails_on_the_budget(monkeypatch, run_cli):
    """Metrics unchanged, epochs_used halved: only the exact budget comparison can see it."""
    def half_charged_batch(self, indices):
        indices = self._rows(indices)
        self.meter.charge(max(1, indices.numel() // 2))
        return self._x[indices], self._y[indices]

    monkeypatch.setattr(MeteredData, "batch", half_charged_batch)
    code, out, _ = run_cli("check", "--baseline", BASELINE, *SUBSET, "--statistical")
    assert code == 1 and "BUDGET" in out and "epochs_used" in out
    assert "0 flagged" in out, "the metrics themselves do not move"


def test_exact_mode_reports_the_first_value_that_moved(monkeypatch, run_cli):
    if not _same_environment():
        pytest.skip("exact mode needs the baseline's environment")
    monkeypatch.setitem(MAP_DEFAULTS, "toy-gap", {**MAP_DEFAULTS["toy-gap"], "min_lr": 1.001e-4})
    code, out, _ = run_cli("check", "--baseline", BASELINE, *SUBSET)
    assert code == 1 and "MOVED: first de on toy-gap, seed 0, block all" in out and "50 values moved" in out
    code, out, _ = run_cli("check", "--baseline", BASELINE, *SUBSET, "--statistical")
    assert code == 0, "a change this small is within the seed spread: only exact mode sees it"


def _finding(metric, baseline, now, se=0.01):
    return gate.Finding("m", "t", "all", metric, baseline_mean=baseline, observed_mean=now, standard_error=se)


def test_fidelity_metrics_are_flagged_in_both_directions_others_only_when_worse():
    tolerance = 4.0
    report = gate.Report("statistical", tolerance, [], findings=[
        _finding("w2", 0.5, 0.45), _finding("w2", 0.5, 0.55), _finding("agreement", 0.9, 0.95),
        _finding("nll", 0.5, 0.45), _finding("nll", 0.5, 0.55), _finding("w1", 0.5, 0.52)])
    flagged = {(f.metric, f.observed_mean) for f in report.flagged}
    assert flagged == {("w2", 0.45), ("w2", 0.55), ("agreement", 0.95), ("nll", 0.55)}
    assert [(f.metric, f.observed_mean) for f in report.improvements] == [("nll", 0.45)]
    assert not report.passed


def test_statistical_tolerance_is_the_bonferroni_t_bound():
    import scipy.stats

    assert gate.statistical_tolerance(10, 140) == pytest.approx(scipy.stats.t.ppf(1 - 0.01 / 280, 18))
    assert gate.statistical_tolerance(10, 1) < gate.statistical_tolerance(10, 140) < gate.statistical_tolerance(5, 140)


def test_standard_error_is_of_the_difference_of_means_with_floors():
    stats = {"std": 0.03, "floor": 0.01}
    assert gate._standard_error(stats, 0.04, 10) == pytest.approx((0.03**2 + 0.04**2) ** 0.5 / 10**0.5)
    assert gate._standard_error({"std": 0.0, "floor": 0.01}, 0.0, 4) == pytest.approx((2 * 0.01**2 / 4) ** 0.5)


def test_missing_method_task_or_baseline_and_bad_options_are_clear_errors(tmp_path, run_cli):
    code, _, err = run_cli("check", "--baseline", BASELINE, "--methods", "nope")
    assert code == 2 and "no baseline for method nope" in err
    code, _, err = run_cli("check", "--baseline", BASELINE, "--task", "cifar10")
    assert code == 2 and "no baseline for task cifar10" in err
    code, _, err = run_cli("check", "--baseline", tmp_path / "none.json")
    assert code == 2 and "check --update" in err and err.count("\n") == 1
    code, _, err = run_cli("check", "--baseline", BASELINE, "--tolerance", "-1")
    assert code == 2 and "--tolerance must be a positive number" in err
    code, _, err = run_cli("check", "--baseline", BASELINE, "--seeds", "3")
    assert code == 2 and "--seeds chooses what --update measures" in err


@pytest.mark.parametrize("metric, block_size, noise_floor, expected", [
    ("agreement", 360, {"agreement": 0.99}, 1 / 360),
    ("total_variation", 1440, {"total_variation": 0.009}, 0.1 * 0.009),
    ("competition_w", 121, {"competition_w": -0.02}, 0.1 * 0.02),
    ("nll", 1440, None, 1e-6 * 3.0),
    ("w2", 121, None, 1e-6 * 3.0),
])
def test_spread_floor(metric, block_size, noise_floor, expected):
    floor, _ = gate.spread_floor(metric, block_size, noise_floor, mean=-3.0)
    assert floor == pytest.approx(expected)


def test_update_writes_a_baseline_that_the_check_then_passes_exactly(tmp_path, run_cli):
    path = tmp_path / "baseline.json"
    code, out, err = run_cli("check", "--update", "--baseline", path, "--methods", "sgd", "--task", "toy-gap",
                             "--seeds", "2")
    assert code == 0, err
    content = json.loads(path.read_text())
    assert content["runs"]["sgd"]["toy-gap"]["epochs_used"] == [20.0, 20.0] and "--seeds 2" in content["commands"][0]
    code, out, _ = run_cli("check", "--baseline", path)
    assert code == 0 and "check passed (exact)" in out


def test_a_partial_update_extends_the_baseline_and_refuses_to_mix_seeds_or_environments(tmp_path, monkeypatch,
                                                                                           run_cli):
    path = tmp_path / "baseline.json"
    first = ("check", "--update", "--baseline", path, "--seeds", "2", "--task", "toy-gap")
    assert run_cli(*first, "--methods", "sgd")[0] == 0
    sgd_before = json.loads(path.read_text())["results"]["sgd"]
    assert run_cli(*first, "--methods", "de")[0] == 0
    content = json.loads(path.read_text())
    assert set(content["results"]) == {"sgd", "de"} and content["results"]["sgd"] == sgd_before
    assert content["configuration"]["methods"] == ["sgd", "de"] and len(content["commands"]) == 2
    code, out, _ = run_cli("check", "--baseline", path)
    assert code == 0 and "check passed (exact)" in out, out

    code, _, err = run_cli(*first[:-2], "--methods", "sgd", "--task", "toy-gap")  # 2 seeds still
    assert code == 0, err
    code, _, err = run_cli("check", "--update", "--baseline", path, "--seeds", "3", "--methods", "sgd", "--task",
                           "toy-gap")
    assert code == 2 and "2 seeds" in err and len(err.strip().splitlines()) == 1
    real = gate.environment()
    monkeypatch.setattr(gate, "environment", lambda: {**real, "torch": "0.0"})
    code, _, err = run_cli(*first, "--methods", "sgd")
    assert code == 2 and "another environment (torch differ)" in err and len(err.strip().splitlines()) == 1
    assert json.loads(path.read_text())["results"]["sgd"] == sgd_before  # a refused update writes nothing
