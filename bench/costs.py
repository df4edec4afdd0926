"""What a built-in method's run spends of its budget, known from its settings and the budget before any training:
each method's budget rule (the ``plan`` its ``fit`` follows) fixes how many epochs it trains, so a record claiming
another cost was edited after its run, and the validator (``submit``, ``verify`` and ``export-submission`` alike,
:func:`leaderboard.submission.checked_run`) refuses it in one line without re-executing anything.

Exact for every built-in method but ``hmc``, whose trajectories' lengths follow the step size its search finds: for
it only the bounds of its budget rule are checked (at least its chains' initial gradients and one leapfrog step, at
most the budget). A method of one's own declares no rule here: its cost is checked only by its re-execution.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlannedCost:
    """The epochs a run may have used: ``least`` to ``most``, one number where ``exact``."""

    least: float
    most: float
    exact: bool
    why: str = ""
    """Where not exact, why only bounds are known (said in the refusal)."""


ROUND_OFF = 1e-6
"""How far a record's epochs used may lie from the plan's (the meter sums rows over the training set's size)."""


def planned_cost(approximator, budget: float, n_train: int) -> PlannedCost | None:
    """What ``approximator`` (a built-in method, constructed with the record's settings) spends of ``budget`` epochs
    on a training set of ``n_train`` rows, from its own budget rule; None for a method this module knows no rule of.
    The rule's refusal of the budget (a ``BudgetExhausted``) is raised as it is."""
    from approximators.anchored import AnchoredEnsemble
    from approximators.csgmcmc import CyclicalSGMCMC
    from approximators.engine import steps_per_epoch
    from approximators.hmc import BudgetedHMC
    from approximators.laplace import Laplace
    from approximators.map import DeepEnsemble
    from approximators.mc_dropout import MCDropout
    from approximators.mfvi import MFVI
    from approximators.sae import SequentialAnchoredEnsemble, allocation
    from approximators.sgld import StochasticGradientLangevin
    from approximators.swag import SWAG
    from approximators.vogn import VOGN

    a, c = approximator, approximator.config
    if isinstance(a, BudgetedHMC):
        return PlannedCost(2 * c.chains, budget, False, "hmc's trajectories follow the step size its search finds, so "
                           "only its budget rule's bounds are known before training")
    if isinstance(a, DeepEnsemble):  # sgd (one member) and de
        epochs = a.n_members() * a.epochs_per_member(budget)
    elif isinstance(a, AnchoredEnsemble):
        epochs = a.members(budget) * c.epochs
    elif isinstance(a, CyclicalSGMCMC):
        cycles, length = a.plan(budget)
        epochs = c.chains * cycles * length
    elif isinstance(a, Laplace):
        epochs = a.plan(budget) + 1  # the MAP's epochs, then one pass for the curvature
    elif isinstance(a, MCDropout):
        epochs = a.plan(budget)[0]
    elif isinstance(a, MFVI):
        epochs = sum(a.plan(budget))
    elif isinstance(a, SequentialAnchoredEnsemble):
        chains, members = allocation(budget, c.first_epochs, c.sequential_epochs, c.chains, c.members_per_chain)
        epochs = chains * (c.first_epochs + (members - 1) * c.sequential_epochs)
    elif isinstance(a, StochasticGradientLangevin):
        epochs = c.chains * a.plan(budget)[0]
    elif isinstance(a, SWAG):  # swag, swag-diag and multiswag
        epochs = c.runs * a.plan(budget, steps_per_epoch(n_train, c.batch_size))[0]
    elif isinstance(a, VOGN):  # s_0 from the first minibatch (charged), then epochs of mc_samples passes each
        epochs = min(c.batch_size, n_train) / n_train + a.plan(budget, n_train) * c.mc_samples
    else:
        return None
    return PlannedCost(float(epochs), float(epochs), True)


def refused_cost(claimed: float, cost: PlannedCost) -> bool:
    """Whether ``claimed`` epochs used lie outside what the plan allows (to :data:`ROUND_OFF`; ``-0.0`` is 0)."""
    slack = ROUND_OFF * max(1.0, abs(cost.most))
    return not (cost.least - slack <= claimed <= cost.most + slack)
