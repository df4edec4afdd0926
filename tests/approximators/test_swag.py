"""SWAG: online moments equal the batch formulas, samples have the stored covariance, budget rules."""

import math

import pytest
import torch

from approximators import get_method, resolve_config
from approximators.swag import SWAG, Moments, SWAGConfig, epoch_rates
from bench.errors import BudgetExhausted, ConfigError

Z = 4.5


def _snapshots(n, runs=2, dim=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(runs, dim, generator=g)
    return [base + 0.3 * torch.randn(runs, dim, generator=g) * torch.arange(1, dim + 1) for _ in range(n)]


def test_online_moments_equal_the_batch_formulas_and_keep_the_last_deviations():
    snaps = _snapshots(7)
    moments = Moments.zeros(2, 4, rank=5, device=torch.device("cpu"))
    for s in snaps:
        moments.collect(s)
    stacked = torch.stack(snaps)  # (n, R, D)
    torch.testing.assert_close(moments.mean, stacked.mean(0))
    torch.testing.assert_close(moments.sq_mean, stacked.square().mean(0))
    running = [stacked[:i + 1].mean(0) for i in range(7)]
    expected = torch.stack([snaps[i] - running[i] for i in range(2, 7)], dim=1)  # the last 5, oldest first
    held = moments.deviations
    # a ring buffer: the same deviations in rotated order (D D^T does not depend on the order)
    slots = [i % 5 for i in range(2, 7)]  # snapshot i went to slot i mod 5
    torch.testing.assert_close(held[:, slots], expected)
    assert moments.rank == 5 and moments.count == 7


def _empirical_covariance(moments, scale, low_rank, n=20000):
    generators = [torch.Generator().manual_seed(10 + r) for r in range(moments.mean.shape[0])]
    draws = torch.stack([moments.sample(generators, scale, low_rank) for _ in range(n)]).double()  # (n, R, D)
    return draws, n


@pytest.mark.parametrize("low_rank", [True, False], ids=["swag", "swag-diag"])
def test_samples_have_the_stored_diagonal_plus_low_rank_covariance(low_rank):
    """The classic bug (the variance where the standard deviation belongs) fails this."""
    moments = Moments.zeros(2, 4, rank=5, device=torch.device("cpu"))
    for s in _snapshots(6):
        moments.collect(s)
    scale, k = 0.5, moments.rank
    draws, n = _empirical_covariance(moments, scale, low_rank)
    for r in range(2):
        d = moments.deviations[r, :k].double()
        expected = torch.diag(moments.variance()[r].double())
        if low_rank:
            expected = expected + d.T @ d / (k - 1)
        expected = scale * expected
        empirical = torch.cov(draws[:, r].T)
        error = ((expected.diagonal()[:, None] * expected.diagonal()[None, :] + expected**2) / n).sqrt()
        assert ((empirical - expected).abs() < Z * error).all(), (empirical, expected)
        mean_error = (expected.diagonal() / n).sqrt()
        assert ((draws[:, r].mean(0) - moments.mean[r].double()).abs() < Z * mean_error).all()


def test_the_variance_is_clamped_at_the_floor():
    moments = Moments.zeros(1, 3, rank=4, device=torch.device("cpu"))
    for _ in range(3):
        moments.collect(torch.ones(1, 3))
    assert (moments.variance() > 0).all()


def test_first_phase_learning_rates_follow_the_authors_schedule():
    config = SWAGConfig(lr=0.1, swa_lr=0.02)
    rates = epoch_rates(config, 10, 10)
    assert rates[:6] == [0.1] * 6  # t <= 0.5
    assert rates[7] == pytest.approx(0.1 * (1 - 0.8 * 0.2 / 0.4))  # linear in between
    assert rates[9] == pytest.approx(0.02)  # t > 0.9


@pytest.mark.parametrize("method, scale", [("swag", 0.5), ("swag-diag", 1.0), ("multiswag", 0.5)])
@pytest.mark.parametrize("task", ["toy-gap", "digits-lstm", "cifar10"])
def test_draws_are_scaled_as_the_authors_experiments_scale_them(method, scale, task):
    """wjmaddox/swa_gaussian, experiments/uncertainty/README.md: scale 0.5 for SWAG, 1 for SWAG-Diagonal."""
    assert resolve_config(get_method(method), task).scale == scale


@pytest.mark.parametrize("setting, error", [
    ({"rank": "1"}, ConfigError), ({"lr": "-0.01"}, ConfigError), ({"lr": "nan"}, ConfigError),
    ({"scale": "0"}, ConfigError), ({"batch_size": "0"}, ConfigError), ({"runs": "0"}, ConfigError),
    ({"swa_start": "1"}, ConfigError),
])
def test_nonsensical_settings_are_one_clear_error(fit, setting, error):
    with pytest.raises(error):
        fit("swag", "toy-gap", 20, **setting)


def test_too_small_a_budget_is_refused_before_training(fit):
    with pytest.raises(BudgetExhausted, match="at least 2"):
        fit("swag", "toy-gap", 3)


@pytest.mark.parametrize("method", ["swag", "swag-diag", "multiswag"])
def test_every_epoch_charged_and_samples_streamed(fit, method):
    budget = get_method(method).check_budget
    predictive, meter = fit(method, "toy-gap", budget)
    runs = resolve_config(get_method(method), "toy-gap").runs
    assert meter.epochs_used == runs * math.floor(budget / runs)
    assert meter.test_passes == runs * 30
    assert predictive.shape == (121, 1000)


def test_fewer_snapshots_than_the_rank_are_reported():
    from bench.runner import execute, metered
    from bench.tasks import get_task
    task = get_task("toy-gap")
    problem, data = metered(task, 20)
    _, report = execute(SWAG, resolve_config(SWAG, "toy-gap"), problem, data, 0)
    assert report["snapshots_per_run"] == 20 - round(20 * 161 / 300)
    assert report["deviations_used"] == report["snapshots_per_run"] < 20 and "rank" in report["note"]
