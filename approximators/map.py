"""MAP point estimates and deep ensembles (Lakshminarayanan et al. 2017).

``sgd``: one network trained on the log posterior (its MAP estimate under the task's prior).
``de``: ``members`` networks, each from its own initialisation and data order, each trained to the
MAP estimate for ``floor(budget / members)`` epochs; the predictive averages their predictives.
Deviation from Lakshminarayanan et al.: no adversarial training, and the prior is the task's
N(0, v I) (a weight decay of 1 / (v N_train) per example) rather than a tuned weight decay, so that
every method targets the same posterior.

Per-task optimiser defaults (batch, lr -> min_lr): on the MLP tasks set by hand so that the default
budget reaches a converged MAP fit; on the convnet and CNN-LSTM tasks the learning rate of the lowest
held-out NLL at budget 100 (``python benchmarks/tune_trajectory.py sgd --tasks digits-cnn digits-lstm``;
``min_lr = lr / 100`` and the batch size as on ``digits``); on the competition tasks the SAE authors' tuned
settings for a network trained from scratch (:data:`approximators.anchored.FIRST_MEMBER_DEFAULTS`), the same
optimisation problem up to the anchor. None was tuned against the references.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from approximators.anchored import FIRST_MEMBER_DEFAULTS
from approximators.base import (Approximator, Footprint, PredictiveAccumulator, Problem, epochs_unspent, member_seeds,
                                steps_for)
from approximators.refusals import budget_refusal, settings_that_lower
from approximators.training import AdamConfig, initial_members, schedule_of, train_members
from bench.budget import MeteredData
from bench.errors import BudgetExhausted
from bench.functional import StackedModel


@dataclass(frozen=True)
class MAPConfig(AdamConfig):
    members: int = 5

    BOUNDS: ClassVar[dict[str, str]] = {"members": "[1, inf)"}
    """Each numeric setting's interval (checked before any work: :func:`approximators.base.check_settings`)."""


EMBEDDED_DEFAULTS = {
    "toy-gap": {"batch_size": 16, "lr": 1e-2, "min_lr": 1e-4},
    "diabetes-gap": {"batch_size": 32, "lr": 5e-3, "min_lr": 5e-5},
    "digits": {"batch_size": 64, "lr": 3e-3, "min_lr": 3e-5},
    "digits-cnn": {"batch_size": 64, "lr": 0.03, "min_lr": 3e-4},
    "digits-lstm": {"batch_size": 64, "lr": 0.03, "min_lr": 3e-4},
}
MAP_DEFAULTS = {**EMBEDDED_DEFAULTS,
                **{task: FIRST_MEMBER_DEFAULTS[task] for task in ("cifar10", "cifar10c", "imdb", "dermamnist", "uci-gap")}}


class DeepEnsemble(Approximator):
    name = "de"
    resumable = True  # a stopped run continues from its checkpoint (bench.checkpoint; tested)
    summary = "deep ensemble of MAP networks, budget split evenly over members"
    paper = "Lakshminarayanan et al. 2017"
    Config = MAPConfig
    TASK_DEFAULTS = MAP_DEFAULTS
    check_budget = 100.0
    LEAST_ASKING: ClassVar[dict[str, object]] = {"members": 1}
    """Each setting that sets the smallest budget, at its value that asks least of it (for the refusal's advice)."""

    def n_members(self) -> int:
        return self.config.members

    def footprint(self, budget: float, n_train: int) -> Footprint:
        members = self.n_members()
        self.epochs_per_member(budget)  # a budget too small is refused when the run is planned
        return Footprint(members, steps_for(budget / members, n_train, self.config.batch_size), what="member",
                         members=members, rows=min(self.config.batch_size, n_train), averaged=members)

    def epochs_per_member(self, budget: float) -> int:
        """Each member's whole epochs of ``budget``, or a one-line error."""
        members = self.n_members()
        if members < 1:
            raise BudgetExhausted(f"{self.name}: members must be at least 1, got {members}")
        epochs = math.floor(budget / members + 1e-9)
        if epochs < 1:
            raise budget_refusal(self.name, budget, f"is too small for {members} members of at least one epoch each",
                                 self.smallest_budget(),
                                 settings_that_lower(self, type(self).smallest_budget, self.LEAST_ASKING))
        return epochs

    def smallest_budget(self) -> int:
        """One epoch per member."""
        return self.n_members()

    def fit(self, problem: Problem, data: MeteredData, generator: torch.Generator) -> None:
        members = self.n_members()
        epochs = self.epochs_per_member(data.meter.budget_epochs)
        seeds = member_seeds(generator, 2 * members)
        init_seeds, order_seeds = seeds[:members], seeds[members:]
        model = StackedModel(problem.model_factory())
        trained = train_members(
            model, initial_members(problem.model_factory, init_seeds), data, problem.likelihood,
            problem.prior_variance, epochs, schedule_of(self.config), order_seeds)
        accumulator = PredictiveAccumulator(problem, members, generator)
        accumulator.add(trained)
        self.report = {"members": members, "epochs_per_member": epochs, "epochs_unspent": epochs_unspent(data.meter)}
        self._predictive = accumulator.result()


class MAP(DeepEnsemble):
    name = "sgd"
    summary = "MAP point estimate: one network trained on the log posterior for the whole budget"
    paper = ""
    Config = AdamConfig
    check_budget = 20.0
    LEAST_ASKING: ClassVar[dict[str, object]] = {}  # one network, whatever the settings

    def n_members(self) -> int:
        return 1
