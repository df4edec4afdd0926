"""Laplace: the curvature against closed forms and brute-force Jacobians, the draws against the covariance they
claim, and the run's budget, reproducibility and one-line errors."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import grad, vmap

from approximators.laplace import (GaussianPosterior, LastLayerCurvature, _curvature_epoch, curvature_root,
                                   diagonal_ggn, last_layer_to_layout)
from bench.budget import BudgetMeter, MeteredData
from bench.functional import StackedModel
from bench.likelihoods import Categorical, FixedNoiseGaussian, HeteroscedasticGaussian

STRUCTURES = ["diagonal", "last-layer-full", "last-layer-kron"]


def _curvature(factory, likelihood, x, y, theta, structure, n_classes=None, fast_path=True, batch_size=7):
    model = StackedModel(factory(), fast_path=fast_path)
    problem = SimpleNamespace(likelihood=likelihood, n_classes=n_classes, model_factory=factory)
    data = MeteredData(x, y, BudgetMeter(1, len(y)))
    curvature = _curvature_epoch(problem, data, model, theta, structure, batch_size, order_seed=0)
    assert data.meter.epochs_used == 1
    return curvature


@pytest.mark.parametrize("structure", STRUCTURES)
def test_linear_regression_precision_is_the_closed_form(linear_regression, structure):
    """For y = phi^T w + noise the GGN is the Hessian, Phi^T Phi / noise^2, whatever theta*; with one output
    Kronecker factoring is exact, and the diagonal structure keeps diag(P)."""
    problem = linear_regression
    factory = lambda: nn.Sequential(nn.Linear(3, 1)).double()  # noqa: E731
    theta = problem.mean.unsqueeze(0)
    curvature = _curvature(factory, FixedNoiseGaussian(problem.noise), problem.x, problem.y, theta, structure)
    posterior = GaussianPosterior(structure, theta[0], 1 / problem.prior_variance, problem.n,
                                  **({"diagonal": curvature} if structure == "diagonal" else {"last": curvature}))
    exact = torch.linalg.inv(problem.precision)
    if structure == "diagonal":
        torch.testing.assert_close(posterior.covariance(), problem.precision.diagonal().reciprocal(), rtol=1e-10,
                                   atol=0)
    else:
        torch.testing.assert_close(posterior.covariance(), exact, rtol=1e-9, atol=1e-12)


def _brute_force_ggn(factory, likelihood, x):
    """sum_i J_i^T H_i J_i, one autograd Jacobian per example (H_i = L_i L_i^T)."""
    model = StackedModel(factory(), fast_path=False)
    flat = model.layout.flatten(StackedModel.stack([factory()]))
    total = 0
    for xi in x:
        f = lambda p: model.flat(p.unsqueeze(0), xi.unsqueeze(0))[0, 0]  # noqa: E731
        jacobian = torch.autograd.functional.jacobian(f, flat[0])  # (O, D)
        root = curvature_root(likelihood, f(flat[0]).unsqueeze(0))[0]
        total = total + jacobian.T @ root @ root.T @ jacobian
    return flat, model.layout, total


class NotSequential(nn.Module):
    """A small network off the MLP fast path (so the per-example Jacobian path is exercised)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 2, 2)
        self.classifier = nn.Linear(6, 3)

    def forward(self, x):
        return self.classifier(torch.tanh(self.conv(x.unsqueeze(-2))).flatten(-2))


@pytest.mark.parametrize("factory, fast_path", [
    (lambda: torch.manual_seed(0) and nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 3)).double(), True),
    (lambda: torch.manual_seed(0) and nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 3)).double(), False),
    (lambda: torch.manual_seed(0) and NotSequential().double(), False),
], ids=["mlp-goodfellow", "mlp-jacobians", "conv-jacobians"])
def test_categorical_curvature_matches_a_per_example_jacobian_loop(factory, fast_path):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 4 if isinstance(factory(), NotSequential) else 2, dtype=torch.float64, generator=g)
    x = x[:, :4] if isinstance(factory(), NotSequential) else x
    y = torch.randint(0, 3, (5,), generator=g)
    flat, layout, exact = _brute_force_ggn(factory, Categorical(), x)

    model = StackedModel(factory(), fast_path=fast_path)
    diagonal = diagonal_ggn(model, Categorical(), flat, x.unsqueeze(0), n_outputs=3)[0]
    torch.testing.assert_close(diagonal, exact.diagonal(), rtol=1e-10, atol=1e-12)

    full = _curvature(factory, Categorical(), x, y, flat, "last-layer-full", n_classes=3, batch_size=2).full
    n_hidden = layout.shapes[-2][1]
    # the (c, h) order of [W | b] picked out of the layout's order
    identity = torch.eye(3 * (n_hidden + 1), dtype=torch.float64)
    index = last_layer_to_layout(identity, 3, layout.size).argmax(1)
    torch.testing.assert_close(full, exact[index][:, index], rtol=1e-10, atol=1e-12)


def test_the_categorical_curvature_is_the_hessian_of_the_negative_log_likelihood():
    logits = torch.tensor([[0.5, -1.0, 2.0, 0.0]], dtype=torch.float64)
    hessian = torch.autograd.functional.hessian(lambda f: -Categorical().log_prob(f, torch.tensor([1])).sum(), logits)
    root = curvature_root(Categorical(), logits)[0]
    torch.testing.assert_close(root @ root.T, hessian.view(4, 4), rtol=1e-12, atol=1e-14)


def test_the_heteroscedastic_curvature_is_the_fisher_of_the_gaussian():
    """E_y[s s^T] of the score s = grad_(m, r) log p(y | m, r), by Monte Carlo, against L L^T, within 4.5
    standard errors per entry."""
    likelihood, outputs, n = HeteroscedasticGaussian(), torch.tensor([0.3, -0.7], dtype=torch.float64), 200_000
    mean, std = likelihood.mean_and_std(outputs)
    y = mean + std * torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    scores = vmap(grad(lambda f, target: likelihood.log_prob(f, target)), in_dims=(None, 0))(outputs, y)
    products = scores.unsqueeze(2) * scores.unsqueeze(1)  # (n, 2, 2)
    root = curvature_root(likelihood, outputs.unsqueeze(0))[0]
    z = (products.mean(0) - root @ root.T) / (products.std(0) / math.sqrt(n))
    assert z.abs().max() < 4.5, z


def _random_last_layer(c=3, h=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(h, h, dtype=torch.float64, generator=g), torch.randn(c, c, dtype=torch.float64, generator=g)
    return LastLayerCurvature(None, a @ a.T, b @ b.T)


@pytest.mark.parametrize("structure", ["last-layer-full", "last-layer-kron"])
def test_draws_have_the_covariance_of_the_posterior(structure):
    """A draw is linear in z: the covariance it implies, T T^T with T = draw(I)^T, must be P^-1 (full: of the
    given G; Kronecker: of B (x) A with B = sum H / N)."""
    n_train, prior_precision = 10, 2.0
    curvature = _random_last_layer()
    kron = torch.kron(curvature.outputs / n_train, curvature.features)
    curvature.full = kron + 0.1 * torch.eye(12, dtype=torch.float64)
    posterior = GaussianPosterior(structure, torch.zeros(12), prior_precision, n_train, last=curvature)
    g = curvature.full if structure == "last-layer-full" else kron
    expected = torch.linalg.inv(g + prior_precision * torch.eye(12, dtype=torch.float64))
    transform = posterior.draw(torch.eye(12, dtype=torch.float64)).T
    torch.testing.assert_close(transform @ transform.T, expected, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(posterior.covariance(), expected, rtol=1e-9, atol=1e-12)


def test_a_last_layer_draw_perturbs_only_the_last_layer_in_the_layout_order():
    layout_shapes = {"0.weight": (4, 2), "0.bias": (4,), "2.weight": (3, 4), "2.bias": (3,)}
    n_parameters = sum(math.prod(s) for s in layout_shapes.values())
    delta = torch.arange(1.0, 16.0).unsqueeze(0)  # (c, h) order of [W | b], H + 1 = 5
    full = last_layer_to_layout(delta, 3, n_parameters)[0]
    weight, bias = full[-15:-3].view(3, 4), full[-3:]
    assert (full[:-15] == 0).all()
    assert weight[1, 2] == delta[0, 1 * 5 + 2] and bias[2] == delta[0, 2 * 5 + 4]


def test_last_layer_glm_is_the_sampling_predictive_and_the_diagonal_one_is_not(fit):
    """The network is linear in its last layer: the linearised predictive equals the sampled one there."""
    sampled, _ = fit("laplace", "digits", 3, samples=3)
    linearised, _ = fit("laplace", "digits", 3, samples=3, predictive="glm")
    np.testing.assert_allclose(linearised, sampled, rtol=0, atol=1e-5)
    sampled, _ = fit("laplace", "digits", 3, samples=3, structure="diagonal")
    linearised, _ = fit("laplace", "digits", 3, samples=3, structure="diagonal", predictive="glm")
    assert np.abs(linearised - sampled).max() > 1e-3


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("task", ["toy-gap", "digits"])
def test_runs_spend_the_budget_and_reproduce(fit, task, structure):
    first, meter = fit("laplace", task, 3.5, samples=3, structure=structure)
    second, _ = fit("laplace", task, 3.5, samples=3, structure=structure)
    assert meter.epochs_used == 3
    np.testing.assert_array_equal(first, second)
    if task == "digits":
        np.testing.assert_allclose(first.sum(1), 1.0, atol=1e-12)
    else:
        assert first.shape == (121, 1000) and np.isfinite(first).all()


@pytest.mark.parametrize("setting", ["structure=bogus", "predictive=bogus", "samples=0", "lr=-1", "min_lr=1"])
def test_nonsensical_settings_are_one_line_errors(setting, run_cli, tmp_path):
    code, _, err = run_cli("--method", "laplace", "--task", "toy-gap", "--budget", "5", "--set", setting,
                           "--out", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_a_budget_without_room_for_map_training_is_refused(run_cli, tmp_path):
    code, _, err = run_cli("--method", "laplace", "--task", "toy-gap", "--budget", "1.5", "--out", tmp_path)
    assert code == 2 and "laplace" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("task_name", ["cifar10", "cifar10c", "imdb", "dermamnist"])
@pytest.mark.parametrize("structure", ["diagonal", "last-layer-full"])
def test_the_other_structures_run_on_the_competition_models(task_name, structure):
    """The default structure runs in test_competition_models.py; these take the per-example Jacobian path
    (diagonal) and the full last-layer block."""
    from approximators import METHODS, resolve_config
    from bench.runner import metered
    from bench.tasks.competition import synthetic_task

    task = synthetic_task(task_name, rows=6)
    cls = METHODS["laplace"]
    problem, data = metered(task, 2)
    approximator = cls(resolve_config(cls, task_name, {"batch_size": "3", "samples": "2", "structure": structure,
                                                      "predictive": "glm"}))
    approximator.fit(problem, data, torch.Generator().manual_seed(0))
    assert data.meter.epochs_used == 2 and np.isfinite(approximator.predictive()).all()


@pytest.mark.parametrize("structure", ["diagonal", "last-layer-full"])
def test_the_curvature_epoch_and_the_linearised_predictive_compute_on_what_they_are_charged(structure):
    """The honesty probe (the default structure is probed in tests/bench/test_honesty.py)."""
    from bench.honesty import probe

    result = probe("laplace", "toy-gap", budget=4, overrides={"structure": structure, "predictive": "glm",
                                                              "samples": "3"})
    assert result.honest, result
