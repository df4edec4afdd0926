"""A task of one's own: a posterior given by tensors, a network, a likelihood and a prior variance.

The built-in tasks are registered by name; :func:`make_task` builds the same :class:`~bench.tasks.base.Task`
from a user's data, so that every method (and :func:`bench.api.fit`) runs on a problem whose posterior the
user knows, a conjugate model with a closed-form posterior, say. Every argument is checked here, before any
method sees it, and a bad one is one line (:class:`~bench.errors.ConfigError`).
"""

from __future__ import annotations

import math
import re
from typing import Callable

import torch
from torch import nn

from bench.errors import ConfigError
from bench.likelihoods import Categorical, FixedNoiseGaussian, HeteroscedasticGaussian, Likelihood
from bench.tasks.base import Task

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
"""A task's name: it names folders, so lower-case letters, digits, ``.``, ``_`` and ``-``, at most 64."""

_OUTPUTS = {FixedNoiseGaussian: 1, HeteroscedasticGaussian: 2}
"""Outputs per row the network must give for each regression likelihood (classification: one per class)."""


def make_task(name: str, x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor,
              model_factory: Callable[[], nn.Module], likelihood: Likelihood, prior_variance: float, *,
              y_test: torch.Tensor | None = None, description: str = "a task of one's own") -> Task:
    """The posterior p(theta | D) ∝ prod_i p(y_i | f(x_i; theta)) N(theta; 0, ``prior_variance`` I) over every
    parameter of ``model_factory()``, scored on ``x_test``.

    Shapes: ``x_train`` ``(N, *input_shape)`` and ``x_test`` ``(M, *input_shape)``, floating point, finite;
    ``y_train`` (and ``y_test``, optional) ``(N,)``: class indices 0..C-1 (``Categorical``, C the network's
    outputs) or finite real targets (``FixedNoiseGaussian``: one output; ``HeteroscedasticGaussian``: two).
    ``model_factory()`` returns a new ``nn.Module`` (PyTorch's default initialisation, no buffers) whose output
    on ``(B, *input_shape)`` is ``(B, n_outputs)``. The tensors are kept as given (on the CPU; a run moves
    them to its device).
    """
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(f"a task's name is 1 to 64 lower-case letters, digits, '.', '_' or '-', starting with a "
                          f"letter or digit; got {name!r}")
    from bench.tasks import all_task_names  # a user's task may not take a built-in's name

    if name in all_task_names():
        raise ConfigError(f"{name!r} is a built-in task's name; choose another for a task of one's own")
    if not isinstance(likelihood, Likelihood):
        raise ConfigError(f"the likelihood must be one of Categorical(), FixedNoiseGaussian(noise_std), "
                          f"HeteroscedasticGaussian(); got {likelihood!r}")
    if isinstance(prior_variance, bool) or not isinstance(prior_variance, (int, float)) \
            or not (math.isfinite(prior_variance) and prior_variance > 0):
        raise ConfigError(f"prior_variance must be a positive finite number, got {prior_variance!r}")
    x_train = _inputs(x_train, "x_train")
    x_test = _inputs(x_test, "x_test")
    if x_test.shape[1:] != x_train.shape[1:]:
        raise ConfigError(f"x_test's rows {tuple(x_test.shape[1:])} differ from x_train's {tuple(x_train.shape[1:])}")
    n_outputs = _outputs(model_factory, x_train)
    y_train = _targets(y_train, "y_train", x_train.shape[0], likelihood, n_outputs)
    if y_test is not None:
        y_test = _targets(y_test, "y_test", x_test.shape[0], likelihood, n_outputs)
    return Task(name=name, version=1, description=description, x_train=x_train, y_train=y_train, x_test=x_test,
                y_test=y_test, model_factory=model_factory, architecture=type(model_factory()).__name__,
                likelihood=likelihood, prior_variance=float(prior_variance), settings={"custom": True},
                n_classes=n_outputs if isinstance(likelihood, Categorical) else None)


def _inputs(x, what: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 2 or x.shape[0] < 1:
        raise ConfigError(f"{what} must be a floating-point tensor (N, *input_shape) with N >= 1, got "
                          f"{type(x).__name__}{'' if not isinstance(x, torch.Tensor) else f' {x.dtype} {tuple(x.shape)}'}")
    if not bool(torch.isfinite(x).all()):
        raise ConfigError(f"{what} holds non-finite values")
    return x.detach().cpu()


def _outputs(model_factory, x_train: torch.Tensor) -> int:
    """The network's outputs per row, from one call on two training rows."""
    if not callable(model_factory):
        raise ConfigError(f"model_factory must be a callable returning an nn.Module, got {model_factory!r}")
    try:
        module = model_factory()
    except Exception as error:  # the user's code: its failure is reported as its own, in one line
        raise ConfigError(f"model_factory() failed: {type(error).__name__}: {error}") from None
    if not isinstance(module, nn.Module):
        raise ConfigError(f"model_factory() must return an nn.Module, got {type(module).__name__}")
    if any(True for _ in module.buffers()):
        raise ConfigError("the network must not hold buffers (batch-norm statistics, say): the posterior is over "
                          "its parameters alone")
    if not any(True for _ in module.parameters()):
        raise ConfigError("the network has no parameters: there is no posterior to approximate")
    try:
        with torch.no_grad():
            out = module(x_train[:2])
    except Exception as error:  # the user's network: its failure is reported as its own, in one line
        raise ConfigError(f"the network failed on two rows of x_train: {type(error).__name__}: {error}") from None
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != min(2, x_train.shape[0]):
        raise ConfigError(f"the network must map (B, *input_shape) to (B, n_outputs); on {tuple(x_train[:2].shape)} "
                          f"it gave {tuple(out.shape)}")
    return int(out.shape[1])


def _targets(y, what: str, rows: int, likelihood: Likelihood, n_outputs: int) -> torch.Tensor:
    if not isinstance(y, torch.Tensor) or y.shape != (rows,):
        raise ConfigError(f"{what} must be a tensor of shape ({rows},), got "
                          f"{tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__}")
    if isinstance(likelihood, Categorical):
        if y.is_floating_point() or y.dtype == torch.bool or (y.numel() and not (0 <= int(y.min()) and int(y.max()) < n_outputs)):
            raise ConfigError(f"{what} must hold class indices 0..{n_outputs - 1} (the network's {n_outputs} outputs)")
        return y.detach().cpu().long()
    expected = _OUTPUTS.get(type(likelihood))
    if expected is not None and n_outputs != expected:
        raise ConfigError(f"{type(likelihood).__name__} needs a network with {expected} output(s) per row, "
                          f"it has {n_outputs}")
    if not y.is_floating_point() or not bool(torch.isfinite(y).all()):
        raise ConfigError(f"{what} must hold finite real targets")
    return y.detach().cpu()
