"""A problem of one's own through bench.api: Bayesian linear regression, whose posterior is known in closed
form, and the Laplace approximation that is exact for it (docs/writing-a-method.md)."""

import torch
from torch import nn
from bench.api import FixedNoiseGaussian, fit, make_task

x = torch.randn(64, 3, dtype=torch.float64)
y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.5 * torch.randn(64, dtype=torch.float64)
task = make_task("linear-gaussian", x, y, x[:16], lambda: nn.Sequential(nn.Linear(3, 1)).double(),
                 FixedNoiseGaussian(0.5), prior_variance=1.0)
laplace = fit(task, "laplace", budget=400, settings={"structure": "last-layer-full", "batch_size": 64})
phi = torch.cat([x, torch.ones(64, 1, dtype=torch.float64)], dim=1)
exact = torch.linalg.inv(phi.T @ phi / 0.5**2 + torch.eye(4, dtype=torch.float64))
print((laplace.approximator.posterior.covariance() - exact).abs().max())  # ~1e-18: exact for a linear model
