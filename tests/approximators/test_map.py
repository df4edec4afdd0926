"""MAP and deep ensembles: vectorised members equal members trained alone; the MAP is the posterior mode."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from approximators import get_method, resolve_config
from approximators.base import PredictiveAccumulator
from approximators.training import AdamConfig, initial_members, train_members
from bench.budget import BudgetMeter, MeteredData
from bench.errors import BudgetExhausted, ConfigError
from bench.functional import StackedModel
from bench.likelihoods import FixedNoiseGaussian
from bench.tasks import get_task


@pytest.mark.parametrize("task_name", ["toy-gap", "digits"])
def test_vectorised_members_equal_members_trained_alone(task_name):
    task = get_task(task_name)
    model = StackedModel(task.model_factory())
    schedule = AdamConfig(batch_size=32, lr=1e-2, min_lr=1e-3)
    init_seeds, order_seeds = [1, 2, 3], [11, 12, 13]

    def train(inits, orders):
        meter = BudgetMeter(10, task.n_train)
        data = MeteredData(task.x_train, task.y_train, meter)
        return train_members(model, initial_members(task.model_factory, inits), data, task.likelihood,
                             task.prior_variance, 2, schedule, orders)

    together = train(init_seeds, order_seeds)
    for k in range(3):
        alone = train(init_seeds[k:k + 1], order_seeds[k:k + 1])
        for name in together:
            torch.testing.assert_close(together[name][k], alone[name][0], atol=1e-5, rtol=1e-4)


def test_fast_mlp_path_equals_vmap_functional_call():
    task = get_task("digits")
    params = initial_members(task.model_factory, [0, 1])
    fast, plain = StackedModel(task.model_factory()), StackedModel(task.model_factory(), fast_path=False)
    assert fast.mlp_layers is not None and plain.mlp_layers is None
    x = task.x_test[:50]
    torch.testing.assert_close(fast(params, x, shared_input=True), plain(params, x, shared_input=True))
    xs = torch.stack([x, x.flip(0)])
    torch.testing.assert_close(fast(params, xs, shared_input=False), plain(params, xs, shared_input=False))


def test_map_recovers_the_posterior_mode_of_linear_regression():
    """With a linear model and known noise, the MAP is the Gaussian posterior's mean in closed form."""
    g = torch.Generator().manual_seed(0)
    n, d, noise, prior_variance = 64, 3, 0.5, 0.5
    x = torch.randn(n, d, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3 + noise * torch.randn(n, generator=g)
    features = torch.cat([x, torch.ones(n, 1)], 1).double()
    precision = features.T @ features / noise**2 + torch.eye(d + 1) / prior_variance
    mode = torch.linalg.solve(precision, features.T @ y.double() / noise**2)

    model = StackedModel(nn.Sequential(nn.Linear(d, 1)))
    meter = BudgetMeter(400, n)
    trained = train_members(model, initial_members(lambda: nn.Sequential(nn.Linear(d, 1)), [0]),
                            MeteredData(x, y, meter), FixedNoiseGaussian(noise), prior_variance, 400,
                            AdamConfig(batch_size=n, lr=0.05, min_lr=1e-4), [0])
    found = torch.cat([trained["0.weight"][0, 0], trained["0.bias"][0]]).double()
    torch.testing.assert_close(found, mode, atol=2e-3, rtol=0)
    assert meter.epochs_used == 400


def test_deep_ensemble_charges_exactly_its_allocation(fit):
    _, meter = fit("de", "toy-gap", budget=13, members=4)
    assert meter.epochs_used == 12  # floor(13 / 4) = 3 epochs for each of 4 members
    _, meter = fit("sgd", "toy-gap", budget=7)
    assert meter.epochs_used == 7


def test_budget_too_small_for_the_members_is_a_clear_error(fit):
    with pytest.raises(BudgetExhausted, match="too small for 5 members"):
        fit("de", "toy-gap", budget=4)


def test_seeded_runs_reproduce_exactly(fit):
    first, _ = fit("de", "digits", budget=6, members=3)
    second, _ = fit("de", "digits", budget=6, members=3)
    other, _ = fit("de", "digits", budget=6, members=3, seed=1)
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, other)


def test_predictive_shapes(fit):
    probs, _ = fit("de", "digits", budget=2, members=2)
    assert probs.shape == (1440, 10)
    np.testing.assert_allclose(probs.sum(1), 1, atol=1e-9)
    samples, _ = fit("de", "diabetes-gap", budget=3, members=3)
    assert samples.shape == (147, 1000) and np.all(np.isfinite(samples))


def test_regression_samples_are_spread_evenly_over_members(problem_for):
    task = get_task("toy-gap")
    meter = BudgetMeter(1, task.n_train)
    accumulator = PredictiveAccumulator(problem_for(task, meter), n_members=3, generator=torch.Generator())
    assert accumulator._counts == [334, 333, 333]
    params = initial_members(task.model_factory, [0, 1, 2])
    params["2.bias"][:, 1] = -50.0  # softplus(-50) ~ 0: each member's draws equal its own mean
    accumulator.add({n: p[:1] for n, p in params.items()})
    accumulator.add({n: p[1:] for n, p in params.items()})
    samples = accumulator.result()
    means = StackedModel(task.model_factory())(params, task.x_test, shared_input=True)[..., 0]
    np.testing.assert_allclose(samples[:, 0], means[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(samples[:, 334], means[1].numpy(), atol=1e-6)
    np.testing.assert_allclose(samples[:, 999], means[2].numpy(), atol=1e-6)
    assert meter.test_passes == 3


def test_unknown_setting_and_bad_value_are_config_errors(fit):
    with pytest.raises(ConfigError, match="no setting 'momentum'"):
        fit("de", "toy-gap", budget=5, momentum=0.9)
    with pytest.raises(ConfigError, match="expected a value of type int"):
        fit("de", "toy-gap", budget=5, members="many")
    assert math.isclose(resolve_config(get_method("de"), "toy-gap", {"lr": "0.5"}).lr, 0.5)
