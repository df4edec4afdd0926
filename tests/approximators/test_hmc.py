"""Budgeted HMC (``hmc``): the closed-form posterior at a generous budget, one epoch per chain-gradient, the budget
plan, evenly kept samples and settings refused in one line."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from approximators import hmc as method
from approximators.base import Problem
from approximators.hmc import BudgetedHMC, EvenlyKept, HMCConfig
from bench.budget import BudgetMeter, MeteredData
from bench.honesty import probe
from bench.likelihoods import FixedNoiseGaussian
from reference import diagnostics
from reference import hmc as sampler


def _far_away_linear() -> nn.Linear:
    """nn.Linear(3, 1) started far from the posterior (weights 3, bias -3, about 10 posterior standard deviations
    away): samples taken before burn-in ends would bias the moments."""
    layer = nn.Linear(3, 1).double()
    with torch.no_grad():
        layer.weight.fill_(3.0)
        layer.bias.fill_(-3.0)
    return layer


def _linear_problem(linear_regression, budget):
    """The conftest's Bayesian linear regression as a task a method can fit: nn.Linear(3, 1), known noise."""
    p = linear_regression
    meter = BudgetMeter(budget, p.n)
    problem = Problem(task="linear", kind="regression", model_factory=_far_away_linear,
                      likelihood=FixedNoiseGaussian(p.noise), prior_variance=p.prior_variance, n_train=p.n,
                      x_test=torch.zeros(2, 3, dtype=torch.float64), n_classes=None, n_predictive_samples=1000,
                      device=torch.device("cpu"), meter=meter)
    return problem, MeteredData(p.x, p.y, meter)


def test_budgeted_hmc_samples_the_closed_form_posterior(linear_regression, monkeypatch):
    """At a generous budget the kept samples' mean and covariance are the exact posterior's, within Monte Carlo
    error measured by the samples' own effective sample size."""
    positions = []
    real = method._test_outputs
    monkeypatch.setattr(method, "_test_outputs", lambda problem, model, position: (
        positions.append(position.detach().clone()), real(problem, model, position))[1])
    problem, data = _linear_problem(linear_regression, 12_000)
    fitted = BudgetedHMC(HMCConfig(chains=4, leapfrog_steps=5, max_samples=10_000))
    fitted.fit(problem, data, torch.Generator().manual_seed(0))
    draws = torch.stack(positions, dim=1).numpy()  # (chains, samples, 4): weight then bias, phi's layout
    assert draws.shape[1] > 200 and diagnostics.split_rhat(draws).max() < 1.05
    mean, cov = linear_regression.mean.numpy(), torch.linalg.inv(linear_regression.precision).numpy()
    # Monte Carlo standard errors from the exact posterior's spread and the draws' own ESS (a sample spread would
    # grow with any stray draw and hide it): Var(theta_i) = S_ii, Var((theta_i - m_i)(theta_j - m_j)) = S_ii S_jj + S_ij^2.
    flat = draws.reshape(-1, 4)
    z_mean = (flat.mean(0) - mean) / np.sqrt(np.diag(cov) / diagnostics.bulk_ess(draws))
    assert np.abs(z_mean).max() < 4.5, z_mean
    centred = draws - mean
    second = centred[..., :, None] * centred[..., None, :]
    spread = np.sqrt(np.outer(np.diag(cov), np.diag(cov)) + cov**2)
    z_cov = (second.reshape(-1, 4, 4).mean(0) - cov) / (spread / np.sqrt(diagnostics.bulk_ess(second)))
    assert np.abs(z_cov).max() < 4.5, z_cov


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
                                     "max_samples=0", "trajectory_length=-1", "trajectory_length=nan",
                                     "leapfrog_steps=-1"])
def test_nonsensical_settings_are_one_line_errors(setting, run_cli, tmp_path):
    code, _, err = run_cli("--method", "hmc", "--task", "toy-gap", "--budget", "50", "--set", setting,
                           "--out", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_the_default_trajectory_is_the_references():
    assert math.isclose(sampler.default_trajectory_length(0.1), math.pi / 2 * math.sqrt(0.1))
