"""Per-example gradient moments against a plain loop: one autograd call per member and example."""

import pytest
import torch
from torch import nn

from approximators.per_example import gradient_moments
from bench.functional import StackedModel, seeded_module
from bench.likelihoods import Categorical, HeteroscedasticGaussian
from bench.tasks.competition import SPECS, synthetic_task


def _loop_moments(factory, likelihood, params, x, y):
    """(mean, mean of squares) over examples of each example's own gradient, member by member."""
    means, squares = [], []
    for k in range(params.shape[0]):
        module = factory()
        nn.utils.vector_to_parameters(params[k].clone(), module.parameters())
        grads = []
        for i in range(y.shape[1]):
            loss = -likelihood.log_prob(module(x[k, i:i + 1]), y[k, i:i + 1]).sum()
            grads.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(module.parameters()))]))
        grads = torch.stack(grads)
        means.append(grads.mean(0))
        squares.append(grads.square().mean(0))
    return torch.stack(means), torch.stack(squares)


def _members(factory, k):
    model = StackedModel(factory())
    return model, model.layout.flatten(StackedModel.stack([seeded_module(factory, s) for s in range(k)]))


def _mlp():
    return nn.Sequential(nn.Linear(3, 7), nn.ReLU(), nn.Linear(7, 5), nn.ReLU(), nn.Linear(5, 2))


@pytest.mark.parametrize("likelihood", [HeteroscedasticGaussian(), Categorical()], ids=["gaussian", "categorical"])
@pytest.mark.parametrize("fast_path", [True, False], ids=["goodfellow", "vmap"])
def test_mlp_moments_equal_the_per_example_loop(likelihood, fast_path):
    g = torch.Generator().manual_seed(0)
    _, params = _members(_mlp, 3)
    model = StackedModel(_mlp(), fast_path=fast_path)
    x = torch.randn(3, 9, 3, generator=g)
    y = torch.randn(3, 9, generator=g) if likelihood.kind == "regression" else torch.randint(0, 2, (3, 9), generator=g)
    mean, mean_square = gradient_moments(model, likelihood, params, x, y)
    expected_mean, expected_square = _loop_moments(_mlp, likelihood, params, x, y)
    torch.testing.assert_close(mean, expected_mean, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(mean_square, expected_square, rtol=1e-5, atol=1e-9)
    # the statistic is the mean of squares, not the square of the mean (Adam's)
    assert not torch.allclose(mean_square, mean.square(), rtol=1e-2)


@pytest.mark.parametrize("task_name", list(SPECS))
def test_competition_model_moments_equal_the_per_example_loop(task_name, monkeypatch):
    """Convolutions, FRN, LSTM and embeddings through the vmap path, one example per chunk.

    In float64: in float32 the two orders of summation differ by up to 1e-4 of the largest gradient in
    ResNet-20-FRN (its normalisation divides by small mean squares), in float64 by 1e-16."""
    monkeypatch.setattr("approximators.per_example.PER_EXAMPLE_VALUES", 1)
    task = synthetic_task(task_name, rows=6)
    factory = lambda: task.model_factory().double()  # noqa: E731
    model, params = _members(factory, 2)
    as_double = lambda t: t.double() if t.is_floating_point() else t  # noqa: E731 (token ids stay integers)
    x, y = as_double(task.x_train).reshape(2, 3, *task.x_train.shape[1:]), as_double(task.y_train).reshape(2, 3)
    mean, mean_square = gradient_moments(model, task.likelihood, params, x, y)
    expected_mean, expected_square = _loop_moments(factory, task.likelihood, params, x, y)
    torch.testing.assert_close(mean, expected_mean, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(mean_square, expected_square, rtol=1e-9, atol=1e-14)
