"""Helpers shared by the approximator tests: run a method's ``fit`` under a real meter."""

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
