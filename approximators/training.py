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

import math
from dataclasses import dataclass

import torch

from bench.budget import MeteredData
from bench.functional import StackedModel, seeded_module
from bench.likelihoods import Likelihood


VALIDATION_CHUNK = 1024
"""Validation rows evaluated at once by all members (bounds memory, not results)."""


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


def schedule_of(config: AdamConfig, prefix: str = "") -> AdamConfig:
    """The schedule in ``config``'s ``{prefix}lr``, ``{prefix}min_lr``, ``{prefix}beta1/2`` fields
    (``prefix="seq_"`` for SAE's sequential members), with its batch size."""
    get = lambda name: getattr(config, prefix + name)  # noqa: E731
    return AdamConfig(config.batch_size, get("lr"), get("min_lr"), get("beta1"), get("beta2"))


def initial_members(model_factory, seeds: list[int]) -> dict[str, torch.Tensor]:
    """PyTorch's default initialisation of one network per seed, stacked ``{name: (K, *shape)}``."""
    return StackedModel.stack([seeded_module(model_factory, s) for s in seeds])


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
    """Trains K stacked members for ``epochs`` epochs each (charging K * epochs epochs to the meter).

    ``params`` and ``anchors`` are ``{name: (K, *shape)}``; ``seeds`` (K of them) fix each member's
    minibatch order. With a ``split``, members train on its ``fit`` rows, are evaluated on its
    ``validation`` rows after every epoch (mean negative log-likelihood), and each member's
    best-validation weights are returned; one epoch then still reads every training example once
    and is charged exactly one epoch. Returns parameters, detached, on the data's device.
    """
    k = len(seeds)
    if len(next(iter(params.values()))) != k:
        raise ValueError("one minibatch-order seed per member is needed")
    rows = split.fit if split is not None else torch.arange(data.n_train)
    n, batch = data.n_train, schedule.batch_size
    params = {name: p.detach().clone().to(data.device).requires_grad_(True) for name, p in params.items()}
    optimiser = torch.optim.Adam(params.values(), lr=schedule.lr, betas=(schedule.beta1, schedule.beta2))
    steps = epochs * math.ceil(len(rows) / batch)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=max(steps, 1), eta_min=schedule.min_lr)
    shufflers = [torch.Generator().manual_seed(s) for s in seeds]
    best = best_loss = None
    for _ in range(epochs):
        order = rows[torch.stack([torch.randperm(len(rows), generator=g) for g in shufflers])]
        for start in range(0, len(rows), batch):
            x, y = data.batch(order[:, start:start + batch])
            outputs = model(params, x, shared_input=False)
            mean_log_lik = likelihood.log_prob(outputs, y).mean(-1)
            log_prior = sum(_member_sq_distance(p, anchors[name] if anchors else None)
                            for name, p in params.items()) * (-0.5 / prior_variance)
            loss = -(mean_log_lik + log_prior / n).sum()
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            scheduler.step()
        if split is not None:
            best, best_loss = _keep_best(model, params, data, likelihood, split, best, best_loss)
    final = best if best is not None else params
    return {name: p.detach() for name, p in final.items()}


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


def _keep_best(model, params, data, likelihood, split, best, best_loss):
    """Evaluates every member on the validation rows (charged) and keeps each one's best weights."""
    k = next(iter(params.values())).shape[0]
    x, y = data.shared_batch(split.validation, copies=k)
    with torch.no_grad():  # in chunks of rows: a CIFAR-10 validation set through K ResNets at once is gigabytes
        loss = -torch.cat([likelihood.log_prob(model(params, x[i:i + VALIDATION_CHUNK], shared_input=True),
                                               y[i:i + VALIDATION_CHUNK])
                           for i in range(0, len(y), VALIDATION_CHUNK)], dim=-1).mean(-1)
        if best is None:
            return {n: p.detach().clone() for n, p in params.items()}, loss
        improved = loss < best_loss
        for name, p in params.items():
            mask = improved.view(-1, *([1] * (p.dim() - 1)))
            best[name] = torch.where(mask, p.detach(), best[name])
        return best, torch.where(improved, loss, best_loss)


def _member_sq_distance(p: torch.Tensor, anchor: torch.Tensor | None) -> torch.Tensor:
    """Squared distance of each member's parameter tensor to its anchor (or zero): ``(K,)``."""
    diff = p if anchor is None else p - anchor.to(p.device)
    return diff.square().flatten(1).sum(1)
