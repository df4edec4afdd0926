"""Helpers shared by the approximator tests: run a method's ``fit`` under a real meter."""

import pytest
import torch

from approximators import get_method, resolve_config
from approximators.base import Problem
from bench.budget import BudgetMeter, MeteredData
from bench.tasks import get_task


def _fit(method, task_name, budget, seed=0, **overrides):
    """Fits ``method`` on ``task_name`` under ``budget`` epochs; returns (predictive, meter)."""
    task = get_task(task_name)
    cls = get_method(method)
    meter = BudgetMeter(budget, task.n_train)
    approximator = cls(resolve_config(cls, task_name, {k: str(v) for k, v in overrides.items()}))
    approximator.fit(Problem.for_task(task, meter), MeteredData(task.x_train, task.y_train, meter),
                     torch.Generator().manual_seed(seed))
    return approximator.predictive(), meter


@pytest.fixture
def fit():
    return _fit


@pytest.fixture
def problem_for():
    return Problem.for_task
