r"""The training engine: the one metered, vectorised minibatch loop that every method drives.

K members (ensemble members, SWAG runs, sampler chains) of one architecture train together. Their
parameters are one flat tensor ``(K, D)`` (:class:`bench.functional.ParameterLayout` gives the
per-layer views the forward pass needs). Member k's objective is the negative log posterior per
training example,

    U_k(theta) = -[ (1/B) sum_{i in batch_k} log p(y_i | x_i, theta) + log N(theta; a_k, v I) / N_train ],

the full-data negative log posterior -(log p(D | theta) + log N(theta; a_k, v I)) divided by the
constant N_train, estimated on member k's minibatch (anchors a_k = 0: the task's prior N(0, v I)).
A sampler's gradient of the log posterior is therefore ``-N_train * grad U_k``.

Every epoch each member draws its own permutation of the training rows from its own generator
(so a member's run does not depend on how many members train with it) and reads them through the
meter in minibatches; one vectorised forward and backward pass gives all K gradients of the
likelihood term (the loss is the sum of the members' terms, and member k's parameters enter only its
own), and the prior's gradient is added in closed form. The update rule
(:mod:`approximators.updates`) then maps ``(state, grads, step) -> state``.

Hooks: ``on_step(state, step)`` runs after every update, ``on_epoch(state, epoch)`` after every
epoch. Non-finite parameters at the end of an epoch stop the run with :class:`TrainingDiverged`.
:class:`KeepBest` is such an epoch hook: it evaluates every member on held-out training rows
(charged) and keeps each member's best weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch

from bench import checkpoint
from bench.budget import MeteredData
from bench.errors import TrainingDiverged
from bench.functional import StackedModel
from bench.likelihoods import Likelihood, log_prior

VALIDATION_CHUNK = 1024
"""Validation rows evaluated at once by all members (bounds memory, not results)."""


class UpdateRule(Protocol):
    """A functional update over stacked parameters ``(K, D)``, in the style of optax and posteriors.

    ``init(params)`` returns a state with a ``params`` field (the ``(K, D)`` tensor the engine
    differentiates, a leaf that requires grad) and whatever buffers the rule needs;
    ``update(state, grads, step)`` applies step ``step`` (0-based, counted within one engine run)
    and returns the state. ``grads`` is ``objective.gradient(state.params, x, y)``, unless the rule
    defines ``gradient(objective, state, x, y)``, whose result it then receives instead. Buffers
    are updated in place (no per-step allocation): a caller that keeps a state across steps clones it.
    """

    def init(self, params: torch.Tensor) -> Any: ...

    def update(self, state: Any, grads: torch.Tensor, step: int) -> Any: ...


@dataclass(frozen=True)
class Objective:
    """The K members' negative log posterior per training example (see the module docstring).

    ``anchors`` ``(K, D)`` or None (the prior's mean, zero).
    """

    model: StackedModel
    likelihood: Likelihood
    prior_variance: float
    n_train: int
    anchors: torch.Tensor | None = None

    def gradient(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """grad U_k for every member, ``(K, D)``, on per-member minibatches ``x`` ``(K, B, ...)``, ``y`` ``(K, B)``.

        The likelihood term by autograd, the prior's in closed form, (theta_k - a_k) / (v N_train),
        added in place: the prior's square, sum and their backward would cost a fifth of a small
        model's step.
        """
        grads = self.likelihood_gradient(params, x, y)
        scale = 1.0 / (self.prior_variance * self.n_train)
        with torch.no_grad():
            grads.add_(params, alpha=scale)
            if self.anchors is not None:
                grads.sub_(self.anchors, alpha=scale)
        return grads

    def prior_term(self, params: torch.Tensor) -> torch.Tensor:
        """Each member's -log N(theta_k; a_k, v I) / N_train up to its constant, |theta_k - a_k|^2 / (2 v N_train),
        ``(K,)``."""
        offset = params if self.anchors is None else params - self.anchors
        return -log_prior(offset, self.prior_variance) / self.n_train

    def likelihood_gradient(self, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The gradient of each member's mean minibatch negative log-likelihood, ``(K, D)`` (a new tensor)."""
        outputs = self.model(self.model.layout.unflatten(params), x, shared_input=False)
        (grads,) = torch.autograd.grad(-self.likelihood.log_prob(outputs, y).mean(-1).sum(), params)
        return grads


def steps_per_epoch(n_rows: int, batch_size: int) -> int:
    return math.ceil(n_rows / batch_size)


def member_order(n_rows: int, shuffler: torch.Generator) -> torch.Tensor:
    """A member's order of ``n_rows`` rows for its next epoch, from its own generator."""
    return torch.randperm(n_rows, generator=shuffler)


def first_minibatch(seed: int, n_rows: int, batch_size: int) -> torch.Tensor:
    """The rows of the first minibatch :func:`run` gives a member with order seed ``seed`` (all rows)."""
    return member_order(n_rows, torch.Generator().manual_seed(seed))[:batch_size]


def run(
    objective: Objective,
    rule: UpdateRule,
    params: torch.Tensor,
    data: MeteredData,
    epochs: int,
    batch_size: int,
    seeds: list[int],
    rows: torch.Tensor | None = None,
    on_step: Callable[[Any, int], None] | None = None,
    on_epoch: Callable[[Any, int], None] | None = None,
) -> Any:
    """Trains K members ``params`` ``(K, D)`` for ``epochs`` epochs each over ``rows`` (all training
    rows by default), charging ``K * epochs * len(rows)`` examples, times the rule's ``passes_per_batch`` (1 unless
    it declares more); returns the rule's final state.

    ``seeds`` (K of them) fix each member's minibatch order. The last minibatch of an epoch is
    short when ``batch_size`` does not divide ``len(rows)``.
    """
    k = params.shape[0]
    if len(seeds) != k:
        raise ValueError("one minibatch-order seed per member is needed")
    rows = torch.arange(data.n_train) if rows is None else rows
    state = rule.init(params.detach().clone().to(data.device).requires_grad_(True))
    shufflers = [torch.Generator().manual_seed(s) for s in seeds]
    # A rule that differentiates elsewhere than at its parameters (VOGN: at draws from q) says so, and how
    # many times its gradient runs each minibatch through the network (charged that many times).
    gradient = getattr(rule, "gradient", None)
    passes = getattr(rule, "passes_per_batch", 1)
    rule_generators = list(getattr(rule, "generators", None) or [])
    epoch, start, step, order = 0, 0, 0, None
    tape = checkpoint.active()
    saved = tape.enter_call() if tape is not None else None
    if saved is not None:  # a stopped run replays toward where it stopped (bench.checkpoint)
        if saved.get("skip"):
            tape.leave_call(lambda: {})
            return state  # not trained: what it would have fed is restored at the resume point
        checkpoint.restore(state, saved["state"])
        checkpoint.restore(rule_generators, saved["rule_generators"])
        if saved["kind"] == "step":
            checkpoint.restore(shufflers, saved["shufflers"])
            epoch, start, step, order = saved["epoch"], saved["start"], saved["step"], saved["order"].to(rows.device)
        else:
            epoch = epochs
        tape.resumed_here()

    def call_state(kind: str) -> dict:
        """This call's state as the run's checkpoint keeps it (``kind``: ``"step"`` between steps, ``"end"``)."""
        kept = {"kind": kind, "state": checkpoint.capture(state), "rule_generators": checkpoint.capture(rule_generators)}
        if kind == "step":
            kept.update(shufflers=checkpoint.capture(shufflers), epoch=epoch, start=start, step=step,
                        order=None if order is None else order.clone())
        return kept

    while epoch < epochs:
        if order is None:
            order = rows[torch.stack([member_order(len(rows), g) for g in shufflers])]
        while start < len(rows):
            x, y = data.batch(order[:, start:start + batch_size], passes=passes)
            grads = objective.gradient(state.params, x, y) if gradient is None else gradient(objective, state, x, y)
            state = rule.update(state, grads, step)
            if on_step is not None:
                on_step(state, step)
            step += 1
            start += batch_size
            if tape is not None:
                tape.after_step(lambda: call_state("step"))
        if not bool(torch.isfinite(state.params).all()):  # once per epoch: a NaN sample would poison the average
            raise TrainingDiverged(f"training diverged in epoch {epoch + 1}: non-finite parameters; lower the step "
                                   f"size (--set lr=...)")
        if on_epoch is not None:
            on_epoch(state, epoch)
        epoch, start, order = epoch + 1, 0, None
    if tape is not None:
        tape.leave_call(lambda: call_state("end"))
    return state


class KeepBest:
    """Epoch hook: evaluates every member's objective U_k on the ``validation`` rows (their mean negative
    log-likelihood plus :meth:`Objective.prior_term`, anchor included; charged: K members read them) and keeps each
    member's best weights in :attr:`params` ``(K, D)``.

    The criterion is the SAE authors' (``train_model`` in Delaunoy & Louppe's code keeps the weights of the lowest
    negative anchored log posterior on the validation rows), not the likelihood alone: the selection then prefers,
    among epochs that predict the held-out rows equally well, the one nearer the member's anchored MAP."""

    def __init__(self, objective: Objective, data: MeteredData, validation: torch.Tensor):
        self.objective, self.data, self.validation = objective, data, validation
        self.params: torch.Tensor | None = None
        self.loss: torch.Tensor | None = None
        checkpoint.track(self)

    def state_dict(self) -> dict:
        """What a run's checkpoint keeps: the best weights and their losses so far (None before the first epoch)."""
        return {"params": self.params, "loss": self.loss}

    def load_state_dict(self, state: dict) -> None:
        device = self.data.device
        self.params, self.loss = (None if state[key] is None else state[key].to(device) for key in ("params", "loss"))

    def __call__(self, state: Any, epoch: int) -> None:
        params = state.params.detach()
        model, likelihood = self.objective.model, self.objective.likelihood
        x, y = self.data.shared_batch(self.validation, copies=params.shape[0])
        members = model.layout.unflatten(params)
        with torch.no_grad():  # in chunks of rows: a CIFAR-10 validation set through K ResNets at once is gigabytes
            loss = -torch.cat([likelihood.log_prob(model(members, x[i:i + VALIDATION_CHUNK], shared_input=True),
                                                   y[i:i + VALIDATION_CHUNK])
                               for i in range(0, len(y), VALIDATION_CHUNK)], dim=-1).mean(-1)
            loss += self.objective.prior_term(params)
        if self.params is None:
            self.params, self.loss = params.clone(), loss
            return
        improved = loss < self.loss
        self.params = torch.where(improved.unsqueeze(1), params, self.params)
        self.loss = torch.where(improved, loss, self.loss)
