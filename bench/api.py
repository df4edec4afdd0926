"""bdl-bench's public API: everything a method of one's own needs, and a run from Python.

Import from here, not from the modules behind it: the names in ``__all__`` keep their meaning and
signatures within a major version of bdl-bench; everything else may change. The guide,
``docs/writing-a-method.md``, walks through a complete method built on them.

The method contract
-------------------
A method is a subclass of :class:`Approximator` with

- ``name: str``: its command-line name (1 to 100 printable characters, no ``:`` or ``/``, not a built-in's);
- ``summary: str``: one line for ``bench methods``; ``paper: str`` optionally, what it follows;
- ``Config``: a frozen dataclass of its settings, each field typed (``int``, ``float``, ``bool``, ``str``)
  with a default. ``--set key=value`` parses by the field's type. ``Config.BOUNDS`` (a class attribute,
  ``{"field": "[1, inf)"}``) gives each numeric setting's interval, ``Config.CHOICES`` a string setting's values and
  ``Config.AT_MOST`` (``{"min_lr": "lr"}``) settings that may not exceed another, all checked before any work;
- ``TASK_DEFAULTS: dict[str, dict]`` optionally, per-task values that replace the defaults;
- ``check_budget: float``, the budget ``bench check`` runs it with by default;
- ``fit(self, problem, data, generator) -> None``, which trains and leaves its predictive in
  ``self._predictive`` (or overrides ``predictive()``):

  ``problem`` (:class:`Problem`): what the method may know about the task: ``task``, ``kind``
  (``"classification"`` or ``"regression"``), ``model_factory()`` (a new ``nn.Module`` of the task's
  architecture with PyTorch's default initialisation), ``likelihood`` (``likelihood.log_prob(outputs,
  targets)`` per example), ``prior_variance`` (the prior is N(0, prior_variance I) on every weight;
  :func:`log_prior`), ``n_train``, ``x_test`` ``(N_test, *input_shape)`` on ``device`` (test inputs, never
  their labels), ``n_classes``, ``n_predictive_samples`` (S, for regression) and ``meter``.

  ``data`` (:class:`MeteredData`): the training set, the only way to read it. ``data.batch(indices)``
  with integer ``indices`` of any shape ``(*I)`` returns inputs ``(*I, *input_shape)`` and targets
  ``(*I)``, charged ``indices.numel()`` examples (``passes`` times with ``data.batch(indices, passes)``, for
  rows that go through the network several times, once per Monte Carlo draw of the weights, say);
  ``data.shared_batch(indices, copies)`` charges
  ``copies`` times for rows used by several stacked networks; ``data.full()`` is one epoch. A read that
  would pass the budget raises :class:`BudgetExhausted` and returns nothing. ``data.meter.epochs_left``
  says what remains.

  ``generator`` (``torch.Generator``): the run's only source of randomness (seeded by ``--seed``), so a
  seeded run reproduces exactly. :func:`member_seeds` and :func:`member_generators` split it per member.

- ``predictive(self) -> numpy.ndarray``: classification, probabilities ``(N_test, C)``, rows summing to
  one; regression, samples ``(N_test, S)`` from the predictive distribution, S =
  ``problem.n_predictive_samples``. Build it with :class:`PredictiveAccumulator`: ``PredictiveAccumulator(
  problem, n_members, generator)``, then ``add({name: (K, *shape)})`` for K networks' parameters stacked
  on a leading axis (or ``add_outputs((K, N_test, n_outputs))``) as they finish, then ``result()``. It
  keeps the Bayesian model average online, so members never need to be held in memory together.
- optionally ``footprint(self, budget, n_train) -> Footprint``, what a run holds at once, checked against
  the device's memory before ``fit`` is called; ``architecture_change(cls, config) -> str | None``, for a
  method that changes the task's network; ``self.report`` (a dict stored in the result record).

Stacked parameters: ``{name: tensor (K, *shape)}`` with the names of ``model.named_parameters()``; a
:class:`StackedModel` evaluates K networks at once (``model(params, x, shared_input=True)`` with ``x``
``(B, *input_shape)`` gives ``(K, B, n_outputs)``), and :class:`ParameterLayout` converts to and from
one flat ``(K, D)`` tensor.

A method is found by ``--method package.module:ClassName``, or by its name once an installed package
registers it in the ``bdl_bench.methods`` entry point group (:data:`ENTRY_POINT_GROUP`).

A run from Python
-----------------
:func:`run` runs one (task, method, budget, seed) as ``python -m bench run`` does and returns the
result record it wrote (:func:`read_result` reads one back).

A problem of one's own
----------------------
:func:`make_task` builds a task from tensors, a network factory, a likelihood (:class:`Categorical`,
:class:`FixedNoiseGaussian`, :class:`HeteroscedasticGaussian`) and a prior variance; :func:`fit` runs any
method on it (or on a built-in task) under the meter and returns what the method computed, its fitted
state included, without a reference and without writing anything: a conjugate model's closed-form posterior
is then a test of the method (``tests/science/``).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from approximators import ENTRY_POINT_GROUP, resolve_config, resolve_method
from approximators.base import (Approximator, Footprint, PredictiveAccumulator, Problem, member_generators,
                                member_seeds, steps_for)
from bench.budget import BudgetMeter, MeteredData, check_budget_size
from bench.errors import BenchError, BudgetExhausted, ConfigError, MethodFailed
from bench.executors import usable_cores
from bench.functional import ParameterLayout, StackedModel, seeded_module
from bench.likelihoods import Categorical, FixedNoiseGaussian, HeteroscedasticGaussian, Likelihood, log_prior
from bench.records import read_result
from bench.runner import RunSpec, fit_and_predict, metered, planned, resolve_device, run as run_spec
from bench.tasks import Task, get_task, task_names
from bench.tasks.custom import make_task


def run(task: str, method: str | type[Approximator], budget: float, seed: int = 0, *,
        settings: dict[str, object] | None = None, device: str = "cpu", out: str | Path = "runs",
        label: str | None = None, force: bool = False, cache: str | Path | None = None, threads: int = 1) -> dict:
    """Runs ``method`` on ``task`` for ``budget`` epochs with ``seed``, as ``python -m bench run`` does, and
    returns the result record (written to ``out/<task>/<method>/budget-<budget>/seed-<seed>/``).

    ``method``: a built-in's or an installed plugin's name, ``"package.module:ClassName"``, or an
    :class:`Approximator` subclass itself (one defined in a notebook, say). ``settings``: values for the
    method's config fields, as ``--set`` takes them (given as strings or as values whose ``str`` parses).
    ``threads``: torch's threads while it runs (default 1, as on the command line; the caller's setting is restored
    after). A finished run in the same folder is an error unless ``force``. Every failure a user can cause raises a
    :class:`BenchError` whose message is the one line the command line would print; a method that is not
    bdl-bench's failing in its own code raises :class:`MethodFailed` (its one line, chained to what it raised).
    """
    overrides = tuple((str(key), _setting_text(value)) for key, value in (settings or {}).items())
    call = ", ".join([f"task={task!r}", f"method={getattr(method, '__qualname__', method)!r}",
                      f"budget={budget!r}", f"seed={seed!r}", *([f"settings={settings!r}"] if settings else [])])
    with _torch_threads(threads):
        return run_spec(RunSpec(task=task, method=method, budget=budget, seed=seed, device=device, out=Path(out),
                                overrides=overrides, force=force, cache=None if cache is None else Path(cache),
                                label=label, command=f"bench.api.run({call})"))


@contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """torch's threads set to ``threads`` (a whole number from 1 to the usable cores) for the block, then restored."""
    cores = usable_cores()
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= cores:
        raise ConfigError(f"threads must be a whole number from 1 to the {cores} usable CPU core(s), got {threads!r}")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class Fit:
    """What :func:`fit` returns: the fitted method (its state, e.g. a Laplace posterior or SWAG's moments, as
    its module documents), its predictive (``(N_test, C)`` probabilities or ``(N_test, S)`` samples), its
    report, its config and the meter's account (``epochs_used``, ``test_passes``)."""

    approximator: Approximator
    predictive: np.ndarray
    report: dict
    config: object
    epochs_used: float
    test_passes: float


def fit(task: "str | Task", method: str | type[Approximator], budget: float, seed: int = 0, *,
        settings: dict[str, object] | None = None, device: str = "cpu", threads: int = 1) -> Fit:
    """Trains ``method`` on ``task`` (a built-in's name or a :func:`make_task` task) for ``budget`` epochs
    under the meter with ``seed``, and returns :class:`Fit`. Nothing is scored or written. ``settings`` and
    ``threads`` as for :func:`run`; ``device`` where the tensors live. Failures raise as for :func:`run`."""
    method_class = resolve_method(method)
    the_task = task if isinstance(task, Task) else get_task(task)
    problem, data = metered(the_task, check_budget_size(budget), resolve_device(device))
    config = resolve_config(method_class, the_task.name,
                            {str(key): _setting_text(value) for key, value in (settings or {}).items()})
    approximator = planned(method_class, config, problem, data)
    with _torch_threads(threads):
        predictive, report = fit_and_predict(approximator, problem, data, seed)
    return Fit(approximator, predictive, report, config, data.meter.epochs_used, data.meter.test_passes)


def _setting_text(value: object) -> str:
    """A setting as ``--set`` would receive it (``True`` -> ``"true"``, so booleans parse as booleans)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


__all__ = [
    "ENTRY_POINT_GROUP", "Approximator", "BenchError", "BudgetExhausted", "BudgetMeter", "Categorical", "ConfigError",
    "Fit", "FixedNoiseGaussian", "Footprint", "HeteroscedasticGaussian", "Likelihood", "MeteredData", "MethodFailed",
    "ParameterLayout", "PredictiveAccumulator", "Problem", "StackedModel", "Task", "fit", "log_prior", "make_task",
    "member_generators", "member_seeds", "read_result", "resolve_config", "run", "seeded_module", "steps_for",
    "task_names",
]
