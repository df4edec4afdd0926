"""Samplers recover a known Gaussian posterior; vectorised chains equal chains run alone.

Target: N(mu, Sigma) in 2-D with correlation 0.6, written as a posterior of N = 10 examples so that
a sampler which forgets to scale the per-example gradient by N samples a tempered posterior. Each
of K chains starts far from mu and runs > 10 relaxation times; its last state is one draw, so the
K draws are independent and the effective sample size is K. Tolerances are 4.5 Monte Carlo standard
errors of the mean and of each covariance entry (var(S_ij) = (S_ii S_jj + S_ij^2) / K), with the
samplers' discretisation bias bounded well below one standard error by the small steps.
"""


import pytest
import torch
from torch import nn

from approximators import engine
from approximators.csgmcmc import cyclical_schedule
from approximators.engine import Objective
from approximators.updates import FLOAT32_MAX, SGHMC, SGLD, Adam
from bench.errors import TrainingDiverged
from bench.budget import BudgetMeter, MeteredData
from bench.functional import StackedModel, seeded_module
from bench.likelihoods import Categorical

MU = torch.tensor([1.0, -0.5], dtype=torch.float64)
SIGMA = torch.tensor([[1.0, 0.6], [0.6, 0.8]], dtype=torch.float64)
N = 10
CHAINS = 2000
Z = 4.5


def _per_example_gradient(theta):
    """Gradient of U(theta) / N with U = -log N(theta; MU, SIGMA): the engine's per-example objective."""
    return (theta - MU) @ torch.linalg.inv(SIGMA) / N


def _draws(rule, steps, keep=None):
    keep = keep or (lambda step: step == steps - 1)
    state = rule.init(torch.full((CHAINS, 2), 4.0, dtype=torch.float64))
    kept = []
    for step in range(steps):
        state = rule.update(state, _per_example_gradient(state.params), step)
        if keep(step):
            kept.append(state.params.clone())
    return torch.cat(kept)


def _assert_gaussian(draws, independent):
    mean, cov = draws.mean(0), torch.cov(draws.T)
    mean_error = (SIGMA.diagonal() / independent).sqrt()
    cov_error = ((SIGMA.diagonal()[:, None] * SIGMA.diagonal()[None, :] + SIGMA**2) / independent).sqrt()
    assert ((mean - MU).abs() < Z * mean_error).all(), (mean, MU, mean_error)
    assert ((cov - SIGMA).abs() < Z * cov_error).all(), (cov, SIGMA, cov_error)


def _generators(k, offset=0):
    return [torch.Generator().manual_seed(offset + i) for i in range(k)]


def test_sgld_with_small_steps_recovers_a_correlated_gaussian():
    # eps = 0.02: the slowest mode relaxes in ~2 / (eps * 0.45) ~ 220 steps; 3000 steps are > 13 of them.
    # Stationary variance of the discretisation is 1 / (lambda (1 - eps lambda / 4)): a bias < 1.5%.
    eps, steps = 0.02, 3000
    draws = _draws(SGLD([eps] * steps, N, _generators(CHAINS)), steps)
    _assert_gaussian(draws, CHAINS)


def test_cyclical_sghmc_samples_from_its_sampling_stages_recover_a_correlated_gaussian():
    """Four cycles; one draw per chain at the end of each cycle's sampling stage (cycles are far apart
    in relaxation times, so the 4 K draws are independent).

    Friction 0.5: the exact covariance recursion of this linear system puts the end-of-cycle draws'
    excess variance at 0.006 (half a standard error); at the authors' 0.9 (csgmcmc's default) 0.002. With
    friction 0.1 (csgmcmc's default until 0.2.0, a misreading of the authors' code) it is 0.067 at this cycle
    length (0.026 at 6000 steps): the step size shrinks faster than the momentum relaxes, a real bias of short
    cycles with light friction, not Monte Carlo error."""
    cycles, length = 4, 1500
    steps = cycles * length
    rates, proportions = cyclical_schedule(0.02, steps, cycles)
    rule = SGHMC(rates, N, _generators(CHAINS), alpha=0.5, noisy=[r >= 0.3 for r in proportions])
    draws = _draws(rule, steps, keep=lambda step: (step + 1) % length == 0)
    _assert_gaussian(draws, cycles * CHAINS)


@pytest.mark.parametrize("make_rule", [
    lambda steps, gens: SGLD([1e-3] * steps, 50, gens),
    lambda steps, gens: SGHMC([1e-4] * steps, 50, gens, alpha=0.1, noisy=[s % 2 == 0 for s in range(steps)]),
], ids=["sgld", "sghmc"])
def test_vectorised_chains_equal_chains_run_alone(make_rule):
    """Three chains on the engine, each its own initialisation, data order and noise generator."""
    factory = lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))  # noqa: E731
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 4, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    model = StackedModel(factory())
    objective = Objective(model, Categorical(), 1.0, 50)

    def train(chains):
        params = model.layout.flatten(StackedModel.stack([seeded_module(factory, c) for c in chains]))
        data = MeteredData(x, y, BudgetMeter(3 * len(chains), 50))
        steps = 3 * engine.steps_per_epoch(50, 16)
        rule = make_rule(steps, [torch.Generator().manual_seed(100 + c) for c in chains])
        return engine.run(objective, rule, params, data, 3, 16, [10 + c for c in chains]).params.detach()

    together = train([0, 1, 2])
    alone = torch.cat([train([c]) for c in (0, 1, 2)])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(together[0], together[1])


@pytest.mark.parametrize("rule", [
    lambda lr: Adam([lr], beta1=0.9),
    lambda lr: SGLD([lr], n_train=1000, generators=[torch.Generator().manual_seed(0)]),
    lambda lr: SGHMC([lr], n_train=1000, generators=[torch.Generator().manual_seed(0)], alpha=0.9),
])
def test_a_step_beyond_float32_is_training_diverged_not_an_overflow(rule):
    """lr / (1 - beta1) or eps N_train beyond float32's range: torch cannot convert the step (exit 70 before); the
    parameters it would make infinite mean the training diverged. A step within the range is taken."""
    params = torch.zeros(1, 3)
    update = rule(FLOAT32_MAX / 2)
    with pytest.raises(TrainingDiverged, match="beyond float32's range"):
        update.update(update.init(params.clone()), torch.ones(1, 3), 0)
    update = rule(1e-3)
    state = update.update(update.init(params.clone()), torch.ones(1, 3), 0)
    assert torch.isfinite(state.params).all() and not torch.equal(state.params, params)
