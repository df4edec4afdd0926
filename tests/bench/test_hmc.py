"""HMC validated against closed forms: Bayesian linear regression, the prior, and the integrator's order."""

import math

import numpy as np
import pytest
import torch

from bench import hmc
from reference import diagnostics



@pytest.fixture(autouse=True)
def float64_by_default():
    """These tests compare against closed forms to tight tolerances: float64 throughout."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def linear_regression(n=60, d=3, noise_std=0.5, prior_variance=1.0, correlation=0.0, seed=0):
    """Data, log-likelihood and the closed-form Gaussian posterior N(mu, Sigma) of y = X w + noise."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, d, generator=g)
    x = z if not correlation else z @ torch.linalg.cholesky(
        (1 - correlation) * torch.eye(d) + correlation * torch.ones(d, d)).T
    w = torch.randn(d, generator=g)
    y = x @ w + noise_std * torch.randn(n, generator=g)

    def log_likelihood(theta):
        return -0.5 * (y - theta @ x.T).square().sum(-1) / noise_std**2

    precision = x.T @ x / noise_std**2 + torch.eye(d) / prior_variance
    cov = torch.linalg.inv(precision)
    mean = cov @ x.T @ y / noise_std**2
    return hmc.Target(log_likelihood, prior_variance), mean, cov


def run_chains(target, n_chains, dim, n_burnin, n_samples, tau, step_size=0.05, seed=0):
    generators = [torch.Generator().manual_seed(seed + c) for c in range(n_chains)]
    state = hmc.init(torch.zeros(n_chains, dim), target, step_size, adapt=True)
    draws = []
    for i in range(n_burnin + n_samples):
        if i == n_burnin:
            state = hmc.freeze(state)
        state, _ = hmc.step(state, target, tau, generators)
        if i >= n_burnin:
            draws.append(state.position)
    return torch.stack(draws, dim=1).numpy()  # (chains, draws, dim)


def mc_standard_error(quantity):
    """Monte-Carlo standard error of the mean of ``quantity`` ``(chains, draws, ...)``: its standard
    deviation over sqrt(bulk ESS), the ESS measured on that very quantity (so antithetic or
    sticky chains are accounted for)."""
    flat = quantity.reshape(-1, *quantity.shape[2:])
    return flat.std(0) / np.sqrt(diagnostics.bulk_ess(quantity))


def assert_moments_match(draws, mean, cov, z=4.0):
    """Mean and covariance of ``draws`` ``(chains, draws, d)`` within ``z`` Monte-Carlo standard
    errors of the exact ones; z = 4 keeps the chance of a false failure over the handful of
    entries tested below 1e-3."""
    mean, cov = np.asarray(mean), np.asarray(cov)
    centred = draws - mean
    products = centred[..., :, None] * centred[..., None, :]
    assert diagnostics.bulk_ess(draws).min() > 200, "too few effective samples for a meaningful test"
    flat = draws.reshape(-1, draws.shape[-1])
    assert np.all(np.abs(flat.mean(0) - mean) < z * mc_standard_error(draws)), (flat.mean(0), mean)
    second = products.reshape(-1, *products.shape[2:]).mean(0)
    assert np.all(np.abs(second - cov) < z * mc_standard_error(products)), (second, cov)


def test_linear_regression_posterior_matches_closed_form():
    target, mean, cov = linear_regression()
    draws = run_chains(target, n_chains=4, dim=3, n_burnin=100, n_samples=400, tau=0.6)
    assert_moments_match(draws, mean.numpy(), cov.numpy())
    assert diagnostics.split_rhat(draws).max() < 1.05


def test_ill_conditioned_linear_regression_matches_closed_form():
    target, mean, cov = linear_regression(n=40, correlation=0.95, prior_variance=1.0, seed=1)
    eigenvalues = torch.linalg.eigvalsh(cov)
    assert eigenvalues.max() / eigenvalues.min() > 50, "the test case must be ill-conditioned"
    tau = 0.5 * math.pi * math.sqrt(float(eigenvalues.max()))
    draws = run_chains(target, n_chains=4, dim=3, n_burnin=100, n_samples=500, tau=tau)
    assert_moments_match(draws, mean.numpy(), cov.numpy())


def test_predictive_matches_closed_form():
    target, mean, cov = linear_regression(seed=2)
    x_new = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, 1.0]])
    draws = run_chains(target, n_chains=4, dim=3, n_burnin=100, n_samples=400, tau=0.6)
    predictive_means = draws @ x_new.numpy().T  # (chains, draws, 2)
    assert_moments_match(predictive_means, (x_new @ mean).numpy(), (x_new @ cov @ x_new.T).numpy())


def test_prior_only_target_returns_the_prior():
    variance = 2.0
    target = hmc.Target(None, variance)
    draws = run_chains(target, n_chains=4, dim=5, n_burnin=50, n_samples=500,
                       tau=hmc.default_trajectory_length(variance), step_size=0.1)
    assert_moments_match(draws, np.zeros(5), variance * np.eye(5))


def _energy_error(target, step_size, tau, n_chains=8):
    g = torch.Generator().manual_seed(3)
    position = torch.randn(n_chains, 3, generator=g) * 0.1
    momentum = torch.randn(n_chains, 3, generator=g)
    log_lik, log_prior, grad = target.evaluate(position)
    n = torch.full((n_chains,), round(tau / step_size))
    _, new_momentum, new_log_lik, new_log_prior, _ = hmc.leapfrog(
        position, momentum, grad, torch.full((n_chains,), step_size), n, target)
    h_start = -(log_lik + log_prior) + 0.5 * momentum.square().sum(-1)
    h_end = -(new_log_lik + new_log_prior) + 0.5 * new_momentum.square().sum(-1)
    return (h_end - h_start).abs()


def test_leapfrog_energy_error_is_second_order():
    target, _, _ = linear_regression()
    coarse = _energy_error(target, 0.02, 0.4)
    fine = _energy_error(target, 0.01, 0.4)
    ratio = (coarse / fine).median()
    assert 3.0 < ratio < 5.0, ratio


def test_leapfrog_is_reversible():
    target, _, _ = linear_regression()
    g = torch.Generator().manual_seed(4)
    position, momentum = torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g)
    steps, eps = torch.tensor([30, 17]), torch.tensor([0.03, 0.05])
    _, _, grad = target.evaluate(position)
    end, end_momentum, _, _, end_grad = hmc.leapfrog(position, momentum, grad, eps, steps, target)
    back, back_momentum, _, _, _ = hmc.leapfrog(end, -end_momentum, end_grad, eps, steps, target)
    torch.testing.assert_close(back, position, atol=1e-10, rtol=0)
    torch.testing.assert_close(-back_momentum, momentum, atol=1e-10, rtol=0)


def test_vectorised_chains_equal_chains_run_alone():
    target, _, _ = linear_regression()
    together = run_chains(target, n_chains=3, dim=3, n_burnin=20, n_samples=20, tau=0.3, seed=10)
    for c in range(3):
        alone = run_chains(target, n_chains=1, dim=3, n_burnin=20, n_samples=20, tau=0.3, seed=10 + c)
        np.testing.assert_allclose(together[c], alone[0], atol=1e-9, rtol=0)


@pytest.mark.parametrize("initial_step", [1e-2, 1.0])
def test_dual_averaging_moves_acceptance_towards_the_target(initial_step):
    """From a step far too small (acceptance ~1) or far too large (acceptance ~0), adaptation ends
    near the 0.8 target. The frozen, averaged step of a short adaptation is known to land on the
    cautious side, hence the asymmetric band; 800 correlated acceptance probabilities put the
    Monte-Carlo error of their mean at a few 0.01."""
    target, _, _ = linear_regression()
    generators = [torch.Generator().manual_seed(c) for c in range(4)]
    state = hmc.init(torch.zeros(4, 3), target, initial_step, adapt=True)
    for _ in range(150):
        state, _ = hmc.step(state, target, 0.3, generators, target_accept=0.8)
    state = hmc.freeze(state)
    accepts = []
    for _ in range(200):
        state, info = hmc.step(state, target, 0.3, generators)
        accepts.append(info.accept_prob)
    rate = float(torch.stack(accepts).mean())
    assert 0.7 < rate < 0.95, rate


def _trajectory_inputs(target, n_chains=3, dim=3, seed=5):
    g = torch.Generator().manual_seed(seed)
    position, momentum = torch.randn(n_chains, dim, generator=g) * 0.3, torch.randn(n_chains, dim, generator=g)
    _, _, grad = target.evaluate(position)
    return position, momentum, grad, torch.tensor([0.02, 0.03, 0.025]), torch.tensor([30, 11, 21])


@pytest.mark.parametrize("vectorise, compiled", [(False, False), (True, True), (False, True)],
                         ids=["chain-by-chain", "compiled", "compiled-chain-by-chain"])
def test_every_integrator_computes_the_eager_vectorised_trajectories(vectorise, compiled):
    target, _, _ = linear_regression()
    inputs = _trajectory_inputs(target)
    expected = hmc.leapfrog(*inputs, target)
    ends = hmc.Integrator(target, vectorise=vectorise, compiled=compiled)(*inputs)
    for end, reference in zip(ends, expected):
        torch.testing.assert_close(end, reference, atol=1e-12, rtol=1e-12)


def test_compiled_integrators_of_other_models_do_not_share_a_recompilation_limit(monkeypatch):
    """One process may sample many models (a sweep, a notebook): with torch.compile's limit lowered to one graph,
    integrators for targets of other sizes each still compile their own (sharing one count failed the second)."""
    import torch._dynamo

    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    for dim in (2, 4):
        target = hmc.Target(lambda theta: -theta.square().sum(-1), 1.0)
        inputs = _trajectory_inputs(target, dim=dim)
        ends = hmc.Integrator(target, vectorise=True, compiled=True)(*inputs)
        for end, reference in zip(ends, hmc.leapfrog(*inputs, target)):
            torch.testing.assert_close(end, reference, atol=1e-12, rtol=1e-12)


def test_an_integrator_counts_the_gradients_it_computes():
    n_steps = torch.tensor([30, 11, 21])
    target, _, _ = linear_regression()
    assert hmc.Integrator(target, vectorise=True).gradient_evaluations(n_steps) == 90
    assert hmc.Integrator(target, vectorise=False).gradient_evaluations(n_steps) == 62


def test_each_evaluation_reads_the_targets_data_for_the_chains_it_computes():
    """A target's data are asked for at every gradient, for as many chains as are computed (what a meter charges)."""
    base, _, _ = linear_regression()
    asked = []
    target = hmc.Target(lambda theta, scale: base.log_likelihood(theta) * scale, base.prior_variance,
                        data=lambda chains: (asked.append(chains), (torch.tensor(1.0),))[1])
    inputs = _trajectory_inputs(target)
    asked.clear()
    hmc.Integrator(target, vectorise=True)(*inputs)
    assert asked == [3] * 30
    asked.clear()
    hmc.Integrator(target, vectorise=False)(*inputs)
    assert asked == [1] * (30 + 11 + 21)


def test_jitter_draws_trajectory_lengths_within_its_band_and_none_without_it():
    target, _, _ = linear_regression()
    state = hmc.freeze(hmc.init(torch.zeros(4, 3), target, 0.01))
    counts = []
    generators = [torch.Generator().manual_seed(c) for c in range(4)]
    for _ in range(50):
        _, info = hmc.step(state, target, 0.5, generators, jitter=0.2)
        counts.append(info.n_leapfrog)
    counts = torch.stack(counts)
    assert counts.min() >= 40 and counts.max() <= 60 and len(counts.unique()) > 10
    plain = [torch.Generator().manual_seed(c) for c in range(4)]
    _, info = hmc.step(state, target, 0.5, plain)
    assert (info.n_leapfrog == 50).all()
    # Without jitter nothing is drawn for it: the generators end where momentum and Metropolis draws leave them.
    replay = [torch.Generator().manual_seed(c) for c in range(4)]
    for g in replay:
        torch.randn(3, generator=g), torch.rand((), generator=g, dtype=torch.float64)
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(plain, replay))


def test_jittered_chains_sample_the_closed_form_posterior():
    target, mean, cov = linear_regression(seed=3)
    generators = [torch.Generator().manual_seed(20 + c) for c in range(4)]
    state = hmc.init(torch.zeros(4, 3), target, 0.05, adapt=True)
    draws = []
    for i in range(500):
        if i == 100:
            state = hmc.freeze(state)
        state, _ = hmc.step(state, target, 0.6, generators, jitter=0.5)
        if i >= 100:
            draws.append(state.position)
    assert_moments_match(torch.stack(draws, dim=1).numpy(), mean.numpy(), cov.numpy())


def log_ratio_at_end(target, state, momentum, step_size, n_steps):
    """log exp(-Delta H) at the end of ``n_steps`` ``(C,)`` leapfrog steps of ``step_size`` ``(C,)`` from ``state``."""
    _, new_momentum, log_lik, log_prior, _ = hmc.leapfrog(state.position, momentum, state.grad, step_size, n_steps,
                                                           target)
    return (log_lik - state.log_likelihood) + (log_prior - state.log_prior) \
        - 0.5 * (new_momentum.square().sum(-1) - momentum.square().sum(-1))


def first_momenta(chains, dim):
    """The momentum the search draws first from each chain's generator (seeded with the chain's index)."""
    return torch.stack([torch.randn(dim, generator=torch.Generator().manual_seed(c)) for c in range(chains)])


def test_step_size_search_of_one_step_ends_on_the_accepting_side_of_one_half():
    """Hoffman & Gelman's Algorithm 4 with its one leapfrog step: from far too small or far too large, every chain
    ends at a step size whose one-step acceptance ratio exceeds 1/2 while twice it does not (doubling, one halving
    back from where the paper's loop stops; halving, where it stops)."""
    target, _, _ = linear_regression()
    one = torch.ones(3, dtype=torch.long)
    for initial in (1e-6, 10.0):
        generators = [torch.Generator().manual_seed(c) for c in range(3)]
        state = hmc.init(torch.zeros(3, 3) + 0.5, target, initial)
        momentum = first_momenta(3, 3)
        found = hmc.find_reasonable_step_size(state, target, generators).step_size
        assert (log_ratio_at_end(target, state, momentum, found, one) >= -math.log(2)).all()
        assert (log_ratio_at_end(target, state, momentum, 2 * found, one) <= -math.log(2)).all()
        assert (found != initial).all()


@pytest.mark.parametrize("trajectory", [dict(n_leapfrog=6), dict(trajectory_length=1.5)])
def test_step_size_search_tests_the_whole_trajectory(trajectory):
    """On N(0, I) in 1000 dimensions from its mode, one leapfrog step of size h changes the energy by about
    1000 h^4 / 8 and a trajectory of L steps by about 1000 h^2 sin^2(L h) / 8: a step size one step accepts
    (h = 0.256, ratio about 0.58) is rejected by a trajectory of a quarter period (L = 6, or length 1.5; ratio about
    1e-4). The search ends where the trajectory's ratio crosses 1/2, at 0.064 (ratio about 0.6 to 0.9; at 0.128
    about 0.1 to 0.4), not where one step's does."""
    dim, chains = 1000, 3
    target = hmc.Target(None, 1.0)
    state = hmc.init(torch.zeros(chains, dim), target, 1e-3)
    momentum = first_momenta(chains, dim)

    def steps(step_size):
        if "n_leapfrog" in trajectory:
            return torch.full((chains,), trajectory["n_leapfrog"])
        return hmc.leapfrog_steps(trajectory["trajectory_length"], step_size, 10_000)

    def search(**options):
        return hmc.find_reasonable_step_size(state, target, [torch.Generator().manual_seed(c) for c in range(chains)],
                                             **options).step_size

    one_step = search()
    assert (log_ratio_at_end(target, state, momentum, one_step, torch.ones(chains, dtype=torch.long))
            > -math.log(2)).all()
    assert (log_ratio_at_end(target, state, momentum, one_step, steps(one_step)) < -math.log(2)).all()
    found = search(**trajectory)
    assert (log_ratio_at_end(target, state, momentum, found, steps(found)) > -math.log(2)).all()
    assert (log_ratio_at_end(target, state, momentum, 2 * found, steps(2 * found)) <= -math.log(2)).all()
    assert (found < one_step).all()


@pytest.mark.parametrize("vectorise", [True, False])
def test_step_size_search_computes_no_gradient_past_its_allowance(vectorise):
    """Rounds of 4 chains x 6 steps: an allowance of 50 gradients pays for two (from 1e-3, doubling: 1e-3 and 2e-3
    tested); a chain cut off while doubling keeps the last step size it tested."""
    evaluated = []
    target = hmc.Target(lambda theta: -0.5 * theta.square().sum(-1), 1.0,
                        data=lambda chains: evaluated.append(chains) or ())
    state = hmc.init(torch.zeros(4, 1000), target, 1e-3)
    evaluated.clear()
    found = hmc.find_reasonable_step_size(state, target, [torch.Generator().manual_seed(c) for c in range(4)],
                                          hmc.Integrator(target, vectorise=vectorise), n_leapfrog=6,
                                          max_gradients=50)
    assert sum(evaluated) == 48
    assert torch.equal(found.step_size, torch.full((4,), 2e-3))


def test_freezing_before_any_adaptation_keeps_the_step_size():
    target, _, _ = linear_regression()
    state = hmc.init(torch.zeros(2, 3), target, 0.07, adapt=True)
    frozen = hmc.freeze(state)
    assert frozen.adaptation is None and torch.equal(frozen.step_size, state.step_size)
