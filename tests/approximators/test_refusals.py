"""Every built-in method's budget refusal states the smallest budget that runs with its settings, and the settings
that lower it: that budget is accepted when the run is planned (``footprint``, before anything trains), and every
smaller one (each whole budget below it, and one less in the last decimal it is stated with) is refused."""

import math
import re

import pytest

from approximators import METHODS
from approximators.base import resolve_config
from bench.errors import BudgetExhausted

N_TRAIN = 80  # any training set: only vogn's smallest budget depends on it (its initialisation minibatch)
STATED = re.compile(r"the smallest budget that runs with these settings is ([0-9.]+)")


def _planned(method: str, settings: dict, budget: float) -> None:
    approximator = METHODS[method](resolve_config(METHODS[method], "toy-gap", {k: str(v) for k, v in settings.items()}))
    approximator.footprint(budget, N_TRAIN)


# (method, settings, a budget it refuses, the smallest budget, the settings the refusal says lower it)
CASES = [
    ("sgd", {}, 0.5, 1, []),
    ("de", {}, 2, 5, ["members"]),
    ("ae", {}, 50, 100, ["epochs"]),
    ("sae", {}, 10, 100, ["first_epochs"]),
    ("sae", dict(chains=2, members_per_chain=3, first_epochs=10, sequential_epochs=5), 39, 40,
     ["first_epochs", "chains", "members_per_chain", "sequential_epochs"]),
    # chains from the budget grow with it, so 10 members per chain need more than one chain of them (11 epochs)
    ("sae", dict(members_per_chain=10, first_epochs=2, sequential_epochs=1), 11, 55, ["chains", "members_per_chain"]),
    ("swag", {}, 1, 4, ["swa_start", "collect_every"]),
    ("multiswag", {}, 4, 12, ["runs", "swa_start", "collect_every"]),
    ("sgld", dict(chains=2, thin=3), 9, 10, ["chains", "burn_in", "thin"]),
    ("csgmcmc", {}, 20, 21, ["samples_per_cycle", "exploration"]),
    ("csgmcmc", dict(chains=2, cycles=2), 82, 84, ["chains", "cycles", "samples_per_cycle", "exploration"]),
    ("mfvi", {}, 1, 2, []),  # the MAP phase is at least one epoch, whatever map_fraction says
    ("mfvi", dict(map_fraction=0.9), 4, 5, ["map_fraction"]),
    ("vogn", dict(mc_samples=3), 3.1, 3.2, ["mc_samples"]),  # 3 epochs after 16 of 80 rows
    ("laplace", {}, 1, 2, []),
    ("mc-dropout", {}, 0.5, 1, []),
    ("hmc", dict(leapfrog_steps=0, trajectory_length=1.0, chains=3), 5, 6, ["chains"]),
    ("hmc", dict(chains=2, leapfrog_steps=10), 95, 96, ["chains", "jitter", "burn_in", "leapfrog_steps"]),
    # without burn-in the second of the rule's three terms binds: the initial gradients and two iterations
    ("hmc", dict(chains=2, leapfrog_steps=10, burn_in=0.0), 49, 50, ["chains", "jitter", "leapfrog_steps"]),
]


@pytest.mark.parametrize("method, settings, refused, smallest, lower", CASES,
                         ids=[f"{case[0]}-{i}" for i, case in enumerate(CASES)])
def test_a_refusal_states_the_smallest_budget_that_runs_and_the_settings_that_lower_it(method, settings, refused,
                                                                                       smallest, lower):
    with pytest.raises(BudgetExhausted) as refusal:
        _planned(method, settings, refused)
    message = str(refusal.value)
    stated = STATED.search(message)
    assert stated and float(stated.group(1)) == smallest, message
    assert re.findall(r"--set (\w+)=", message) == lower, message
    if not lower:
        assert "no setting lowers it" in message, message
    _planned(method, settings, smallest)  # the stated budget runs
    last_decimal = 10.0 ** -len(stated.group(1).partition(".")[2])
    for less in (smallest - last_decimal, *range(math.ceil(smallest) - 1, 0, -1)):  # and no smaller one
        with pytest.raises(BudgetExhausted):
            _planned(method, settings, less)


def test_settings_no_budget_runs_with_are_said_so():
    """Cycles of the rule's about 50 epochs (74 at most) whose sampling stage (the last 2%) cannot hold 3 samples: no
    budget helps, but fewer samples per cycle, an earlier sampling stage, or cycles that grow with the budget do."""
    with pytest.raises(BudgetExhausted, match=re.escape("no budget runs with these settings; change --set cycles=... or "
                                                        "--set samples_per_cycle=... or --set exploration=...")):
        _planned("csgmcmc", dict(exploration=0.98), 200)
