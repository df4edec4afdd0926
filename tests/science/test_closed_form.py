"""Methods held to exact answers on Bayesian linear regression, built through the public API alone
(:func:`bench.api.make_task`, :func:`bench.api.fit`).

The network is one linear layer (weights, then bias) with a Gaussian likelihood of known noise s and the prior
N(0, v I), so the posterior is Gaussian in closed form: with Phi = [X, 1],

    precision Lambda = Phi^T Phi / s^2 + I / v,     mean = Lambda^-1 Phi^T y / s^2.

Its generalised Gauss-Newton is Phi^T Phi / s^2 at every theta, so a Laplace approximation is exact here
whatever MAP point it reaches.
"""

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
