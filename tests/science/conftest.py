"""Conjugate problems whose posteriors are known in closed form (:mod:`reference.conjugate`: Bayesian linear
regression, built through the public API alone), and the Monte Carlo yardsticks the conformance tests measure
methods with.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from reference.conjugate import NOISE, linear_gaussian


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
