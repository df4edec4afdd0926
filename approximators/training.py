r"""Vectorised MAP training of K independent networks: the engine of ``sgd``, ``de`` (and anchored ensembles).

Member k minimises the negative anchored log posterior per training example,

    loss_k(theta_k) = -[ (1/B) sum_{i in batch_k} log p(y_i | x_i, theta_k) + log N(theta_k; a_k, v I) / N_train ],

which is the full-data objective -(log p(D | theta_k) + log N(theta_k; a_k, v I)) divided by the
constant N_train (the minibatch mean log-likelihood scaled by N_train). Anchors a_k = 0 give the
MAP estimate under the task's prior N(0, v I).

All K members are trained in one pass: their parameters are stacked ``{name: (K, *shape)}``, each
member draws its own minibatch order from its own generator, the forward pass is vectorised, and
the loss is the sum of the members' losses (its gradient with respect to member k's parameters is
member k's own gradient). Adam is element-wise, so one Adam over the stacked tensors is exactly K
independent Adams. The learning rate follows a cosine decay from ``lr`` to ``min_lr`` over the
training call, and optimiser state starts fresh at every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from approximators import engine
from approximators.base import SCHEDULE_WOULD_RISE, Problem, next_seed
from approximators.engine import KeepBest, Objective, steps_per_epoch
from approximators.updates import Adam, cosine_schedule
from bench.budget import MeteredData
from bench.functional import StackedModel
from bench.likelihoods import Likelihood


@dataclass(frozen=True)
class AdamConfig:
    """Adam with a cosine decay from ``lr`` to ``min_lr``: the settings of one training call, and the
    base of every config of a method trained by :func:`train_members` (so each exposes them to
    ``--set``)."""

    batch_size: int = 32
    lr: float = 1e-2
    min_lr: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.999

    BOUNDS: ClassVar[dict[str, str]] = {
        "batch_size": "[1, inf)",
        "lr": "(0, inf)",
        "min_lr": "[0, inf)",
        "beta1": "[0, 1)",
        "beta2": "[0, 1)",
    }
    """Each numeric setting's interval (checked before any work: :func:`approximators.base.check_settings`)."""
    AT_MOST: ClassVar[dict] = {"min_lr": ("lr", SCHEDULE_WOULD_RISE)}
    """Settings that may not exceed another (the cosine decay's end, its start), checked with the bounds."""


def schedule_of(config: AdamConfig, prefix: str = "") -> AdamConfig:
    """The schedule in ``config``'s ``{prefix}lr``, ``{prefix}min_lr``, ``{prefix}beta1/2`` fields
    (``prefix="seq_"`` for SAE's sequential members), with its batch size."""
    get = lambda name: getattr(config, prefix + name)  # noqa: E731
    return AdamConfig(config.batch_size, get("lr"), get("min_lr"), get("beta1"), get("beta2"))


def initial_members(model_factory, seeds: list[int]) -> dict[str, torch.Tensor]:
    """PyTorch's default initialisation of one network per seed, stacked ``{name: (K, *shape)}``."""
    return StackedModel.seeded(model_factory, seeds)


@dataclass(frozen=True)
class Members:
    """K members ready for :func:`engine.run` under the task's prior (no anchors): the stacked model,
    the objective, the initial parameters ``(K, D)`` and each member's data-order seed."""

    model: StackedModel
    objective: Objective
    params: torch.Tensor
    order_seeds: list[int]

    @classmethod
    def start(cls, problem: Problem, data: MeteredData, generators: list[torch.Generator]) -> "Members":
        """One member per generator: PyTorch's default initialisation from the generator's next seed,
        then its data-order seed (in this order, so a member's run depends on its generator alone)."""
        model = StackedModel(problem.model_factory())
        params = model.layout.flatten(initial_members(problem.model_factory, [next_seed(g) for g in generators]))
        objective = Objective(model, problem.likelihood, problem.prior_variance, data.n_train)
        return cls(model, objective, params, [next_seed(g) for g in generators])


def train_members(
    model: StackedModel,
    params: dict[str, torch.Tensor],
    data: MeteredData,
    likelihood: Likelihood,
    prior_variance: float,
    epochs: int,
    schedule: AdamConfig,
    seeds: list[int],
    anchors: dict[str, torch.Tensor] | None = None,
    split: "ValidationSplit | None" = None,
) -> dict[str, torch.Tensor]:
    """Trains K stacked members for ``epochs`` epochs each (charging K * epochs epochs to the meter)
    with Adam and the cosine schedule, on :mod:`approximators.engine`.

    ``params`` and ``anchors`` are ``{name: (K, *shape)}``; ``seeds`` (K of them) fix each member's
    minibatch order. With a ``split``, members train on its ``fit`` rows, are evaluated on its
    ``validation`` rows after every epoch (the member's objective there: :class:`approximators.engine.KeepBest`),
    and each member's best-validation weights are returned; one epoch then still reads every training example once
    and is charged exactly one epoch. Returns parameters, detached, on the data's device.
    """
    layout = model.layout
    flat_anchors = None if anchors is None else layout.flatten(anchors).to(data.device)
    objective = Objective(model, likelihood, prior_variance, data.n_train, flat_anchors)
    rows = split.fit if split is not None else torch.arange(data.n_train)
    steps = epochs * steps_per_epoch(len(rows), schedule.batch_size)
    rule = Adam(cosine_schedule(schedule.lr, schedule.min_lr, steps), schedule.beta1, schedule.beta2)
    keep_best = KeepBest(objective, data, split.validation) if split is not None else None
    state = engine.run(objective, rule, layout.flatten(params), data, epochs, schedule.batch_size, seeds,
                       rows=rows, on_epoch=keep_best)
    final = keep_best.params if keep_best is not None and keep_best.params is not None else state.params
    return layout.unflatten(final.detach())


@dataclass(frozen=True)
class ValidationSplit:
    """Rows of the training set held out for model selection (``validation``) and the rest (``fit``)."""

    fit: torch.Tensor
    validation: torch.Tensor

    @classmethod
    def random(cls, n_train: int, fraction: float, generator: torch.Generator) -> "ValidationSplit | None":
        """A random split with ``round(fraction * n_train)`` validation rows; None for fraction 0."""
        n_validation = round(fraction * n_train)
        if n_validation == 0:
            return None
        if n_validation >= n_train:
            raise ValueError(f"validation fraction {fraction} leaves no training rows")
        order = torch.randperm(n_train, generator=generator)
        return cls(fit=order[n_validation:], validation=order[:n_validation])
