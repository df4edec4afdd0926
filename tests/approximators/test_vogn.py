"""VOGN on Bayesian linear regression with known noise, where every target has a closed form.

For y = phi^T w + N(0, noise^2) with prior N(0, v I) the posterior is Gaussian with precision
Lambda = Phi^T Phi / noise^2 + I / v and mean Lambda^-1 Phi^T y / noise^2. The gradient is linear in w,
so VOGN's mean converges to the posterior mean exactly. Its precision s converges to the fixed point
of s = E_q[h]: the squared per-example gradients at draws from q,

    s_j = (1/N) sum_i E_q[(w . phi_i - y_i)^2] phi_ij^2 / noise^4,
    E_q[(w . phi_i - y_i)^2] = (mu . phi_i - y_i)^2 + sum_l phi_il^2 sigma_l^2,  sigma^2 = 1 / (N (s + delta / N)),

computed here by iterating it. That is the mean-field optimum 1 / diag(Lambda) up to the residuals:
with r_i^2 / noise^2 ~ chi^2_1 (variance 2), s_j N noise^2 / sum_i phi_ij^2 = 1 within a relative
standard error sqrt(2 sum_i phi_ij^4) / sum_i phi_ij^2, plus D / N for the fitted residuals.

Full-batch steps, so the only noise is VOGN's own draws; the mean and precision are averaged over
the run's last 2000 steps and compared within 4.5 standard errors from 20 batch means (the
precision with E[h] at the run's own jitter of mu and sigma, then with the fixed point above).
"""

import pytest
import torch
from torch import nn

from approximators import engine
from approximators.engine import Objective
from approximators.per_example import gradient_moments
from approximators.vogn import VOGNRule, tempering_schedule
from bench.budget import BudgetMeter, MeteredData
from bench.functional import StackedModel, seeded_module
from bench.likelihoods import FixedNoiseGaussian

BURN_IN, STEPS = 1600, 3600
"""The precision is an average with weight 0.01 a step: its start, some 1e5 of its step-to-step standard deviations
off, decays by e every 100 steps, under 0.02 of them by step 1600 (the mean settles by step 500). The 2000 steps
recorded after it are as many as the test kept when it discarded the first 2000 of 4000: the same power."""


def _expected_h(problem, mean, variance, mean_covariance=None):
    """E[h]: the mean squared per-example gradients at w ~ N(mean, diag(variance)), the mean itself
    jittering with ``mean_covariance`` (the iterates' own, for a run at a constant step size)."""
    phi, y = problem.phi, problem.y
    expected_sq_residual = (phi @ mean - y) ** 2 + phi.square() @ variance
    if mean_covariance is not None:
        expected_sq_residual = expected_sq_residual + ((phi @ mean_covariance) * phi).sum(1)
    return (expected_sq_residual.unsqueeze(1) * phi.square()).mean(0) / problem.noise**4


def _variance(problem, s):
    return 1 / (problem.n * (s + 1 / (problem.prior_variance * problem.n)))


def _fixed_point(problem, iterations=500):
    s = torch.ones(problem.phi.shape[1], dtype=torch.float64)
    for _ in range(iterations):
        s = _expected_h(problem, problem.mean, _variance(problem, s))
    return s


def test_vogn_recovers_the_posterior_mean_and_the_mean_field_precision(linear_regression, standard_error):
    problem, n = linear_regression, linear_regression.n
    factory = lambda: nn.Sequential(nn.Linear(3, 1)).double()  # noqa: E731
    model = StackedModel(factory())
    objective = Objective(model, FixedNoiseGaussian(problem.noise), problem.prior_variance, n)
    params = model.layout.flatten(StackedModel.stack([seeded_module(factory, 0)]))
    _, initial = gradient_moments(model, objective.likelihood, params, problem.x.unsqueeze(0),
                                  problem.y.unsqueeze(0))
    rule = VOGNRule(lr=0.02, beta1=0.9, beta2=0.01, mc_samples=8, taus=[1.0] * STEPS,
                    prior_variance=problem.prior_variance, n_train=n, initial_precision=initial,
                    generators=[torch.Generator().manual_seed(1)])
    trace_mean, trace_precision = [], []

    def record(state, step):
        if step >= BURN_IN:
            trace_mean.append(state.params[0].clone())
            trace_precision.append(state.precision[0].clone())

    data = MeteredData(problem.x, problem.y, BudgetMeter(8 * STEPS, n))  # 8 MC samples: 8 passes per step
    engine.run(objective, rule, params, data, STEPS, n, [2], on_step=record)
    trace_mean, trace_precision = torch.stack(trace_mean), torch.stack(trace_precision)

    z_mean = (trace_mean.mean(0) - problem.mean) / standard_error(trace_mean)
    assert z_mean.abs().max() < 4.5, z_mean
    # s is an average of h over the run: E[s] = E[h] at the run's own jitter of mu and sigma (Jensen
    # terms of the size of the Monte Carlo error, kept rather than hidden in a looser tolerance).
    expected = _expected_h(problem, problem.mean, _variance(problem, trace_precision).mean(0),
                           torch.cov(trace_mean.T))
    z_precision = (trace_precision.mean(0) - expected) / standard_error(trace_precision)
    assert z_precision.abs().max() < 4.5, z_precision

    # The fixed point is the mean-field optimum 1 / diag(Lambda) within the residuals' sampling error.
    phi = problem.phi
    relative = _fixed_point(problem) * n * problem.noise**2 / phi.square().sum(0)
    band = 4.5 * (2 * phi.pow(4).sum(0)).sqrt() / phi.square().sum(0) + 4 / n
    assert ((relative - 1).abs() < band).all(), (relative, band)
    vogn_variance = _variance(problem, trace_precision.mean(0))
    assert ((vogn_variance * problem.precision.diagonal() - 1).abs() < band + 0.01).all()


def test_tempering_reaches_one_before_the_end():
    taus = tempering_schedule(100, 0.3, 0.1)
    assert taus[0] == pytest.approx(0.1) and taus[29] < 1 and taus[30:] == [1.0] * 70
    assert tempering_schedule(5, 0.0, 0.1) == [1.0] * 5


@pytest.mark.parametrize("setting", ["lr=-1", "beta1=1", "beta2=0", "mc_samples=0", "tempering=1", "samples=0",
                                     "tau_start=2"])
def test_nonsensical_settings_are_one_line_errors(setting, run_cli, tmp_path):
    code, _, err = run_cli("--method", "vogn", "--task", "toy-gap", "--budget", "5", "--set", setting,
                           "--out", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("mc_samples, epochs", [(1, 19), (3, 6)])
def test_each_mc_sample_is_an_epoch_of_rows_through_the_network(mc_samples, epochs):
    """K draws per minibatch take it through the network K times: an epoch costs K epochs of the budget."""
    from approximators import METHODS, resolve_config
    from bench.runner import metered
    from bench.tasks import get_task

    task = get_task("toy-gap")  # 80 rows, batch 16: the initialisation minibatch is 0.2 epochs
    problem, data = metered(task, 20)
    method = METHODS["vogn"](resolve_config(METHODS["vogn"], "toy-gap", {"mc_samples": str(mc_samples)}))
    method.fit(problem, data, torch.Generator().manual_seed(0))
    assert method.report["epochs"] == epochs
    assert data.meter.examples == 16 + mc_samples * epochs * task.n_train


def test_too_small_a_budget_is_one_line(run_cli, tmp_path):
    code, _, err = run_cli("--method", "vogn", "--task", "toy-gap", "--budget", "1", "--out", tmp_path)
    assert code == 2 and "vogn" in err and len(err.strip().splitlines()) == 1, err
