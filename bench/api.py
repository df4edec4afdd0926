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
  ``Config.AT_MOST`` (``{"min_lr": "lr"}``, or ``{"min_lr": ("lr", why)}`` with the reason a refusal gives) settings
  that may not exceed another, all checked before any work;
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
- optionally ``resolved(self, problem) -> Config``: the config with every automatic setting (one whose 0 means
  "the method's rule decides") replaced by what a run on ``problem`` (its meter's budget) uses, the same run bit for
  bit; a result record keeps it as ``resolved`` beside the ``config`` asked for (default: the config itself);
- optionally ``footprint(self, budget, n_train) -> Footprint``, what a run holds at once, checked against
  the device's memory before ``fit`` is called; ``architecture_change(cls, config) -> str | None``, for a
  method that changes the task's network; ``self.report`` (a dict stored in the result record).

Stacked parameters: ``{name: tensor (K, *shape)}`` with the names of ``model.named_parameters()``; a
:class:`StackedModel` evaluates K networks at once (``model(params, x, shared_input=True)`` with ``x``
``(B, *input_shape)`` gives ``(K, B, n_outputs)``), and :class:`ParameterLayout` converts to and from
one flat ``(K, D)`` tensor.

A method is found by ``--method package.module:ClassName``, or by its name once an installed package
registers it in the ``bdl_bench.methods`` entry point group (:data:`ENTRY_POINT_GROUP`).

Runs from Python, results as a table
------------------------------------
:func:`run` runs one (task, method, budget, seed) as ``python -m bench run`` does and returns the
result record it wrote (:func:`read_result` reads one back). :func:`sweep` runs every combination of methods, tasks,
budgets, seeds and setting variants as ``python -m bench sweep`` does, resumably, and returns their records;
:func:`read_runs` reads every finished run under a folder as the same list. :func:`table` flattens records into rows
(task, method, budget, seed, each metric on the whole test set and per block, settings, the method's report) and
:func:`dataframe` makes them a pandas DataFrame when pandas is installed. Arguments are checked before anything
trains; an error names the argument as the function's signature does (``seed``, ``settings['lr']``).

A problem of one's own
----------------------
:func:`make_task` builds a task from tensors, a network factory, a likelihood (:class:`Categorical`,
:class:`FixedNoiseGaussian`, :class:`HeteroscedasticGaussian`) and a prior variance; :func:`fit` runs any
method on it (or on a built-in task) under the meter and returns what the method computed, its fitted
state included, without a reference and without writing anything: a conjugate model's closed-form posterior
is then a test of the method (``tests/science/``).
"""

from __future__ import annotations

import numbers
import os
import typing
import warnings
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from approximators import ENTRY_POINT_GROUP, method_source, resolve_config, resolve_method
from approximators.base import (Approximator, Footprint, PredictiveAccumulator, Problem, member_generators,
                                member_seeds, steps_for)
from bench import records, sweep as sweep_runs
from bench.budget import BudgetMeter, MeteredData, check_budget_size
from bench.errors import PYTHON, BenchError, BudgetExhausted, ConfigError, DamagedFile, MethodFailed, shown
from bench.executors import usable_cores
from bench.functional import ParameterLayout, StackedModel, seeded_module
from bench.likelihoods import Categorical, FixedNoiseGaussian, HeteroscedasticGaussian, Likelihood, log_prior
from bench.arguments import SEED_LIMIT
from bench.records import read_result
from bench.runner import (DEVICES, RunSpec, check_label, fit_and_predict, metered, planned, resolve_device,
                          resolved_config, run as run_spec)
from bench.tasks import Task, all_task_names, get_task, task_names
from bench.tasks.custom import make_task


def run(task: str, method: str | type[Approximator], budget: float, seed: int = 0, *,
        settings: dict[str, object] | None = None, device: str = "cpu", out: str | Path = "runs",
        label: str | None = None, force: bool = False, cache: str | Path | None = None, threads: int = 1,
        predictions: bool = True) -> dict:
    """Runs ``method`` on ``task`` for ``budget`` epochs with ``seed``, as ``python -m bench run`` does, and
    returns the result record (written to ``out/<task>/<method>/budget-<budget>/seed-<seed>/``).

    ``method``: a built-in's or an installed plugin's name, ``"package.module:ClassName"``, or an
    :class:`Approximator` subclass itself (one defined in a notebook, say). ``settings``: values for the
    method's config fields, each of the field's type or text as ``--set`` takes it. ``seed``: a whole number in
    [0, 2^63). ``device``: ``"cpu"``, ``"cuda"`` or ``"auto"``.
    ``threads``: torch's threads while it runs (default 1, as on the command line; the caller's setting is restored
    after). ``predictions=False`` keeps the record alone, without ``predictions.npz`` (as ``--no-predictions``). The
    same run finished earlier in ``out`` (same task, method, budget, seed and configuration) is not
    trained again: its stored record is returned, as ``python -m bench run`` shows it and :func:`sweep` skips it
    (``force=True`` trains it again, replacing it); a finished run of another configuration in that folder is an
    error naming what differs. Every argument is checked before anything
    trains, and every failure a user can cause raises a :class:`BenchError` whose one line names the argument as this
    signature does; a method that is not bdl-bench's failing in its own code raises :class:`MethodFailed` (its one
    line, chained to what it raised).
    """
    method_class = _method(method)
    spec = RunSpec(task=_task_name(task, "task"), method=method, budget=check_budget_size(budget),
                   seed=_seed(seed, "seed"), device=_device(device), out=_folder(out, "out"),
                   overrides=tuple(_setting_texts(settings, [method_class])), force=_flag(force, "force"),
                   cache=None if cache is None else _folder(cache, "cache"), label=label,
                   command=_call("run", task=task, method=method, budget=budget, seed=seed, settings=settings),
                   keep_predictions=_flag(predictions, "predictions"))
    check_label(spec.label)
    config = resolve_config(method_class, spec.task, dict(spec.overrides), PYTHON)  # a bad setting in the API's words
    with _torch_threads(threads):  # checks threads before a finished run is returned
        folder = records.run_folder(spec.out, get_task(spec.task, spec.cache).name, method_class.name, spec.budget,
                                    spec.seed)
        if not spec.force and records.finished_with(folder, asdict(config), PYTHON, method_source(method_class)):
            return read_result(folder)
        return run_spec(spec)


def sweep(*, method: "str | type[Approximator] | list", budget: "float | list[float]",
          task: "str | list[str] | None" = None, seed: "int | list[int]" = 0, settings: dict[str, object] | None = None,
          device: str = "cpu", out: str | Path = "runs", force: bool = False, cache: str | Path | None = None,
          threads: int = 1, workers: int | None = None, executor: str = "local", ray_address: str | None = None,
          quiet: bool = False, predictions: bool = True, skip_infeasible: bool = False) -> list[dict]:
    """Runs every combination of ``method``, ``task`` (default: the embedded MLP tasks), ``budget``, ``seed`` and
    setting variant, as ``python -m bench sweep`` does, and returns the records of its runs (dicts as stored in each
    ``result.json``, in the order task by task within method within variant, as planned; :func:`table` flattens them,
    :func:`dataframe` makes them a pandas DataFrame).

    ``method``, ``task``, ``budget`` and ``seed`` each take one value or a list. ``settings`` as for :func:`run`, and a
    list of values sweeps over them (``{"lr": [0.01, 0.02]}``; several listed settings make every combination), each
    variant writing under its own folder level as on the command line. Resumable: a run that finished earlier with
    the same configuration is not trained again but read from its folder, so the same call after an interruption
    finishes what is left (``force``: every run trains again). ``threads``, ``workers``, ``executor`` (``"local"`` or
    ``"ray"``) and ``ray_address`` as ``sweep``'s options; ``quiet`` turns off the progress bars (drawn only on a
    terminal); ``predictions=False`` keeps each run's record alone (as ``--no-predictions``); ``skip_infeasible``
    leaves out the runs whose method's budget rule refuses their budget, one :class:`UserWarning` per method, task,
    budget and variant (as ``--skip-infeasible``). Every argument and every planned run is checked before the first
    run trains, each failure one
    :class:`BenchError` line naming the argument; a run that fails does not stop the others, and then
    :class:`SweepFailed` is raised at the end, holding the finished runs' records and each failure.
    """
    methods = _several(method, "method")
    method_classes = [_method(each) for each in methods]
    tasks = None if task is None else [_task_name(each, "task") for each in _several(task, "task")]
    budgets = [check_budget_size(each) for each in _several(budget, "budget")]
    seeds = [_seed(each, "seed") for each in _several(seed, "seed")]
    pairs = _setting_texts(settings, method_classes, several=True)
    if executor not in EXECUTORS:
        raise ConfigError(f"executor must be one of {', '.join(map(repr, EXECUTORS))}, got {shown(executor)}")
    if workers is not None:
        _count(workers, "workers")
    if ray_address is not None and not isinstance(ray_address, str):
        raise ConfigError(f"ray_address must be None or a cluster's address (a str, host:port), got "
                          f"{shown(ray_address)}")
    threads = _count(threads, "threads")
    sweep_runs.check_executor(executor, workers, threads, ray_address, PYTHON)
    runs = sweep_runs.plan(methods, tasks, budgets, seeds, pairs, _folder(out, "out"), _device(device),
                           None if cache is None else _folder(cache, "cache"),
                           _call("sweep", method=method, budget=budget, task=task, seed=seed, settings=settings),
                           _flag(force, "force"), PYTHON, keep_predictions=_flag(predictions, "predictions"))
    if _flag(skip_infeasible, "skip_infeasible"):
        runs, refused = sweep_runs.feasible(runs, None if cache is None else _folder(cache, "cache"))
        for line in refused:
            warnings.warn(line, UserWarning, stacklevel=2)
    outcomes = sweep_runs.execute(runs, executor, workers, threads, ray_address, _flag(quiet, "quiet"))
    finished = sweep_runs.finished_records(runs, outcomes)
    failed = [(run.folder, outcomes[run].exit_code, outcomes[run].failure) for run in runs
              if run in outcomes and outcomes[run].result is None]
    if failed:
        folder, _, line = failed[0]
        raise SweepFailed(f"{len(failed)} of {len(runs)} runs failed, the first {folder}: {line}; the others "
                          f"finished (read_runs({str(out)!r}) reads them); the same call again retries the failed ones",
                          [record for _, record in finished], failed)
    return [record for _, record in finished]


class SweepFailed(BenchError):
    """Some runs of :func:`sweep` failed and the others finished. ``records``: the finished runs' records, as
    :func:`sweep` returns them; ``failures``: per failed run ``(folder, exit code, one line)``, the exit code as the
    command line's (:mod:`bench.errors`)."""

    def __init__(self, line: str, records: list[dict], failures: list[tuple[Path, int, str]]):
        super().__init__(line)
        self.records, self.failures = records, failures


def read_runs(out: str | Path = "runs") -> list[dict]:
    """The records of every finished run in or below the folder ``out`` (a sweep's or run's ``out``, or any folder of
    run folders), sorted by the folder level above the task (a sweep's variant), task, method, budget and seed: the
    same table :func:`sweep` returns. A record that cannot be tabled is one :class:`DamagedFile` line naming it."""
    root = _folder(out, "out")
    if not root.is_dir():
        raise ConfigError(f"out={str(out)!r} is not a folder of runs (no such folder)")
    found = []
    for path in root.rglob(records.RESULT):
        record = records.read_result(path.parent)
        problem = _not_a_record(record)
        if problem:
            raise DamagedFile(f"{path}: {problem}; run it again with force=True to replace it")
        found.append((path.parent.relative_to(root).parts[:-4], record))
    found.sort(key=lambda item: (item[0], item[1]["task"], item[1]["method"], item[1]["budget"], item[1]["seed"]))
    return [record for _, record in found]


def table(records: "list[dict]") -> list[dict]:
    """One flat row per run record (of :func:`run`, :func:`sweep` or :func:`read_runs`): ``task``, ``method``,
    ``label``, ``budget``, ``seed``, ``epochs_used``, ``test_passes``, ``wall_seconds``; every metric on the whole
    test set as ``all.<metric>`` and on each test block as ``<block>.<metric>`` (``clean.agreement``); the reference's
    noise floor as ``noise_floor.<block>.<metric>``; each setting as ``config.<name>`` (as requested: the same for
    every budget, so rows group by configuration) and, where an automatic setting (0 for "the method's rule") was
    resolved to what ran, ``resolved.<name>``; and the method's report as ``report.<name>`` (members, chains, cycles,
    samples, epochs unspent). Rows of different tasks or methods have different columns."""
    rows = []
    for index, record in enumerate(records):
        problem = _not_a_record(record)
        if problem:
            raise ConfigError(f"records[{index}]: {problem}")
        row = {key: record.get(key) for key in TABLE_FIELDS}
        for block, values in {"all": record["metrics"], **record["metrics_by_block"]}.items():
            row.update({f"{block}.{name}": value for name, value in values.items()})
        for block, values in (record.get("noise_floor") or {}).items():
            row.update({f"noise_floor.{block}.{name}": value for name, value in values.items()})
        row.update({f"config.{name}": value for name, value in record["config"].items()})
        row.update({f"resolved.{name}": value for name, value in (record.get("resolved") or {}).items()
                    if value != record["config"].get(name)})
        row.update({f"report.{name}": value for name, value in (record.get("method_report") or {}).items()})
        rows.append(row)
    return rows


def dataframe(records: "list[dict]"):
    """:func:`table` as a ``pandas.DataFrame`` (pandas is optional: ``pip install pandas``; without it, one
    :class:`ConfigError` line)."""
    from bench import optional

    rows = table(records)  # records that are no records are said as such, with or without pandas
    pandas = optional.load("pandas", "dataframe", missing="dataframe needs pandas, which is not installed: pip "
                           "install pandas (or the extra: pip install -e '.[pandas]'); table(records) gives the same "
                           "rows as dicts")
    return pandas.DataFrame(rows)


TABLE_FIELDS = ("task", "method", "label", "budget", "seed", "epochs_used", "test_passes", "wall_seconds")
"""The columns :func:`table` copies from a record as they are; the rest are flattened from its dicts."""
_RECORD_DICTS = ("metrics", "metrics_by_block", "config")
_OPTIONAL_DICTS = ("noise_floor", "resolved", "method_report")
"""Absent or null in some records (an official reference has no noise floor; older records have no ``resolved``)."""


def _not_a_record(record) -> str | None:
    """What keeps ``record`` from being a run record :func:`table` can flatten, or None."""
    if not isinstance(record, dict):
        return f"not a run record (a {type(record).__name__}, not a dict)"
    missing = [key for key in ("task", "method", "budget", "seed", *_RECORD_DICTS) if key not in record]
    kinds = {"task": (str,), "method": (str,), "budget": (numbers.Real,), "seed": (numbers.Integral,),
             **{key: (dict,) for key in _RECORD_DICTS}}
    wrong = [key for key, kind in kinds.items() if key in record and (isinstance(record[key], bool)
                                                                       or not isinstance(record[key], kind))]
    wrong += [key for key in _OPTIONAL_DICTS if record.get(key) is not None and not isinstance(record[key], dict)]
    wrong += [key for key in ("metrics_by_block", "noise_floor") if isinstance(record.get(key), dict)
              and not all(isinstance(values, dict) for values in record[key].values())]
    if missing or wrong:
        return (f"not a run record ({'no ' + ', '.join(missing) if missing else ''}"
                f"{'; ' if missing and wrong else ''}{', '.join(wrong) + ' of the wrong type' if wrong else ''})")
    return None


EXECUTORS = ("local", "ray")


def _call(function: str, **arguments) -> str:
    """How a run was asked for from Python, as its record's ``command`` keeps it: ``bench.api.run(task='toy-gap',
    ...)``, a class given as its name, settings only when given."""
    given = {name: getattr(value, "__qualname__", value) if name == "method" else value
             for name, value in arguments.items() if name != "settings" or value}
    return f"bench.api.{function}({', '.join(f'{name}={value!r}' for name, value in given.items())})"


def _method(method) -> type[Approximator]:
    """The method class ``method`` names (or is), any failure in the API's words."""
    if not isinstance(method, (str, type)):
        raise ConfigError(f"method must be a method's name, 'package.module:ClassName' or an Approximator subclass, "
                          f"got {shown(method)}")
    return resolve_method(method, PYTHON)


def _task_name(task, argument: str) -> str:
    if not isinstance(task, str):
        raise ConfigError(f"{argument} must be a task's name (a str; known tasks: {', '.join(all_task_names())}), "
                          f"got {shown(task)}")
    return task


def _seed(seed, argument: str) -> int:
    """A seed in [0, 2^63), as a seeded run and the run folder's name take it."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < SEED_LIMIT:
        raise ConfigError(f"{argument} must be a whole number in [0, 2^63), got {shown(seed)}")
    return int(seed)


def _count(value, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ConfigError(f"{argument} must be a whole number of at least 1, got {shown(value)}")
    return int(value)


def _device(device) -> str:
    if device not in DEVICES:
        raise ConfigError(f"device must be one of {', '.join(map(repr, DEVICES))}, got {shown(device)}")
    resolve_device(device, PYTHON)
    return device


def _folder(path, argument: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"{argument} must be a folder's path (a str or pathlib.Path), got {shown(path)}")
    return Path(path)


def _flag(value, argument: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{argument} must be True or False, got {shown(value)}")
    return value


def _several(value, argument: str) -> list:
    """One value or a list (or tuple) of values, as a list."""
    if not isinstance(value, (list, tuple)):
        return [value]
    if not value:
        raise ConfigError(f"{argument} is an empty list; give one value or several")
    return list(value)


SETTING_KINDS = {bool: (bool,), int: (numbers.Integral,), float: (numbers.Real,), str: (str,)}
"""The Python values a setting of each declared type takes (text is parsed as ``--set`` parses it)."""


def _setting_texts(settings, methods: list[type[Approximator]], several: bool = False) -> list[tuple[str, str]]:
    """``settings`` as ``--set`` pairs ``(name, text)``, each value checked against its setting's type in every one
    of ``methods`` that has it; with ``several`` (a sweep) a list of values gives one pair per value."""
    if settings is None:
        return []
    if not isinstance(settings, Mapping):
        raise ConfigError(f"settings must be a dict of setting names to values, got {shown(settings)}")
    pairs = []
    for name, given in settings.items():
        if not isinstance(name, str):
            raise ConfigError(f"settings: a setting's name is a str, got {shown(name)}")
        values = _several(given, f"settings[{name!r}]") if several else [given]
        for value in values:
            for method in methods:
                kind = typing.get_type_hints(method.Config).get(name)
                if kind is None or isinstance(value, str):  # unknown names and text: resolve_config says
                    continue
                if isinstance(value, bool) is not (kind is bool) or not isinstance(value, SETTING_KINDS[kind]):
                    raise ConfigError(f"settings[{name!r}] must be {'an' if kind is int else 'a'} {kind.__name__} "
                                      f"for {method.name} (or text that parses as one), got {shown(value)}")
            if isinstance(value, numbers.Integral) and not -2**63 <= value < 2**63:
                raise ConfigError(f"settings[{name!r}]: a whole number must lie in [-2^63, 2^63), got {shown(value)}")
            pairs.append((name, _setting_text(value)))
    return pairs


@contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """torch's threads set to ``threads`` (a whole number from 1 to the usable cores) for the block, then restored."""
    cores = usable_cores()
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= cores:
        raise ConfigError(f"threads must be a whole number from 1 to the {cores} usable CPU core(s), got "
                          f"{shown(threads)}")
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
    report, its config, the meter's account (``epochs_used``, ``test_passes``) and ``resolved``: the config's
    fields as the run used them, automatic settings (0 for "the method's rule") replaced by the rule's choice."""

    approximator: Approximator
    predictive: np.ndarray
    report: dict
    config: object
    epochs_used: float
    test_passes: float
    resolved: dict


def fit(task: "str | Task", method: str | type[Approximator], budget: float, seed: int = 0, *,
        settings: dict[str, object] | None = None, device: str = "cpu", threads: int = 1) -> Fit:
    """Trains ``method`` on ``task`` (a built-in's name or a :func:`make_task` task) for ``budget`` epochs
    under the meter with ``seed``, and returns :class:`Fit`. Nothing is scored or written. ``settings``, ``seed`` and
    ``threads`` as for :func:`run`; ``device`` where the tensors live. Failures raise as for :func:`run`."""
    method_class = _method(method)
    the_task = task if isinstance(task, Task) else get_task(_task_name(task, "task"))
    seed = _seed(seed, "seed")
    problem, data = metered(the_task, check_budget_size(budget), resolve_device(_device(device), PYTHON))
    config = resolve_config(method_class, the_task.name, dict(_setting_texts(settings, [method_class])), PYTHON)
    approximator = planned(method_class, config, problem, data)
    resolved = resolved_config(approximator, problem)
    with _torch_threads(threads):
        predictive, report = fit_and_predict(approximator, problem, data, seed)
    return Fit(approximator, predictive, report, config, data.meter.epochs_used, data.meter.test_passes, resolved)


def _setting_text(value: object) -> str:
    """A setting as ``--set`` would receive it (``True`` -> ``"true"``, so booleans parse as booleans)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


__all__ = [
    "ENTRY_POINT_GROUP", "Approximator", "BenchError", "BudgetExhausted", "BudgetMeter", "Categorical", "ConfigError",
    "Fit", "FixedNoiseGaussian", "Footprint", "HeteroscedasticGaussian", "Likelihood", "MeteredData", "MethodFailed",
    "ParameterLayout", "PredictiveAccumulator", "Problem", "StackedModel", "SweepFailed", "Task", "dataframe", "fit",
    "log_prior", "make_task", "member_generators", "member_seeds", "read_result", "read_runs", "resolve_config", "run",
    "seeded_module", "steps_for", "sweep", "table", "task_names",
]
