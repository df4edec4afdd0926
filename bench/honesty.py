"""The honesty probe: counts the training rows that pass through a method's network, independently of the meter.

The meter counts what a method *asks for*; the probe counts what the network *computes on*. It
runs the method's real ``fit`` on a copy of a task whose inputs carry one extra trailing column, a
mark that is 0 on every training row and 1 on every test row, and whose network is the task's own
wrapped in :class:`RowCounter`: the wrapper strips the mark, runs the network, and counts the rows
of its output by mark. Under ``torch.func`` transforms (``vmap`` over members or examples, ``grad``)
the output is unwrapped to its physical tensor, so a row evaluated by K stacked members counts K
times, as the meter charges it.

An honest method then satisfies ``training rows through the network == epochs_used x N_train`` (a
validation pass over held-out training rows included) and ``test rows == test_passes x N_test``.
A method that reads a batch once and trains K members on it, takes two gradient steps per read, or
under-reports its test evaluations fails the probe. The probe applies to every method the harness
knows (``tests/bench/test_honesty.py``); ``benchmarks/honesty_table.py`` prints the table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch._C._functorch as functorch
from torch import nn

from approximators import get_method, resolve_config
from bench.runner import execute, metered
from bench.tasks import get_task

TRAIN_MARK, TEST_MARK = 0.0, 1.0


class Tally:
    """Rows counted by mark; shared (never copied) by every copy of the probed network."""

    def __init__(self):
        self.train_rows = 0
        self.test_rows = 0
        self.unmarked_rows = 0

    def __deepcopy__(self, memo):  # StackedModel deep-copies its module: the copy must count into the same tally
        return self

    def add(self, marks: torch.Tensor) -> None:
        self.train_rows += int((marks == TRAIN_MARK).sum())
        self.test_rows += int((marks == TEST_MARK).sum())
        self.unmarked_rows += int(((marks != TRAIN_MARK) & (marks != TEST_MARK)).sum())


def physical(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor under every ``vmap`` / ``grad`` wrapper: its shape holds every batch dimension."""
    while functorch.is_batchedtensor(t) or functorch.is_functorch_wrapped_tensor(t):
        t = functorch.get_unwrapped(t)
    return t


class RowCounter(nn.Module):
    """The task's network on inputs with a trailing mark column; counts its output rows into ``tally``."""

    def __init__(self, inner: nn.Module, tally: Tally):
        super().__init__()
        self.inner = inner
        self.tally = tally

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x[..., :-1])
        marks = x.detach().flatten(1)[:, -1]
        # Broadcast each row's mark to the output's batch structure (members, examples) without arithmetic
        # on the output, so NaN outputs still count.
        per_output_row = marks + torch.zeros_like(out.detach().flatten(1)[:, 0])
        self.tally.add(physical(per_output_row))
        return out


def marked(x: torch.Tensor, mark: float) -> torch.Tensor:
    """``x`` ``(N, ..., W)`` with a column of ``mark`` appended along the last axis: ``(N, ..., W + 1)``."""
    return torch.cat([x, torch.full((*x.shape[:-1], 1), mark, dtype=x.dtype)], dim=-1)


@dataclass(frozen=True)
class ProbeResult:
    method: str
    task: str
    budget: float
    n_train: int
    n_test: int
    epochs_used: float
    examples_charged: int
    test_passes: float
    train_rows: int
    test_rows: int
    unmarked_rows: int

    @property
    def honest(self) -> bool:
        return (self.train_rows == self.examples_charged and self.unmarked_rows == 0
                and self.test_rows == round(self.test_passes * self.n_test))


def probe(method_name: str, task_name: str, budget: float | None = None, seed: int = 0,
          overrides: dict[str, str] | None = None, train_rows: int | None = None) -> ProbeResult:
    """Runs ``method_name`` on a marked copy of ``task_name`` (default budget: the method's
    ``check_budget``; ``train_rows``: only the first rows of the training set, to probe quickly)
    and returns what the network computed on next to what the meter charged."""
    task = get_task(task_name)
    method = get_method(method_name)
    budget = method.check_budget if budget is None else budget
    tally = Tally()
    rows = slice(train_rows)
    probed = dataclasses.replace(
        task, x_train=marked(task.x_train[rows], TRAIN_MARK), y_train=task.y_train[rows],
        x_test=marked(task.x_test, TEST_MARK), model_factory=lambda: RowCounter(task.model_factory(), tally))
    problem, data = metered(probed, budget)
    config = resolve_config(method, task.name, overrides)
    if hasattr(config, "sites"):  # layers named in a setting (MC dropout's) sit under the wrapper
        config = dataclasses.replace(config, sites=",".join(f"inner.{site}" for site in config.sites.split(",")))
    execute(method, config, problem, data, seed)
    meter = data.meter
    return ProbeResult(method.name, task.name, budget, probed.n_train, task.n_test, meter.epochs_used, meter.examples,
                       meter.test_passes, tally.train_rows, tally.test_rows, tally.unmarked_rows)
