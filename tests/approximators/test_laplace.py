"""Laplace: the curvature against closed forms and brute-force Jacobians, the draws against the covariance they
claim, the run's budget, reproducibility and one-line errors, and its report of the MAP's convergence."""

import dataclasses
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import grad, jacrev, vmap

from approximators.base import PredictiveAccumulator, Problem
from approximators.laplace import (GaussianPosterior, LastLayerCurvature, _curvature_epoch, curvature_root,
                                   diagonal_ggn, diagonal_output_moments, features_on_test_inputs,
                                   last_layer_predictive, last_layer_to_layout, probit_predictive)
from bench.budget import BudgetMeter, MeteredData
from bench.functional import StackedModel
from bench.likelihoods import Categorical, FixedNoiseGaussian, HeteroscedasticGaussian
from bench.tasks import get_task

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
    """The network is linear in its last layer: there the linearised predictive is the sampled one (one code path,
    whose equality to the network at each draw is tested below); over all weights they differ."""
    sampled, _ = fit("laplace", "digits", 3, samples=3)
    linearised, _ = fit("laplace", "digits", 3, samples=3, predictive="glm")
    np.testing.assert_array_equal(linearised, sampled)
    sampled, _ = fit("laplace", "digits", 3, samples=3, structure="diagonal")
    linearised, _ = fit("laplace", "digits", 3, samples=3, structure="diagonal", predictive="glm")
    assert np.abs(linearised - sampled).max() > 1e-3


def _fitted_in_float64(task_name, structure, rows=40):
    """A task's network in float64 at its initial weights, a posterior of ``structure`` from a curvature epoch on
    its first ``rows`` training rows, and a problem on 50 of its test inputs."""
    task = get_task(task_name)
    factory = task.model_factory
    task = dataclasses.replace(task, model_factory=lambda: torch.manual_seed(0) and factory().double(),
                               x_train=task.x_train[:rows].double(), y_train=task.y_train[:rows],
                               x_test=task.x_test[:50].double())
    problem = Problem.for_task(task, BudgetMeter(1, rows))
    model = StackedModel(task.model_factory())
    theta = model.layout.flatten(StackedModel.stack([task.model_factory()]))
    data = MeteredData(task.x_train, task.y_train, BudgetMeter(1, rows))
    curvature = _curvature_epoch(problem, data, model, theta, structure, 16, order_seed=0)
    posterior = GaussianPosterior(structure, theta[0], 1 / task.prior_variance, rows,
                                  **({"diagonal": curvature} if structure == "diagonal" else {"last": curvature}))
    return problem, model, theta, posterior


@pytest.mark.parametrize("task_name", ["digits", "digits-cnn", "digits-lstm", "toy-gap"],
                         ids=["mlp", "convnet", "cnn-lstm", "regression"])
@pytest.mark.parametrize("structure", ["last-layer-kron", "last-layer-full"])
def test_the_last_layer_predictive_from_features_computed_once_is_the_network_at_each_draw(task_name, structure):
    """The body's features once per test row, then only the last layer per draw, against the whole network run at
    every draw theta* + Delta (the path before; the same draws and the same generator for the regression noise), in
    float64: equal to round-off, for one test pass instead of one per draw."""
    problem, model, theta, posterior = _fitted_in_float64(task_name, structure)
    samples = 7
    cached = last_layer_predictive(problem, model, theta, posterior, "sampling", samples,
                                   torch.Generator().manual_seed(1), torch.Generator().manual_seed(2))
    assert problem.meter.test_passes == 1
    draws, n_outputs = torch.Generator().manual_seed(1), posterior.n_outputs
    whole = PredictiveAccumulator(problem, samples, torch.Generator().manual_seed(2))
    for _ in range(samples):
        whole.add(model.layout.unflatten(theta + last_layer_to_layout(posterior.sample(draws), n_outputs,
                                                                       model.layout.size)))
    assert problem.meter.test_passes == 1 + samples
    np.testing.assert_allclose(cached, whole.result(), rtol=0, atol=1e-10)


def _brute_force_output_covariance(problem, model, theta, posterior):
    """J_i Sigma J_i^T per test row from the autograd Jacobian of the whole network in all its weights, with Sigma
    the posterior's covariance over all weights (the last layer's block placed in the layout's order, zero
    elsewhere; or the diagonal)."""
    d = model.layout.size
    if posterior.structure == "diagonal":
        sigma = torch.diag(posterior.covariance())
    else:
        size = posterior.n_outputs * posterior.n_features
        index = last_layer_to_layout(torch.eye(size, dtype=torch.float64), posterior.n_outputs, d).argmax(1)
        sigma = torch.zeros(d, d, dtype=torch.float64)
        sigma[index.unsqueeze(1), index.unsqueeze(0)] = posterior.covariance()
    jacobians = torch.stack([jacrev(lambda p: model.flat(p.unsqueeze(0), x.unsqueeze(0))[0, 0])(theta[0])
                             for x in problem.x_test])  # (N, O, D)
    return jacobians @ sigma @ jacobians.transpose(1, 2)


@pytest.mark.parametrize("task_name", ["digits", "digits-cnn", "toy-gap"], ids=["mlp", "convnet", "regression"])
@pytest.mark.parametrize("structure", STRUCTURES)
def test_the_probit_predictive_is_the_closed_form_of_brute_force_jacobians(task_name, structure):
    """The linearised outputs' covariance J Sigma J^T (last layer: phi^T Sigma phi in closed form; diagonal:
    per-example Jacobians) against an autograd Jacobian per test row, and the classification predictive against
    MacKay's softmax(f / sqrt(1 + pi / 8 diag F)) computed from it; one test pass."""
    problem, model, theta, posterior = _fitted_in_float64(task_name, structure)
    exact = _brute_force_output_covariance(problem, model, theta, posterior)
    if structure == "diagonal":
        outputs, covariance = diagonal_output_moments(problem, model, theta, posterior.std.square())
    else:
        outputs, features = features_on_test_inputs(problem, model, theta)
        covariance = posterior.output_covariance(features)
    assert problem.meter.test_passes == 1
    torch.testing.assert_close(outputs, model.flat(theta, problem.x_test)[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(covariance, exact, rtol=1e-10, atol=1e-14)
    if problem.kind == "classification":
        predictive = probit_predictive(problem, outputs, covariance, torch.Generator())
        expected = torch.softmax(outputs / (1 + math.pi / 8 * exact.diagonal(dim1=1, dim2=2)).sqrt(), dim=-1)
        np.testing.assert_allclose(predictive, expected.numpy(), rtol=1e-12, atol=0)


def test_the_probit_regression_predictive_draws_the_linearised_outputs():
    """For the heteroscedastic Gaussian the linearised outputs (m, r) are N(f, F); each predictive sample is
    y ~ N(m, softplus(r)^2) at its own draw, so E[y] = f_0 and Var[y] = F_00 + E[softplus(r)^2] (the latter by
    quadrature of r ~ N(f_1, F_11)); both within 4.5 Monte Carlo standard errors per row."""
    problem = SimpleNamespace(kind="regression", likelihood=HeteroscedasticGaussian(), n_predictive_samples=200_000)
    outputs = torch.tensor([[0.5, -1.0], [-2.0, 0.3]], dtype=torch.float64)
    covariance = torch.tensor([[[0.3, 0.1], [0.1, 0.2]], [[0.05, -0.02], [-0.02, 0.5]]], dtype=torch.float64)
    samples = torch.from_numpy(probit_predictive(problem, outputs, covariance, torch.Generator().manual_seed(0)))
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)  # E[h(r)] = sum w h(f + sqrt(F) node) / sqrt(2 pi)
    r = outputs[:, 1:] + covariance[:, 1, 1:].sqrt() * torch.from_numpy(nodes)
    noise = (torch.nn.functional.softplus(r).square() * torch.from_numpy(weights)).sum(1) / math.sqrt(2 * math.pi)
    variance = covariance[:, 0, 0] + noise
    n = samples.shape[1]
    z_mean = (samples.mean(1) - outputs[:, 0]) / (variance / n).sqrt()
    fourth = ((samples - samples.mean(1, keepdim=True)) ** 4).mean(1)
    z_variance = (samples.var(1) - variance) / ((fourth - variance**2) / n).sqrt()
    assert z_mean.abs().max() < 4.5 and z_variance.abs().max() < 4.5, (z_mean, z_variance)


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
    from bench.tasks.competition import generated_task

    task = generated_task(task_name, 6)
    cls = METHODS["laplace"]
    problem, data = metered(task, 2)
    approximator = cls(resolve_config(cls, task_name, {"batch_size": "3", "samples": "2", "structure": structure,
                                                      "predictive": "glm"}))
    approximator.fit(problem, data, torch.Generator().manual_seed(0))
    assert data.meter.epochs_used == 2 and np.isfinite(approximator.predictive()).all()


@pytest.mark.parametrize("predictive", ["glm", "probit"])
@pytest.mark.parametrize("structure", ["diagonal", "last-layer-full"])
def test_the_curvature_epoch_and_the_linearised_predictives_compute_on_what_they_are_charged(structure, predictive):
    """The honesty probe (the default structure is probed in tests/bench/test_honesty.py)."""
    from bench.honesty import probe

    result = probe("laplace", "toy-gap", budget=4, overrides={"structure": structure, "predictive": predictive,
                                                              "samples": "3"})
    assert result.honest, result


# --- The MAP's convergence in the report (issue 63) ---------------------------------------------------------------


def _autograd_posterior_gradient(module: nn.Module, likelihood, prior_variance, theta, x, y) -> torch.Tensor:
    """grad U(theta), U = -sum_i log p(y_i | x_i, theta) + |theta|^2 / (2 v) over every row, by autograd on the module
    itself (its parameters set from theta in their own order, not through the layout under test)."""
    torch.nn.utils.vector_to_parameters(theta.detach().clone(), module.parameters())
    module.zero_grad()
    prior = sum(p.square().sum() for p in module.parameters()) / (2 * prior_variance)
    u = -likelihood.log_prob(module(x), y).sum() + prior
    u.backward()
    return torch.nn.utils.parameters_to_vector([p.grad for p in module.parameters()])


class LinearOffTheFastPath(nn.Module):
    """The linear-Gaussian network (weights, then bias) outside ``nn.Sequential``: the diagonal takes its per-example
    Jacobian path."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 1).double()

    def forward(self, x):
        return self.linear(x)


@pytest.mark.parametrize("structure, off_fast_path", [("last-layer-kron", False), ("last-layer-full", False),
                                                      ("diagonal", False), ("diagonal", True)],
                         ids=["kron", "full", "diagonal-mlp", "diagonal-jacobians"])
def test_a_converged_map_records_its_full_batch_gradient_and_no_warning(structure, off_fast_path):
    """Bayesian linear regression at budget 1000 (the class defaults: Adam at batch 32 of 64 rows): the recorded
    |grad U(theta*)| is an independent autograd computation's over the whole training set at the final parameters,
    and the closed form's, |Lambda (theta* - mean)|, to round-off; the ratio to the prior's gradient is small and
    the report carries no warning."""
    from approximators.laplace import MAP_GRADIENT_TOLERANCE
    from bench.api import fit
    from reference.conjugate import NOISE, linear_gaussian

    linear = linear_gaussian("linear-gaussian", 64, NOISE,
                             model_factory=LinearOffTheFastPath if off_fast_path else None)
    fitted = fit(linear.task, "laplace", budget=1000, settings={"structure": structure})
    theta = fitted.approximator.posterior.mean.double()
    report = fitted.report
    module = linear.task.model_factory()
    gradient = _autograd_posterior_gradient(module, linear.task.likelihood, linear.prior_variance, theta, linear.x,
                                            linear.y)
    # Round-off: the gradient is a small difference of terms of the size of the prior's gradient.
    scale = 1e-12 * float((theta / linear.prior_variance).norm())
    assert abs(report["map_gradient_norm"] - float(gradient.norm())) < scale, (report, gradient)
    assert abs(report["map_gradient_norm"] - float((linear.precision @ (theta - linear.mean)).norm())) < 1e-9
    ratio = report["map_gradient_ratio"]
    assert ratio == pytest.approx(report["map_gradient_norm"] / float((theta / linear.prior_variance).norm()),
                                  rel=1e-12)
    assert ratio < 0.01 * MAP_GRADIENT_TOLERANCE and "warnings" not in report, report


def test_a_map_cut_short_by_the_budget_is_said_so_in_its_record(run_cli, tmp_path):
    """Issue 63's case, budget 200 on Bayesian linear regression: the MAP stops 13 posterior standard deviations from
    the mode, its gradient ratio is far above the tolerance, and the report warns and says what to do; a run's record
    keeps the warning and its table shows it as a note."""
    from approximators.laplace import MAP_GRADIENT_TOLERANCE
    from bench.api import fit
    from reference.conjugate import NOISE, linear_gaussian

    linear = linear_gaussian("linear-gaussian", 64, NOISE)
    fitted = fit(linear.task, "laplace", budget=200)
    report = fitted.report
    assert ((fitted.approximator.posterior.mean.double() - linear.mean) / linear.sd).abs().max() > 10
    assert report["map_gradient_ratio"] > 10 * MAP_GRADIENT_TOLERANCE, report
    (warning,) = report["warnings"]
    assert "did not converge" in warning and "raise the budget" in warning, warning
    assert f"{report['map_gradient_ratio']:.3g}" in warning
    # A run's record keeps it, and its table shows it as a note (2 epochs of MAP on toy-gap are far from converged).
    code, _, err = run_cli("--method", "laplace", "--task", "toy-gap", "--budget", "3", "--out", tmp_path)
    record = json.loads((tmp_path / "toy-gap" / "laplace" / "budget-3" / "seed-0" / "result.json").read_text())
    (warning,) = record["method_report"]["warnings"]
    assert code == 0 and record["method_report"]["map_gradient_ratio"] > MAP_GRADIENT_TOLERANCE
    assert "did not converge" in warning and "note: " in err and "did not converge" in err, err


@pytest.mark.parametrize("task_name", ["digits", "digits-cnn", "digits-lstm", "toy-gap"],
                         ids=["mlp", "convnet", "cnn-lstm", "regression"])
@pytest.mark.parametrize("structure", STRUCTURES)
def test_the_gradient_leaves_the_curvature_bitwise_and_is_the_full_batch_one(task_name, structure):
    """The curvature epoch computes the gradient from its own forward passes: the curvature is bitwise the one
    computed without it (in float32, as runs compute; the CNN-LSTM's linear map on a non-contiguous input takes
    another kernel when its weight requires grad), the charge is one epoch, and the gradient is autograd's over all
    the rows at once to float32 round-off."""
    task = get_task(task_name)
    rows = 40
    x, y = task.x_train[:rows], task.y_train[:rows]
    factory = lambda: torch.manual_seed(0) and task.model_factory()  # noqa: E731
    model = StackedModel(factory())
    theta = model.layout.flatten(StackedModel.stack([factory()])).detach()
    problem = SimpleNamespace(likelihood=task.likelihood, n_classes=task.n_classes)
    curvatures, gradient = [], torch.zeros(theta.shape[1], dtype=torch.float64)
    for into in (None, gradient):
        data = MeteredData(x, y, BudgetMeter(1, rows))
        curvatures.append(_curvature_epoch(problem, data, model, theta, structure, 16, order_seed=0, gradient=into))
        assert data.meter.epochs_used == 1
    without, with_gradient = curvatures
    if structure == "diagonal":
        assert torch.equal(without, with_gradient)
    else:
        for field in ("full", "features", "outputs"):
            a, b = getattr(without, field), getattr(with_gradient, field)
            assert (a is None and b is None) or torch.equal(a, b), field
    module = factory()
    torch.nn.utils.vector_to_parameters(theta[0].clone(), module.parameters())
    nll = -task.likelihood.log_prob(module(x), y).sum()
    expected = torch.nn.utils.parameters_to_vector(torch.autograd.grad(nll, list(module.parameters())))
    torch.testing.assert_close(gradient.float(), expected, rtol=0, atol=1e-5 * float(expected.abs().max()))
