"""Bayesian linear regression in closed form, and each method's exact target on it, built through the public
API alone (:func:`bench.api.make_task`): the conformance suite's problem (``tests/science``) and
``benchmarks/converged_gap.py``'s.

The network is one linear layer (weights, then bias) with a Gaussian likelihood of known noise s and the prior
N(0, v I), so the posterior is Gaussian in closed form: with Phi = [X, 1],

    precision Lambda = Phi^T Phi / s^2 + I / v,     mean = Lambda^-1 Phi^T y / s^2.

Its generalised Gauss-Newton is Phi^T Phi / s^2 at every theta, and the full-batch gradient of the negative log
posterior is exactly Lambda (theta - mean), so every method's recursion is linear here. The prior variance is not 1,
so that a method confusing v with its square root or its inverse is seen.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from bench.likelihoods import FixedNoiseGaussian
from bench.tasks.custom import make_task

D, NOISE, PRIOR_VARIANCE = 3, 0.5, 0.5
WEIGHTS, BIAS = [1.0, -2.0, 0.5], 0.3


def linear_gaussian(name: str, rows: int, residual: float, prior_variance: float = PRIOR_VARIANCE, scale: float = 1.0,
                    model_factory=None) -> SimpleNamespace:
    """``rows`` rows of y = scale (x^T w + b) + residual * N(0, 1), x ~ N(0, I_3), and 16 test rows, as a task with
    the likelihood's noise s = NOISE whatever ``residual`` is (the posterior is the same closed form either way)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, D, generator=g, dtype=torch.float64)
    y = scale * (x @ torch.tensor(WEIGHTS, dtype=torch.float64) + BIAS) \
        + residual * torch.randn(rows, generator=g, dtype=torch.float64)
    x_test = torch.randn(16, D, generator=g, dtype=torch.float64)
    factory = model_factory or (lambda: nn.Sequential(nn.Linear(D, 1)).double())
    task = make_task(name, x, y, x_test, factory, FixedNoiseGaussian(NOISE), prior_variance)
    phi = torch.cat([x, torch.ones(rows, 1, dtype=torch.float64)], dim=1)
    precision = phi.T @ phi / NOISE**2 + torch.eye(D + 1, dtype=torch.float64) / prior_variance
    mean = torch.linalg.solve(precision, phi.T @ y / NOISE**2)
    covariance = torch.linalg.inv(precision)
    return SimpleNamespace(task=task, x=x, y=y, x_test=x_test, phi=phi, n=rows, noise=NOISE,
                           prior_variance=prior_variance, precision=precision, mean=mean, covariance=covariance,
                           sd=torch.diagonal(covariance).sqrt())


def vogn_fixed_point(problem) -> torch.Tensor:
    """sigma^2 ``(4,)`` at VOGN's fixed point, tau = 1: mu = the posterior mean (a linear model's E_q g(w) = g(mu),
    so E g + delta~ mu = 0 is the MAP), and s = E_q h(w), the mean squared per-example gradient at draws from q,

        s_j = (1/N) sum_i phi_ij^2 [(phi_i^T mu - y_i)^2 + sum_k phi_ik^2 sigma_k^2] / s_noise^4,
        sigma_j^2 = 1 / (N (s_j + delta~)),   delta~ = 1 / (v N),

    solved by iterating it (a contraction here)."""
    n, delta = problem.n, 1 / (problem.prior_variance * problem.n)
    squared_residuals = (problem.phi @ problem.mean - problem.y).square()
    precision = torch.zeros(4, dtype=torch.float64)
    for _ in range(100):
        variance = 1 / (n * (precision + delta))
        precision = (problem.phi.square() * (squared_residuals + problem.phi.square() @ variance)[:, None]).mean(0) \
            / problem.noise**4
    return 1 / (n * (precision + delta))


def anchored_map(problem, anchors: torch.Tensor) -> torch.Tensor:
    """Pearce et al.'s anchored MAP for each anchor ``(K, 4)``: the minimum of -log p(D | theta) + |theta - a|^2 / (2 v),
    Lambda^-1 (Phi^T y / s^2 + a / v)."""
    phi_y = problem.precision @ problem.mean  # Phi^T y / s^2
    return torch.linalg.solve(problem.precision, (phi_y + anchors / problem.prior_variance).T).T
