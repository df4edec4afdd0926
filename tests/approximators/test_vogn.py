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
the second half of the run and compared within 4.5 standard errors from 20 batch means (the
precision with E[h] at the run's own jitter of mu and sigma, then with the fixed point above).
"""

import math

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

N, NOISE, PRIOR_VARIANCE, STEPS = 200, 0.5, 1.0, 4000


def _linear_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 3, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.3 + NOISE * torch.randn(N, generator=g,
                                                                                         dtype=torch.float64)
    phi = torch.cat([x, torch.ones(N, 1, dtype=torch.float64)], dim=1)  # nn.Linear's layout: weight, then bias
    return x, y, phi


def _fixed_point(phi, y, mean, iterations=500):
    s = torch.ones(phi.shape[1], dtype=torch.float64)
    for _ in range(iterations):
        s = _expected_h(phi, y, mean, 1 / (N * (s + 1 / (PRIOR_VARIANCE * N))))
    return s


def _expected_h(phi, y, mean, variance, mean_covariance=None):
    """E[h]: the mean squared per-example gradients at w ~ N(mean, diag(variance)), the mean itself
    jittering with ``mean_covariance`` (the iterates' own, for a run at a constant step size)."""
    expected_sq_residual = (phi @ mean - y) ** 2 + phi.square() @ variance
    if mean_covariance is not None:
        expected_sq_residual = expected_sq_residual + ((phi @ mean_covariance) * phi).sum(1)
    return (expected_sq_residual.unsqueeze(1) * phi.square()).mean(0) / NOISE**4


def _batch_means_se(trace: torch.Tensor, batches: int = 20) -> torch.Tensor:
    means = trace[: len(trace) // batches * batches].reshape(batches, -1, trace.shape[-1]).mean(1)
    return means.std(0) / math.sqrt(batches)


def test_vogn_recovers_the_posterior_mean_and_the_mean_field_precision():
    x, y, phi = _linear_data()
    factory = lambda: nn.Sequential(nn.Linear(3, 1)).double()  # noqa: E731
    model = StackedModel(factory())
    objective = Objective(model, FixedNoiseGaussian(NOISE), PRIOR_VARIANCE, N)
    params = model.layout.flatten(StackedModel.stack([seeded_module(factory, 0)]))
    _, initial = gradient_moments(model, objective.likelihood, params, x.unsqueeze(0), y.unsqueeze(0))
    rule = VOGNRule(lr=0.02, beta1=0.9, beta2=0.01, mc_samples=8, taus=[1.0] * STEPS,
                    prior_variance=PRIOR_VARIANCE, n_train=N, initial_precision=initial,
                    generators=[torch.Generator().manual_seed(1)])
    trace_mean, trace_precision = [], []

    def record(state, step):
        if step >= STEPS // 2:
            trace_mean.append(state.params[0].clone())
            trace_precision.append(state.precision[0].clone())

    data = MeteredData(x, y, BudgetMeter(STEPS, N))
    engine.run(objective, rule, params, data, STEPS, N, [2], on_step=record)
    trace_mean, trace_precision = torch.stack(trace_mean), torch.stack(trace_precision)

    precision = phi.T @ phi / NOISE**2 + torch.eye(4, dtype=torch.float64) / PRIOR_VARIANCE
    posterior_mean = torch.linalg.solve(precision, phi.T @ y / NOISE**2)
    z_mean = (trace_mean.mean(0) - posterior_mean) / _batch_means_se(trace_mean)
    assert z_mean.abs().max() < 4.5, z_mean

    # s is an average of h over the run: E[s] = E[h] at the run's own jitter of mu and sigma (Jensen
    # terms of the size of the Monte Carlo error, kept rather than hidden in a looser tolerance).
    variances = 1 / (N * (trace_precision + 1 / (PRIOR_VARIANCE * N)))
    expected = _expected_h(phi, y, posterior_mean, variances.mean(0), torch.cov(trace_mean.T))
    z_precision = (trace_precision.mean(0) - expected) / _batch_means_se(trace_precision)
    assert z_precision.abs().max() < 4.5, z_precision
    target = _fixed_point(phi, y, posterior_mean)

    # The fixed point is the mean-field optimum 1 / diag(Lambda) within the residuals' sampling error.
    relative = target * N * NOISE**2 / phi.square().sum(0)
    band = 4.5 * (2 * phi.pow(4).sum(0)).sqrt() / phi.square().sum(0) + 4 / N
    assert ((relative - 1).abs() < band).all(), (relative, band)
    vogn_variance = 1 / (N * (trace_precision.mean(0) + 1 / (PRIOR_VARIANCE * N)))
    mean_field = 1 / precision.diagonal()
    assert ((vogn_variance / mean_field - 1).abs() < band + 0.01).all()


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


def test_too_small_a_budget_is_one_line(run_cli, tmp_path):
    code, _, err = run_cli("--method", "vogn", "--task", "toy-gap", "--budget", "1", "--out", tmp_path)
    assert code == 2 and "vogn" in err and len(err.strip().splitlines()) == 1, err
