"""Conjugate problems whose posteriors are known in closed form, built through the public API alone
(:func:`bench.api.make_task`), and the Monte Carlo yardsticks the conformance tests measure methods with.

Bayesian linear regression: the network is one linear layer (weights, then bias) with a Gaussian likelihood of known
noise s and the prior N(0, v I), so the posterior is Gaussian in closed form: with Phi = [X, 1],

    precision Lambda = Phi^T Phi / s^2 + I / v,     mean = Lambda^-1 Phi^T y / s^2.

Its generalised Gauss-Newton is Phi^T Phi / s^2 at every theta, and the full-batch gradient of the negative log
posterior is exactly Lambda (theta - mean), so every method's recursion is linear here. The prior variance is not 1,
so that a method confusing v with its square root or its inverse is seen.
"""

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from bench.api import FixedNoiseGaussian, make_task

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


@pytest.fixture(scope="session")
def linear():
    """64 rows with residuals of the likelihood's own noise: the problem most tests use."""
    return linear_gaussian("linear-gaussian", 64, NOISE)


@pytest.fixture(scope="session")
def problem():
    """:func:`linear_gaussian` itself, for a test that needs a variant (another network's start, say)."""
    return linear_gaussian


STRONG_PRIOR_VARIANCE = 0.002
"""A prior whose precision, 500, is an eighth of 1024 rows' (4096): strong enough that a method getting the prior
wrong (v for its square root, a prior term dropped) misses its target by several percent."""


@pytest.fixture(scope="session")
def wide_linear():
    """1024 rows with residuals of the likelihood's noise and the strong prior: a stochastic optimiser's fluctuation
    about its target falls as 1 / N here (VOGN)."""
    return linear_gaussian("linear-gaussian-wide", 1024, NOISE, STRONG_PRIOR_VARIANCE)


@pytest.fixture(scope="session")
def exact_linear():
    """1024 rows without residuals (y = x^T w + b exactly, the likelihood's noise still s, weights a tenth of the
    others' so that the strong prior's shrinkage leaves the posterior mean's residuals small): the
    reparameterisation gradient's noise then comes from the weight draws alone and falls as 1 / sqrt(N) (MFVI)."""
    return linear_gaussian("linear-gaussian-exact", 1024, 0.0, STRONG_PRIOR_VARIANCE, scale=0.1)


@pytest.fixture(scope="session")
def flat():
    """``{"0.weight": (K, 1, 3), "0.bias": (K, 1)}`` -> ``(K, 4)`` float64, in Phi's order (weights, then bias)."""
    return lambda params: torch.cat([params["0.weight"].flatten(1), params["0.bias"]], dim=1).double()


def gaussian_z(draws: torch.Tensor, mean: torch.Tensor, covariance: torch.Tensor):
    """z-scores of n independent draws ``(n, D)`` of N(``mean``, ``covariance``): of their mean (standard error
    sqrt(C_ii / n)) and of their second moment about ``mean`` (standard error sqrt((C_ii C_jj + C_ij^2) / n), the
    Gaussian's fourth moments), each ``(D,)`` and ``(D, D)``."""
    n = draws.shape[0]
    centred = draws - mean
    variances = torch.diagonal(covariance)
    z_mean = centred.mean(0) / (variances / n).sqrt()
    spread = (torch.outer(variances, variances) + covariance**2).sqrt() / math.sqrt(n)
    z_covariance = (centred.T @ centred / n - covariance) / spread
    return z_mean, z_covariance


@pytest.fixture(scope="session")
def moments_z():
    return gaussian_z


@pytest.fixture
def engine_iterates(monkeypatch):
    """Every engine run's initial parameters and, after every step, what ``record(state)`` returns: a list of
    ``SimpleNamespace(rule, start, steps)``, one per run, filled as the run goes (through the engine's own
    ``on_step`` hook, the method's hook still called)."""
    from approximators import engine

    runs = []
    run = engine.run

    def install(record):
        def recording_run(objective, rule, params, data, epochs, batch_size, seeds, on_step=None, **hooks):
            runs.append(SimpleNamespace(rule=rule, start=params.detach().clone(), steps=[]))

            def step(state, index):
                runs[-1].steps.append(record(state))
                if on_step is not None:
                    on_step(state, index)

            return run(objective, rule, params, data, epochs, batch_size, seeds, on_step=step, **hooks)

        monkeypatch.setattr(engine, "run", recording_run)
        return runs

    return install


@pytest.fixture
def training_calls(monkeypatch, flat):
    """``install(module)`` wraps the ``train_members`` a method module calls: a list of ``SimpleNamespace(start,
    anchors, trained)``, each ``(K, 4)`` (anchors None for a MAP), one per call in order."""
    from approximators import training

    def install(module):
        calls = []

        def recording(model, params, *args, anchors=None, **kwargs):
            trained = training.train_members(model, params, *args, anchors=anchors, **kwargs)
            calls.append(SimpleNamespace(start=flat(params), anchors=None if anchors is None else flat(anchors),
                                         trained=flat(trained)))
            return trained

        monkeypatch.setattr(module, "train_members", recording)
        return calls

    return install
