"""The one wording of every built-in method's budget refusal: what the budget is too small for, the smallest budget
that runs with the current settings, and the settings that lower it. Each method computes its smallest budget
beside its budget rule (its ``smallest_budget``), from the same arithmetic, so the two cannot disagree; the tests
of ``tests/approximators/test_refusals.py`` run the stated budget through each method's plan and refuse one less."""

import dataclasses
from typing import Callable, Sequence

from bench.errors import BudgetExhausted
from bench.limits import MAX_BUDGET_EPOCHS


def budget_refusal(method: str, budget: float, why: str, smallest: float | None,
                   lower: Sequence[str]) -> BudgetExhausted:
    """``method``'s refusal of ``budget``, which ``why`` (the budget rule's own words); ``smallest`` is the smallest
    budget that runs with these settings (None: none up to the largest budget a run accepts), ``lower`` the settings
    that lower it (none: no setting does)."""
    settings = " or ".join(f"--set {name}=..." for name in lower)
    if smallest is None:
        advice = f"no budget runs with these settings; change {settings}"
    else:
        advice = f"the smallest budget that runs with these settings is {smallest:g}" + (
            f"; a lower {settings} needs less" if lower else " (no setting lowers it)")
    return BudgetExhausted(f"{method}: a budget of {budget:g} epochs {why}; {advice}")


def least_epochs(runs: Callable[[int], bool], start: int = 1, up_to: int = MAX_BUDGET_EPOCHS) -> int | None:
    """The least whole number of epochs from ``start`` with which ``runs`` holds, or None where none up to ``up_to``
    (beyond which the rule says none can; by default :data:`bench.limits.MAX_BUDGET_EPOCHS`, the largest budget a run
    accepts) does: for a rule whose rounding has no closed-form inverse. Called only when a budget is refused, so its
    linear scan costs nothing a run pays."""
    return next((epochs for epochs in range(max(1, start), up_to + 1) if runs(epochs)), None)


def settings_that_lower(approximator, smallest: Callable[[object], float | None],
                        least_asking: dict[str, object]) -> list[str]:
    """The settings of ``least_asking`` (each with its value that asks least of the budget) whose change alone lowers
    ``smallest`` (the method's smallest budget, of an approximator): a refusal names only those that help."""
    now = smallest(approximator)
    lowering = []
    for name, value in least_asking.items():
        changed = smallest(type(approximator)(dataclasses.replace(approximator.config, **{name: value})))
        if changed is not None and (now is None or changed < now):
            lowering.append(name)
    return lowering


LEAST_FRACTION = 1e-6
"""The value of a setting in (0, 1) that asks least of the budget, for :func:`settings_that_lower`."""
