"""The honesty probe: counts the rows a method's network computes on, independently of the meter.

The meter counts what a method *asks for*; the probe counts what the network *computes on*, at the one
level every code path passes through: PyTorch's dispatcher. It runs the method's real ``fit`` on the
task's own network and data (so every fast path a real run takes, batched member matmuls, the recorded
per-example forward, local reparameterisation, compiled or vectorised chains, is the one probed), under a
``TorchDispatchMode`` that sees every tensor operation after ``vmap``/``grad`` have turned it into a
physical one (a row evaluated by K stacked members counts K times, as the meter charges it; functions a
method compiles run eagerly, the same operations, since the dispatcher cannot see into a compiled graph):

- **provenance**: tensors that hold rows of the training inputs or of the test inputs (the originals, their
  views, and the outputs of operations that only move or copy rows: indexing, ``clone``, ``cat``,
  padding, dtype casts, ...) are tracked by the memory they occupy, each labelled train or test;
- **rows**: an operation that multiplies such rows by weights, a matrix product with the rows as its left
  operand contracted over their features (``mm``, ``addmm``, ``bmm``, ``baddbmm``: linear layers however
  they are batched) or a convolution over them, counts its rows. Products that contract *over* rows
  (a weight's gradient, per-example outer products) and arithmetic on the rows (``x**2`` in local
  reparameterisation) are not network passes and do not count.

An honest method then satisfies ``training rows through the network == epochs_used x N_train`` (a
validation pass over held-out training rows included) and ``test rows == test_passes x N_test``, with
no rows of mixed origin. A method that reads a batch once and trains K members on it, takes two
gradient steps per read, evaluates K Monte Carlo draws per read, or under-reports its test evaluations
fails the probe (``tests/bench/test_honesty.py``, which also probes every method over a grid of its
settings); ``benchmarks/honesty_table.py`` prints the table.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from unittest import mock

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from approximators import get_method, resolve_config
from approximators.base import Interval, settings_bounds, settings_choices
from bench.errors import BudgetExhausted, ConfigError
from bench.runner import execute, metered
from bench.tasks import get_task

aten = torch.ops.aten

ROW_MOVES = {
    aten.index.Tensor, aten.index_select.default, aten.gather.default, aten.take.default, aten.clone.default,
    aten._to_copy.default, aten.copy_.default, aten.cat.default, aten.stack.default, aten.constant_pad_nd.default,
    aten._unsafe_view.default, aten.repeat.default, aten.expand_copy.default, aten.narrow_copy.default,
    aten.unsqueeze_copy.default, aten.permute_copy.default, aten.view_copy.default, aten.masked_select.default,
}
"""Operations whose output holds (copies of) their input rows and nothing computed from them."""

ROW_SCALINGS = {aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar, aten.native_dropout.default}
"""Operations that scale rows by something else (a dropout mask, a constant): the scaled rows are still
the inputs' rows. ``x * x`` (two operands of the rows) is arithmetic on them, not rows."""

# A matrix product's operand holding the rows: its position among the arguments.
MATRIX_PRODUCTS = {aten.mm.default: 0, aten.bmm.default: 0, aten.addmm.default: 1, aten.baddbmm.default: 1}


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The addresses ``[start, end)`` of the elements a tensor can reach."""
    start = t.data_ptr()
    reach = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()) if size > 0)
    return start, start + (reach + 1) * t.element_size()


def _tensors(values: tuple) -> list[torch.Tensor]:
    """The tensors among an aten operation's arguments or outputs, in order: each a tensor or a list or tuple of
    them (``cat``'s inputs, ``native_dropout``'s outputs), never nested deeper (a pytree walk of every argument of
    every multiplication took a fifth of the probe's time)."""
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


class RowTally(TorchDispatchMode):
    """Counts rows of the training and test inputs entering a matrix product or convolution.

    ``row_width``: the size of an input row's last axis (the features a linear first layer contracts);
    ``filters``: the output channels of the network's first convolution, if it has one.
    """

    def __init__(self, x_train: torch.Tensor, x_test: torch.Tensor, row_width: int, filters: int | None):
        super().__init__()
        self.row_width, self.filters = row_width, filters
        self.regions: dict[int, list[tuple[int, int, str]]] = {}  # by storage: the spans of rows in it
        self.kept: list[torch.Tensor] = []  # alive until the probe ends, so that no address is reused
        self.train_rows = self.test_rows = self.mixed_rows = 0
        self._track(x_train, "train")
        self._track(x_test, "test")

    def _track(self, t: torch.Tensor, origin: str) -> None:
        if t.numel():
            start, end = _span(t)
            self.regions.setdefault(t.untyped_storage().data_ptr(), []).append((start, end, origin))
            self.kept.append(t)

    def origin(self, t) -> str | None:
        """'train', 'test', 'mixed' or None for a tensor that holds none of the inputs' rows."""
        if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.device.type == "meta":
            return None
        spans = self.regions.get(t.untyped_storage().data_ptr())
        if spans is None:
            return None
        start, end = _span(t)
        found = {origin for first, last, origin in spans if first < end and start < last}
        return None if not found else found.pop() if len(found) == 1 else "mixed"

    def _count(self, origin: str | None, rows: int) -> None:
        if origin == "train":
            self.train_rows += rows
        elif origin == "test":
            self.test_rows += rows
        elif origin == "mixed":
            self.mixed_rows += rows

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in MATRIX_PRODUCTS:
            rows = args[MATRIX_PRODUCTS[func]]
            # Contracted over features: a row's features are its last axis, contiguous (a transposed
            # operand contracts over rows, as a weight's gradient does).
            if rows.shape[-1] == self.row_width and (rows.stride(-1) == 1 or self.row_width == 1):
                self._count(self.origin(rows), rows.numel() // self.row_width)
        elif func is aten.convolution.default:
            rows, weight = args[0], args[1]
            origin = self.origin(rows)
            if origin is not None:
                # K members' filters stacked along the output channels (a shared input, or per-member
                # inputs as channel groups) make K rows of each input row: (N, ...) with (K x filters, ...)
                # weights is N x K rows, as is a (K x N, ...) input with one member's weights.
                self._count(origin, rows.shape[0] * weight.shape[0] // self.filters)
        elif func in ROW_MOVES or func in ROW_SCALINGS:
            origins = [self.origin(a) for a in _tensors((*args, *kwargs.values()))]
            sources = set(origins) - {None}
            if func in ROW_SCALINGS and (len(origins) - origins.count(None) != 1 or origins[0] is None):
                sources = set()  # only the first operand may hold rows, the scale none
            if sources:
                origin = sources.pop() if len(sources) == 1 else "mixed"
                target = args[0] if func is aten.copy_.default else out
                for t in _tensors((target,)):
                    self._track(t, origin)
        return out


def _eagerly(function=None, **options):
    """``torch.compile``'s signature, compiling nothing."""
    return function if function is not None else (lambda f: f)


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
    mixed_rows: int
    overrides: tuple[tuple[str, str], ...] = ()

    @property
    def honest(self) -> bool:
        return (self.train_rows == self.examples_charged and self.mixed_rows == 0
                and self.test_rows == round(self.test_passes * self.n_test))


def probe(method_name: str, task_name: str, budget: float | None = None, seed: int = 0,
          overrides: dict[str, str] | None = None, train_rows: int | None = None) -> ProbeResult:
    """Runs ``method_name`` on ``task_name`` (default budget: the method's ``check_budget``;
    ``train_rows``: only the first rows of the training set, to probe quickly) with its settings and
    ``overrides``, and returns what the network computed on next to what the meter charged."""
    task = get_task(task_name)
    method = get_method(method_name)
    budget = method.check_budget if budget is None else budget
    if train_rows is not None:
        task = dataclasses.replace(task, x_train=task.x_train[:train_rows], y_train=task.y_train[:train_rows])
    problem, data = metered(task, budget)
    config = resolve_config(method, task.name, overrides)
    convolutions = [m for m in problem.model_factory().modules() if isinstance(m, nn.modules.conv._ConvNd)]
    tally = RowTally(task.x_train, problem.x_test, row_width=task.x_train.shape[-1],
                     filters=convolutions[0].out_channels if convolutions else None)
    # The dispatcher cannot see inside a compiled graph: functions a method compiles (HMC's ``compiled``) run as
    # the same Python eagerly, operation by operation, under the probe.
    with mock.patch.object(torch, "compile", _eagerly), tally:
        execute(method, config, problem, data, seed)
    meter = data.meter
    return ProbeResult(method.name, task.name, budget, task.n_train, task.n_test, meter.epochs_used, meter.examples,
                       meter.test_passes, tally.train_rows, tally.test_rows, tally.mixed_rows,
                       tuple(sorted((overrides or {}).items())))


UNBOUNDED = Interval("(-inf, inf)")
"""The interval of a numeric setting that declares none (a user's method may leave one undeclared)."""


COMPANIONS = {("hmc", "trajectory_length"): {"leapfrog_steps": "0"}}
"""Settings that act only together with another: alone they are refused in one line, so the grid moves both."""


def _other_values(method_name: str, task_name: str, name: str, kind, value, interval, choices) -> list:
    """Values of one setting other than ``value``: every other choice of a string, the other value of a flag; for
    a count 3 (5 where it is 3; for a batch size 2B + 1, which seldom divides the rows) and 0 where 0 means the
    method's own choice; for a real number one inside its interval."""
    if kind is bool:
        return [not value]
    if kind is str:
        if choices is not None:
            return [choice for choice in choices if choice != value]
        # Free text naming the network's layers (MC dropout's sites): every layer with weights that the network
        # calls as a module, the first included (a layer whose weights it uses functionally, such as the
        # CNN-LSTM's recurrent cell, takes no dropout and is refused as a site).
        return [",".join(_layers_called(get_task(task_name)))]
    if kind is int:
        if name == "batch_size":
            return [2 * value + 1]
        return sorted(v for v in {5 if value == 3 else 3} | ({0} if 0 in interval else set()) if v != value)
    low, high = (float(end) for end in interval.text[1:-1].split(","))
    if high == float("inf"):
        return [value / 2 if value > 0 else 0.05]
    middle = (low + high) / 2
    return [middle if middle != value else (low + 3 * high) / 4]


def _layers_called(task) -> list[str]:
    """The names of the network's linear and convolutional layers that one forward pass calls as modules."""
    network, called = task.model_factory(), []
    hooks = [module.register_forward_hook(lambda *_, name=name: called.append(name))
             for name, module in network.named_modules() if isinstance(module, (nn.Linear, nn.modules.conv._ConvNd))]
    with torch.no_grad():
        network(task.x_train[:2])
    for hook in hooks:
        hook.remove()
    return list(dict.fromkeys(called))


def setting_grid(method_name: str, task_name: str) -> list[dict[str, str]]:
    """Settings away from ``task_name``'s defaults, as ``--set`` overrides: each count, flag and choice of the
    method alone (these choose code paths and schedules), then every real-valued setting at once (rates,
    fractions, scales); a setting in :data:`COMPANIONS` with its companion."""
    method = get_method(method_name)
    config = resolve_config(method, task_name)
    hints, bounds, choices = (typing.get_type_hints(method.Config), settings_bounds(method.Config),
                              settings_choices(method.Config))
    grid, reals = [], {}
    for field in dataclasses.fields(config):
        kind = hints[field.name]
        for other in _other_values(method.name, task_name, field.name, kind, getattr(config, field.name),
                                   bounds.get(field.name, UNBOUNDED), choices.get(field.name)):
            overrides = {field.name: str(other).lower() if isinstance(other, bool) else str(other),
                         **COMPANIONS.get((method.name, field.name), {})}
            (reals.update if kind is float else grid.append)(overrides)
    return grid + ([reals] if reals else [])


def probe_at_a_budget_it_fits(method_name: str, task_name: str, overrides: dict[str, str],
                              train_rows: int | None = None) -> ProbeResult:
    """:func:`probe` at the method's check budget, or at 4 or 20 times it where a setting needs more (more
    chains, more cycles, HMC's longest trajectories: refused in one line at a smaller budget)."""
    check_budget = get_method(method_name).check_budget
    for scale in (1, 4):
        try:
            return probe(method_name, task_name, scale * check_budget, overrides=overrides, train_rows=train_rows)
        except (BudgetExhausted, ConfigError) as refusal:
            if "budget" not in str(refusal):
                raise
    return probe(method_name, task_name, 20 * check_budget, overrides=overrides, train_rows=train_rows)
