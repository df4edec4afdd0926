"""Cyclical SG-MCMC as a method: the paper's cosine cycles, samples only in sampling stages, budget rule."""

import math

import pytest

from approximators import get_method, resolve_config
from approximators.csgmcmc import cyclical_schedule
from bench.errors import BudgetExhausted, ConfigError


def test_cyclical_step_sizes_are_the_papers_cosine():
    alpha0, steps, cycles = 0.4, 103, 4
    rates, proportions = cyclical_schedule(alpha0, steps, cycles)
    length = math.ceil(steps / cycles)
    for k in range(1, steps + 1):  # the paper counts steps from 1
        r = ((k - 1) % length) / length
        assert proportions[k - 1] == pytest.approx(r)
        assert rates[k - 1] == pytest.approx(alpha0 / 2 * (math.cos(math.pi * r) + 1))
    assert rates[0] == alpha0 and rates[length] == alpha0  # every cycle restarts at alpha_0


@pytest.mark.parametrize("task", ["toy-gap", "digits", "digits-cnn", "digits-lstm", "cifar10", "cifar10c"])
def test_friction_is_the_authors_on_every_task(task):
    """ruqizhang/csgmcmc, experiments/cifar_csghmc.py: ``--alpha`` 0.9 in ``buf <- (1 - alpha) buf - lr grad``."""
    assert resolve_config(get_method("csgmcmc"), task).friction == 0.9


@pytest.mark.parametrize("form", ["sghmc", "sgld"])
def test_cycles_and_samples_follow_the_budget_rule(fit, form):
    # 100 epochs: 2 cycles of 50 (one per 50 epochs), 3 samples at the end of each -> 6 test passes
    predictive, meter = fit("csgmcmc", "digits", 100, form=form)
    assert meter.epochs_used == 100 and meter.test_passes == 6
    assert predictive.shape == (1440, 10)


def test_samples_outside_the_sampling_stage_are_refused(fit):
    """A 20-epoch cycle with noise from 90%: the third-last epoch ends before any noise."""
    with pytest.raises(BudgetExhausted, match="sampling stage"):
        fit("csgmcmc", "toy-gap", 20)


@pytest.mark.parametrize("setting", [{"lr": "-1"}, {"form": "hmc"}, {"friction": "0"}, {"friction": "1.5"},
                                     {"exploration": "1"}, {"samples_per_cycle": "0"}, {"cycles": "-1"},
                                     {"chains": "0"}, {"batch_size": "0"}])
def test_nonsensical_settings_are_one_clear_error(fit, setting):
    with pytest.raises(ConfigError):
        fit("csgmcmc", "toy-gap", 50, **setting)


def test_more_cycles_than_epochs_is_refused(fit):
    with pytest.raises(BudgetExhausted):
        fit("csgmcmc", "toy-gap", 50, cycles=60)
