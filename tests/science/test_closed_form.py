"""Methods held to exact answers on Bayesian linear regression, built through the public API alone
(:func:`bench.api.make_task`, :func:`bench.api.fit`).

The network is one linear layer (weights, then bias) with a Gaussian likelihood of known noise s and the prior
N(0, v I), so the posterior is Gaussian in closed form: with Phi = [X, 1],

    precision Lambda = Phi^T Phi / s^2 + I / v,     mean = Lambda^-1 Phi^T y / s^2.

Its generalised Gauss-Newton is Phi^T Phi / s^2 at every theta, so a Laplace approximation is exact here
whatever MAP point it reaches.
"""

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from bench.api import FixedNoiseGaussian, fit, make_task

N, D, NOISE, PRIOR_VARIANCE = 64, 3, 0.5, 1.0


@pytest.fixture(scope="module")
def linear():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, D, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.3 + NOISE * torch.randn(N, generator=g,
                                                                                          dtype=torch.float64)
    task = make_task("linear-gaussian", x, y, torch.randn(16, D, generator=g, dtype=torch.float64),
                     lambda: nn.Sequential(nn.Linear(D, 1)).double(), FixedNoiseGaussian(NOISE), PRIOR_VARIANCE)
    phi = torch.cat([x, torch.ones(N, 1, dtype=torch.float64)], dim=1)
    precision = phi.T @ phi / NOISE**2 + torch.eye(D + 1, dtype=torch.float64) / PRIOR_VARIANCE
    mean = torch.linalg.solve(precision, phi.T @ y / NOISE**2)
    return SimpleNamespace(task=task, precision=precision, mean=mean, covariance=torch.linalg.inv(precision))


@pytest.mark.parametrize("structure", ["last-layer-full", "last-layer-kron", "diagonal"])
def test_laplace_is_the_gaussian_its_structure_states(linear, structure):
    """The full and Kronecker last layers (one output: the Kronecker factorisation is exact) are the posterior's
    covariance; the diagonal structure is N(theta*, diag(Lambda)^-1), the inverse of the precision's diagonal."""
    fitted = fit(linear.task, "laplace", budget=400, settings={"structure": structure, "batch_size": 64,
                                                                "lr": 0.05, "min_lr": 0.001})
    posterior = fitted.approximator.posterior
    expected = 1 / torch.diagonal(linear.precision) if structure == "diagonal" else linear.covariance
    torch.testing.assert_close(posterior.covariance().double(), expected, rtol=1e-6, atol=0)
    # Its mean is the MAP point, which Adam reaches to a small fraction of a posterior standard deviation.
    z = (posterior.mean.double() - linear.mean) / torch.diagonal(linear.covariance).sqrt()
    assert z.abs().max() < 0.05, z


@pytest.mark.parametrize("structure", ["last-layer-full", "last-layer-kron", "diagonal"])
def test_laplace_probit_regression_predictive_is_the_closed_form(linear, structure):
    """Linearised (here: exactly linear) with a Gaussian of fixed noise, the predictive is N(phi^T theta*,
    phi^T Sigma phi + s^2) in closed form, Sigma the structure's covariance (exact, or the precision's diagonal
    inverted): each test row's 1000 samples have its mean and variance within 4.5 Monte Carlo standard errors.
    The test rows lie ten times farther out than the training rows, where phi^T Sigma phi is most of the variance
    (near the data it is 2% of it, below what 1000 samples resolve)."""
    x_test = 10 * linear.task.x_test
    task = make_task("linear-gaussian-far", linear.task.x_train, linear.task.y_train, x_test, linear.task.model_factory,
                     FixedNoiseGaussian(NOISE), PRIOR_VARIANCE)
    fitted = fit(task, "laplace", budget=400, settings={"structure": structure, "batch_size": 64, "lr": 0.05,
                                                         "min_lr": 0.001, "predictive": "probit"})
    posterior = fitted.approximator.posterior
    phi = torch.cat([x_test, torch.ones(len(x_test), 1, dtype=torch.float64)], dim=1)
    sigma = torch.diag(1 / torch.diagonal(linear.precision)) if structure == "diagonal" else linear.covariance
    mean, variance = phi @ posterior.mean.double(), ((phi @ sigma) * phi).sum(1) + NOISE**2
    samples = torch.from_numpy(fitted.predictive)
    n = samples.shape[1]
    z_mean = (samples.mean(1) - mean) / (variance / n).sqrt()
    z_variance = (samples.var(1) - variance) / (variance * math.sqrt(2 / (n - 1)))  # Gaussian samples
    assert z_mean.abs().max() < 4.5 and z_variance.abs().max() < 4.5, (z_mean, z_variance)
    assert fitted.test_passes == 1


def test_each_anchored_ensemble_member_is_its_anchor_s_map(linear, monkeypatch):
    """Pearce et al.'s anchored MAP: member k minimises -log p(D | theta) + |theta - a_k|^2 / (2 v), whose minimum
    is Lambda^-1 (Phi^T y / s^2 + a_k / v); so the ensemble's spread is Lambda^-1 Cov(a) Lambda^-1 / v^2 with
    Cov(a) = v I. Each member, trained on all rows (no validation split), must reach its own."""
    from approximators import anchored

    calls = []

    def recording(*args, **kwargs):
        calls.append((kwargs.get("anchors"), anchored_train(*args, **kwargs)))
        return calls[-1][1]

    anchored_train = anchored.train_members
    monkeypatch.setattr(anchored, "train_members", recording)
    fit(linear.task, "ae", budget=8 * 300, settings={"epochs": 300, "validation_fraction": 0, "batch_size": 64,
                                                      "lr": 0.05, "min_lr": 1e-4})
    ((anchors, members),) = calls
    flat = lambda tensors: torch.cat([tensors["0.weight"].flatten(1), tensors["0.bias"]], dim=1)  # noqa: E731
    a, theta = flat(anchors).double(), flat(members).double()
    assert theta.shape == (8, D + 1)
    phi_y = linear.precision @ linear.mean  # Phi^T y / s^2
    exact = torch.linalg.solve(linear.precision, (phi_y + a / PRIOR_VARIANCE).T).T
    z = (theta - exact) / torch.diagonal(linear.covariance).sqrt()
    assert z.abs().max() < 0.01, z


def test_sgld_samples_the_stationary_law_of_its_own_recursion(linear, monkeypatch):
    """Full-batch SGLD at a constant step eps is the linear recursion theta <- theta - (eps / 2) Lambda (theta - mu)
    + N(0, eps I), whose stationary law is N(mu, C) with C = eps (I - A^2)^-1 in Lambda's eigenbasis,
    A = I - eps Lambda / 2: not the posterior (C exceeds Lambda^-1 by 1 / (1 - eps lambda / 4), a third along
    Lambda's largest eigenvalue at eps lambda_max = 1). 4096 chains' last samples are independent draws: their
    covariance is compared within 4.5 standard errors (sqrt(C_ii C_jj + C_ij^2) / sqrt(n))."""
    from approximators.base import PredictiveAccumulator

    kept = []
    add = PredictiveAccumulator.add

    def keep(self, members):
        kept.append(torch.cat([members["0.weight"].flatten(1), members["0.bias"]], dim=1).double())
        return add(self, members)

    monkeypatch.setattr(PredictiveAccumulator, "add", keep)
    values, vectors = torch.linalg.eigh(linear.precision)
    eps, chains = 1 / float(values.max()), 4096
    fit(linear.task, "sgld", budget=chains * 40, settings={"chains": chains, "batch_size": N, "schedule": "constant",
                                                           "lr": eps * N / 2, "burn_in": 0.9})
    draws = kept[-1]
    a = 1 - eps * values / 2
    stationary = vectors @ torch.diag(eps / (1 - a**2)) @ vectors.T
    torch.testing.assert_close(draws.mean(0), linear.mean, atol=float(4.5 * torch.diagonal(stationary).max().sqrt()
                                                                        / chains**0.5), rtol=0)
    covariance = torch.cov(draws.T)
    spread = (torch.outer(torch.diagonal(stationary), torch.diagonal(stationary)) + stationary**2).sqrt()
    z = (covariance - stationary) / (spread / chains**0.5)
    assert z.abs().max() < 4.5, z
    # ... and the same draws are far from the posterior along the largest eigenvalue.
    top = vectors[:, -1]
    assert float(top @ covariance @ top) > 1.2 * float(top @ linear.covariance @ top)
