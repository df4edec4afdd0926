"""The CI gate: an unchanged method passes, a method trained on a tenth of its budget trips it."""

import json

import pytest

from approximators import METHODS
from approximators.map import DeepEnsemble
from bench.cli import main
from leaderboard import gate


class TenthBudgetEnsemble(DeepEnsemble):
    """The deep ensemble with a regression: it trains on a tenth of the budget it is given."""

    def fit(self, problem, data, generator):
        data.meter.budget_epochs /= 10
        super().fit(problem, data, generator)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """``de`` on toy-gap, 3 seeds: the smallest baseline with a measured spread."""
    path = tmp_path_factory.mktemp("gate") / "baseline.json"
    assert main(["check", "--update", "--baseline", str(path), "--methods", "de", "--task", "toy-gap",
                 "--seeds", "3"]) == 0
    return path


def test_baseline_records_configuration_versions_and_measured_spread(baseline):
    content = json.loads(baseline.read_text())
    assert content["configuration"]["seeds"] == [0, 1, 2] and content["configuration"]["budgets"] == {"de": 100.0}
    assert content["std_ddof"] == 1 and content["versions"]["torch"]
    w2 = content["results"]["de"]["toy-gap"]["all"]["w2"]
    assert len(w2["values"]) == 3 and w2["std"] > 0
    assert w2["spread"] == max(w2["std"], w2["floor"])
    assert "--seeds 3" in content["command"]


def test_unchanged_method_passes(baseline, run_cli):
    code, out, err = run_cli("check", "--baseline", str(baseline))
    assert code == 0, out + err
    assert "check passed" in out and "0 regressions" in out


def test_method_trained_on_a_tenth_of_its_budget_trips_the_gate(baseline, monkeypatch, run_cli):
    monkeypatch.setitem(METHODS, "de", TenthBudgetEnsemble)
    code, out, _ = run_cli("check", "--baseline", str(baseline))
    assert code == 1
    assert "REGRESSIONS" in out and "check FAILED" in out
    regressed = {line.split()[3] for line in out.splitlines() if line.startswith("de ")}
    assert regressed >= {"w1", "w2"}


def test_missing_method_or_baseline_is_a_clear_error(baseline, tmp_path, run_cli):
    code, _, err = run_cli("check", "--baseline", str(baseline), "--methods", "sae")
    assert code == 2 and "no baseline for sae" in err
    code, _, err = run_cli("check", "--baseline", str(tmp_path / "none.json"))
    assert code == 2 and "check --update" in err and err.count("\n") == 1
    code, _, err = run_cli("check", "--baseline", str(baseline), "--tolerance", "-1")
    assert code == 2 and "--tolerance must be a positive number" in err


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


def test_zero_spread_uses_the_floor_so_round_off_does_not_trip(monkeypatch):
    finding = gate.Finding("m", "t", "all", "w2", baseline_mean=0.5, spread=1e-6, observed_mean=0.5 + 1e-12)
    assert gate.Report(3.0, [finding], 0.0, {}).passed
    worse = gate.Finding("m", "t", "all", "w2", baseline_mean=0.5, spread=1e-6, observed_mean=0.5 + 4e-6)
    assert not gate.Report(3.0, [worse], 0.0, {}).passed
    better = gate.Finding("m", "t", "all", "agreement", baseline_mean=0.9, spread=0.01, observed_mean=0.95)
    report = gate.Report(3.0, [better], 0.0, {})
    assert report.passed and report.improvements == [better]
