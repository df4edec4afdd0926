"""The CI gate against the committed baseline (never one computed from the code under test).

Each end-to-end test reruns ``de`` on ``toy-gap`` (10 seeds, a few seconds) and compares it with
``benchmarks/baseline.json``: the unchanged method passes, and realistic bugs fail it for the right
reason (a changed per-task default in both modes, a meter that charges half of each batch on the
budget check alone, a change too small for the statistics in exact mode).
"""

import functools
import io
import json
import sys
import re
from pathlib import Path

import pytest

from approximators.map import MAP_DEFAULTS
from bench.budget import MeteredData
from bench.errors import BenchError
from bench.runner import environment
from bench.tasks import DEFAULT_TASKS, EMBEDDED
from leaderboard import gate
from leaderboard.ranking import STD_DDOF
from tests.reliability.test_error_boundary import assert_one_line

ROOT = Path(__file__).resolve().parents[2]

BASELINE = Path(__file__).parents[2] / "benchmarks" / "baseline.json"
SUBSET = ("--method", "de", "--task", "toy-gap")


def _same_environment() -> bool:
    """Whether the gate compares exactly here: what decides round-off is the committed baseline's."""
    return not gate.statistics.numerics_changes_since(json.loads(BASELINE.read_text()))


def test_committed_baseline_records_every_seed_the_budget_and_the_environment():
    content = json.loads(BASELINE.read_text())
    assert content["format"] == gate.BASELINE_FORMAT
    assert content["configuration"]["seeds"] == list(range(gate.DEFAULT_SEEDS))
    from approximators import METHODS
    # every registered method is gated, at its check budget
    assert content["configuration"]["budgets"] == {name: float(cls.check_budget) for name, cls in METHODS.items()}
    # also after partial updates: every method on the MLP tasks, and every embedded task by some method
    assert all(set(DEFAULT_TASKS) <= set(content["results"][name]) for name in METHODS)
    assert {task for name in METHODS for task in content["results"][name]} == set(EMBEDDED)
    runs = content["runs"]["de"]["toy-gap"]
    assert runs["epochs_used"] == [100.0] * gate.DEFAULT_SEEDS and len(runs["test_passes"]) == gate.DEFAULT_SEEDS
    w2 = content["results"]["de"]["toy-gap"]["all"]["w2"]
    assert len(w2["values"]) == gate.DEFAULT_SEEDS and w2["std"] > 0
    assert {"torch", "platform", "cpu", "torch_threads"} <= set(content["environment"])


@pytest.mark.parametrize("statistical", [False, True])
def test_unchanged_method_passes(statistical, run_cli):
    code, out, err = run_cli("check", "--baseline", BASELINE, *SUBSET, *(["--statistical"] if statistical else []))
    assert code == 0, out + err
    mode = "cross-CPU" if statistical or not _same_environment() else "exact"
    assert f"check passed ({mode})" in out and "0 budget mismatches" in out


@pytest.mark.parametrize("statistical", [False, True])
def test_a_changed_per_task_learning_rate_fails_in_both_modes(statistical, monkeypatch, run_cli):
    monkeypatch.setitem(MAP_DEFAULTS, "toy-gap", {**MAP_DEFAULTS["toy-gap"], "lr": 1e-3})
    code, out, _ = run_cli("check", "--baseline", BASELINE, *SUBSET, *(["--statistical"] if statistical else []))
    assert code == 1 and "check FAILED" in out and "MOVED: first de on toy-gap, seed 0" in out


def test_a_formula_changed_by_a_fraction_of_a_seed_s_spread_fails_off_the_baseline_s_cpu(monkeypatch, run_cli):
    """W2 taken as the square root of the mean over points of the squared distance, instead of the mean of per-point
    distances, moves sgd's W2 on toy-gap by about 20%, two of its seeds' standard deviations: the statistical mode of
    earlier releases passed it off the baseline's CPU (z about 1.6 against a tolerance of 8); seed by seed, it fails."""
    import numpy as np

    from bench import metrics

    def w2_of_the_mean(samples, ref_samples):
        a, b = metrics._sample_pair(samples, ref_samples)
        return float(np.sqrt(np.mean(metrics._wasserstein_p_power(a, b, 2))))

    code, out, _ = run_cli("check", "--baseline", BASELINE, "--method", "sgd", "--task", "toy-gap", "--seeds", "2",
                           "--statistical")
    assert code == 0 and "check passed (cross-CPU)" in out, out
    monkeypatch.setattr(metrics, "w2_distance", w2_of_the_mean)
    code, out, _ = run_cli("check", "--baseline", BASELINE, "--method", "sgd", "--task", "toy-gap", "--seeds", "2",
                           "--statistical")
    assert code == 1 and "MOVED: first sgd on toy-gap, seed 0, block all, w2" in out, out


def test_a_meter_that_charges_half_of_each_batch_fails_on_the_budget(monkeypatch, run_cli):
    """Metrics unchanged, epochs_used halved: only the exact budget comparison can see it."""
    def half_charged_batch(self, indices, passes=1):
        indices = self._rows(indices)
        self.meter.charge(max(1, passes * indices.numel() // 2))
        return self._x[indices], self._y[indices]

    monkeypatch.setattr(MeteredData, "batch", half_charged_batch)
    code, out, _ = run_cli("check", "--baseline", BASELINE, *SUBSET, "--statistical")
    assert code == 1 and "BUDGET" in out and "epochs_used" in out
    assert "0 moved, 0 flagged" in out, "the metrics themselves do not move"


def test_exact_mode_reports_the_first_value_that_moved(monkeypatch, run_cli):
    if not _same_environment():
        pytest.skip("exact mode needs the baseline's environment")
    monkeypatch.setitem(MAP_DEFAULTS, "toy-gap", {**MAP_DEFAULTS["toy-gap"], "min_lr": 1.001e-4})
    code, out, _ = run_cli("check", "--baseline", BASELINE, *SUBSET)
    assert code == 1 and "MOVED: first de on toy-gap, seed 0, block all" in out and "50 values moved" in out
    code, out, _ = run_cli("check", "--baseline", BASELINE, *SUBSET, "--statistical")
    assert code == 0, "a change this small is within what another CPU kind may move a seed: only exact mode sees it"


def _finding(metric, baseline, now, se=0.01):
    return gate.Finding("m", "t", "all", metric, baseline_mean=baseline, observed_mean=now, standard_error=se)


def test_fidelity_metrics_are_flagged_in_both_directions_others_only_when_worse():
    tolerance = 4.0
    report = gate.Report("cross-CPU", tolerance, [], findings=[
        _finding("w2", 0.5, 0.45), _finding("w2", 0.5, 0.55), _finding("agreement", 0.9, 0.95),
        _finding("nll", 0.5, 0.45), _finding("nll", 0.5, 0.55), _finding("w1", 0.5, 0.52)])
    flagged = {(f.metric, f.observed_mean) for f in report.flagged}
    assert flagged == {("w2", 0.45), ("w2", 0.55), ("agreement", 0.95), ("nll", 0.55)}
    assert [(f.metric, f.observed_mean) for f in report.improvements] == [("nll", 0.45)]
    assert not report.passed


def test_statistical_tolerance_is_the_bonferroni_t_bound_with_the_baseline_s_degrees_of_freedom():
    import scipy.stats

    assert gate.statistical_tolerance(10, 140) == pytest.approx(scipy.stats.t.ppf(1 - 0.01 / 280, 9))
    assert gate.statistical_tolerance(5, 28) == pytest.approx(scipy.stats.t.ppf(1 - 0.01 / 56, 4))
    assert gate.statistical_tolerance(10, 1) < gate.statistical_tolerance(10, 140) < gate.statistical_tolerance(5, 140)


def test_standard_error_is_the_baseline_s_spread_over_both_means_floored():
    """The spread is the baseline's alone: a change that makes a method erratic cannot widen its own test."""
    stats = {"std": 0.03, "floor": 0.01}
    assert gate.standard_error(stats, 10, 10) == pytest.approx(0.03 * (2 / 10) ** 0.5)
    assert gate.standard_error(stats, 10, 2) == pytest.approx(0.03 * (1 / 10 + 1 / 2) ** 0.5)
    assert gate.standard_error({"std": 0.0, "floor": 0.01}, 4, 1) == pytest.approx(0.01 * (1 / 4 + 1) ** 0.5)


@functools.lru_cache(maxsize=1)
def _environment() -> dict:
    return environment()


def _comparison(baseline_values: dict[str, list[float]], now_values: dict[str, list[float]], floor: float = 1e-12,
                other_kernels: dict[str, list[float]] | None = None, task: str = "digits",
                metric: str = "total_variation"):
    """A baseline and a measurement as :func:`gate.compare` takes them: per method (``{method: per-seed values}``) one
    ``metric`` on the whole test set of ``task`` (a primary one by default), the baseline's statistics as ``check
    --update`` writes them, with the same runs' values under other kernels where ``other_kernels`` gives them."""
    import numpy as np

    n_baseline = len(next(iter(baseline_values.values())))
    n_now = len(next(iter(now_values.values())))
    results = {method: {task: {"all": {metric: {
        "values": values, "mean": float(np.mean(values)), "std": float(np.std(values, ddof=STD_DDOF)), "floor": floor,
        **({} if other_kernels is None else {"other_kernels": other_kernels[method]})}}}}
        for method, values in baseline_values.items()}
    baseline = {"configuration": {"seeds": list(range(n_baseline))}, "environment": _environment(),
                "runs": {method: {task: {name: [1.0] * n_baseline for name in gate.BUDGET_FIELDS}}
                         for method in baseline_values},
                "results": results}
    measured = {method: {task: [{**{name: 1.0 for name in gate.BUDGET_FIELDS},
                                 "metrics": {"all": {metric: values[seed]}}} for seed in range(n_now)]}
                for method, values in now_values.items()}
    return baseline, measured


@pytest.mark.parametrize("n_baseline, n_now", [(10, 10), (10, 2), (5, 3), (10, 1)])
def test_off_the_baseline_s_cpu_a_chaotic_primary_metric_is_tested_by_its_mean_with_the_baseline_s_spread(
        n_baseline, n_now):
    """Where the baseline measured no other kernels (or they move a metric too far to compare seed by seed), the
    primary metric on the whole test set is tested by its mean: SE = s_b sqrt(1 / n_b + 1 / n_m) with the baseline's
    s_b alone (a change that makes a method erratic cannot widen its own test) and the tolerance t^-1(1 - alpha / (2 m))
    with n_b - 1 degrees of freedom over the m = 3 metrics compared; hand-computed here for baselines and reruns of
    several sizes."""
    import numpy as np
    import scipy.stats

    rng = np.random.default_rng(n_baseline * 10 + n_now)
    methods = ["a", "b", "c"]
    baseline_values = {method: list(rng.normal(0.3, 0.02, n_baseline)) for method in methods}
    now_values = {method: list(rng.normal(0.3, 0.05, n_now)) for method in methods}
    report = gate.compare(*_comparison(baseline_values, now_values), statistical=True)
    assert report.tolerance == pytest.approx(scipy.stats.t.ppf(1 - gate.FAMILY_FALSE_ALARM / (2 * 3),
                                                               n_baseline - 1), rel=1e-12)
    assert [finding.method for finding in report.findings] == methods and report.n_seed_by_seed == 0
    for finding in report.findings:
        base, now = np.array(baseline_values[finding.method]), np.array(now_values[finding.method])
        assert finding.standard_error == pytest.approx(base.std(ddof=1) * np.sqrt(1 / n_baseline + 1 / n_now),
                                                       rel=1e-12)
        assert finding.observed_mean == pytest.approx(now.mean(), rel=1e-12)


def test_a_metric_that_is_not_primary_or_not_on_the_whole_test_set_is_not_tested_by_its_mean():
    report = gate.compare(*_comparison({"a": [0.3, 0.31, 0.32]}, {"a": [9.0]}, metric="nll"), statistical=True)
    assert report.findings == [] and report.n_chaotic == 1 and report.n_compared == 0 and not report.passed


@pytest.mark.parametrize("moved, kernels, expected", [
    # allowance max(0.25 sd, 10 x the most the other kernels moved a seed), compared seed by seed while <= 4 sd
    (0.24, 0.0, "passed"), (0.26, 0.0, "moved"),  # the 0.25 sd floor, on each side
    (0.39, 0.04, "passed"), (0.41, 0.04, "moved"),  # 10 x the other kernels' 0.04 sd
    (3.8, 0.39, "passed"), (4.0, 0.39, "moved"),  # 3.9 sd, under the 4 sd limit
    (5.0, 0.41, "tested by its mean"),  # 10 x 0.41 sd > 4 sd: chaotic, its mean only (one seed moved, within)
])
def test_a_metric_other_kernels_move_little_is_compared_seed_by_seed(moved, kernels, expected):
    """Thresholds bracketed: the seed floor, the other kernels' factor and the paired limit, each near, each side; the
    seed that moves is the second, not the first."""
    import numpy as np

    values = list(np.linspace(0.2, 0.4, 10))
    sd = float(np.std(values, ddof=1))
    other = [value + (kernels * sd if seed == 3 else 0.0) for seed, value in enumerate(values)]
    now = [values[0], values[1] + moved * sd]
    report = gate.compare(*_comparison({"a": values}, {"a": now}, other_kernels={"a": other}), statistical=True)
    if expected == "tested by its mean":
        assert report.n_seed_by_seed == 0 and len(report.findings) == 1
    else:
        assert report.n_seed_by_seed == 1 and not report.findings
        assert (not report.passed and [(m.seed, m.now) for m in report.moves] == [(1, now[1])]
                if expected == "moved" else report.passed), report.text()


def test_the_documented_false_alarm_rate_holds_in_simulation():
    """The test of means' promise (docs/leaderboard.md): an unchanged method, its seeds now and the baseline's drawn
    from one normal distribution, fails with probability at most FAMILY_FALSE_ALARM (Bonferroni over the m metrics).
    With m = 10 independent primary metrics (two-sided), 10 baseline seeds and CI's 2 now, the statistic is Student's t
    with 9 degrees of freedom and the exact rate 1 - (1 - alpha / m)^m = 0.00996; 2000 simulated checks must alarm that
    often within 4.5 binomial standard errors (20 +- 20). Degrees of freedom taken as 10, or the spread as pooled with
    the 2 seeds now, alarm measurably more or less."""
    import numpy as np

    rng = np.random.default_rng(0)
    m, trials = 10, 2000
    alarms = 0
    for _ in range(trials):
        baseline_values = {f"method-{b}": list(rng.normal(0.3, 0.02, 10)) for b in range(m)}
        now_values = {f"method-{b}": list(rng.normal(0.3, 0.02, 2)) for b in range(m)}
        alarms += not gate.compare(*_comparison(baseline_values, now_values), statistical=True).passed
    rate = 1 - (1 - gate.FAMILY_FALSE_ALARM / m) ** m
    spread = 4.5 * np.sqrt(trials * rate * (1 - rate))
    assert abs(alarms - trials * rate) < spread, (alarms, trials * rate)


def test_the_documented_calibration_is_of_the_committed_baseline():
    """docs/leaderboard.md's calibration table is written from benchmarks/results/gate-calibration.json: when the
    baseline changes, the calibration must be run again (`python benchmarks/gate_calibration.py --sets 4 --seeds 2
    --workers 2 --out benchmarks/results/gate-calibration.json`, about 5 minutes), or the doc would describe another
    baseline's false alarms."""
    import hashlib

    from bench import docblocks

    kept = json.loads(docblocks.CALIBRATION.read_text())
    assert kept["baseline_sha256"] == hashlib.sha256(BASELINE.read_bytes()).hexdigest()
    assert all(row["flagged"] == 0 for row in kept["sets"])


def test_missing_method_task_or_baseline_and_bad_options_are_clear_errors(tmp_path, run_cli):
    code, _, err = run_cli("check", "--baseline", BASELINE, "--method", "nope")
    assert code == 2 and "no baseline for method nope" in err
    code, _, err = run_cli("check", "--baseline", BASELINE, "--task", "cifar10")
    assert code == 2 and "no baseline for task cifar10" in err
    code, _, err = run_cli("check", "--baseline", tmp_path / "none.json")
    assert code == 2 and "check --update" in err and err.count("\n") == 1
    code, _, err = run_cli("check", "--baseline", BASELINE, "--tolerance", "-1")
    assert code == 2 and "--tolerance must be a positive number" in err
    code, _, err = run_cli("check", "--baseline", BASELINE, "--seeds", "11")
    assert code == 2 and "holds 10 seeds; a check reruns at most those" in err


def test_the_first_seeds_alone_still_catch_a_changed_default_off_the_baseline_s_cpu(monkeypatch, run_cli):
    """CI reruns 2 of the baseline's 10 seeds; on a machine other than the baseline's each metric that another CPU kind
    moves little is compared seed by seed, which must pass unchanged code and fail a real change."""
    code, out, err = run_cli("check", "--baseline", BASELINE, *SUBSET, "--seeds", "2", "--statistical")
    assert code == 0 and "check passed (cross-CPU)" in out and "2 seeds now, the baseline's 10" in out, out + err
    monkeypatch.setitem(MAP_DEFAULTS, "toy-gap", {**MAP_DEFAULTS["toy-gap"], "lr": 1e-3})
    code, out, _ = run_cli("check", "--baseline", BASELINE, *SUBSET, "--seeds", "2", "--statistical")
    assert code == 1 and "MOVED: first de on toy-gap, seed 0" in out


def test_the_first_seeds_are_checked_exactly_and_a_change_moves_them(tmp_path, monkeypatch, run_cli):
    """CI's gate reruns the baseline's first seeds where the environment matches: deterministic training moves every
    seed's bits when what a method computes changes, so the first ones show it."""
    path = tmp_path / "baseline.json"
    assert run_cli("check", "--update", "--baseline", path, "--method", "de", "--task", "toy-gap", "--seeds", "3",
                   "--budget", "10")[0] == 0
    code, out, err = run_cli("check", "--baseline", path, "--seeds", "1")
    assert code == 0 and "check passed (exact)" in out, out + err
    monkeypatch.setitem(MAP_DEFAULTS, "toy-gap", {**MAP_DEFAULTS["toy-gap"], "lr": 1e-3})
    code, out, _ = run_cli("check", "--baseline", path, "--seeds", "1")
    assert code == 1 and "MOVED: first de" in out


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
    code, out, err = run_cli("check", "--update", "--baseline", path, "--method", "sgd", "--task", "toy-gap",
                             "--seeds", "2")
    assert code == 0, err
    content = json.loads(path.read_text())
    assert content["runs"]["sgd"]["toy-gap"]["epochs_used"] == [20.0, 20.0] and "--seeds 2" in content["commands"][0]
    w2 = content["results"]["sgd"]["toy-gap"]["all"]["w2"]
    from bench.executors import other_kernels_differ

    assert content["format"] == 3
    assert len(w2["other_kernels"]) == 2 if other_kernels_differ() else "other_kernels" not in w2, \
        "every run measured again with other kernels, where there are others"
    code, out, _ = run_cli("check", "--baseline", path)
    assert code == 0 and "check passed (exact)" in out


def test_a_baseline_measured_where_there_are_no_other_kernels_compares_means_alone_off_its_cpu(tmp_path, monkeypatch,
                                                                                            run_cli):
    from bench import executors

    monkeypatch.setattr(executors, "other_kernels_differ", lambda: False)
    path = tmp_path / "baseline.json"
    assert run_cli("check", "--update", "--baseline", path, "--method", "sgd", "--task", "toy-gap", "--seeds", "3")[0] == 0
    content = json.loads(path.read_text())
    assert content["other_kernels"] is None and "other_kernels" not in content["results"]["sgd"]["toy-gap"]["all"]["w2"]
    code, out, _ = run_cli("check", "--baseline", path, "--statistical")
    assert code == 0 and "1 primary metrics by the test of means" in out, out
    assert "5 metrics the baseline holds no runs with other kernels for" in out, out


def test_a_check_shows_its_runs_and_their_epochs_on_a_terminal_and_nothing_when_quiet(tmp_path, monkeypatch,
                                                                                      every_progress_update):
    """`check` ran for minutes in silence: on a terminal a bar counts its runs (in workers too) and, for runs in its
    own process, one counts the run's epochs; `--quiet`, or a standard error that is no terminal, draws nothing."""
    from bench.cli import main
    Terminal = every_progress_update
    path = tmp_path / "baseline.json"
    update = ("check", "--update", "--baseline", str(path), "--method", "sgd", "--task", "toy-gap", "--seeds", "2",
              "--budget", "2")
    for command, workers in ((update, "1"), (("check", "--baseline", str(path)), "1"),
                             (("check", "--baseline", str(path)), "2")):
        terminal = Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert main([*command, "--workers", workers]) == 0
        drawn = terminal.getvalue()
        assert "check: 100%" in drawn and "| 2/2 [" in drawn, drawn
        assert "last: toy-gap sgd budget 2 seed 1" in drawn, drawn
        assert ("2.0/2 epochs" in drawn) == (workers == "1"), drawn
        for quiet, stream in (("--quiet", Terminal()), *([(None, io.StringIO())] if command == update else [])):
            monkeypatch.setattr(sys, "stderr", stream)
            assert main([*command, "--workers", workers, *([quiet] if quiet else [])]) == 0
            assert stream.getvalue() == ""


def test_workers_measure_the_same_bits_in_the_seeds_order(tmp_path, run_cli):
    """``--workers 2`` shares the runs out to spawned processes (as CI's gate runs): the same baseline, bit for bit
    and seed by seed, as one process measures, and the check in workers passes it exactly."""
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    for path, workers in ((one, "1"), (two, "2")):
        code, _, err = run_cli("check", "--update", "--baseline", path, "--method", "sgd", "swag", "--task", "toy-gap",
                               "--seeds", "3", "--budget", "4", "--workers", workers)
        assert code == 0, err
    measured = [json.loads(path.read_text()) for path in (one, two)]
    assert measured[0]["results"] == measured[1]["results"] and measured[0]["runs"] == measured[1]["runs"]
    code, out, err = run_cli("check", "--baseline", one, "--workers", "2")
    assert code == 0 and "check passed (exact)" in out, out + err


def test_exact_mode_keys_on_what_decides_round_off_not_the_kernel_build(tmp_path, run_cli):
    """A baseline from a machine that differs only in its kernel's build string, core count or bdl-bench version is
    compared exactly; one measured with other torch threads (or `check --threads`) statistically."""
    import torch

    from bench.executors import usable_cores

    path = tmp_path / "baseline.json"
    assert run_cli("check", "--update", "--baseline", path, "--method", "sgd", "--task", "toy-gap", "--seeds", "2")[0] == 0
    content = json.loads(path.read_text())
    environment = content["environment"]
    path.write_text(json.dumps({**content, "environment": {**environment, "platform": "Linux-0.0-another-build",
                                                           "cpu_count": 64, "bdl-bench": "0.0.1"}}))
    code, out, _ = run_cli("check", "--baseline", path)
    assert code == 0 and "check passed (exact)" in out and "differs" not in out, out
    path.write_text(json.dumps({**content, "environment": {**environment, "torch_threads": 2}}))
    code, out, _ = run_cli("check", "--baseline", path)
    assert code == 0 and "check passed (cross-CPU)" in out and "torch_threads 2 -> 1" in out, out
    if usable_cores() >= 2:
        path.write_text(json.dumps(content))
        try:
            code, out, _ = run_cli("check", "--baseline", path, "--threads", "2")
        finally:
            torch.set_num_threads(1)
        assert code == 0 and "check passed (cross-CPU)" in out and "torch_threads 1 -> 2" in out, out


def test_a_partial_update_extends_the_baseline_and_refuses_to_mix_seeds_or_environments(tmp_path, monkeypatch,
                                                                                           run_cli):
    path = tmp_path / "baseline.json"
    first = ("check", "--update", "--baseline", path, "--seeds", "2", "--task", "toy-gap")
    assert run_cli(*first, "--method", "sgd")[0] == 0
    sgd_before = json.loads(path.read_text())["results"]["sgd"]
    assert run_cli(*first, "--methods", "de")[0] == 0  # the option's earlier name, still taken
    content = json.loads(path.read_text())
    assert set(content["results"]) == {"sgd", "de"} and content["results"]["sgd"] == sgd_before
    assert content["configuration"]["methods"] == ["sgd", "de"] and len(content["commands"]) == 2
    code, out, _ = run_cli("check", "--baseline", path)
    assert code == 0 and "check passed (exact)" in out, out

    # A baseline written before `--method` was the option's name stores its commands with `--methods`.
    earlier = json.loads(path.read_text())
    path.write_text(json.dumps({**earlier, "commands": [c.replace("--method ", "--methods ")
                                                        for c in earlier["commands"]]}))
    code, _, err = run_cli(*first[:-2], "--method", "sgd", "--task", "toy-gap")  # 2 seeds still
    assert code == 0, err
    content = json.loads(path.read_text())  # the same command again replaces its entry and its time
    assert [re.search(r"--methods? (\S+)", c)[1] for c in content["commands"]] == ["de", "sgd"]
    assert content["wall_seconds"] == pytest.approx(sum(content["command_seconds"]), abs=0.2)
    code, _, err = run_cli("check", "--update", "--baseline", path, "--seeds", "3", "--method", "sgd", "--task",
                           "toy-gap")
    assert code == 2 and "2 seeds" in err and len(err.strip().splitlines()) == 1
    real = environment()
    monkeypatch.setattr(gate.statistics, "environment", lambda: {**real, "torch": "0.0"})
    code, _, err = run_cli(*first, "--method", "sgd")
    assert code == 2 and "another environment (torch differ)" in err and len(err.strip().splitlines()) == 1
    assert json.loads(path.read_text())["results"]["sgd"] == sgd_before  # a refused update writes nothing


USER_METHODS = '''
from approximators.map import DeepEnsemble


class Pair(DeepEnsemble):
    """A user's method, outside bdl-bench: two MAP networks."""

    name = "pair"
    summary = "two MAP networks"
    check_budget = 6.0

    def n_members(self):
        return 2


Twin = Pair


class Unbudgeted(Pair):
    name = "unbudgeted"
    check_budget = "a lot"
'''
PAIR = "gate_user.methods:Pair"


@pytest.fixture
def user_method(tmp_path):
    """The package ``gate_user`` (module ``methods``) on sys.path, as a user's own checkout would put it."""
    import sys

    (tmp_path / "site" / "gate_user").mkdir(parents=True)
    (tmp_path / "site" / "gate_user" / "__init__.py").write_text("")
    (tmp_path / "site" / "gate_user" / "methods.py").write_text(USER_METHODS)
    sys.path.insert(0, str(tmp_path / "site"))
    yield PAIR
    sys.path.remove(str(tmp_path / "site"))
    for module in ("gate_user", "gate_user.methods"):
        sys.modules.pop(module, None)


IN_PROCESS = pytest.mark.usefixtures("plugins_in_process")
"""For the tests of what a user's baseline stores and refuses: the user's method runs in the test's process, not in a
process of its own (seconds to start, per command); the gate's isolation itself: tests/reliability/test_isolation.py."""


def _update(run_cli, path, *options):
    return run_cli("check", "--update", "--baseline", path, "--task", "toy-gap", "--seeds", "2", *options)


@IN_PROCESS
def test_a_user_method_is_gated_with_the_budget_and_settings_its_baseline_stores(tmp_path, run_cli, user_method):
    path = tmp_path / "mine.json"
    code, out, err = _update(run_cli, path, "--method", user_method, "--budget", "4", "--set", "lr=0.02")
    assert code == 0, err
    content = json.loads(path.read_text())
    configuration = content["configuration"]
    assert set(content["results"]) == {"pair"} and configuration["methods"] == ["pair"]  # no built-in measured
    assert configuration["sources"] == {"pair": user_method}
    assert configuration["budgets"] == {"pair": 4.0} and content["runs"]["pair"]["toy-gap"]["epochs_used"] == [4.0] * 2
    assert configuration["settings"] == {"pair": {"lr": "0.02"}}
    assert content["commands"][0].endswith(f"--method {user_method} --task toy-gap --seeds 2 --budget 4 --set lr=0.02")
    code, out, err = run_cli("check", "--baseline", path, "--method", user_method)  # named as the update named it
    assert code == 0 and "check passed (exact)" in out, out + err  # reruns the stored budget and settings, or moves

    defaults = tmp_path / "defaults.json"
    assert _update(run_cli, defaults, "--method", user_method, "--budget", "4")[0] == 0
    assert json.loads(defaults.read_text())["results"]["pair"]["toy-gap"]["all"]["w2"]["values"] \
        != content["results"]["pair"]["toy-gap"]["all"]["w2"]["values"], "--set lr=0.02 reached the runs"


@IN_PROCESS
def test_budgets_and_settings_per_method_and_the_methods_they_name(tmp_path, run_cli, user_method):
    path = tmp_path / "mixed.json"
    code, _, err = _update(run_cli, path, "--method", "sgd", user_method, "--budget", "3", "--budget", f"{PAIR}=4",
                           "--set", f"{PAIR}.min_lr=0.001")
    assert code == 0, err
    configuration = json.loads(path.read_text())["configuration"]
    assert configuration["budgets"] == {"sgd": 3.0, "pair": 4.0}
    assert configuration["settings"] == {"sgd": {}, "pair": {"min_lr": "0.001"}}
    assert run_cli("check", "--baseline", path, "--method", "sgd", user_method)[0] == 0

    named = tmp_path / "named.json"
    code, _, err = _update(run_cli, named, "--budget", f"{PAIR}=4")
    assert code == 0, err
    content = json.loads(named.read_text())
    assert set(content["results"]) == {"pair"}, "naming one's method is not a request to measure every built-in"


@IN_PROCESS
def test_a_user_method_defaults_to_its_check_budget(tmp_path, run_cli, user_method):
    path = tmp_path / "mine.json"
    assert _update(run_cli, path, "--method", user_method)[0] == 0
    assert json.loads(path.read_text())["runs"]["pair"]["toy-gap"]["epochs_used"] == [6.0, 6.0]


@IN_PROCESS
def test_a_method_the_baseline_gates_but_cannot_load_is_one_line(tmp_path, run_cli, user_method):
    import sys

    path = tmp_path / "mine.json"
    assert _update(run_cli, path, "--method", user_method, "--budget", "2")[0] == 0
    sys.path.remove(str(tmp_path / "site"))
    sys.modules.pop("gate_user.methods"), sys.modules.pop("gate_user")
    code, _, err = run_cli("check", "--baseline", path, "--method", user_method)
    assert_one_line(code, err, 2, f"{path} gates the method 'pair', which cannot be loaded here",
                    "cannot import gate_user.methods", "install the package that provides it")
    sys.path.insert(0, str(tmp_path / "site"))  # for the fixture's teardown


@IN_PROCESS
def test_a_baseline_never_chooses_code_to_import(tmp_path, run_cli, user_method):
    """A baseline is a file anyone can edit: one that names a module (`package.module:ClassName`) is refused before
    the module is imported, unless the command line names it too; the calibration script refuses it alike."""
    import importlib.util
    import sys

    path = tmp_path / "mine.json"
    assert _update(run_cli, path, "--method", user_method, "--budget", "2")[0] == 0
    content = json.loads(path.read_text())
    side_effect = tmp_path / "imported"
    (tmp_path / "site" / "gate_evil.py").write_text(f"open({str(side_effect)!r}, 'w').close()\n"
                                                     "from gate_user.methods import Pair\n")
    content["configuration"]["sources"]["pair"] = "gate_evil:Pair"
    path.write_text(json.dumps(content))
    code, _, err = run_cli("check", "--baseline", path)
    assert_one_line(code, err, 2, "a baseline never chooses code to import", "pass --method gate_evil:Pair")
    spec = importlib.util.spec_from_file_location("calibration", ROOT / "benchmarks" / "gate_calibration.py")
    calibration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(calibration)
    with pytest.raises(BenchError, match="a baseline never chooses code to import"):
        calibration.calibration(path, 1, 1, 1)
    assert not side_effect.exists() and "gate_evil" not in sys.modules


@pytest.mark.parametrize("options, message", [
    (("--method", "sgd", "--budget", "nope=3"), "--budget names nope, which this update does not measure (sgd)"),
    (("--method", "sgd", "--budget", "many"), "--budget many: write EPOCHS (every method) or METHOD=EPOCHS"),
    (("--method", "sgd", "--budget", "sgd=0"), "--budget sgd=0: the budget must be a positive number of epochs"),
    (("--method", "sgd", "--budget", "3", "--budget", "4"), "--budget given twice for every method"),
    (("--method", PAIR, "--budget", "pair=3", "--budget", f"{PAIR}=4"), "--budget given twice for pair"),
    (("--method", "sgd", "--set", "lr"), "--set lr: write KEY=VALUE (every method) or METHOD.KEY=VALUE"),
    (("--method", "sgd", PAIR, "--set", f"{PAIR}.nosuch=1"), "method 'pair' has no setting 'nosuch'"),
    (("--method", PAIR, "--set", "lr=-1"), "pair: lr must lie in (0, inf)"),
    (("--method", PAIR, "gate_user.methods:Twin"), "--method names 'pair' twice"),
    (("--method", "gate_user.methods:Unbudgeted"), "unbudgeted's check_budget: the budget must be a positive number"),
    (("--method", "gate_user.methods:Missing"), "gate_user.methods has no Missing"),
])
def test_a_bad_update_of_a_user_baseline_is_one_line_before_any_run(tmp_path, run_cli, user_method, monkeypatch,
                                                                     options, message):
    def no_run(*_):
        raise AssertionError("a run started before the update's options were checked")

    monkeypatch.setattr(gate.runs, "measure", no_run)
    code, _, err = _update(run_cli, tmp_path / "mine.json", *options)
    assert_one_line(code, err, 2, message)
    assert not (tmp_path / "mine.json").exists()


def test_budgets_and_settings_are_update_options(run_cli):
    code, _, err = run_cli("check", "--baseline", BASELINE, "--budget", "3")
    assert_one_line(code, err, 2, "--budget and --set choose what --update measures")


@IN_PROCESS
def test_a_partial_update_refuses_to_leave_tasks_measured_with_another_budget(tmp_path, run_cli, user_method):
    path = tmp_path / "mine.json"
    assert _update(run_cli, path, "--method", user_method, "--budget", "2")[0] == 0
    before = path.read_bytes()
    code, _, err = run_cli("check", "--update", "--baseline", path, "--task", "diabetes-gap", "--seeds", "2",
                           "--method", user_method, "--budget", "4")
    assert_one_line(code, err, 2, f"{path} measured pair on toy-gap with budget 2 and settings none, this update "
                                  "with budget 4", "--task toy-gap")
    assert path.read_bytes() == before
    code, _, err = run_cli("check", "--update", "--baseline", path, "--task", "diabetes-gap", "--seeds", "2",
                           "--method", user_method, "--budget", "2")
    assert code == 0, err
    assert set(json.loads(path.read_text())["results"]["pair"]) == {"toy-gap", "diabetes-gap"}


@pytest.mark.parametrize("field, value, message", [
    ("seeds", [-5, 10], "seeds must be distinct whole numbers"), ("seeds", [0, 10**30], "seeds must be distinct"),
    ("seeds", [0.5], "seeds must be distinct"), ("seeds", [], "seeds must be distinct"),
    ("seeds", [1, 1], "seeds must be distinct"), ("seeds", "0", "seeds must be distinct"),
    ("methods", [], "methods must be a non-empty list"), ("tasks", [3], "tasks must be a non-empty list"),
    ("budgets", {"sgd": 20}, "one budget per method"), ("settings", {"sgd": {"lr": 1}}, "--set values as text"),
])
def test_an_edited_baseline_configuration_is_one_line_before_anything_trains(tmp_path, run_cli, field, value, message):
    baseline = json.loads(Path(BASELINE).read_text())
    baseline["configuration"][field] = value
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    code, _, err = run_cli("check", "--baseline", tmp_path / "baseline.json", *SUBSET)
    assert code == 2 and message in err and err.count("\n") == 1, err


def test_an_edited_baseline_budget_is_range_checked(tmp_path, run_cli):
    baseline = json.loads(Path(BASELINE).read_text())
    baseline["configuration"]["budgets"]["sgd"] = -3
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    code, _, err = run_cli("check", "--baseline", tmp_path / "baseline.json", *SUBSET)
    assert code == 2 and "the budget of sgd" in err, err


def test_an_update_into_a_path_that_cannot_be_written_measures_nothing(tmp_path, run_cli, monkeypatch):
    measured = []
    monkeypatch.setattr(gate.runs, "measure", lambda *args, **kwargs: measured.append(args) or {})
    for target in (tmp_path / "missing" / "baseline.json", tmp_path / "file.txt" / "baseline.json"):
        (tmp_path / "file.txt").write_text("not a folder")
        code, _, err = run_cli("check", "--update", "--baseline", target, "--method", "sgd", "--task", "toy-gap")
        assert code == 2 and "cannot write the baseline" in err and err.count("\n") == 1, err
    assert measured == []


def test_a_refused_submission_leaves_another_program_s_database_untouched(tmp_path, make_run, run_cli):
    import hashlib
    import sqlite3

    foreign = tmp_path / "theirs.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE notes (text)")
    db.close()
    before = hashlib.sha256(foreign.read_bytes()).hexdigest()
    make_run(tmp_path / "runs", "toy-gap")
    code, _, err = run_cli("submit", tmp_path / "runs", "--db", foreign)
    assert code == 2 and "SQLite database of another program" in err, err
    assert hashlib.sha256(foreign.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("theirs")) == ["theirs.sqlite"]


@pytest.mark.parametrize("statistical", [False, True])
@pytest.mark.parametrize("field", ["epochs_used", "test_passes"])
@pytest.mark.parametrize("seed", [0, 2])
def test_every_budget_field_of_every_seed_is_compared_exactly(statistical, field, seed):
    """Each budget field (epochs used, test passes), on any seed, not only the first: charged otherwise by one part in
    10^12 is a budget mismatch, in both modes, whatever the metrics say."""
    values = [0.30, 0.31, 0.32]
    baseline, measured = _comparison({"a": values}, {"a": values})
    measured["a"]["digits"][seed][field] = 1.0 + 1e-12
    report = gate.compare(baseline, measured, statistical=statistical)
    assert [(m.seed, m.field) for m in report.budget_mismatches] == [(seed, field)] and not report.passed


@pytest.mark.parametrize("factor, moved", [(0.9, False), (1.1, True)])
def test_exact_mode_is_bracketed_at_its_round_off_tolerance_on_any_seed(factor, moved):
    """Exact mode allows 1e-12 x max(1, |baseline|) on each seed: 0.9 x it on the third seed passes, 1.1 x it moves."""
    values = [0.30, 0.31, 2.5]
    now = [*values[:2], values[2] * (1 + factor * 1e-12)]
    report = gate.compare(*_comparison({"a": values}, {"a": now}))
    assert report.mode == "exact" and [m.seed for m in report.moves] == ([2] if moved else []), report.text()
    assert report.passed is not moved


@pytest.mark.parametrize("metric, sign", [("total_variation", 1), ("total_variation", -1), ("agreement", -1)])
@pytest.mark.parametrize("factor, flagged", [(0.99, False), (1.01, True)])
def test_the_test_of_means_is_bracketed_at_its_tolerance(metric, sign, factor, flagged):
    """A primary metric's mean (each a fidelity metric, flagged either way) that moved by 0.99 x the tolerance's
    standard errors passes, by 1.01 x it is flagged."""
    import numpy as np

    values = list(np.linspace(0.2, 0.4, 10))
    baseline, _ = _comparison({"a": values}, {"a": values}, metric=metric)
    stats = baseline["results"]["a"]["digits"]["all"][metric]
    tolerance = gate.statistical_tolerance(10, 1)
    shift = sign * factor * tolerance * gate.standard_error(stats, 10, 10)
    _, measured = _comparison({"a": values}, {"a": [value + shift for value in values]}, metric=metric)
    report = gate.compare(baseline, measured, statistical=True)
    assert report.tolerance == pytest.approx(tolerance, rel=1e-12) and len(report.findings) == 1
    assert bool(report.flagged) is flagged and report.passed is not flagged


@pytest.mark.parametrize("values, moved, expected", [
    ([1.0, 3.0, 2.0], [1.0, 3.0 + 2e-4, 2.0 + 1e-4], 10 * 2e-4),  # the kernels' most, on the second seed, binds
    ([1.0, 30.0, 10.0], [1.0, 30.0, 10.0], 1e-4 * 30.0),  # round-off at the largest value, the second, binds
], ids=["kernels-bind", "round-off-binds"])
def test_a_seed_s_allowance_takes_the_most_over_the_seeds_wherever_it_is(values, moved, expected):
    """Issue 66, blind spot 2: the most another CPU's kernels moved a seed, and the round-off of the largest value,
    each on a seed that is not the first (std 0.001: its quarter does not bind)."""
    from leaderboard.gate.statistics import seed_allowance

    stats = {"values": values, "other_kernels": moved, "std": 1e-3, "floor": 0.0}
    assert seed_allowance(stats, "w2", 100) == pytest.approx(expected, rel=1e-9)
