"""What a task is: data, model, likelihood, prior, and the identity of its reference."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from bench.errors import ConfigError
from bench.likelihoods import Likelihood

PREDICTIVE_SAMPLES = 1000
"""Samples of p(y | x) per test point for regression predictives and references (the competition's count)."""
PROBE_INPUTS = 2
"""Test inputs the network probe (:attr:`Task.network_probe`) runs the network on."""
PROBE_DIGITS = 6
"""Significant digits of the probe's outputs: a changed computation moves them by far more, while float64 round-off
on another CPU (about 1e-15 relative) moves one across a rounding boundary with a chance of about 1e-9."""


PATHS_AGREE = 1e-9
"""Largest difference, relative to the probe's largest output, allowed between the module's ``forward`` and the
paths methods and HMC evaluate it by (float64: their round-off differs by about 1e-15; a dropout or a changed fast
path moves outputs by far more)."""


def probe_weights(shape: torch.Size, index: int) -> torch.Tensor:
    """Deterministic float64 values for the ``index``-th parameter tensor of ``shape``: sin(1 + k x 0.754877 + index)
    over its entries k, scaled by 1 / sqrt(fan-in) (the entries of one output unit; all of a vector), so that deep
    networks neither vanish nor explode, and independent of any random number generator."""
    count = int(np.prod(shape)) if len(shape) else 1
    fan_in = count // shape[0] if len(shape) > 1 else count
    values = torch.sin(1.0 + torch.arange(count, dtype=torch.float64) * 0.754877 + index)
    return (values / np.sqrt(max(fan_in, 1))).reshape(shape)


@dataclass(frozen=True)
class TestBlock:
    """A named contiguous range of test rows (the clean block, or one kind of shift)."""

    name: str
    start: int
    stop: int


@dataclass(frozen=True)
class Task:
    """Everything that defines a posterior and how a method is scored on it.

    The posterior is p(theta | D) ∝ p(D | theta)^(1/T) N(theta; 0, v I) over **all** parameters
    theta of ``model_factory()``, with T = ``temperature`` = 1 and the full-data log-likelihood
    (a sum over the ``n_train`` examples). Minibatch estimates scale the mean log-likelihood by
    ``n_train``.

    Shapes: ``x_train`` ``(N_train, *input_shape)``, ``y_train`` ``(N_train,)`` (int64 class
    indices or float targets); ``x_test`` ``(N_test, *input_shape)``; ``y_test`` ``(N_test,)`` or None.
    """

    name: str
    version: int
    description: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor | None
    model_factory: Callable[[], nn.Module] = field(repr=False)
    architecture: str
    likelihood: Likelihood
    prior_variance: float
    settings: dict
    test_blocks: tuple[TestBlock, ...] = ()
    temperature: float = 1.0
    n_classes: int | None = None
    data_digest: str | None = field(default=None, repr=False)
    """sha256 standing for the data arrays when they were already hashed (at fetch time), so that large
    memory-mapped data are not hashed again on every run."""
    data_folder: Path | None = field(default=None, repr=False, compare=False)
    """Where fetched data (and an official reference) live; None for embedded tasks."""

    @property
    def kind(self) -> str:
        return self.likelihood.kind

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])

    @functools.cached_property
    def network_probe(self) -> list[float]:
        """What the network computes, in the fingerprint beside its description: the outputs of ``model_factory()``, in
        float64 and evaluation mode, with every parameter set to :func:`probe_weights`, on the first
        :data:`PROBE_INPUTS` test inputs, rounded to :data:`PROBE_DIGITS` significant digits. A changed layer, activation,
        pooling or reading axis changes them (and so the fingerprint, and every reference and record made for the
        task), where its name alone need not change; they do not depend on torch's random initialisation."""
        try:
            model, inputs = self._probe_network()
            with torch.no_grad():
                outputs = model.eval()(inputs)
        except Exception as error:  # a network of one's own (bench.api.make_task) that cannot run in float64
            raise ConfigError(f"task {self.name}: its network must run in float64 on its first test inputs, which "
                              f"its fingerprint records ({type(error).__name__}: {error})") from None
        self._check_the_paths_agree(outputs)
        return [float(f"{value:.{PROBE_DIGITS}g}") for value in outputs.flatten().tolist()]

    def _probe_network(self) -> tuple[torch.nn.Module, torch.Tensor]:
        """The probe's network and inputs: ``model_factory()``'s network in float64, in the mode it is built in, with
        every parameter set to :func:`probe_weights`, and the first :data:`PROBE_INPUTS` test inputs (float64 where
        they are floating point)."""
        with torch.random.fork_rng(devices=[]):  # building the network draws its initial weights: not the caller's
            torch.manual_seed(0)  # and a buffer it draws (a fixed projection, a mask) the same every time
            model = self.model_factory().double()
        with torch.no_grad():
            for index, parameter in enumerate(model.parameters()):
                parameter.copy_(probe_weights(parameter.shape, index))
        inputs = self.x_test[:PROBE_INPUTS].cpu()
        return model, inputs.double() if inputs.is_floating_point() else inputs

    def _check_the_paths_agree(self, outputs: torch.Tensor) -> None:
        """The probe runs the module's own ``forward`` in evaluation mode; methods and HMC run the network through
        :class:`bench.functional.StackedModel`, in training mode (as ``model_factory()`` builds it), on one parameter
        set or several (vmap, or the MLP fast path) and on shared or per-copy inputs. Each of those must give the
        probe's outputs, or the fingerprint would vouch for a network that is not the one sampled and trained: a
        dropout (random, and on in training mode) or a fast path that disagrees with the module is refused here."""
        from bench.functional import StackedModel

        try:
            model, inputs = self._probe_network()
            stacked, weights = StackedModel(model), StackedModel.stack([model])
            pair = {name: weight.expand(2, *weight.shape[1:]).contiguous() for name, weight in weights.items()}
            with torch.no_grad():
                paths = [stacked(weights, inputs, shared_input=True), stacked(pair, inputs, shared_input=True),
                         stacked(pair, inputs.expand(2, *inputs.shape).contiguous(), shared_input=False)]
        except Exception as error:
            raise ConfigError(f"task {self.name}: its network fails in training mode or evaluated stacked, as methods "
                              f"and HMC run it ({type(error).__name__}: {str(error).splitlines()[0]}); a reference "
                              "assumes one deterministic network") from None
        scale = float(outputs.abs().max()) or 1.0
        gap = max(float((path - outputs).abs().max()) for path in paths)
        if not gap <= PATHS_AGREE * scale:
            raise ConfigError(f"task {self.name}: its network computes other outputs in training mode or evaluated "
                              f"stacked, as methods and HMC run it, than its forward in evaluation mode (largest "
                              f"difference {gap:.1e} on the probe); a reference assumes one deterministic network: no "
                              "dropout or other randomness, no layer that depends on the mode, no fast path that "
                              "disagrees with the module")

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.model_factory().parameters())

    def fingerprint(self) -> str:
        """sha256 over the data arrays and the settings: a reference is valid for exactly this task."""
        digest = hashlib.sha256()
        if self.data_digest is not None:
            digest.update(self.data_digest.encode())
        else:
            for array in (self.x_train, self.y_train, self.x_test):
                digest.update(np.ascontiguousarray(array.cpu().numpy()).tobytes())
        digest.update(json.dumps(self.describe(), sort_keys=True).encode())
        return digest.hexdigest()

    def test_targets_sha256(self) -> str | None:
        """sha256 of ``y_test`` (None without one). Not in the fingerprint, which predates it and which every record
        and cross-check is keyed on; a reference records it instead (its evidence holds each draw's test
        log-likelihood), and :func:`reference.store.load_reference` refuses the reference when the targets change."""
        if self.y_test is None:
            return None
        return hashlib.sha256(np.ascontiguousarray(self.y_test.cpu().numpy()).tobytes()).hexdigest()

    def describe(self) -> dict:
        """Every setting that defines the task, as shown by ``python -m bench tasks`` and stored in results."""
        return {
            "name": self.name,
            "version": self.version,
            "kind": self.kind,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "input_shape": list(self.x_train.shape[1:]),
            "architecture": self.architecture,
            "network_probe": self.network_probe,
            "likelihood": self.likelihood.describe(),
            "prior_variance": self.prior_variance,
            "temperature": self.temperature,
            "test_blocks": [[b.name, b.start, b.stop] for b in self.test_blocks],
            **self.settings,
        }
