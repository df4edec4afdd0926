"""What a built-in method's run spends of its budget, known from its settings and the budget before any training:
each method's budget rule (the ``plan`` its ``fit`` follows) fixes how many epochs it trains, so a record claiming
another cost was edited after its run, and the validator (``submit``, ``verify`` and ``export-submission`` alike,
:func:`leaderboard.submission.checked_run`) refuses it in one line without re-executing anything.

The test passes (how many networks its predictive evaluates on the test inputs) are planned too where the settings
fix them (every method but ``hmc``, whose samples follow its trajectories, and ``laplace``, whose passes follow its
structure). Exact for every built-in method but ``hmc``, whose trajectories' lengths follow the step size its search finds: for
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
    test_passes: float | None = None
    """The passes over the test inputs its predictive makes (networks, members or draws evaluated), where its
    settings fix them; None where they are not checked here (hmc's samples, laplace's structures)."""


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
    ruled = next((known for known in (BudgetedHMC, DeepEnsemble, AnchoredEnsemble, CyclicalSGMCMC, Laplace, MCDropout,
                                      MFVI, SequentialAnchoredEnsemble, StochasticGradientLangevin, SWAG, VOGN)
                  if isinstance(a, known)), None)
    if ruled is None or type(a).fit is not ruled.fit:  # a fit of its own follows no rule known here
        return None
    if isinstance(a, BudgetedHMC):
        return PlannedCost(2 * c.chains, budget, False, "hmc's trajectories follow the step size its search finds, so "
                           "only its budget rule's bounds are known before training")
    passes: float | None = None
    if isinstance(a, DeepEnsemble):  # sgd (one member) and de
        epochs, passes = a.n_members() * a.epochs_per_member(budget), a.n_members()
    elif isinstance(a, AnchoredEnsemble):
        epochs, passes = a.members(budget) * c.epochs, a.members(budget)
    elif isinstance(a, CyclicalSGMCMC):
        cycles, length = a.plan(budget)
        epochs, passes = c.chains * cycles * length, c.chains * cycles * c.samples_per_cycle
    elif isinstance(a, Laplace):
        epochs = a.plan(budget) + 1  # the MAP's epochs, then one pass for the curvature
    elif isinstance(a, MCDropout):
        epochs, passes = a.plan(budget)[0], c.samples
    elif isinstance(a, MFVI):
        epochs, passes = sum(a.plan(budget)), c.samples
    elif isinstance(a, SequentialAnchoredEnsemble):
        chains, members = allocation(budget, c.first_epochs, c.sequential_epochs, c.chains, c.members_per_chain)
        epochs, passes = chains * (c.first_epochs + (members - 1) * c.sequential_epochs), chains * members
    elif isinstance(a, StochasticGradientLangevin):
        epochs, _, samples = a.plan(budget)
        epochs, passes = c.chains * epochs, c.chains * samples
    elif isinstance(a, SWAG):  # swag, swag-diag and multiswag
        epochs, passes = c.runs * a.plan(budget, steps_per_epoch(n_train, c.batch_size))[0], c.runs * c.samples
    elif isinstance(a, VOGN):  # s_0 from the first minibatch (charged), then epochs of mc_samples passes each
        epochs, passes = min(c.batch_size, n_train) / n_train + a.plan(budget, n_train) * c.mc_samples, c.samples
    else:
        return None
    return PlannedCost(float(epochs), float(epochs), True, test_passes=None if passes is None else float(passes))


def refused_passes(claimed: float, cost: PlannedCost) -> bool:
    """Whether ``claimed`` test passes are not the ones the plan fixes (where it fixes them)."""
    return cost.test_passes is not None and abs(claimed - cost.test_passes) > ROUND_OFF * max(1.0, cost.test_passes)


def refused_cost(claimed: float, cost: PlannedCost) -> bool:
    """Whether ``claimed`` epochs used lie outside what the plan allows (to :data:`ROUND_OFF`; ``-0.0`` is 0)."""
    slack = ROUND_OFF * max(1.0, abs(cost.most))
    return not (cost.least - slack <= claimed <= cost.most + slack)
