"""A task of one's own through the public API: every bad argument is one line, and every method runs on it."""

import numpy as np
import pytest
import torch
from torch import nn

from approximators import METHODS
from bench.api import (Categorical, ConfigError, FixedNoiseGaussian, HeteroscedasticGaussian, fit, make_task)

X = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))
Y = X.sum(1)
LABELS = (X[:, 0] > 0).long()


def _linear(outputs=1):
    return lambda: nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, outputs))


class _Fails(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 1)

    def forward(self, x):
        raise RuntimeError("the user's bug")


GOOD = dict(name="mine", x_train=X, y_train=Y, x_test=X[:5], model_factory=_linear(), likelihood=FixedNoiseGaussian(0.5),
            prior_variance=1.0)


@pytest.mark.parametrize("change, message", [
    (dict(name="digits"), "built-in"), (dict(name="My Task"), "name"), (dict(name=""), "name"), (dict(name=3), "name"),
    (dict(x_train=X.long()), "x_train"), (dict(x_train=X[:, 0]), "x_train"), (dict(x_train=[[1.0]]), "x_train"),
    (dict(x_train=torch.full((40, 3), float("nan"))), "non-finite"), (dict(x_test=X[:5, :2]), "x_test"),
    (dict(y_train=Y[:10]), "y_train"), (dict(y_train=Y.clone().fill_(float("inf"))), "finite"),
    (dict(y_train=LABELS), "finite real"), (dict(prior_variance=0), "prior_variance"),
    (dict(prior_variance=float("nan")), "prior_variance"), (dict(prior_variance=True), "prior_variance"),
    (dict(likelihood="gaussian"), "likelihood"), (dict(model_factory=nn.Linear(3, 1)), "model_factory\\(\\) failed"),
    (dict(model_factory=lambda: "a network"), "nn.Module"), (dict(model_factory=_Fails), "the user's bug"),
    (dict(model_factory=_linear(2)), "1 output"), (dict(likelihood=HeteroscedasticGaussian()), "2 output"),
    (dict(likelihood=Categorical(), y_train=LABELS + 5, model_factory=_linear(2)), "class indices"),
    (dict(likelihood=Categorical(), y_train=Y, model_factory=_linear(2)), "class indices"),
    (dict(y_test=Y), "y_test"),
])
def test_a_bad_argument_is_one_line_naming_it(change, message):
    with pytest.raises(ConfigError, match=message) as refusal:
        make_task(**{**GOOD, **change})
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_every_method_runs_on_a_task_of_one_s_own(method, kind):
    task = make_task(**GOOD) if kind == "regression" else \
        make_task(**{**GOOD, "y_train": LABELS, "likelihood": Categorical(), "model_factory": _linear(2)})
    # A task of one's own has no per-task defaults: MC dropout needs its sites, cSG-MCMC's CIFAR step size
    # (0.5 per example) diverges on 40 rows.
    settings = {"mc-dropout": {"sites": "2"}, "csgmcmc": {"lr": 0.01}}.get(method)
    fitted = fit(task, method, METHODS[method].check_budget, settings=settings)
    assert 0 < fitted.epochs_used <= METHODS[method].check_budget
    if kind == "classification":
        assert fitted.predictive.shape == (5, 2) and np.allclose(fitted.predictive.sum(1), 1)
    else:
        assert fitted.predictive.shape == (5, 1000) and np.isfinite(fitted.predictive).all()
