r"""Anchored ensembles (Pearce et al. 2020): ``ae``.

Member k draws an anchor a_k ~ N(0, v I) (v: the task's prior variance), starts from a fresh
initialisation and minimises the anchored loss

    -(log p(D | theta_k) + log N(theta_k; a_k, v I)),

with the likelihood at full-data scale, for ``epochs`` epochs (E = 100: ``nb_epochs`` in the SAE authors'
configurations, ``config_files/`` in https://github.com/ADelau/SAE-Sequential-Anchored-Ensembles). A budget B gives
floor(B / E) members. With a_k = 0 this is the deep ensemble of MAP networks that ``de`` trains; both use
:func:`approximators.training.train_members`.

Training follows the SAE authors' implementation (Delaunoy & Louppe 2021): Adam with a cosine decay from ``lr`` to
``min_lr`` within each training call and fresh optimiser state per member; a random 90/10 split of the training set
(``validation_fraction``), each member keeping the weights of its epoch with the lowest anchored loss on the 10% (the
authors' selection, likelihood and anchor term, ``models/train.py``: :class:`approximators.engine.KeepBest`).
Metering: an epoch reads the 90% once for training and the 10% once for validation, so it is charged exactly one
epoch. The likelihood is scaled by the full N_train (the task's posterior), not by the 90% the gradient steps see;
**deviation**: the SAE authors' code scales it by the 90% (``train_set_size`` after the split, ``main.py``).

Per-task settings: the competition tasks use the authors' tuned values (``train_batch_size``, ``lr``,
``min_lr``, ``b1``, ``b2`` of ``config_files/<task>/<task>_ensemble_<B>.yml``). For the embedded tasks the
first member's settings were tuned by a seeded random search
(``benchmarks/tune_anchored.py``) whose objective is the validation NLL on the held-out 10%.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from approximators.base import (Approximator, Footprint, PredictiveAccumulator, Problem, epochs_unspent,
                                member_generators, next_seed, steps_for)
from approximators.refusals import budget_refusal, settings_that_lower
from approximators.training import AdamConfig, ValidationSplit, initial_members, schedule_of, train_members
from bench.budget import MeteredData
from bench.functional import StackedModel


@dataclass(frozen=True)
class AnchoredConfig(AdamConfig):
    epochs: int = 100
    validation_fraction: float = 0.1
    vectorise: bool = True

    BOUNDS: ClassVar[dict[str, str]] = {"epochs": "[1, inf)", "validation_fraction": "[0, 1)"}
    """Each numeric setting's interval (checked before any work: :func:`approximators.base.check_settings`)."""


FIRST_MEMBER_DEFAULTS = {
    # The SAE authors' tuned settings (batch, lr -> min_lr, beta1, beta2) for a member trained from scratch.
    "cifar10": dict(batch_size=155, lr=2.145e-3, min_lr=6.03e-5, beta1=0.8547, beta2=0.9997),
    "cifar10c": dict(batch_size=86, lr=9.332e-4, min_lr=5.5e-6, beta1=0.8947, beta2=0.999),
    "dermamnist": dict(batch_size=56, lr=7.893e-4, min_lr=3.87e-8, beta1=0.8774, beta2=0.9989),
    "uci-gap": dict(batch_size=58, lr=8.989e-3, min_lr=4.83e-5, beta1=0.8921, beta2=0.9962),
    "imdb": dict(batch_size=141, lr=7.436e-4, min_lr=2.82e-4, beta1=0.8866, beta2=0.9989),
}
FIRST_MEMBER_DEFAULTS.update({
    # Embedded tasks: `python benchmarks/tune_anchored.py --trials 16 --seed 0` (random search,
    # validation NLL on the held-out 10%, never the HMC reference; the same 16 candidates on every task:
    # on digits-cnn the same one won as on digits, on digits-lstm the same as on toy-gap).
    "toy-gap": dict(batch_size=16, lr=0.02072, min_lr=2.111e-06, beta1=0.9286, beta2=0.9903),
    "diabetes-gap": dict(batch_size=32, lr=0.02689, min_lr=0.0002405, beta1=0.9033, beta2=0.9939),
    "digits": dict(batch_size=32, lr=0.01824, min_lr=0.0001205, beta1=0.9094, beta2=0.9954),
    "digits-cnn": dict(batch_size=32, lr=0.01824, min_lr=0.0001205, beta1=0.9094, beta2=0.9954),
    "digits-lstm": dict(batch_size=32, lr=0.02072, min_lr=2.111e-06, beta1=0.9286, beta2=0.9903),
})


def prior_draws(generators: list[torch.Generator], dim: int, prior_variance: float) -> torch.Tensor:
    """One anchor a ~ N(0, v I) per generator: ``(K, D)``."""
    return torch.stack([torch.randn(dim, generator=g) for g in generators]) * prior_variance**0.5


class AnchoredEnsemble(Approximator):
    name = "ae"
    resumable = True  # a stopped run continues from its checkpoint (bench.checkpoint; tested)
    summary = "anchored ensemble: members trained from scratch towards anchors drawn from the prior"
    paper = "Pearce et al. 2020"
    Config = AnchoredConfig
    TASK_DEFAULTS = FIRST_MEMBER_DEFAULTS
    check_budget = 200.0  # two members of 100 epochs

    def members(self, budget: float) -> int:
        """How many members of ``epochs`` epochs the budget trains, or a one-line error before any work."""
        members = math.floor(budget / self.config.epochs + 1e-9)
        if members < 1:
            raise budget_refusal("ae", budget, f"is too small for one member of {self.config.epochs} epochs",
                                 self.smallest_budget(), settings_that_lower(
                                     self, type(self).smallest_budget, {"epochs": 1}))
        return members

    def smallest_budget(self) -> int:
        """One member's epochs."""
        return self.config.epochs

    def footprint(self, budget: float, n_train: int) -> Footprint:
        c, members = self.config, self.members(budget)
        return Footprint(members if c.vectorise else 1, steps_for(c.epochs, n_train, c.batch_size), what="member",
                         members=members, rows=min(c.batch_size, n_train))

    def fit(self, problem: Problem, data: MeteredData, generator: torch.Generator) -> None:
        c = self.config
        budget = data.meter.budget_epochs
        members = self.members(budget)
        split = ValidationSplit.random(data.n_train, c.validation_fraction, generator)
        generators = member_generators(generator, members)
        model = StackedModel(problem.model_factory())
        layout = model.layout
        init_seeds = [next_seed(g) for g in generators]
        anchors = layout.unflatten(prior_draws(generators, layout.size, problem.prior_variance))
        order_seeds = [next_seed(g) for g in generators]
        initial = initial_members(problem.model_factory, init_seeds)
        accumulator = PredictiveAccumulator(problem, members, generator)
        groups = [slice(0, members)] if c.vectorise else [slice(k, k + 1) for k in range(members)]
        for group in groups:
            trained = train_members(
                model, {n: p[group] for n, p in initial.items()}, data, problem.likelihood,
                problem.prior_variance, c.epochs, schedule_of(c), order_seeds[group],
                anchors={n: a[group] for n, a in anchors.items()}, split=split)
            accumulator.add(trained)
        self.report = {"members": members, "epochs_unspent": epochs_unspent(data.meter)}
        self._predictive = accumulator.result()
