"""What every approximator shares: its problem statement, typed config, and online predictive.

An approximator is a small class with

- ``Config``: a dataclass of hyper-parameters. ``TASK_DEFAULTS`` holds per-task values; the user
  overrides any field with ``--set key=value``; :func:`resolve_config` combines the three.
- ``fit(problem, data, generator)``: trains under the budget meter (``data`` is the only access to
  the training set) using only the explicit ``generator`` for randomness.
- ``predictive()``: probabilities ``(N_test, C)`` or samples ``(N_test, S)``, float64 numpy.

Predictions are accumulated online by :class:`PredictiveAccumulator` as members finish training,
never by keeping members in memory.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import typing
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np
import torch
from torch import nn

from bench.arguments import NUMBER, WHOLE_NUMBER
from bench.budget import BudgetMeter, MeteredData
from bench.errors import COMMAND_LINE, ConfigError, DoesNotFit, Spelling, shown
from bench.memory import Room, room
from bench.functional import StackedModel
from bench.likelihoods import Categorical, Likelihood
from bench.tasks import PREDICTIVE_SAMPLES, Task, all_task_names

EVAL_CHUNK = 4096
"""Test rows evaluated at once, to bound memory for large test sets and many members."""


@dataclass(frozen=True)
class Problem:
    """What a method may know about a task: no training tensors (those come metered), no test labels.

    ``x_test`` ``(N_test, *input_shape)`` lives on ``device``.
    """

    task: str
    kind: str
    model_factory: Callable[[], nn.Module]
    likelihood: Likelihood
    prior_variance: float
    n_train: int
    x_test: torch.Tensor
    n_classes: int | None
    n_predictive_samples: int
    device: torch.device
    meter: BudgetMeter

    @classmethod
    def for_task(cls, task: Task, meter: BudgetMeter, device: torch.device = torch.device("cpu")) -> "Problem":
        return cls(task=task.name, kind=task.kind, model_factory=task.model_factory, likelihood=task.likelihood,
                   prior_variance=task.prior_variance, n_train=task.n_train, x_test=task.x_test.to(device),
                   n_classes=task.n_classes, n_predictive_samples=PREDICTIVE_SAMPLES, device=device, meter=meter)


class PredictiveAccumulator:
    """Running Bayesian model average over the members of an approximation.

    Classification: the mean of the members' softmax probabilities, kept as a running sum.
    Regression: ``n_predictive_samples`` draws per test point spread evenly over the
    ``n_members`` members (member i contributes S // M draws, plus one for i < S % M), each
    member drawing from its own predictive p(y | x, theta_i).

    ``model`` evaluates the members (a :class:`StackedModel` of the task's network by default; MC
    dropout passes its network with dropout active, so that each added member is one dropout draw).
    """

    def __init__(self, problem: Problem, n_members: int, generator: torch.Generator, model=None):
        if n_members < 1:
            raise ValueError("an approximation needs at least one member")
        self.problem, self.n_members, self.generator = problem, n_members, generator
        self.model = StackedModel(problem.model_factory()) if model is None else model
        self.added = 0
        n_test = problem.x_test.shape[0]
        if problem.kind == "classification":
            self._sum = torch.zeros(n_test, problem.n_classes, dtype=torch.float64)
        else:
            s, m = problem.n_predictive_samples, n_members
            self._counts = [s // m + (i < s % m) for i in range(m)]
            self._samples = torch.empty(n_test, s, dtype=torch.float64)

    def _outputs(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(K, N_test, n_outputs)`` for K stacked members, evaluated in chunks of test rows."""
        x = self.problem.x_test
        with torch.no_grad():
            chunks = [self.model(params, x[i:i + EVAL_CHUNK], shared_input=True)
                      for i in range(0, x.shape[0], EVAL_CHUNK)]
        k = next(iter(params.values())).shape[0]
        self.problem.meter.record_test_pass(k * x.shape[0], x.shape[0])
        return torch.cat(chunks, dim=1).double().cpu()

    def add(self, params: dict[str, torch.Tensor]) -> None:
        """Adds K trained members given as stacked parameters ``{name: (K, *shape)}``."""
        self.add_outputs(self._outputs({n: p.detach() for n, p in params.items()}))

    def add_outputs(self, outputs: torch.Tensor) -> None:
        """Adds K members given by their outputs on the test inputs, ``(K, N_test, n_outputs)`` float64 on the CPU
        (a method that evaluates them itself, as Laplace's linearised predictive, charges their test passes)."""
        k = outputs.shape[0]
        if self.added + k > self.n_members:
            raise RuntimeError(f"more members added ({self.added + k}) than announced ({self.n_members})")
        if self.problem.kind == "classification":
            self._sum += Categorical.probabilities(outputs).sum(0)
        else:
            start = sum(self._counts[:self.added])
            for member in range(k):
                count = self._counts[self.added + member]
                self._samples[:, start:start + count] = self.problem.likelihood.sample(
                    outputs[member], count, self.generator)
                start += count
        self.added += k

    def result(self) -> np.ndarray:
        if self.added != self.n_members:
            raise RuntimeError(f"{self.added} of {self.n_members} members were added")
        if self.problem.kind == "classification":
            return (self._sum / self.added).numpy()
        return self._samples.numpy()


STATE_COPIES = 8
"""Parameter-sized tensors a network in training holds at once in the memory plan (parameters, gradient,
two optimiser moments, anchor, best-so-far copy and working space)."""

ACTIVATION_COPIES = 2
"""Copies of what a network's forward pass saves for its backward pass (:func:`activations_per_row`) that a training
step holds per row at its peak in the memory plan: the saved tensors and the gradients with respect to them."""

BYTES_PER_OUTPUT = 20
"""Bytes the predictive holds per member, test row and output while it is evaluated: the float32 chunks, their
concatenation and its float64 copy."""

BYTES_PER_SCHEDULE_STEP = 32
"""A per-step schedule entry held as a Python float in a list (the object and its pointer)."""


MEMBER_COPIES = 2
"""Parameter-sized tensors the memory plan counts for every member or chain a run creates, trained together or
not: its initial parameters and its anchor, which the methods build for all members before training them."""

MEMBER_OVERHEAD_BYTES = 4096
"""What else a member or chain holds while the run lasts: its ``torch.Generator`` (2.7 kB measured, 100,000 of them
at once), its seeds and list entries, rounded up."""


@dataclass(frozen=True)
class Footprint:
    """What a run holds at once, known from its settings and budget before anything is built.

    ``networks``: networks trained together (vectorised members or chains), each with its training state;
    ``schedule_steps``: entries of the per-step schedules it materialises; ``kept``: further
    parameter-sized vectors it keeps (SWAG's moments and deviations, VOGN's per-example gradients); ``members``:
    members or chains it creates in all, together or one group after another (:data:`MEMBER_COPIES`,
    :data:`MEMBER_OVERHEAD_BYTES`); ``rows``: the rows each network computes on in one step (its minibatch, or
    the training set for a full-batch method), whose activations it holds (:data:`ACTIVATION_COPIES`)."""

    networks: int
    schedule_steps: int
    kept: int = 0
    what: str = "network"
    members: int = 0
    rows: int = 0

    def bytes(self, n_params: int, row_bytes: int = 0, n_outputs: int = 0, n_test: int = 0) -> int:
        """Bytes for networks of ``n_params`` parameters whose forward pass saves ``row_bytes`` per input row for
        its backward pass, predicting ``n_outputs`` numbers for each of ``n_test`` test rows: the training state
        and what the members hold, plus the larger of a training step's activations and the predictive's
        evaluation (its outputs, and its layers' outputs on a chunk of test rows, taken as one copy of what a
        training step saves). It means to count no more than a run holds (``benchmarks/memory_plan.py``), so that
        it refuses only what cannot fit; running out later is still the machine's refusal (exit 3)."""
        state = (self.networks * STATE_COPIES + self.kept + self.members * MEMBER_COPIES) * n_params * 4 \
            + self.schedule_steps * BYTES_PER_SCHEDULE_STEP + self.members * MEMBER_OVERHEAD_BYTES
        training = self.networks * self.rows * row_bytes * ACTIVATION_COPIES
        evaluation = self.networks * (min(n_test, EVAL_CHUNK) * row_bytes + n_test * n_outputs * BYTES_PER_OUTPUT)
        return state + max(training, evaluation)


PROBE_ROWS = 8
"""Test rows of the forward pass that measures what a network's training step holds per row."""


def activations_per_row(model_factory: Callable[[], nn.Module], x: torch.Tensor) -> tuple[int, int]:
    """For one network on the input rows ``x`` ``(R, *input_shape)``, R >= 2: the bytes per row of what its forward
    pass saves for the backward pass (every saved tensor but its parameters and input, counted through
    ``torch.autograd.graph.saved_tensors_hooks``), as the difference between passes on R and R // 2 rows (what it
    saves once per pass, an LSTM's initial state, is left out), and the numbers it outputs per row (on the CPU).
    PyTorch's global generator is left as it was (a run's results must not depend on its plan)."""
    with torch.random.fork_rng(devices=[]):
        return _activations_per_row(model_factory, x)


def _activations_per_row(model_factory: Callable[[], nn.Module], x: torch.Tensor) -> tuple[int, int]:
    model = model_factory()

    def saved_bytes(rows: torch.Tensor) -> tuple[int, int]:
        own = {p.data_ptr() for p in model.parameters()} | {rows.data_ptr()}
        saved: dict[tuple, int] = {}

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.data_ptr() not in own:
                saved[(tensor.data_ptr(), tuple(tensor.shape))] = tensor.numel() * tensor.element_size()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            output = model(rows)
        return sum(saved.values()), output.numel() // rows.shape[0]

    # Zeros of the rows' shape and type: the plan reads no test row (the honesty probe counts every one a network
    # computes on), and what is saved depends on shapes alone.
    x = torch.zeros(tuple(x.shape), dtype=x.dtype)
    half = x.shape[0] // 2
    (full, outputs), (part, _) = saved_bytes(x.clone()), saved_bytes(x[:half].clone())
    return max(math.ceil((full - part) / (x.shape[0] - half)), 0), outputs


def epochs_unspent(meter: BudgetMeter) -> float:
    """The budget a run left unspent, in epochs, as its report states it (rounded to 1e-6 epochs)."""
    return round(meter.budget_epochs - meter.epochs_used, 6)


def steps_for(epochs: float, n_train: int, batch_size: int) -> int:
    """Minibatch steps in ``epochs`` epochs of ``n_train`` rows (what a per-step schedule holds)."""
    return math.floor(epochs + 1e-9) * math.ceil(n_train / batch_size)


def device_memory(device: torch.device) -> Room:
    """What a run on ``device`` may allocate: the GPU's total memory, or on the CPU the least of the machine's
    physical memory and what the process's address-space and control-group limits leave (:func:`bench.memory.room`)."""
    if device.type == "cuda":
        return Room(torch.cuda.get_device_properties(device).total_memory, f"of {device}'s memory")
    return room()


def check_footprint(approximator: "Approximator", budget: float, problem: "Problem") -> None:
    """Plan before allocating: one line (:class:`~bench.errors.DoesNotFit`) when what the settings and budget imply
    on ``problem`` cannot fit in the memory its device leaves the run."""
    n_train, n_test, device = problem.n_train, problem.x_test.shape[0], problem.device
    n_params = sum(p.numel() for p in problem.model_factory().parameters())
    footprint = approximator.footprint(budget, n_train)
    counts = ("networks", "schedule_steps", "kept", "members", "rows")
    if type(footprint) is not Footprint or not all(
            type(getattr(footprint, count)) is int and getattr(footprint, count) >= 0 for count in counts):
        from approximators.boundary import method_fault

        method_fault(type(approximator), f"method {approximator.name!r}: its footprint must be a Footprint of "
                                         f"whole numbers >= 0 ({', '.join(counts)}); got {shown(footprint)}")
    needed = footprint.bytes(n_params, *activations_per_row(problem.model_factory, problem.x_test[:PROBE_ROWS]), n_test)
    available = device_memory(device)
    if needed > available.bytes:
        held = [f"trains {footprint.networks:,} {footprint.what}(s) of {n_params:,} parameters together"]
        if footprint.members > footprint.networks:
            held.append(f"creates {footprint.members:,} in all")
        if footprint.kept:
            held.append(f"keeps {footprint.kept:,} more parameter vectors")
        if footprint.schedule_steps:
            held.append(f"schedules {footprint.schedule_steps:,} steps")
        raise DoesNotFit(
            f"{approximator.name}: a budget of {budget:g} epochs with these settings {', '.join(held)}: at least "
            f"{needed / 2**30:,.1f} GiB, more than the {available.bytes / 2**30:,.1f} GiB {available.what}; "
            f"lower the budget or what multiplies it (members, chains, runs, rank), or set vectorise=false where the "
            f"method has it")


class Approximator:
    name: ClassVar[str]
    summary: ClassVar[str]
    paper: ClassVar[str] = ""
    Config: ClassVar[type]
    TASK_DEFAULTS: ClassVar[dict[str, dict]] = {}
    check_budget: ClassVar[float] = 200.0
    """The method's smallest sensible budget with its default settings, in epochs: what the CI gate
    (``bench check``) and the honesty probe run it with, so both stay fast on a CPU."""

    def __init__(self, config):
        check_settings(self.name, config)
        self.config = config
        self._predictive: np.ndarray | None = None
        self.report: dict = {}
        """What the run should know about how the method spent its budget (stored in the result record); its
        ``warnings``, a list of strings, are also shown beside the run's table (``note: ...`` on stderr)."""

    def resolved(self, problem: Problem):
        """The config with every automatic setting (one whose 0 means "the method's rule decides", such as SAE's
        ``chains``) replaced by the value a run on ``problem`` under its meter's budget uses: what a result record
        keeps as ``resolved`` beside the ``config`` asked for. Running with it is the same run, bit for bit. The
        default, for a method without automatic settings: the config itself."""
        return self.config

    def footprint(self, budget: float, n_train: int) -> Footprint:
        """What a run of ``budget`` epochs holds at once (checked before :meth:`fit` builds anything).
        The default: one network, with a per-step schedule over the whole budget when the config has a
        ``batch_size`` (a method without one is not assumed to hold a schedule); a method that trains
        members or chains together, or keeps more than its parameters, says so."""
        batch_size = getattr(self.config, "batch_size", None)
        if not batch_size:
            return Footprint(1, 0)
        return Footprint(1, steps_for(budget, n_train, batch_size), rows=min(batch_size, n_train))

    @classmethod
    def architecture_change(cls, config) -> str | None:
        """How the method changes the task's network (None: it approximates the task's own posterior).
        A method that changes it approximates another posterior than the reference's; the change is
        shown by ``bench methods``, stored in every result record and marked on the leaderboard."""
        return None

    def fit(self, problem: Problem, data: MeteredData, generator: torch.Generator) -> None:
        raise NotImplementedError

    def predictive(self) -> np.ndarray:
        if self._predictive is None:
            raise RuntimeError("predictive() called before fit()")
        return self._predictive


TYPED_NUMBERS = {int: WHOLE_NUMBER, float: re.compile(rf"{NUMBER.pattern}|[+-]?(inf|infinity|nan)", re.IGNORECASE)}
"""How a setting's number is typed: the command line's grammar (:data:`bench.arguments.NUMBER`), and for a float also
inf and nan (which the setting's interval then refuses, naming it); Python's ``int`` and ``float`` also take spaces,
underscores and other scripts' digits."""


def _parse(name: str, raw: str, kind, spelling: Spelling) -> object:
    try:
        if kind in TYPED_NUMBERS and not TYPED_NUMBERS[kind].fullmatch(raw):
            raise ValueError(raw)
        if kind is bool:
            if raw.lower() in ("1", "true", "yes"):
                return True
            if raw.lower() in ("0", "false", "no"):
                return False
            raise ValueError(raw)
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{spelling.setting(name)}: expected a value of type {kind.__name__}, got {raw[:40]!r}"
                          f"{'...' if len(raw) > 40 else ''}") from None
    if kind is int and not -2**63 <= value < 2**63:  # beyond what a tensor index or count can hold
        raise ConfigError(f"{spelling.setting(name)}: {len(raw)} digits is more than a 64-bit count holds")
    return value


LARGEST_INTEGER_SETTING = 2**63 - 1
"""The largest whole number a setting may be: a 64-bit count, what a tensor's size or index holds."""
LARGEST_FLOAT_SETTING = float(torch.finfo(torch.float32).max)
"""The largest magnitude of a float setting, about 3.4e38: the networks train in float32, and a setting beyond its
range cannot be converted to a tensor's number at all (``--set init_std=1e300`` would fail as an overflow)."""


@dataclass(frozen=True)
class Interval:
    """The values a numeric setting may take, written as in mathematics: ``"(0, inf)"``, ``"[1, inf)"``,
    ``"[0, 1)"``; a square bracket includes its end. A non-finite value is never inside, nor a float beyond
    :data:`LARGEST_FLOAT_SETTING` or a whole number beyond 64 bits (:func:`representable`), whatever the ends say."""

    text: str

    def __post_init__(self):
        ends = self.text[1:-1].split(",")
        if self.text[:1] not in ("[", "(") or self.text[-1:] not in ("]", ")") or len(ends) != 2:
            raise ValueError(f"not an interval: {self.text!r}")
        float(ends[0]), float(ends[1])

    def __contains__(self, value: float) -> bool:
        low, high = (float(end) for end in self.text[1:-1].split(","))
        above = value >= low if self.text[0] == "[" else value > low  # int against float: exact, never converted
        below = value <= high if self.text[-1] == "]" else value < high
        return representable(value) and above and below


def representable(value: float) -> bool:
    """Whether a numeric setting's value is one a run can compute with: a whole number in [-2^63, 2^63), or a float
    of magnitude at most :data:`LARGEST_FLOAT_SETTING` (so neither NaN nor infinite)."""
    if isinstance(value, int):
        return -LARGEST_INTEGER_SETTING - 1 <= value <= LARGEST_INTEGER_SETTING
    return abs(value) <= LARGEST_FLOAT_SETTING


MAX_DRAWS = 1000
"""The most draws a predictive may average (``samples``, 30 by default): each is a pass over the test set, charged to
no budget, so the count itself is what bounds the work. At 1000 a predictive takes about 1 s on toy-gap and 20 s on
digits-lstm, 0.12 plain SGD epochs per draw there (``python benchmarks/predictive_draws.py``, one thread on a busy
2-core machine); the earlier cap of 10^5 took minutes on toy-gap and 30 to 45 minutes on digits-lstm. A regression
predictive keeps ``PREDICTIVE_SAMPLES`` (1000) samples per point, one per draw here: a further draw would add none.
On a competition task's network on a CPU no count bounds the work to minutes (the default 30 draws of ResNet-20 over
10,000 images already take minutes); those tasks are for a GPU."""
DRAWS_BOUNDS = f"[1, {MAX_DRAWS}]"


def settings_bounds(config_class: type) -> dict[str, Interval]:
    """Every numeric setting's :class:`Interval`: the ``BOUNDS`` of the config class and of its bases, where
    each config declares the interval of each of its numeric fields."""
    bounds: dict[str, Interval] = {}
    for cls in reversed(config_class.__mro__):
        bounds.update({name: Interval(text) for name, text in vars(cls).get("BOUNDS", {}).items()})
    return bounds


def settings_choices(config_class: type) -> dict[str, tuple[str, ...]]:
    """Every string setting's allowed values: the ``CHOICES`` of the config class and of its bases (a string
    setting without declared choices, such as MC dropout's layer names, is free text checked by its method)."""
    choices: dict[str, tuple[str, ...]] = {}
    for cls in reversed(config_class.__mro__):
        choices.update(vars(cls).get("CHOICES", {}))
    return choices


SCHEDULE_WOULD_RISE = "a schedule that ends above where it starts would rise"
"""Why a learning-rate schedule's end may not exceed its start (the built-in methods' ``AT_MOST`` pairs)."""


def settings_order(config_class: type) -> list[tuple[str, str, str]]:
    """Triples ``(a, b, why)`` of numeric settings with a <= b: the ``AT_MOST`` of the config class and of its bases,
    each entry ``a: b`` or ``a: (b, why)``, ``why`` saying what a crossed pair would mean in the method's own terms
    (empty where none is given): ``{"min_lr": ("lr", "a schedule that ends above where it starts would rise")}``."""
    order: dict[str, str | tuple[str, str]] = {}
    for cls in reversed(config_class.__mro__):
        order.update(vars(cls).get("AT_MOST", {}))
    return [(low, *((high, "") if isinstance(high, str) else tuple(high))) for low, high in order.items()]


def check_settings(method: str, config) -> None:
    """One line naming the first numeric setting outside its declared interval, the first string setting outside
    its declared choices, or the first pair of settings out of their declared order (before any work is done)."""
    bounds, choices = settings_bounds(type(config)), settings_choices(type(config))
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if field.name in choices and value not in choices[field.name]:
            raise ConfigError(f"{method}: {field.name} must be one of {', '.join(choices[field.name])}, got {value!r}")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        # A user's method may leave a setting undeclared: it must still be a finite number.
        interval = bounds.get(field.name, Interval("(-inf, inf)"))
        if not representable(value) and (isinstance(value, int) or math.isfinite(value)):
            what = "a whole number within 64 bits" if isinstance(value, int) else \
                f"a float32 number, at most {LARGEST_FLOAT_SETTING:.4g} in size"
            raise ConfigError(f"{method}: {field.name} is {shown(value)}, beyond what a run computes with ({what})")
        if value not in interval:
            raise ConfigError(f"{method}: {field.name} must lie in {interval.text}, got {value}")
    for low, high, why in settings_order(type(config)):
        if not getattr(config, low) <= getattr(config, high):
            raise ConfigError(f"{method}: {low} ({getattr(config, low)}) must not exceed {high} "
                              f"({getattr(config, high)}){f': {why}' if why else ''}")


def fits_setting_type(value: object, kind: type) -> bool:
    """Whether ``value`` is a setting of the declared ``kind`` as ``--set`` would give it: a whole number for a float
    too, never a bool for a number (``True`` is an ``int`` to Python, not a count)."""
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, kind) or (kind is float and isinstance(value, int))


def _declared_value_fits(value: object, kind: type) -> bool:
    """:func:`fits_setting_type`, and a whole number as ``--set`` would take it: within 64 bits for an int setting,
    within a float's range for a float one."""
    if not fits_setting_type(value, kind):
        return False
    if isinstance(value, int) and not isinstance(value, bool):
        return -2**63 <= value < 2**63 if kind is int else abs(value) <= sys.float_info.max
    return True


def setting_types(config_class: type) -> dict[str, type]:
    """Each setting's declared type, by name (the dataclass's fields; class variables such as ``BOUNDS`` are none)."""
    hints = typing.get_type_hints(config_class)
    return {field.name: hints[field.name] for field in dataclasses.fields(config_class)}


def check_declared_settings(method: type[Approximator], hints: dict[str, type]) -> None:
    """A method's own ``TASK_DEFAULTS`` hold, for each task, values of its settings of their declared types (checked
    before any work, as ``--set`` values are parsed): a wrong one is the method's failure (exit 4 for a plugin)."""
    from approximators.boundary import method_fault

    declared = method.TASK_DEFAULTS
    if not isinstance(declared, dict):
        method_fault(method, f"method {method.name!r}: TASK_DEFAULTS must be a dict from task names to dicts of "
                             f"settings, not a {type(declared).__name__}")
    for task, values in declared.items():
        if task not in all_task_names():  # a misspelt task's defaults would never apply, silently
            method_fault(method, f"method {method.name!r}: TASK_DEFAULTS names {shown(task)}, which is no task "
                                 f"({', '.join(all_task_names())})")
        if not isinstance(values, dict):
            method_fault(method, f"method {method.name!r}: TASK_DEFAULTS[{shown(task)}] must be a dict of settings, "
                                 f"not a {type(values).__name__}")
        for key, value in values.items():
            where = f"method {method.name!r}: TASK_DEFAULTS[{shown(task)}][{shown(key)}]"
            if key not in hints:
                method_fault(method, f"{where} is not one of its settings ({', '.join(hints)})")
            if not _declared_value_fits(value, hints[key]):
                method_fault(method, f"{where} is {shown(value)}, not a {hints[key].__name__} as its setting {key} is "
                                     "declared (a whole number of 64 bits at most)")


def check_config_types(method: type[Approximator], config) -> None:
    """Every field of a config the method built holds a value of its declared type (the method's failure if not)."""
    from approximators.boundary import method_fault

    hints = setting_types(type(config))
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if not _declared_value_fits(value, hints[field.name]):
            method_fault(method, f"method {method.name!r}: its setting {field.name} is {shown(value)}, not a "
                                 f"{hints[field.name].__name__} as declared (a whole number of 64 bits at most)")


def recorded_config(method: type[Approximator], values: dict):
    """The method's config from the values a run record holds (JSON: each of its field's type, a whole number for a
    float allowed and held as that float, as ``--set`` parses it), checked as ``--set`` values are
    (:func:`check_settings`: bounds, choices, order), or one :class:`ConfigError` line. A setting the record lacks
    takes its class default (older records lack newer settings)."""
    hints = typing.get_type_hints(method.Config)
    unknown = [key for key in values if key not in hints]
    # within a float's range too: a whole number given for a float is held as that float below
    wrong = [key for key, value in values.items() if key in hints and not _declared_value_fits(value, hints[key])]
    if unknown or wrong:
        raise ConfigError(f"{'unknown ' + ', '.join(unknown) if unknown else 'of the wrong type: ' + ', '.join(wrong)}")
    from approximators.boundary import users_code  # here, not at the top: the boundary is a leaf module

    typed = {key: float(value) if hints[key] is float else value for key, value in values.items()}
    with users_code(method, "settings"):
        config = method.Config(**typed)
        check_settings(method.name, config)
    return config


def resolve_config(method: type[Approximator], task: str, overrides: dict[str, str] | None = None,
                   spelling: Spelling = COMMAND_LINE):
    """The method's config for ``task``: class defaults, then per-task defaults, then ``overrides``
    (strings, as ``--set`` gives them, parsed by each field's declared type; ``spelling``: how a failure names them).

    The method's own values (class and task defaults) are checked first, as ``--set`` values are (type, bounds,
    choices, order): a wrong one is the method's failure, not the user's input."""
    from approximators.boundary import method_fault, users_code  # here: the boundary is a leaf module

    values = {}
    try:
        with users_code(method, "settings"):
            hints = setting_types(method.Config)
            check_declared_settings(method, hints)
            values = dict(method.TASK_DEFAULTS.get(task, {}))
            config = method.Config(**values)
            check_config_types(method, config)
            check_settings(method.name, config)
    except ConfigError as error:  # no --set value is in it yet
        method_fault(method, f"{error} (the method's own default{' on ' + task if values else ''}, not a --set value)")
    names = list(hints)
    parsed = {}
    for key, raw in (overrides or {}).items():
        if key not in names:
            raise ConfigError(f"method {method.name!r} has no setting {key!r}; its settings: {', '.join(names)}")
        parsed[key] = _parse(key, raw, hints[key], spelling)
    if not parsed:
        return config
    with users_code(method, "settings"):
        try:
            config = method.Config(**{**values, **parsed})
        except ValueError as refusal:  # the method's own check of these values (a dataclass's __post_init__)
            given = ", ".join(f"{spelling.setting(key)}={overrides[key]}" for key in parsed)
            raise ConfigError(f"method {method.name!r} refuses {given}: {refusal}") from None
        check_config_types(method, config)
        check_settings(method.name, config)
    return config


def member_seeds(generator: torch.Generator, n: int) -> list[int]:
    """``n`` seeds drawn from the run's generator, one per member (initialisation and data order)."""
    return torch.randint(0, 2**62, (n,), generator=generator).tolist()


def mean_field_predictive(problem: Problem, generator: torch.Generator, layout, mean: torch.Tensor,
                          std: torch.Tensor, noise, samples: int) -> np.ndarray:
    """The model average of ``samples`` draws mean + std * z from each of K mean-field Gaussians (``mean``, ``std``
    ``(K, D)``; z from ``noise.next()``, a :class:`approximators.updates.NoiseStream`), each streamed
    into the average (``layout``: the model's :class:`bench.functional.ParameterLayout`)."""
    accumulator = PredictiveAccumulator(problem, samples * mean.shape[0], generator)
    with torch.no_grad():
        for _ in range(samples):
            accumulator.add(layout.unflatten(mean + std * noise.next()))
    return accumulator.result()


def member_generators(generator: torch.Generator, n: int) -> list[torch.Generator]:
    """One generator per member or chain, seeded from the run's generator: a member's draws then do
    not depend on how many members train together."""
    return [torch.Generator().manual_seed(s) for s in member_seeds(generator, n)]


def next_seed(g: torch.Generator) -> int:
    return int(torch.randint(0, 2**62, (), generator=g))
