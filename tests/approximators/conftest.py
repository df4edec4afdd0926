"""Helpers shared by the approximator tests: run a method's ``fit`` under a real meter; Bayesian linear
regression with its exact posterior."""

import math
from dataclasses import dataclass

import pytest
import torch

from approximators import get_method, resolve_config
from approximators.base import Problem
from bench.runner import metered
from bench.tasks import get_task


def _fit(method, task_name, budget, seed=0, **overrides):
    """Fits ``method`` on ``task_name`` under ``budget`` epochs; returns (predictive, meter)."""
    task = get_task(task_name)
    cls = get_method(method)
    problem, data = metered(task, budget)
    approximator = cls(resolve_config(cls, task_name, {k: str(v) for k, v in overrides.items()}))
    approximator.fit(problem, data, torch.Generator().manual_seed(seed))
    return approximator.predictive(), data.meter


@pytest.fixture
def fit():
    return _fit


@pytest.fixture
def problem_for():
    return Problem.for_task


@pytest.fixture
def spy_training(monkeypatch):
    """Records every call of ``train_members`` made by a method module (arguments by name, and the result)."""
    import inspect

    from approximators import training

    def install(module):
        calls = []
        signature = inspect.signature(training.train_members)

        def recording(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            call = dict(bound.arguments)
            call["params"] = {n: p.detach().clone() for n, p in call["params"].items()}
            call["result"] = training.train_members(*args, **kwargs)
            calls.append(call)
            return call["result"]

        monkeypatch.setattr(module, "train_members", recording)
        return calls
    return install


@dataclass(frozen=True)
class LinearRegression:
    """y = phi^T w + N(0, noise^2), phi = (x, 1) in ``nn.Linear``'s layout (weight, then bias), prior N(0, v I):
    the posterior is Gaussian with ``precision`` Phi^T Phi / noise^2 + I / v and ``mean``."""

    x: torch.Tensor
    y: torch.Tensor
    phi: torch.Tensor
    noise: float
    prior_variance: float
    precision: torch.Tensor
    mean: torch.Tensor

    @property
    def n(self) -> int:
        return len(self.y)


@pytest.fixture
def linear_regression():
    n, noise, prior_variance = 200, 0.5, 1.0
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.3 + noise * torch.randn(n, generator=g,
                                                                                         dtype=torch.float64)
    phi = torch.cat([x, torch.ones(n, 1, dtype=torch.float64)], dim=1)
    precision = phi.T @ phi / noise**2 + torch.eye(4, dtype=torch.float64) / prior_variance
    mean = torch.linalg.solve(precision, phi.T @ y / noise**2)
    return LinearRegression(x, y, phi, noise, prior_variance, precision, mean)


def batch_means_se(trace: torch.Tensor, batches: int = 20) -> torch.Tensor:
    """Monte Carlo standard error of the mean of a stationary trace ``(T, D)``, from ``batches`` batch means."""
    means = trace[: len(trace) // batches * batches].reshape(batches, -1, trace.shape[-1]).mean(1)
    return means.std(0) / math.sqrt(batches)


@pytest.fixture
def standard_error():
    return batch_means_se
