"""SGLD as a method: the paper's step-size schedule, the budget rule, settings refused in one line."""

import numpy as np
import pytest

from approximators.sgld import polynomial_schedule
from bench.errors import BudgetExhausted, ConfigError


def test_polynomial_schedule_is_a_times_b_plus_t_to_the_minus_gamma():
    first, b, gamma = 0.02, 50.0, 0.55
    a = first * b**gamma
    rates = polynomial_schedule(first, b, gamma, 200)
    assert rates[0] == pytest.approx(first)
    assert all(rate == pytest.approx(a * (b + t) ** -gamma) for t, rate in enumerate(rates))


def test_chains_burn_in_and_thinning_follow_the_budget_rule(fit):
    # 4 chains of 25 epochs, 12 burn-in epochs (round(0.5 * 25)), a sample every 2nd epoch after: 6 per chain
    predictive, meter = fit("sgld", "digits", 100, chains=4, thin=2)
    assert meter.epochs_used == 100
    assert meter.test_passes == 4 * 6
    assert predictive.shape == (1440, 10)


@pytest.mark.parametrize("setting", [{"lr": "-0.01"}, {"lr": "nan"}, {"lr": "inf"}, {"batch_size": "0"},
                                     {"chains": "0"}, {"burn_in": "1"}, {"thin": "0"}, {"schedule": "cosine"},
                                     {"decay_power": "-1"}])
def test_nonsensical_settings_are_one_clear_error(fit, setting):
    with pytest.raises(ConfigError):
        fit("sgld", "toy-gap", 20, **setting)


def test_too_small_a_budget_is_refused(fit):
    # 4 chains of 0 epochs each
    with pytest.raises(BudgetExhausted):
        fit("sgld", "toy-gap", 3, chains=4)


def test_a_diverging_step_size_stops_with_one_line(fit):
    from bench.errors import TrainingDiverged
    with pytest.raises(TrainingDiverged, match="lower the step size"):
        fit("sgld", "toy-gap", 20, lr=1e6)


@pytest.mark.parametrize("task", ["digits", "digits-cnn"])
def test_chains_one_after_another_are_the_vectorised_chains(fit, task):
    """vectorise=false runs each chain alone on its own streams: the same chains, the predictive equal to round-off
    (a chain given another's generator, noise or data order would differ by far more)."""
    together, together_meter = fit("sgld", task, budget=8, chains=3)
    alone, alone_meter = fit("sgld", task, budget=8, chains=3, vectorise="false")
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=0)
    assert together_meter.epochs_used == alone_meter.epochs_used == 6
