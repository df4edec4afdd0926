"""Budgeted HMC (``hmc``): one epoch per chain-gradient, the budget plan, evenly kept samples and settings refused in
one line (the closed-form posterior at a generous budget: ``tests/science/test_samplers.py``)."""

import json
import math

import pytest
import torch

from approximators import get_method, resolve_config
from approximators.hmc import BudgetedHMC, EvenlyKept, unmoved_chains
from bench.errors import BudgetExhausted, SamplerStuck
from bench.honesty import probe
from bench.runner import metered
from bench.tasks import get_task
from bench import hmc as sampler


@pytest.mark.parametrize("overrides", [{}, {"vectorise": "false", "chains": "3"}, {"chains": "2", "jitter": "0"},
                                       {"chains": "3", "leapfrog_steps": "0", "trajectory_length": "0.02",
                                        "burn_in": "0"}])
@pytest.mark.parametrize("task, rows", [("toy-gap", None), ("digits-cnn", 128)])
def test_every_chain_gradient_is_charged_one_epoch(overrides, task, rows):
    """Counted where the network computes (the honesty probe), vectorised chains whose trajectory ended included."""
    result = probe("hmc", task, budget=300, overrides=overrides, train_rows=rows)
    assert result.honest and result.train_rows == result.examples_charged, result
    assert result.epochs_used <= 300


def test_burn_in_and_samples_follow_the_budget(fit):
    _, meter = fit("hmc", "toy-gap", 400, burn_in=0.25)
    assert meter.epochs_used <= 400 and meter.epochs_left < 12  # less than one more trajectory


def test_the_report_says_what_ran(fit, monkeypatch):
    reports = []
    real = BudgetedHMC.fit

    def fit_and_keep(self, *args):
        real(self, *args)
        reports.append(self.report)

    monkeypatch.setattr(BudgetedHMC, "fit", fit_and_keep)
    fit("hmc", "toy-gap", 300, chains=2, leapfrog_steps=0, trajectory_length=0.05)
    report = reports[0]
    assert report["chains"] == 2 and report["iterations"] == report["burn_in_iterations"] + report["samples_per_chain"]
    assert report["samples_kept"] == 2 * report["samples_per_chain"] and 0 <= report["epochs_unspent"] < 300
    assert report["trajectory"] == "length 0.05"


def test_evenly_kept_samples_stay_evenly_spaced_and_bounded():
    kept = EvenlyKept(limit=4)
    for i in range(37):
        kept.offer(torch.tensor([i]) if kept.wants_next() else None)
    values = [int(t) for t in kept.outputs]
    assert 4 <= len(values) < 8
    assert values == list(range(0, 37, kept.stride))[:len(values)] and kept.stride == 8


def test_a_budget_too_small_for_any_sample_is_one_line(run_cli, tmp_path):
    code, _, err = run_cli("--method", "hmc", "--task", "toy-gap", "--budget", "1", "--out", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "hmc:" in err, err


@pytest.mark.parametrize("setting", ["chains=0", "burn_in=1", "jitter=1", "target_accept=1", "initial_step_size=0",
                                     "initial_step_size=1e30", "initial_step_size=1e-45", "max_samples=0",
                                     "trajectory_length=-1", "trajectory_length=nan", "leapfrog_steps=-1"])
def test_nonsensical_settings_are_one_line_errors(setting, run_cli, tmp_path):
    code, _, err = run_cli("--method", "hmc", "--task", "toy-gap", "--budget", "50", "--set", setting,
                           "--out", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_the_default_trajectory_is_the_references():
    assert math.isclose(sampler.default_trajectory_length(0.1), math.pi / 2 * math.sqrt(0.1))


def test_chains_that_never_left_their_start_are_named_and_a_run_where_none_did_is_refused():
    start = torch.zeros(3, 4, dtype=torch.float64)
    moved = start.clone()
    moved[0, 2] = 1e-300  # one parameter, however little, is a move
    moved[2] = 0.5
    assert unmoved_chains(start, moved, torch.full((3,), 0.01), 8) == [1]
    moved[1, 0] = -1.0
    assert unmoved_chains(start, moved, torch.full((3,), 0.01), 8) == []
    with pytest.raises(SamplerStuck, match=r"no chain left its start in 8 iteration"):
        unmoved_chains(start, start.clone(), torch.full((3,), 0.01), 8)


def test_a_run_whose_chain_never_moved_is_refused_in_one_line_and_writes_nothing(run_cli, tmp_path):
    """From the largest initial step allowed at the smallest budget, the step-size search spends what it may (two
    trajectories of 10 steps, halving from 1e5) and every proposal after it is rejected: the predictive would be the
    untrained network's."""
    code, _, err = run_cli("--method", "hmc", "--task", "toy-gap", "--budget", "48", "--set", "initial_step_size=1e5",
                           "--out", tmp_path, "--quiet")
    assert code == 2 and err.count("\n") == 1 and "no chain left its start" in err, err
    assert not list(tmp_path.rglob("result.json"))


def test_a_chain_that_stood_still_after_burn_in_is_said_beside_the_table_and_kept_in_the_record(run_cli, tmp_path):
    """toy-gap at budget 100, seed 0, adapted towards an acceptance of 1%: dual averaging grows the step size while
    proposals are accepted, and after burn-in the chain's 5 proposals are rejected."""
    code, _, err = run_cli("--method", "hmc", "--task", "toy-gap", "--budget", "100", "--set", "target_accept=0.01",
                           "--out", tmp_path, "--quiet")
    assert code == 0, err
    assert err.startswith("note: toy-gap hmc budget 100 seed 0: no proposal was accepted after burn-in: the 5 "), err
    (folder,) = [path.parent for path in tmp_path.rglob("result.json")]
    report = json.loads((folder / "result.json").read_text())["method_report"]
    assert report["acceptance_rate"] == 0.0 and report["warnings"] == [err.split(": ", 2)[2].strip()]


def test_the_defaults_move_at_budget_50(run_cli, tmp_path):
    """toy-gap at budget 50, which the plan accepts (at least 48): the step-size search tests whole trajectories, so the
    iterations after it accept proposals (a search of one leapfrog step left a step size 10 steps rejected: every
    proposal was, and the run was refused as stuck)."""
    code, _, err = run_cli("--method", "hmc", "--task", "toy-gap", "--budget", "50", "--out", tmp_path, "--quiet")
    assert code == 0 and not err, err
    (record,) = [json.loads(path.read_text()) for path in tmp_path.rglob("result.json")]
    report = record["method_report"]
    assert report["samples_kept"] >= 1 and report["acceptance_rate"] > 0 and "warnings" not in report, report


@pytest.mark.parametrize("task", ["toy-gap", "diabetes-gap", "digits"])
@pytest.mark.parametrize("overrides", [{}, {"chains": "2", "leapfrog_steps": "4"}])
def test_the_least_budget_the_plan_accepts_moves(task, overrides):
    """At the smallest budget :meth:`BudgetedHMC.check_budget_rule` accepts, every chain moves and proposals after
    burn-in are accepted (the defaults, and the competition_cost benchmark's short run)."""
    cls = get_method("hmc")
    config = resolve_config(cls, task, overrides)
    least = next(budget for budget in range(1, 1000) if _accepted(cls(config), budget))
    problem, data = metered(get_task(task), least)
    fitted = cls(config)
    fitted.fit(problem, data, torch.Generator().manual_seed(0))
    assert fitted.report["acceptance_rate"] > 0 and "warnings" not in fitted.report, (least, fitted.report)


def _accepted(approximator, budget) -> bool:
    try:
        approximator.check_budget_rule(budget)
    except BudgetExhausted:
        return False
    return True
