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
import functools
import math
import re
import sys
import typing
import weakref
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from bench import checkpoint
from bench.arguments import NUMBER, WHOLE_NUMBER
from bench.budget import BudgetMeter, MeteredData
from bench.errors import COMMAND_LINE, ConfigError, DoesNotFit, Spelling, shown
from bench.memory import Room, gpu_room, release_freed_memory, room
from bench.progress import members_evaluated
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
        checkpoint.track(self)

    def state_dict(self) -> dict:
        """What a run's checkpoint keeps of the average so far (:mod:`bench.checkpoint`)."""
        kept = self._sum if self.problem.kind == "classification" else self._samples
        return {"added": self.added, "kept": kept}

    def load_state_dict(self, state: dict) -> None:
        kept = self._sum if self.problem.kind == "classification" else self._samples
        kept.copy_(state["kept"])
        self.added = int(state["added"])

    def _outputs(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(K, N_test, n_outputs)`` for K stacked members, evaluated in chunks of test rows."""
        x = self.problem.x_test
        k, n = next(iter(params.values())).shape[0], x.shape[0]
        release_freed_memory()  # what training freed, before the test rows' larger chunks are allocated
        chunks = []
        with torch.no_grad():
            for i in range(0, n, EVAL_CHUNK):
                chunks.append(self.model(params, x[i:i + EVAL_CHUNK], shared_input=True))
                members_evaluated(self.added + k * min(i + EVAL_CHUNK, n) / n, self.n_members)  # a progress bar's
        self.problem.meter.record_test_pass(k * x.shape[0], x.shape[0])
        return torch.cat(chunks, dim=1).double().cpu()

    def add(self, params: dict[str, torch.Tensor]) -> None:
        """Adds K trained members given as stacked parameters ``{name: (K, *shape)}`` (nothing while a resumed run
        replays toward where it stopped: the average is restored there)."""
        if _replaying():
            return
        self.add_outputs(self._outputs({n: p.detach() for n, p in params.items()}))

    def add_outputs(self, outputs: torch.Tensor) -> None:
        """Adds K members given by their outputs on the test inputs, ``(K, N_test, n_outputs)`` float64 on the CPU
        (a method that evaluates them itself, as Laplace's linearised predictive, charges their test passes)."""
        if _replaying():
            return
        k = outputs.shape[0]
        if self.added + k > self.n_members:
            raise RuntimeError(f"more members added ({self.added + k}) than announced ({self.n_members})")
        if self.problem.kind == "classification":
            self._sum += Categorical.probabilities(outputs).sum(0)
        else:
            start = sum(self._counts[:self.added])
            for member in range(k):
                count = self._counts[self.added + member]
                into = self._samples[:, start:start + count]
                if into.is_contiguous():  # one member draws every sample: into the average itself, no copy made
                    self.problem.likelihood.sample(outputs[member], count, self.generator, out=into)
                else:
                    into.copy_(self.problem.likelihood.sample(outputs[member], count, self.generator))
                start += count
        self.added += k
        members_evaluated(self.added, self.n_members)

    def result(self) -> np.ndarray:
        if self.added != self.n_members:
            raise RuntimeError(f"{self.added} of {self.n_members} members were added")
        if self.problem.kind == "classification":
            return (self._sum / self.added).numpy()
        return self._samples.numpy()


STATE_COPIES = 8
"""Parameter-sized tensors a network in training holds at once in the memory plan (parameters, gradient,
two optimiser moments, anchor, best-so-far copy and working space)."""

BYTES_PER_OUTPUT = 16
"""Bytes per member, test row and output that the predictive holds at once while it gathers a member's outputs
(:class:`PredictiveAccumulator`): on the run's device the float32 chunks and their concatenation (4 + 4) and its
float64 copy (8); on the host that copy (8) and its probabilities (8). On the CPU both are one memory, one after the
other."""

BYTES_PER_KEPT_PREDICTION = 8
"""Bytes per test row and kept number of the running predictive (:class:`PredictiveAccumulator`: float64 sums of
probabilities, or the regression's samples), and per sample a member draws, on the host."""

BYTES_PER_SCHEDULE_STEP = 32
"""A per-step schedule entry held as a Python float in a list (the object and its pointer)."""


MEMBER_COPIES = 2
"""Parameter-sized tensors the memory plan counts for every member or chain a run creates, trained together or
not: its initial parameters and its anchor, which the methods build for all members before training them (on the
host: a run copies them to its device when it trains them, a copy :data:`STATE_COPIES` counts)."""

MEMBER_OVERHEAD_BYTES = 4096
"""What else a member or chain holds while the run lasts: its ``torch.Generator`` (2.7 kB measured, 100,000 of them
at once), its seeds and list entries, rounded up."""


@dataclass(frozen=True)
class RowCosts:
    """What one network holds per input row, measured on the CPU by :func:`activations_per_row`: ``training``, bytes
    at the peak of a training step (its forward pass, what autograd saves, and its backward pass's gradients);
    ``evaluation``, bytes at the peak of a forward pass without gradients (the predictive's); ``outputs``, the numbers
    it outputs per row."""

    training: int = 0
    evaluation: int = 0
    outputs: int = 0


@dataclass(frozen=True)
class Needs:
    """What a run needs at least: ``device``, bytes on its device (on the CPU: everything it holds), and ``host``,
    bytes of the host's memory besides (0 when the device is the CPU)."""

    device: int
    host: int = 0


@dataclass(frozen=True)
class Footprint:
    """What a run holds at once, known from its settings and budget before anything is built.

    ``networks``: networks trained together (vectorised members or chains), each with its training state;
    ``schedule_steps``: entries of the per-step schedules it materialises; ``kept``: further
    parameter-sized vectors it keeps (SWAG's moments and deviations, VOGN's per-example gradients); ``members``:
    members or chains it creates in all, together or one group after another (:data:`MEMBER_COPIES`,
    :data:`MEMBER_OVERHEAD_BYTES`); ``rows``: the rows each network computes on in one step (its minibatch, or
    the training set for a full-batch method), whose training step's activations it holds
    (:attr:`RowCosts.training`); ``averaged``: the members its predictive averages, where the method says (a
    regression's predictive draws each member's share of the samples into an array of its own when there are two or
    more; 0: not said, and the plan counts no such array)."""

    networks: int
    schedule_steps: int
    kept: int = 0
    what: str = "network"
    members: int = 0
    rows: int = 0
    averaged: int = 0

    def needs(self, n_params: int, costs: RowCosts = RowCosts(), n_test: int = 0, kept_per_test_row: int = 0,
              device_type: str = "cpu", samples: int = 0) -> Needs:
        """What a run of networks of ``n_params`` float32 parameters, each holding ``costs`` per row, holds at its
        peak, with ``n_test`` test rows of which the predictive keeps ``kept_per_test_row`` numbers each (the classes,
        or a regression's samples), on a device of type ``device_type``; ``samples``: a regression's predictive
        samples, which its members draw (0 for a classification).

        On the device, the larger of two phases: training (each network's training state, :data:`STATE_COPIES`, and
        a training step's activations on ``rows`` rows) and the predictive's evaluation (the parameters evaluated, and
        the activations of a chunk of test rows or the members' outputs on all of them, the larger), both beside the
        ``kept`` vectors. On the host: what the members and the schedules hold in training, then the running predictive,
        the outputs it gathers and a member's draws (:data:`BYTES_PER_KEPT_PREDICTION` each, ``averaged``). On the
        CPU, one memory: the predictive's host part counts only beside the evaluation
        (:func:`bench.memory.release_freed_memory` keeps a run's training from adding to it).

        Everything counted is held at once, so the plan counts no more than a run holds (``python
        benchmarks/memory_plan.py --competition`` measures it against real peaks), and it refuses only what cannot
        fit; running out later is still the machine's refusal (exit 3)."""
        parameters = n_params * 4
        members = self.members * (MEMBER_COPIES * parameters + MEMBER_OVERHEAD_BYTES)
        schedule = self.schedule_steps * BYTES_PER_SCHEDULE_STEP
        chunk = self.networks * min(n_test, EVAL_CHUNK) * costs.evaluation
        outputs = self.networks * n_test * costs.outputs * BYTES_PER_OUTPUT
        training = (self.networks * STATE_COPIES + self.kept) * parameters + self.networks * self.rows * costs.training
        evaluated = (self.networks + self.kept) * parameters
        average = n_test * kept_per_test_row * BYTES_PER_KEPT_PREDICTION
        draws = n_test * -(-samples // self.averaged) * BYTES_PER_KEPT_PREDICTION if self.averaged > 1 else 0
        if device_type == "cpu":
            return Needs(max(members + schedule + training, average + evaluated + max(chunk, outputs + draws)))
        return Needs(max(training, evaluated + max(chunk, outputs)), max(members + schedule, average + outputs + draws))

    def bytes(self, n_params: int, costs: RowCosts = RowCosts(), n_test: int = 0, kept_per_test_row: int = 0) -> int:
        """What :meth:`needs` counts for a run on the CPU, in bytes."""
        return self.needs(n_params, costs, n_test, kept_per_test_row).device


PROBE_ROWS = 8
"""Test rows' shape of the passes that measure what a network holds per row (:func:`activations_per_row`)."""

PROBE_NETWORKS = 2
"""Networks stacked in the passes that measure what each of several networks trained or evaluated together holds
(:func:`activations_per_row` with ``networks`` > 1): vectorised over the stack, a network's operations are batched
ones, which may copy what a network alone would not."""


def activations_per_row(model_factory: Callable[[], nn.Module], x: torch.Tensor, networks: int = 1,
                        device_type: str = "cpu") -> RowCosts:
    """What one network holds per input row at the peak of a training step and of a forward pass without gradients
    (the predictive's), and the numbers it outputs per row, measured on the CPU with zeros of the shape and type of
    ``x`` ``(R, *input_shape)``, R >= 2 (the plan reads no test row: the honesty probe counts every one a network
    computes on), for a run that trains ``networks`` together on a device of type ``device_type``.

    The passes are a run's own: the network's :class:`~bench.functional.StackedModel` with one parameter set, or
    :data:`PROBE_NETWORKS` of them (vectorised, as a run trains several networks together; each holds its share),
    each member on its own rows in training, all on the same rows in evaluation (the predictive's). Each pass is
    watched by :class:`_HeldStorages`: every tensor an operation of the forward or the backward pass returns, from its
    creation to its release, and the buffers a convolution holds inside itself (:meth:`_HeldStorages.inside`). The
    same pass on R and R // 2 rows gives each tensor's bytes per row (those of parameter size, the gradients, have
    none), and the peak is the most the tensors alive at once hold per row. What other kernels allocate inside
    themselves and free before they return is not seen: the plan counts less than a run holds, never more. PyTorch's
    global generator is left as it was (a run's results must not depend on its plan)."""
    with torch.random.fork_rng(devices=[]):
        module = model_factory()
        big = torch.zeros(tuple(x.shape), dtype=x.dtype)
        small = big[:big.shape[0] // 2].clone()
        if networks > 1:
            try:
                return _row_costs(module, big, small, PROBE_NETWORKS, device_type)
            except Exception:  # noqa: BLE001 - a network that does not vectorise: its plan is one network's
                pass
        return _row_costs(module, big, small, 1, device_type)


def _row_costs(module: nn.Module, big: torch.Tensor, small: torch.Tensor, k: int, device_type: str) -> RowCosts:
    model = StackedModel(module)
    params = {name: p.detach().unsqueeze(0).repeat(k, *[1] * p.dim()) for name, p in module.named_parameters()}
    rows, share = big.shape[0] - small.shape[0], k * (big.shape[0] - small.shape[0])
    training = _per_row_peak(_training_pass(model, params, big, k, device_type),
                             _training_pass(model, params, small, k, device_type), share)
    (events, outputs), (few, _) = (_evaluation_pass(model, params, big, device_type),
                                   _evaluation_pass(model, params, small, device_type))
    return RowCosts(training, _per_row_peak(events, few, share), outputs // (k * big.shape[0]))


class _HeldStorages(TorchDispatchMode):
    """Watches the storages of the tensors every ATen operation returns under it (the forward pass's, what a module
    such as an LSTM computes inside itself, and the backward pass's), each from its creation to its release (a weak
    reference's callback: PyTorch keeps a storage's Python object while the storage lives), as events: ``(i, bytes)``
    when storage ``i`` is first seen, ``(i, -bytes)`` when it is released; and what a convolution holds inside itself
    while it runs (:meth:`inside`) as events of its own. Storages in ``ignored`` (the parameters', the inputs') are not
    watched."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # PyTorch would otherwise import its compiler (2 s) to keep it out of __torch_dispatch__

    def __init__(self, ignored: set[int], device_type: str):
        super().__init__()
        self.ignored, self.device_type, self.events, self._open, self._seen = ignored, device_type, [], {}, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        inside = [self._event(size) for size in self.inside(func, args, result)]
        for tensor in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(tensor, torch.Tensor):
                self._see(tensor.untyped_storage())
        self.events += [(index, -size) for index, size in reversed(inside)]
        return result

    def inside(self, func, args, result) -> list[int]:
        """Bytes of the buffers ``func`` holds while it computes ``result`` besides it, as PyTorch's convolutions do:
        a contiguous copy of an input that is not contiguous (``aten/src/ATen/native/Convolution.cpp`` makes its
        input contiguous, on every device), and on the CPU oneDNN's own layout of the larger of its input and output
        (measured with Conv1d and Conv2d layers: the resident memory of a convolution is its output and one buffer
        of that size, a channel count rounded up to a multiple of 8 aside). Other operations: none known."""
        if func is not torch.ops.aten.convolution.default:
            return []
        source, output = args[0], result
        sizes = [] if source.is_contiguous() else [source.numel() * source.element_size()]
        if self.device_type == "cpu":
            sizes.append(max(source.numel(), output.numel()) * output.element_size())
        return sizes

    def _event(self, size: int) -> tuple[int, int]:
        self.events.append((self._seen, size))
        self._seen += 1
        return self._seen - 1, size

    def _see(self, storage) -> None:
        key, size = storage.data_ptr(), storage.nbytes()
        if size and key not in self.ignored and key not in self._open:
            self._open[key] = self._event(size)
            weakref.finalize(storage, self._release, key).atexit = False

    def _release(self, key: int) -> None:
        index, size = self._open.pop(key)
        self.events.append((index, -size))


def _storages(*tensors: torch.Tensor) -> set[int]:
    return {tensor.untyped_storage().data_ptr() for tensor in tensors}


def _training_pass(model: StackedModel, params: dict[str, torch.Tensor], x: torch.Tensor, k: int,
                   device_type: str) -> list[tuple[int, int]]:
    """The events of a training step's forward and backward pass of ``k`` stacked networks, each on the rows ``x``
    (the sum of the outputs as the loss: a likelihood's own tensors are a few numbers per row)."""
    rows = x.unsqueeze(0).repeat(k, *[1] * x.dim())
    leaves = {name: p.clone().requires_grad_(True) for name, p in params.items()}
    held = _HeldStorages(_storages(rows, *leaves.values()), device_type)
    with held:
        torch.autograd.grad(model(leaves, rows, shared_input=False).sum(), list(leaves.values()))
    return held.events


def _evaluation_pass(model: StackedModel, params: dict[str, torch.Tensor], x: torch.Tensor,
                     device_type: str) -> tuple[list[tuple[int, int]], int]:
    """The events of a forward pass without gradients of the stacked networks on the shared rows ``x`` (the
    predictive's), and how many numbers they output."""
    held = _HeldStorages(_storages(x, *params.values()), device_type)
    with torch.no_grad(), held:
        outputs = model(params, x, shared_input=True).numel()
    return held.events, outputs


def _per_row_peak(big: list[tuple[int, int]], small: list[tuple[int, int]], rows: int) -> int:
    """The most bytes per row held at once over a pass's events, from the same pass on ``rows`` more rows (``big``)
    and fewer (``small``): each storage's bytes per row is the difference of its sizes over ``rows``. Passes whose
    events differ (a network whose work depends on its input's size) give the difference of their peaks instead."""
    if [index for index, _ in big] != [index for index, _ in small] or \
            any((a > 0) != (b > 0) for (_, a), (_, b) in zip(big, small)):
        return max(math.ceil((_peak(big) - _peak(small)) / rows), 0)
    held = most = 0.0
    for (_, a), (_, b) in zip(big, small):
        held += (a - b) / rows
        most = max(most, held)
    return math.ceil(most)


def _peak(events: list[tuple[int, int]]) -> int:
    """The most bytes held at once over ``events``."""
    held = most = 0
    for _, size in events:
        held += size
        most = max(most, held)
    return most


def epochs_unspent(meter: BudgetMeter) -> float:
    """The budget a run left unspent, in epochs, as its report states it (rounded to 1e-6 epochs)."""
    return round(meter.budget_epochs - meter.epochs_used, 6)


def steps_for(epochs: float, n_train: int, batch_size: int) -> int:
    """Minibatch steps in ``epochs`` epochs of ``n_train`` rows (what a per-step schedule holds)."""
    return math.floor(epochs + 1e-9) * math.ceil(n_train / batch_size)


def device_memory(device: torch.device) -> Room:
    """What a run on ``device`` may still allocate there: on a GPU, the least of its free memory and this process's
    share of it (:func:`bench.memory.gpu_room`, from ``torch.cuda.mem_get_info`` and the caching allocator's counts);
    on the CPU, the least of the machine's physical memory and what the process's address-space and control-group
    limits leave (:func:`bench.memory.room`)."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return gpu_room(f"{device} ({torch.cuda.get_device_name(device)})", free, total,
                        torch.cuda.memory_reserved(device), torch.cuda.memory_allocated(device),
                        torch.cuda.get_per_process_memory_fraction(device))
    return room()


def data_on(device: torch.device, problem: "Problem") -> int:
    """Bytes of the task's data the run has already put on ``device`` when it is planned (:func:`bench.runner.metered`
    moves the training and test sets there first): 0 on the CPU, where they are the task's own arrays."""
    x = problem.x_test
    if device.type == "cpu" or x.device.type != device.type or device.index not in (None, x.device.index):
        return 0
    row = x[0].numel() * x.element_size() if x.shape[0] else 0
    return (x.shape[0] + problem.n_train) * row + problem.n_train * 8  # labels: at most 8 bytes each


def memory_needs(approximator: "Approximator", budget: float, problem: "Problem") -> tuple[Footprint, int, Needs]:
    """The run's :class:`Footprint` (checked: the method's failure if it is not one of whole numbers), its network's
    parameters, and what it needs on ``problem``'s device and host (:meth:`Footprint.needs`, with the network's
    :func:`activations_per_row`)."""
    n_test, device = problem.x_test.shape[0], problem.device
    n_params = sum(p.numel() for p in problem.model_factory().parameters())
    footprint = approximator.footprint(budget, problem.n_train)
    counts = ("networks", "schedule_steps", "kept", "members", "rows", "averaged")
    if type(footprint) is not Footprint or not all(
            type(getattr(footprint, count)) is int and getattr(footprint, count) >= 0 for count in counts):
        from approximators.boundary import method_fault

        method_fault(type(approximator), f"method {approximator.name!r}: its footprint must be a Footprint of "
                                         f"whole numbers >= 0 ({', '.join(counts)}); got {shown(footprint)}")
    costs = activations_per_row(problem.model_factory, problem.x_test[:PROBE_ROWS], footprint.networks,
                                device.type)
    samples = 0 if problem.kind == "classification" else problem.n_predictive_samples
    kept = problem.n_classes if problem.kind == "classification" else samples
    return footprint, n_params, footprint.needs(n_params, costs, n_test, kept or 0, device.type, samples)


def check_footprint(approximator: "Approximator", budget: float, problem: "Problem") -> None:
    """Plan before allocating: one line (:class:`~bench.errors.DoesNotFit`) when what the settings and budget imply
    on ``problem`` cannot fit in the memory its device leaves the run, or, on a GPU, when what the run keeps on the
    host cannot fit in what the host leaves it (:func:`memory_needs`, :func:`device_memory`). Each is compared with
    the least of what bounds it, so the line names the bound that binds."""
    device = problem.device
    footprint, n_params, needs = memory_needs(approximator, budget, problem)
    on_gpu = device.type != "cpu"
    parts = [(needs.device, device_memory(device), f" on {device}" if on_gpu else "", on_gpu)]
    if needs.host:
        parts.append((needs.host, device_memory(torch.device("cpu")), f" of the host's memory beside {device}", False))
    for needed, available, where, on_device in parts:
        if needed <= available.bytes:
            continue
        held = [f"trains {footprint.networks:,} {footprint.what}(s) of {n_params:,} parameters together"]
        if footprint.members > footprint.networks:
            held.append(f"creates {footprint.members:,} in all")
        if footprint.kept:
            held.append(f"keeps {footprint.kept:,} more parameter vectors")
        if footprint.schedule_steps:
            held.append(f"schedules {footprint.schedule_steps:,} steps")
        data = data_on(device, problem) if on_device else 0
        beside = f", beside its data ({data / 2**30:,.1f} GiB) already there" if data else ""
        raise DoesNotFit(
            f"{approximator.name}: a budget of {budget:g} epochs with these settings {', '.join(held)}: at least "
            f"{needed / 2**30:,.1f} GiB{where}, more than the {available.bytes / 2**30:,.1f} GiB {available.what}"
            f"{beside}; lower the budget or what multiplies it (members, chains, runs, rank, batch size), set "
            f"vectorise=false where the method has it{', or run on the CPU (--device cpu)' if on_device else ''}")


class Approximator:
    name: ClassVar[str]
    summary: ClassVar[str]
    paper: ClassVar[str] = ""
    Config: ClassVar[type]
    TASK_DEFAULTS: ClassVar[dict[str, dict]] = {}
    check_budget: ClassVar[float] = 200.0
    """The method's smallest sensible budget with its default settings, in epochs: what the CI gate
    (``bench check``) and the honesty probe run it with, so both stay fast on a CPU."""
    resumable: ClassVar[bool] = False
    """Whether a stopped run continues from its checkpoint (:mod:`bench.checkpoint`): the class that defines ``fit``
    says so when everything its fit keeps across engine calls is tracked (``bench.checkpoint.track``); otherwise a
    stopped run starts again from scratch."""

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
    each config declares the interval of each of its numeric fields (read as they are now: a ``BOUNDS`` may be
    changed, only its texts' parsing is kept)."""
    declared = tuple((name, text) for cls in reversed(config_class.__mro__)
                     for name, text in vars(cls).get("BOUNDS", {}).items())
    return dict(_parsed_bounds(declared))


@functools.lru_cache(maxsize=256)
def _parsed_bounds(declared: tuple[tuple[str, str], ...]) -> dict[str, Interval]:
    """The intervals of ``(name, text)`` pairs, later ones overriding, parsed once per declaration (a board reads
    thousands of records of a dozen classes)."""
    return {name: Interval(text) for name, text in declared}


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
    hints = _type_hints(config_class)
    return {field.name: hints[field.name] for field in dataclasses.fields(config_class)}


@functools.lru_cache(maxsize=256)
def _type_hints(config_class: type) -> dict[str, object]:
    """``typing.get_type_hints`` of a config class, worked out once per class (never changed by its readers): it
    evaluates every annotation's text, and a board of the shipped store reads thousands of records of a dozen config
    classes."""
    return typing.get_type_hints(config_class)


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
    hints = _type_hints(method.Config)
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
    return [checkpoint.track(torch.Generator().manual_seed(s)) for s in member_seeds(generator, n)]


def _replaying() -> bool:
    """Whether a resumed run is replaying toward where it stopped (:mod:`bench.checkpoint`)."""
    tape = checkpoint.active()
    return tape is not None and tape.replaying


def next_seed(g: torch.Generator) -> int:
    return int(torch.randint(0, 2**62, (), generator=g))
