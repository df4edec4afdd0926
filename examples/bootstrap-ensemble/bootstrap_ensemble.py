"""A bootstrap ensemble for bdl-bench: bagging (Breiman 1996, "Bagging predictors") of MAP networks.

Each of ``members`` networks trains on its own bootstrap resample of the training set: ``n_train`` rows
drawn uniformly with replacement (about 63% of the rows, some of them several times). The predictive
averages the members' predictive distributions.

Deviations from Breiman 1996:

- a member is fitted to the MAP estimate of its resample under the task's prior N(0, v I), not by
  maximum likelihood, so that the method targets the same posterior as every other method;
- classification averages the members' class probabilities instead of taking a plurality vote, and
  regression draws from each member's own p(y | x) (the task's likelihood) instead of averaging point
  predictions: bdl-bench scores predictive distributions;
- a member trains for an equal share of the epoch budget, ``floor(budget / members)`` epochs of Adam
  with a cosine learning-rate decay from ``lr`` to ``min_lr``, rather than to convergence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from bench.api import (Approximator, BudgetExhausted, Footprint, MeteredData, ParameterLayout,
                       PredictiveAccumulator, Problem, StackedModel, log_prior, member_seeds)


@dataclass(frozen=True)
class BootstrapConfig:
    members: int = 5
    batch_size: int = 32
    lr: float = 1e-2
    min_lr: float = 1e-4

    BOUNDS: ClassVar[dict[str, str]] = {"members": "[1, inf)", "batch_size": "[1, inf)", "lr": "(0, inf)",
                                        "min_lr": "[0, inf)"}


class BootstrapEnsemble(Approximator):
    name = "bootstrap"
    summary = "bootstrap ensemble: MAP networks, each trained on its own resample of the training set"
    paper = "Breiman 1996"
    Config = BootstrapConfig
    # The values bdl-bench's own sgd and de use on its embedded tasks (set by hand, not tuned on the references).
    TASK_DEFAULTS = {
        "toy-gap": {"batch_size": 16, "lr": 1e-2, "min_lr": 1e-4},
        "diabetes-gap": {"batch_size": 32, "lr": 5e-3, "min_lr": 5e-5},
        "digits": {"batch_size": 64, "lr": 3e-3, "min_lr": 3e-5},
    }
    check_budget = 100.0

    def footprint(self, budget: float, n_train: int) -> Footprint:
        # The members train together; the learning-rate schedule is computed step by step, never stored.
        return Footprint(networks=self.config.members, schedule_steps=0, what="member",
                         members=self.config.members, rows=min(self.config.batch_size, n_train),
                         averaged=self.config.members)

    def fit(self, problem: Problem, data: MeteredData, generator: torch.Generator) -> None:
        members, n_train, batch_size = self.config.members, problem.n_train, self.config.batch_size
        epochs = math.floor(data.meter.budget_epochs / members + 1e-9)
        if epochs < 1:
            raise BudgetExhausted(f"{self.name}: a budget of {data.meter.budget_epochs:g} epochs is too small for "
                                  f"{members} members of at least one epoch each; the smallest budget that runs "
                                  f"with these settings is {members}; a lower --set members=... needs less")
        resamples = torch.randint(n_train, (members, n_train), generator=generator)  # (K, N_train) row indices
        seeds = member_seeds(generator, members)
        params = {name: tensor.to(problem.device).requires_grad_() for name, tensor in
                  StackedModel.seeded(problem.model_factory, seeds).items()}
        model, layout = StackedModel(problem.model_factory()), ParameterLayout.of(problem.model_factory())
        optimiser = torch.optim.Adam(list(params.values()), lr=self.config.lr)
        steps = epochs * math.ceil(n_train / batch_size)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=steps, eta_min=self.config.min_lr)
        for _ in range(epochs):
            order = torch.rand(members, n_train, generator=generator).argsort(dim=1)  # each member's own shuffle
            for start in range(0, n_train, batch_size):
                rows = resamples.gather(1, order[:, start:start + batch_size])  # (K, B): member k reads its resample
                x, y = data.batch(rows)  # (K, B, *input_shape) and (K, B), charged K * B examples
                log_likelihood = problem.likelihood.log_prob(model(params, x, shared_input=False), y)  # (K, B)
                # Member k's negative log posterior on its resample, per example; the sum over members keeps
                # each member's gradient its own (Adam is element-wise, so one Adam is K independent ones).
                loss = -(log_likelihood.mean(1) + log_prior(layout.flatten(params), problem.prior_variance) / n_train)
                optimiser.zero_grad()
                loss.sum().backward()
                optimiser.step()
                schedule.step()
        accumulator = PredictiveAccumulator(problem, members, generator)
        accumulator.add(params)
        self._predictive = accumulator.result()
        self.report = {"epochs_per_member": epochs,
                       "distinct_rows_per_member": [round(r.unique().numel() / n_train, 4) for r in resamples]}
