"""The epoch budget, counted by the harness.

A budget is a number of training epochs summed over everything a method trains: every member,
chain and sample. A method never holds the training tensors; it reads them only through
:class:`MeteredData`, which charges ``examples processed / N_train`` epochs **before** handing the
examples over, so a request that would exceed the budget raises :class:`BudgetExhausted` and no
example beyond the budget is ever seen. Counting is exact (integers of examples), not floating point.

What is charged: every training example a method reads, for any purpose (gradient steps,
validation passes over held-out training data, statistics updates such as SWAG moments or batch
statistics). A full-batch gradient evaluation costs one epoch.

What is not charged, but reported separately: evaluations of the test inputs to build the
predictive (``test_passes``, in units of one pass over the test set).
"""

from __future__ import annotations

import math

import torch

from bench.errors import BudgetExhausted


class BudgetMeter:
    def __init__(self, budget_epochs: float, n_train: int):
        if not (budget_epochs > 0 and math.isfinite(budget_epochs)):
            raise BudgetExhausted(f"the budget must be a positive number of epochs, got {budget_epochs}")
        self.budget_epochs = float(budget_epochs)
        self.n_train = int(n_train)
        self.limit_examples = math.floor(self.budget_epochs * self.n_train + 1e-9)
        self.examples = 0
        self.test_examples = 0
        self.n_test = 0

    @property
    def epochs_used(self) -> float:
        return self.examples / self.n_train

    @property
    def epochs_left(self) -> float:
        return (self.limit_examples - self.examples) / self.n_train

    @property
    def test_passes(self) -> float:
        return self.test_examples / self.n_test if self.n_test else 0.0

    def charge(self, n_examples: int) -> None:
        if self.examples + n_examples > self.limit_examples:
            raise BudgetExhausted(
                f"over budget: {self.epochs_used:.3f} of {self.budget_epochs:g} epochs used, "
                f"asked for {n_examples / self.n_train:.3f} more")
        self.examples += n_examples

    def record_test_pass(self, n_rows: int, n_test: int) -> None:
        self.n_test = n_test
        self.test_examples += n_rows

    def summary(self) -> dict:
        return {"budget": self.budget_epochs, "epochs_used": self.epochs_used,
                "examples_charged": self.examples, "test_passes": self.test_passes}


class MeteredData:
    """The training set as a method sees it. Shapes: inputs ``(N_train, *input_shape)``, targets ``(N_train,)``."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, meter: BudgetMeter):
        self._x, self._y, self.meter = x, y, meter

    @property
    def n_train(self) -> int:
        return int(self._x.shape[0])

    @property
    def device(self) -> torch.device:
        return self._x.device

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``indices`` (any shape, e.g. ``(K, B)`` for K members) -> inputs ``(*indices.shape, ...)``."""
        self.meter.charge(indices.numel())
        indices = indices.to(self._x.device)
        return self._x[indices], self._y[indices]

    def shared_batch(self, indices: torch.Tensor, copies: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``indices`` ``(B,)`` read once but used by ``copies`` members (e.g. a validation pass
        of K members): charged ``copies * B`` examples, as if each member had read them."""
        self.meter.charge(copies * indices.numel())
        indices = indices.to(self._x.device)
        return self._x[indices], self._y[indices]

    def full(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole training set, charged as one epoch (one full-data gradient evaluation)."""
        self.meter.charge(self.n_train)
        return self._x, self._y
