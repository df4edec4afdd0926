"""The epoch budget, counted by the harness.

A budget is a number of training epochs summed over everything a method trains: every member,
chain and sample. A method never holds the training tensors; it reads them only through
:class:`MeteredData`, which charges ``examples processed / N_train`` epochs **before** handing the
examples over, so a request that would exceed the budget raises :class:`BudgetExhausted` and no
example beyond the budget is ever seen. Counting is exact (integers of examples), not floating point.

What is charged: every training example a method reads, for any purpose (gradient steps,
validation passes over held-out training data, statistics updates such as SWAG moments or batch
statistics). A full-batch gradient evaluation costs one epoch. A row read once but used by K
members (a validation pass of K stacked members) is charged K times: the charge is rows through
the network, not rows copied.

What is not charged, but reported separately: evaluations of the test inputs to build the
predictive (``test_passes``, in units of one pass over the test set).

Misuse is refused rather than trusted: a charge must be a positive whole number of examples, a
shared batch has at least one copy, the meter's fields cannot be assigned, and the data a method
receives are copies (a method cannot edit the training set, or keep a live handle on it, by
accident). What the meter cannot do is stop code that goes around it on purpose: a method is code,
reviewed like code, and ``python -m bench verify`` re-executes its claims.
"""

from __future__ import annotations

import math
import numbers
from typing import Callable

import torch

from bench.errors import BudgetExhausted, ConfigError, MeterMisuse, OverBudget, number_text, shown
from bench.limits import DEFAULT_MAX_EPOCHS, MAX_BUDGET_EPOCHS  # noqa: F401 (bench.budget.DEFAULT_MAX_EPOCHS: its users')


PROGRESS_REPORTS = 1000
"""How often, at most, a meter's progress observer hears of a run: each time the charges cross another
1/PROGRESS_REPORTS of the budget (and when it is spent), so a progress bar costs nothing per batch."""

# The largest budget and the default --max-epochs are set in bench.limits, which the parser reads without torch.


def check_planned_epochs(epochs: float, limit: float, what: str) -> None:
    """One :class:`BudgetExhausted` line, before anything trains, when ``what`` would re-execute more than ``limit``
    epochs."""
    if epochs > limit:
        raise BudgetExhausted(f"{what} would train {number_text(epochs)} epochs in all, more than --max-epochs "
                              f"{number_text(limit)}; "
                              f"check what it claims or asks for, or pass --max-epochs {math.ceil(epochs)} to run it")


def check_budget_size(budget_epochs) -> float:
    """``budget_epochs`` as a float in (0, MAX_BUDGET_EPOCHS], or a one-line :class:`ConfigError` (a budget that is no
    budget is a bad argument; :class:`BudgetExhausted` is a method asking for more than a valid one)."""
    if isinstance(budget_epochs, bool) or not isinstance(budget_epochs, numbers.Real) or not budget_epochs > 0 \
            or budget_epochs == math.inf:  # NaN fails > 0; a whole number is compared, never converted (2^5000)
        raise ConfigError(f"the budget must be a positive number of epochs, got {shown(budget_epochs)}")
    if budget_epochs > MAX_BUDGET_EPOCHS:
        raise ConfigError(f"the budget must be at most {number_text(MAX_BUDGET_EPOCHS)} epochs (bdl-bench runs no more), got "
                              f"{shown(budget_epochs)}")
    return float(budget_epochs)


def _assign(obj, **values) -> None:
    """Sets attributes of the read-only meter classes from inside (their ``__setattr__`` refuses everyone)."""
    for name, value in values.items():
        object.__setattr__(obj, name, value)


def _count(value, what: str, minimum: int) -> int:
    """``value`` as an int of at least ``minimum``; bools, floats and tensors of another kind are refused."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise MeterMisuse(f"{what} must be a whole number of at least {minimum}, got {value!r}")
    return int(value)


class BudgetMeter:
    """Counts the training examples a run reads (charged) and the test rows it evaluates (reported).

    Read-only from outside: the counters change only through :meth:`charge` and
    :meth:`record_test_pass`, which accept only positive whole numbers, and assigning any attribute
    raises :class:`MeterMisuse` (an ``AttributeError``).
    """

    __slots__ = ("_budget_epochs", "_n_train", "_limit", "_examples", "_test_examples", "_n_test", "_on_progress",
                 "_report_step", "_next_report")

    def __init__(self, budget_epochs: float, n_train: int, on_progress: Callable[[float], None] | None = None):
        """``on_progress`` (optional) is called with the epochs used whenever the charges cross another
        1/:data:`PROGRESS_REPORTS` of the budget and when the budget is spent; the harness's progress bar."""
        budget_epochs = check_budget_size(budget_epochs)
        n_train = _count(n_train, "n_train", 1)
        limit = math.floor(budget_epochs * n_train + 1e-9)
        step = max(1, -(-limit // PROGRESS_REPORTS))  # rounded up: at most PROGRESS_REPORTS reports
        # Without an observer the next report lies beyond the limit: charge() then pays one comparison, never a call.
        _assign(self, _budget_epochs=budget_epochs, _n_train=n_train, _limit=limit, _examples=0,
                _test_examples=0, _n_test=0, _on_progress=on_progress, _report_step=step,
                _next_report=min(step, limit) if on_progress is not None else limit + 1)

    def __setattr__(self, name, value):
        raise MeterMisuse(f"the budget meter is read-only (tried to set {name!r}); it changes only by charging")

    @property
    def budget_epochs(self) -> float:
        return self._budget_epochs

    @property
    def n_train(self) -> int:
        return self._n_train

    @property
    def examples(self) -> int:
        """Training examples charged so far."""
        return self._examples

    @property
    def epochs_used(self) -> float:
        return self._examples / self._n_train

    @property
    def epochs_left(self) -> float:
        return (self._limit - self._examples) / self._n_train

    @property
    def test_passes(self) -> float:
        return self._test_examples / self._n_test if self._n_test else 0.0

    def charge(self, n_examples: int) -> None:
        """Charges ``n_examples`` (a positive whole number) or raises :class:`~bench.errors.OverBudget`, charging nothing."""
        n_examples = _count(n_examples, "a charge", 1)
        if self._examples + n_examples > self._limit:
            raise OverBudget(
                f"over budget: {self.epochs_used:.3f} of {self._budget_epochs:g} epochs used, "
                f"asked for {n_examples / self._n_train:.3f} more")
        _assign(self, _examples=self._examples + n_examples)
        if self._examples >= self._next_report:
            step = self._report_step
            _assign(self, _next_report=min((self._examples // step + 1) * step, self._limit)
                    if self._examples < self._limit else self._limit + 1)
            self._on_progress(self.epochs_used)

    def record_test_pass(self, n_rows: int, n_test: int) -> None:
        """Reports ``n_rows`` test rows evaluated (all members counted) on a test set of ``n_test`` rows."""
        n_rows, n_test = _count(n_rows, "test rows", 1), _count(n_test, "the test set size", 1)
        if self._n_test and n_test != self._n_test:
            raise MeterMisuse(f"test passes were reported on {self._n_test} test rows, now on {n_test}")
        _assign(self, _n_test=n_test, _test_examples=self._test_examples + n_rows)

    def counts(self) -> dict:
        """What the meter has counted, as :meth:`restore_counts` takes it (a run's checkpoint keeps it)."""
        return {"examples": self._examples, "test_examples": self._test_examples, "n_test": self._n_test}

    def restore_counts(self, examples: int, test_examples: int, n_test: int) -> None:
        """The harness resumes a stopped run: the meter holds what it had counted when the run's checkpoint was written
        (:mod:`bench.checkpoint`), so that a resumed run can never spend more than its budget."""
        examples = _count(examples, "the examples charged", 0)
        if examples > self._limit:
            raise MeterMisuse(f"a checkpoint claims {examples} examples charged, more than the budget's {self._limit}")
        _assign(self, _examples=examples, _test_examples=_count(test_examples, "test rows", 0),
                _n_test=_count(n_test, "the test set size", 0))
        if self._on_progress is not None:
            step = self._report_step
            _assign(self, _next_report=min((examples // step + 1) * step, self._limit)
                    if examples < self._limit else self._limit + 1)
            self._on_progress(self.epochs_used)

    def summary(self) -> dict:
        return {"budget": self._budget_epochs, "epochs_used": self.epochs_used,
                "examples_charged": self._examples, "test_passes": self.test_passes}


class MeteredData:
    """The training set as a method sees it. Shapes: inputs ``(N_train, *input_shape)``, targets ``(N_train,)``.

    Every read is charged before it is served, and every read returns new tensors (a copy), never
    the training set itself.
    """

    __slots__ = ("_x", "_y", "_meter")

    def __init__(self, x: torch.Tensor, y: torch.Tensor, meter: BudgetMeter):
        if x.shape[0] != y.shape[0] or x.shape[0] != meter.n_train:
            raise ValueError(f"inputs ({x.shape[0]} rows), targets ({y.shape[0]}) and the meter's N_train "
                             f"({meter.n_train}) disagree")
        _assign(self, _x=x, _y=y, _meter=meter)

    def __setattr__(self, name, value):
        raise MeterMisuse(f"metered data are read-only (tried to set {name!r})")

    @property
    def meter(self) -> BudgetMeter:
        return self._meter

    @property
    def n_train(self) -> int:
        return int(self._x.shape[0])

    @property
    def device(self) -> torch.device:
        return self._x.device

    def _rows(self, indices: torch.Tensor) -> torch.Tensor:
        if not isinstance(indices, torch.Tensor) or indices.dtype not in (torch.int64, torch.int32):
            raise MeterMisuse("training rows are read by a tensor of integer indices")
        return indices.to(self._x.device)

    def batch(self, indices: torch.Tensor, passes: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``indices`` (any shape, e.g. ``(K, B)`` for K members) -> inputs ``(*indices.shape, ...)``,
        targets ``indices.shape``; charged ``passes * indices.numel()`` examples, ``passes`` >= 1 being the
        times each row goes through the network (e.g. once per Monte Carlo draw of the weights)."""
        passes = _count(passes, "passes", 1)
        indices = self._rows(indices)
        self._meter.charge(passes * indices.numel())
        return self._x[indices], self._y[indices]

    def shared_batch(self, indices: torch.Tensor, copies: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``indices`` ``(B,)`` read once but used by ``copies`` >= 1 members (e.g. a validation pass
        of K members): charged ``copies * B`` examples, as if each member had read them."""
        copies = _count(copies, "copies", 1)
        indices = self._rows(indices)
        self._meter.charge(copies * indices.numel())
        return self._x[indices], self._y[indices]

    def full(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A copy of the whole training set, charged as one epoch (one full-data gradient evaluation)."""
        self._meter.charge(self.n_train)
        return self._x.clone(), self._y.clone()


def budget_label(budget: float) -> str:
    """The budget as a folder name, exactly: an integer as is, any other float by its shortest round-trip repr."""
    budget = float(budget)
    return str(int(budget)) if budget.is_integer() else repr(budget)
