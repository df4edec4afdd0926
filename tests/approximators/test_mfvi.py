"""Mean-field VI on Bayesian linear regression: the ELBO's optimum is known in closed form.

For a Gaussian posterior N(m, Lambda^-1) the mean-field Gaussian that maximises the ELBO has mean m
and variances 1 / diag(Lambda) (exactly, not only in expectation). Full-batch steps, so the only noise
is the reparameterised draw; Adam at a large step, then a constant small one whose iterates are
averaged (the second half of the run) and compared within 4.5 Monte Carlo standard errors (20 batch means) plus the step's own jitter
bias on sigma, bounded here by 1% (a run at a quarter of the step moves sigma by less).
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from approximators import engine
from approximators.engine import Objective
from approximators.mfvi import MFVIRule, inverse_softplus
from approximators.updates import Adam
from bench.budget import BudgetMeter, MeteredData
from bench.functional import StackedModel
from bench.likelihoods import Categorical, FixedNoiseGaussian

STEPS = 6000


def _run(problem, lr, local):
    factory = lambda: nn.Sequential(nn.Linear(3, 1)).double()  # noqa: E731
    model = StackedModel(factory(), fast_path=local)  # the MLP path draws pre-activations (local reparameterisation)
    objective = Objective(model, FixedNoiseGaussian(problem.noise), problem.prior_variance, problem.n)
    variational = torch.cat([torch.zeros(1, 4), torch.full((1, 4), inverse_softplus(0.1))], dim=1).double()
    schedule = [10 * lr] * (STEPS // 2) + [lr] * (STEPS - STEPS // 2)  # reach the optimum, then sit at it
    rule = MFVIRule(Adam(schedule), problem.prior_variance, problem.n, [torch.Generator().manual_seed(1)])
    trace_mean, trace_sigma = [], []

    def record(state, step):
        if step >= STEPS // 2:
            trace_mean.append(state.params[0].clone())
            trace_sigma.append(F.softplus(state.rho[0]))

    data = MeteredData(problem.x, problem.y, BudgetMeter(STEPS, problem.n))
    engine.run(objective, rule, variational, data, STEPS, problem.n, [2], on_step=record)
    return torch.stack(trace_mean), torch.stack(trace_sigma)


@pytest.mark.parametrize("local", [True, False], ids=["local-reparameterisation", "weight-draw"])
def test_mfvi_reaches_the_mean_field_optimum(linear_regression, standard_error, local):
    problem = linear_regression
    trace_mean, trace_sigma = _run(problem, lr=2e-3, local=local)
    z_mean = (trace_mean.mean(0) - problem.mean) / standard_error(trace_mean)
    assert z_mean.abs().max() < 4.5, z_mean
    optimum = problem.precision.diagonal().rsqrt()
    error = (trace_sigma.mean(0) - optimum).abs()
    assert (error < 4.5 * standard_error(trace_sigma) + 0.01 * optimum).all(), (trace_sigma.mean(0), optimum)


def test_inverse_softplus():
    assert F.softplus(torch.tensor(inverse_softplus(0.003), dtype=torch.float64)).item() == pytest.approx(0.003)


@pytest.mark.parametrize("setting", ["lr=-1", "map_fraction=1", "init_std=0", "samples=0", "min_lr=1"])
def test_nonsensical_settings_are_one_line_errors(setting, run_cli, tmp_path):
    code, _, err = run_cli("--method", "mfvi", "--task", "toy-gap", "--budget", "5", "--set", setting,
                           "--out", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_map_phase_then_vi_is_charged_the_whole_budget(fit):
    _, meter = fit("mfvi", "toy-gap", 10, samples=2)
    assert meter.epochs_used == 10


def test_local_reparameterisation_has_the_weight_draws_expected_gradient():
    """Both estimate the gradient of E_q[NLL]: their means over many draws agree within Monte Carlo error."""
    factory = lambda: nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 3)).double()  # noqa: E731
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1, 6, 2, generator=g, dtype=torch.float64), torch.randint(0, 3, (1, 6), generator=g)
    local, shared = StackedModel(factory()), StackedModel(factory(), fast_path=False)
    dim = local.layout.size
    mu = local.layout.flatten(StackedModel.stack([factory()])).double()
    rho = torch.full((1, dim), inverse_softplus(0.3), dtype=torch.float64)
    rule = MFVIRule(Adam([0.0]), 1.0, 6, [torch.Generator().manual_seed(1)])
    draws = 4000

    def gradients(model):
        state = rule.init(torch.cat([mu, rho], dim=1))
        objective = Objective(model, Categorical(), 1.0, 6)
        return torch.cat([rule.gradient(objective, state, x, y) for _ in range(draws)])

    ours, reference = gradients(local), gradients(shared)
    se = ((ours.var(0) + reference.var(0)) / draws).sqrt()
    z = (ours.mean(0) - reference.mean(0)) / se
    assert z.abs().max() < 4.5, z
    assert (ours.var(0).sum() < reference.var(0).sum())  # and lower variance, the point of the trick
