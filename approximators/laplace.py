r"""The Laplace approximation with generalised Gauss-Newton curvature (MacKay 1992): ``laplace``.

A Gaussian around a MAP solution theta* trained inside the budget,

    q(theta) = N(theta*, P^-1),   P = G + I / v,   G = sum_{i=1..N} J_i^T H_i J_i,

over every training example (the full-data negative log posterior's curvature; v the task's prior
variance), J_i the Jacobian of the network's outputs f(x_i) in the parameters and H_i the Hessian of
-log p(y_i | f) in f (Categorical: diag(p) - p p^T). For the heteroscedastic Gaussian (outputs m and
r, sigma = softplus(r)) that Hessian is not positive semi-definite; its Fisher, diag(1 / sigma^2,
2 sigmoid(r)^2 / sigma^2), stands in (the Fisher of N(m, sigma^2) in (m, sigma) is diag(1, 2) /
sigma^2, chained through dsigma/dr = sigmoid(r)). With H_i = L_i L_i^T, G's terms are the outer
products of the "pseudo-gradients" J_i^T L_i[:, c], one per output c.

``structure`` (laplace-torch's options and default, Daxberger et al. 2021):

- ``diagonal``: diag(G) over all weights, sum_i sum_c (J_i^T L_i[:, c])^2; P^-1 = 1 / (diag G + 1 / v).
- ``last-layer-full``: only the last linear layer's weights W ``(C, H)`` and bias b (the rest fixed at
  theta*), with features a_i = [phi_i; 1] (its input and a one): in the (c, h) row-major order of
  [W | b], G = sum_i H_i (x) a_i a_i^T, exactly; draws through the Cholesky factor of P.
- ``last-layer-kron`` (default): Kronecker-factored (Ritter et al. 2018),
  G ~ (sum_i H_i / N) (x) (sum_i a_i a_i^T) = B (x) A; with A = Q_A diag(l_A) Q_A^T and
  B = Q_B diag(l_B) Q_B^T, P = (Q_B (x) Q_A) diag(l_B l_A^T + 1 / v) (Q_B (x) Q_A)^T, and a draw is
  Q_B [Z / sqrt(l_B l_A^T + 1 / v)] Q_A^T with Z ``(C, H + 1)`` standard normal.

``predictive``:

- ``sampling`` (default): the model average of the network at ``samples`` (30) draws theta* + Delta. A
  last-layer posterior draws the last layer alone, so the body's features a_i = [phi_i; 1] are computed once per
  test row (one test pass, not one per draw) and every draw's outputs a_i^T [W + dW | b + db]^T come from one
  matrix product (laplace-torch's last-layer ``pred_type='nn'`` caches the features at its first draw,
  ``laplace/lllaplace.py`` in https://github.com/aleximmer/Laplace, then runs the last layer once per draw).
- ``glm``: the linearised network f(x; theta*) + J(x) Delta (Immer et al. 2021; a Jacobian-vector product per
  draw), averaged the same way. The network is linear in its last layer, so for the last-layer structures this
  is ``sampling``, and takes its path.
- ``probit``: the linearised network without Monte Carlo over the weights. Its outputs are N(f, F),
  f = f(x; theta*), F = J P^-1 J^T, in closed form: for the last layer A_i P^-1 A_i^T with A_i = I_C (x) a_i^T
  (Kronecker: through the factors' eigenbases, O(H^2 + C H + C^3) per row); for the diagonal from per-example
  Jacobians (``vmap(jacrev)``, the network once per test row). Classification: MacKay's (1992) probit
  approximation softmax(f / sqrt(1 + pi / 8 diag F)), laplace-torch's default (``pred_type='glm'``,
  ``link_approx='probit'`` in its weight-space ``__call__``, ``laplace/baselaplace.py``). Regression: each of the
  task's predictive samples is y ~ p(y | g) at its own g ~ N(f, F), exact given the linearisation; for a Gaussian
  of fixed noise s that is y ~ N(f, F + s^2), the closed form laplace-torch's regression example computes (its
  ``f_var`` plus ``sigma_noise**2``, ``examples/regression_example.py``); the heteroscedastic Gaussian has no
  closed form in y, so g is drawn in output space. ``samples`` is not used.

**Deviation** from laplace-torch: the default is ``sampling``, not ``probit``, by the project's protocol for
defaults (held-out NLL of a seeded 10% of the training rows at budget 100, seeds 0-2, never the reference:
``python benchmarks/tune_trajectory.py laplace``), which favours ``sampling`` on all five embedded tasks
(docs/notebook/methods.md). For a last-layer posterior ``sampling`` is the linearised predictive's exact integral up to
Monte Carlo error; the probit approximation, which shrinks each logit by its own variance and ignores their
covariance, is what loses. With the features computed once, ``sampling`` costs little more than ``probit``.

Budget rule: floor(B) - 1 epochs of MAP (``sgd``'s training and per-task settings), then one
curvature epoch that reads every training row once, in minibatches through the meter: floor(B) in
all. The curvature epoch computes the network once per row (the diagonal's per-output
pseudo-gradients come from one forward pass: Goodfellow's outer products on MLPs,
``vmap(jacrev)`` per example elsewhere).

Report: besides the epochs, the MAP's convergence, from the full-batch gradient of the negative log posterior
U(theta) = -sum_i log p(y_i | x_i, theta) + |theta|^2 / (2 v) at theta*, which the curvature epoch computes from its
own forward passes (a backward pass per minibatch: no row is read twice, nothing more is charged):
``map_gradient_norm`` = |grad U(theta*)| and ``map_gradient_ratio`` = |grad U(theta*)| / |theta* / v|, the part of the
gradient left over relative to the prior's (0 at a MAP; scale-free: the per-row objective U / N that training
descends gives the same r). Above :data:`MAP_GRADIENT_TOLERANCE` (or not finite) the report's
``warnings`` say the MAP did not converge.

Deviations: the prior precision is the task's, never tuned on the marginal likelihood (the
benchmark's posterior fixes the prior); laplace-torch is not used (its install requires torchvision,
``pyproject.toml``, which does not import against this project's torch; its package never imports it).
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, jacrev, jvp, vmap
from torch.overrides import TorchFunctionMode

from approximators.base import (DRAWS_BOUNDS, EVAL_CHUNK, Approximator, Footprint, PredictiveAccumulator, Problem,
                                epochs_unspent, member_generators, next_seed)
from approximators.map import MAP_DEFAULTS
from approximators.per_example import PER_EXAMPLE_VALUES, recorded_mlp_forward
from approximators.refusals import budget_refusal
from approximators.training import AdamConfig, Members, schedule_of, train_members
from bench import checkpoint
from bench.budget import MeteredData
from bench.errors import ConfigError
from bench.functional import StackedModel
from bench.likelihoods import Categorical, FixedNoiseGaussian, HeteroscedasticGaussian, Likelihood
from bench.memory import release_freed_memory

STRUCTURES = ("diagonal", "last-layer-full", "last-layer-kron")
PREDICTIVES = ("sampling", "glm", "probit")

CURVATURE_EPOCHS = 1
"""The epoch of the budget the curvature's pass over the training set costs, after the MAP training."""

MAP_GRADIENT_TOLERANCE = 1.0
"""The largest ratio r = |grad U(theta*)| / |theta* / v| at which the MAP counts as converged (U the negative log
posterior, theta* / v its prior term's gradient; :func:`map_gradient`); above it the run's report warns. At a MAP the
likelihood's gradient balances the prior's exactly, r = 0; at r > 1 what is left of the gradient is larger than the
prior's whole term in it: the stationarity condition has not yet resolved the prior, what makes the point the mode of
the posterior rather than of the likelihood. A tighter value would call converged runs not: at the end of
the embedded tasks' 1000-epoch runs the minibatch optimiser leaves r at 0.27 (toy-gap), 0.24 (diabetes-gap) and 0.055
(digits) (seed 0), where the last layer's Newton step in its own posterior's metric is 0.04, 0.17 and 0.26 standard
deviations. On Bayesian linear regression (:func:`reference.conjugate.linear_gaussian`, 64 rows, the class defaults)
budget 200 stops at r = 60, its mean 13 posterior standard deviations from the mode; budget 600 at r = 1.3 (0.38);
budget 1000 at r = 0.0036 (0.001). r does not convert into standard deviations on a network: it is a necessary
condition, not a sufficient one."""


@dataclass(frozen=True)
class LaplaceConfig(AdamConfig):
    structure: str = "last-layer-kron"
    predictive: str = "sampling"  # not laplace-torch's "probit": held-out NLL (the module's docstring)
    samples: int = 30

    BOUNDS: ClassVar[dict[str, str]] = {"samples": DRAWS_BOUNDS}
    """Each numeric setting's interval (checked before any work: :func:`approximators.base.check_settings`)."""
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"structure": STRUCTURES, "predictive": PREDICTIVES}
    """Each string setting's values (checked before any work: :func:`approximators.base.check_settings`)."""


LAPLACE_DEFAULTS = {task: dict(settings) for task, settings in MAP_DEFAULTS.items()}
"""The MAP phase's settings: ``sgd``'s of each task."""


def curvature_root(likelihood: Likelihood, outputs: torch.Tensor) -> torch.Tensor:
    """L ``(..., N, O, O)`` with L L^T the output-space curvature of -log p(y | f) at ``outputs`` ``(..., N, O)``
    (the Hessian; the Fisher for the heteroscedastic Gaussian). It does not depend on y for these likelihoods."""
    outputs = outputs.detach()
    if isinstance(likelihood, Categorical):
        p = torch.softmax(outputs, dim=-1)
        root_p = p.sqrt()
        return torch.diag_embed(root_p) - p.unsqueeze(-1) * root_p.unsqueeze(-2)
    if isinstance(likelihood, HeteroscedasticGaussian):
        sigma = F.softplus(outputs[..., 1])
        return torch.diag_embed(torch.stack([sigma.reciprocal(), math.sqrt(2) * torch.sigmoid(outputs[..., 1]) / sigma],
                                            dim=-1))
    if isinstance(likelihood, FixedNoiseGaussian):
        return torch.full((*outputs.shape, 1), 1.0 / likelihood.noise_std, dtype=outputs.dtype, device=outputs.device)
    raise ConfigError(f"laplace: no output-space curvature for the {likelihood.name} likelihood")


def diagonal_ggn(model: StackedModel, likelihood: Likelihood, params: torch.Tensor, x: torch.Tensor,
                 n_outputs: int, targets: torch.Tensor | None = None,
                 gradient: torch.Tensor | None = None) -> torch.Tensor:
    """sum_i sum_c (J_i^T L_i[:, c])^2 over a batch, ``(K, D)``, for parameters ``(K, D)`` and inputs ``(K, B, ...)``
    of a network with ``n_outputs`` outputs; the network runs once per row. Given ``targets`` ``(K, B)`` and
    ``gradient`` ``(K, D)``, the batch's gradient of sum_i -log p(y_i | f(x_i)) is added into ``gradient``, from the
    same pass (:func:`nll_output_gradient`)."""
    params = params.detach()
    if model.mlp_layers is not None:
        return _mlp_diagonal_ggn(model, likelihood, params, x, targets, gradient)
    total = torch.zeros_like(params)
    row = 0
    for jacobians, outputs in per_example_jacobians(model, params, x, n_outputs):
        pseudo = torch.einsum("knod,knoc->kncd", jacobians, curvature_root(likelihood, outputs))
        total += pseudo.square().sum((1, 2))
        if gradient is not None:  # sum_i J_i^T d(-log p(y_i | f))/df_i
            rows = outputs.shape[1]
            slope = nll_output_gradient(likelihood, outputs, targets[:, row:row + rows])
            gradient += torch.einsum("knod,kno->kd", jacobians, slope).to(gradient.dtype)
            row += rows
    return total


def nll_output_gradient(likelihood: Likelihood, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """d(-log p(y_i | f_i))/df_i ``(..., N, O)`` at ``outputs`` ``(..., N, O)`` for ``targets`` ``(..., N)``."""
    outputs = outputs.detach().requires_grad_(True)
    with torch.enable_grad():
        (slope,) = torch.autograd.grad(-likelihood.log_prob(outputs, targets).sum(), outputs)
    return slope


def per_example_jacobians(model: StackedModel, params: torch.Tensor, x: torch.Tensor, n_outputs: int):
    """The Jacobians of the outputs in the parameters, ``(K, rows, O, D)``, and the outputs ``(K, rows, O)``, of
    chunks of rows of inputs ``(K, B, ...)`` for parameters ``(K, D)`` (``vmap(jacrev)`` per example: the
    network runs once per row; a chunk holds at most :data:`PER_EXAMPLE_VALUES` Jacobian entries)."""
    layout = model.layout

    def outputs_of(flat, xi):
        member = {name: p[0] for name, p in layout.unflatten(flat.unsqueeze(0)).items()}
        out = functional_call(model.base, member, (xi.unsqueeze(0),))[0]
        return out, out

    per_example = vmap(vmap(jacrev(outputs_of, has_aux=True), in_dims=(None, 0)), in_dims=(0, 0))
    k, batch = x.shape[:2]
    rows = max(1, PER_EXAMPLE_VALUES // (k * n_outputs * layout.size))
    for start in range(0, batch, rows):
        yield per_example(params, x[:, start:start + rows])


def _mlp_diagonal_ggn(model, likelihood, params, x, targets=None, gradient=None):
    """Goodfellow's identity per output column: one forward pass, one backward pass per column c to every
    layer's pre-activations z (giving delta_i = J_z,i^T L_i[:, c] for every row), then
    diag(W) += sum_i delta_i^2 (a_i^2)^T and diag(b) += sum_i delta_i^2. With ``gradient``, one more backward pass
    of sum_i -log p(y_i | f_i) to the z gives the negative log-likelihood's gradient, sum_i delta_i a_i^T and
    sum_i delta_i, added into it."""
    members = model.layout.unflatten(params)
    h, linear, inputs, pre_activations = recorded_mlp_forward(model, members, x)
    if gradient is not None:
        deltas = torch.autograd.grad(-likelihood.log_prob(h, targets).sum(), pre_activations, retain_graph=True)
        with torch.no_grad():
            gradient += model.layout.flatten(
                {f"{name}.{part}": (torch.bmm(delta.transpose(1, 2), a) if part == "weight" else delta.sum(1))
                 for name, a, delta in zip(linear, inputs, deltas) for part in ("weight", "bias")}).to(gradient.dtype)
    root = curvature_root(likelihood, h)  # (K, B, O, O)
    total = {f"{name}.{part}": torch.zeros_like(members[f"{name}.{part}"]) for name in linear
             for part in ("weight", "bias")}
    for column in range(root.shape[-1]):
        deltas = torch.autograd.grad(h, pre_activations, grad_outputs=root[..., column], retain_graph=True)
        with torch.no_grad():
            for name, a, delta in zip(linear, inputs, deltas):
                total[f"{name}.weight"] += torch.bmm(delta.square().transpose(1, 2), a.square())
                total[f"{name}.bias"] += delta.square().sum(1)
    return model.layout.flatten(total)


def last_layer(module: nn.Module, layout) -> str:
    """The name of the network's last layer, checked to be an ``nn.Linear`` with a bias whose weight and bias are
    the layout's last two parameters (true of every network here)."""
    *_, weight, bias = layout.names
    name = weight.removesuffix(".weight")
    layer = dict(module.named_modules()).get(name)
    if not (isinstance(layer, nn.Linear) and weight == f"{name}.weight" and bias == f"{name}.bias"):
        raise ConfigError("laplace: a last-layer structure needs a network that ends in a linear layer with a bias; "
                          "use --set structure=diagonal")
    return name


class _LinearAsWithoutGrad(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` computed by the kernels a call without grad takes, with its gradients. PyTorch
    picks the kernel of a linear map on a non-contiguous input of 3 or more dimensions by whether the weight requires
    grad (``matmul`` folds the input into a matrix then, one batched product per row of it otherwise), and the two
    round differently; the task's CNN-LSTM computes on such an input. Backward: the linear map's own derivatives."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.with_bias = bias is not None
        return F.linear(x.detach(), weight.detach(), None if bias is None else bias.detach())

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        rows = grad_output.reshape(-1, grad_output.shape[-1])
        grad_x = grad_output @ weight if ctx.needs_input_grad[0] else None
        grad_weight = rows.T @ x.reshape(-1, x.shape[-1]) if ctx.needs_input_grad[1] else None
        grad_bias = rows.sum(0) if ctx.with_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


class _KernelsAsWithoutGrad(TorchFunctionMode):
    """Inside it, a network computes its outputs by the kernels it takes without grad, bitwise, while their gradient
    is recorded (:class:`_LinearAsWithoutGrad`, the one place the embedded tasks' networks differ): the curvature epoch
    computes the gradient from the same forward pass as the curvature, which stays that of a run without it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear and torch.is_grad_enabled():
            x, weight, bias = _linear_arguments(*args, **kwargs)
            if weight.requires_grad and x.dim() > 2 and not x.is_contiguous():
                return _LinearAsWithoutGrad.apply(x, weight, bias)
        return func(*args, **kwargs)


def _linear_arguments(input, weight, bias=None):
    return input, weight, bias


class LastLayerFeatures:
    """``model``'s network at fixed flat parameters ``(1, D)``, returning its outputs ``(B, O)`` and the features
    a = [phi; 1] ``(B, H + 1)`` (phi: the last layer's input) of a batch in one forward pass. With
    ``requires_grad``, its parameters are views of ``flat`` ``(1, D)``, a copy of theta that requires grad, so that a
    loss of the outputs computed with grad enabled has its gradient, in the layout's order, from the same pass."""

    def __init__(self, model: StackedModel, theta: torch.Tensor, requires_grad: bool = False):
        # A copy of the parameter-less network (no data: it lives on the meta device), so that the hook stays off the
        # caller's; built from the model rather than the task's factory, whose initialisation of a large network
        # costs more than a forward pass.
        self.base = copy.deepcopy(model.base)
        self.flat = theta.detach().clone().requires_grad_(True) if requires_grad else theta.detach()
        self.params = {name: p[0] for name, p in model.layout.unflatten(self.flat).items()}
        self._features: list[torch.Tensor] = []
        dict(self.base.named_modules())[last_layer(self.base, model.layout)].register_forward_pre_hook(
            lambda _layer, inputs: self._features.append(inputs[0]))

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self._features.clear()
        outputs = functional_call(self.base, self.params, (x,))
        phi = self._features[-1]
        return outputs, torch.cat([phi, torch.ones_like(phi[:, :1])], dim=1)


@dataclass
class LastLayerCurvature:
    """Sums over the training rows: ``full`` = sum_i H_i (x) a_i a_i^T ``(C(H+1), C(H+1))`` (or None),
    ``features`` = sum_i a_i a_i^T ``(H+1, H+1)``, ``outputs`` = sum_i H_i ``(C, C)``."""

    full: torch.Tensor | None
    features: torch.Tensor
    outputs: torch.Tensor

    def add(self, hessians: torch.Tensor, features: torch.Tensor) -> None:
        """``hessians`` ``(B, C, C)``, ``features`` ``(B, H + 1)``."""
        self.features += features.T @ features
        self.outputs += hessians.sum(0)
        if self.full is not None:
            c, h = hessians.shape[1], features.shape[1]
            outer = (features.unsqueeze(2) * features.unsqueeze(1)).flatten(1)  # (B, (H+1)^2)
            block = (hessians.flatten(1).T @ outer).view(c, c, h, h)  # [c, c', h, h']
            self.full += block.permute(0, 2, 1, 3).reshape(c * h, c * h)


class GaussianPosterior:
    """N(theta*, P^-1) for one of the three structures; :meth:`draw` returns ``(S, D)`` deviations Delta."""

    def __init__(self, structure: str, mean: torch.Tensor, prior_precision: float, n_train: int,
                 diagonal: torch.Tensor | None = None, last: LastLayerCurvature | None = None):
        self.structure, self.mean, self.prior_precision = structure, mean, prior_precision
        if structure == "diagonal":
            self.std = (diagonal + prior_precision).rsqrt()
            return
        self.n_outputs, self.n_features = last.outputs.shape[0], last.features.shape[0]
        if structure == "last-layer-full":
            eye = torch.eye(last.full.shape[0], dtype=last.full.dtype, device=last.full.device)
            self.cholesky = torch.linalg.cholesky(last.full + prior_precision * eye)
        else:
            self.feature_values, self.feature_vectors = torch.linalg.eigh(last.features)
            self.output_values, self.output_vectors = torch.linalg.eigh(last.outputs / n_train)

    def covariance(self) -> torch.Tensor:
        """The last-layer covariance P^-1 in the (c, h) order of [W | b], or the diagonal's variances (for tests)."""
        if self.structure == "diagonal":
            return self.std.square()
        if self.structure == "last-layer-full":
            return torch.cholesky_inverse(self.cholesky)
        q = torch.kron(self.output_vectors, self.feature_vectors)
        scale = (self.output_values.unsqueeze(1) * self.feature_values.unsqueeze(0) + self.prior_precision).flatten()
        return q @ torch.diag(scale.reciprocal()) @ q.T

    def output_covariance(self, features: torch.Tensor) -> torch.Tensor:
        """The last-layer posterior's covariance of the outputs, A_i P^-1 A_i^T ``(N, C, C)`` in float64, for features
        a_i = [phi_i; 1] ``(N, H + 1)`` (A_i = I_C (x) a_i^T: the outputs are linear in [W | b], exactly).
        Kronecker: with u_i = Q_A^T a_i, Q_B diag_j(sum_k u_ik^2 / (l_B,j l_A,k + 1 / v)) Q_B^T; full: from P^-1,
        a chunk of rows at a time (each row's product holds C^2 (H + 1) values)."""
        features = features.double()
        if self.structure == "last-layer-kron":
            scale = (self.output_values.double().unsqueeze(1) * self.feature_values.double().unsqueeze(0)
                     + self.prior_precision).reciprocal()  # (C, H + 1)
            weights = (features @ self.feature_vectors.double()).square() @ scale.T  # (N, C)
            vectors = self.output_vectors.double()
            return (vectors * weights.unsqueeze(1)) @ vectors.T
        c, h = self.n_outputs, self.n_features
        covariance = self.covariance().double().view(c, h, c, h)
        rows = max(1, PER_EXAMPLE_VALUES // (c * c * h))
        return torch.cat([torch.einsum("nh,chdk,nk->ncd", chunk, covariance, chunk) for chunk in features.split(rows)])

    def sample(self, draws: torch.Generator, n: int = 1) -> torch.Tensor:
        """``n`` draws Delta ``(n, D')`` (as :meth:`draw`) from standard normal noise of ``draws``, drawn on the CPU in
        the posterior's dtype one draw at a time (the same numbers whether drawn together or one by one)."""
        if self.structure == "diagonal":
            size, dtype = self.std.shape[0], self.std.dtype
        else:
            size = self.n_outputs * self.n_features
            dtype = self.output_values.dtype if self.structure == "last-layer-kron" else self.cholesky.dtype
        z = torch.cat([torch.randn(1, size, generator=draws, dtype=dtype) for _ in range(n)])
        return self.draw(z.to(self.mean.device))

    def draw(self, z: torch.Tensor) -> torch.Tensor:
        """Deviations ``(S, D')`` from standard normal ``z`` ``(S, D')`` (D' = D for the diagonal, C (H + 1) in the
        (c, h) order of [W | b] for the last layer)."""
        if self.structure == "diagonal":
            return z * self.std
        if self.structure == "last-layer-full":
            return torch.linalg.solve_triangular(self.cholesky.T, z.T, upper=True).T
        c, h = self.n_outputs, self.n_features
        scale = (self.output_values.unsqueeze(1) * self.feature_values.unsqueeze(0) + self.prior_precision).rsqrt()
        return (self.output_vectors @ (z.view(-1, c, h) * scale) @ self.feature_vectors.T).flatten(1)


def last_layer_to_layout(delta: torch.Tensor, n_outputs: int, n_parameters: int) -> torch.Tensor:
    """Deviations of [W | b] ``(S, C (H + 1))`` (c, h order) as deviations of all parameters ``(S, D)``: zero but
    for the last layer, whose weight ``(C, H)`` then bias ``(C,)`` are the layout's last entries."""
    wb = delta.view(delta.shape[0], n_outputs, -1)
    last = torch.cat([wb[:, :, :-1].flatten(1), wb[:, :, -1]], dim=1)
    return torch.cat([delta.new_zeros(delta.shape[0], n_parameters - last.shape[1]), last], dim=1)


def _curvature_epoch(problem: Problem, data: MeteredData, model: StackedModel, theta: torch.Tensor, structure: str,
                     batch_size: int, order_seed: int, gradient: torch.Tensor | None = None):
    """One pass over the training rows (charged one epoch): the diagonal GGN ``(D,)`` or a
    :class:`LastLayerCurvature`. Given ``gradient`` ``(D,)``, the full-batch gradient of the negative log-likelihood
    at ``theta`` ``(1, D)``, sum_i grad -log p(y_i | x_i, theta), is added into it from the same forward passes (a
    backward pass per minibatch; no row is read or computed on twice)."""
    order = torch.randperm(data.n_train, generator=torch.Generator().manual_seed(order_seed)).unsqueeze(0)
    into = None if gradient is None else gradient.unsqueeze(0)
    if structure == "diagonal":
        n_outputs = problem.n_classes or _n_outputs(problem.likelihood)
        total = torch.zeros_like(theta)
        for start in range(0, data.n_train, batch_size):
            x, y = data.batch(order[:, start:start + batch_size])
            total += diagonal_ggn(model, problem.likelihood, theta, x, n_outputs, y, into)
        return total[0]
    network = LastLayerFeatures(model, theta, requires_grad=gradient is not None)
    curvature = None
    for start in range(0, data.n_train, batch_size):
        x, y = data.batch(order[:, start:start + batch_size])
        with torch.set_grad_enabled(gradient is not None), \
                (_KernelsAsWithoutGrad() if gradient is not None else contextlib.nullcontext()):
            outputs, features = network(x[0])
            if gradient is not None:
                (grads,) = torch.autograd.grad(-problem.likelihood.log_prob(outputs, y[0]).sum(), network.flat)
                gradient += grads[0].to(gradient.dtype)
        with torch.no_grad():
            outputs, features = outputs.detach(), features.detach()
            root = curvature_root(problem.likelihood, outputs)
            hessians = root @ root.transpose(-1, -2)
            if curvature is None:
                c, h = hessians.shape[1], features.shape[1]
                zeros = lambda *shape: torch.zeros(*shape, dtype=theta.dtype, device=theta.device)  # noqa: E731
                curvature = LastLayerCurvature(zeros(c * h, c * h) if structure == "last-layer-full" else None,
                                               zeros(h, h), zeros(c, c))
            curvature.add(hessians, features)
    return curvature


def map_gradient(theta: torch.Tensor, likelihood_gradient: torch.Tensor,
                 prior_variance: float) -> tuple[float | None, float | None]:
    """The MAP's convergence, at parameters ``theta`` ``(D,)`` given the full-batch negative log-likelihood's gradient
    there ``(D,)``: |grad U(theta)| and the ratio r = |grad U(theta)| / |theta / v| (:data:`MAP_GRADIENT_TOLERANCE`),
    computed in float64; None for a value that is not finite (a record keeps finite numbers), and r = 0 where both
    gradients are 0."""
    prior_gradient = theta.detach().double() / prior_variance
    norm = float((likelihood_gradient.double() + prior_gradient).norm())
    prior_norm = float(prior_gradient.norm())
    ratio = norm / prior_norm if prior_norm > 0 else (0.0 if norm == 0 else math.inf)
    return (norm if math.isfinite(norm) else None), (ratio if math.isfinite(ratio) else None)


def map_warning(ratio: float | None, map_epochs: int) -> str | None:
    """The report's warning where the MAP is not converged (r above :data:`MAP_GRADIENT_TOLERANCE`, or not finite),
    else None."""
    if ratio is not None and ratio <= MAP_GRADIENT_TOLERANCE:
        return None
    reached = "is not finite" if ratio is None else f"is {ratio:.3g} times the prior's there"
    return (f"the MAP did not converge in its {map_epochs} epoch(s): the full-batch gradient of the negative log "
            f"posterior at it {reached} (map_gradient_ratio; converged: at most {MAP_GRADIENT_TOLERANCE:g}), so the "
            "Gaussian is centred away from the posterior's mode; raise the budget")


def _n_outputs(likelihood: Likelihood) -> int:
    return 2 if isinstance(likelihood, HeteroscedasticGaussian) else 1


class Laplace(Approximator):
    name = "laplace"
    resumable = True  # a stopped run continues from its checkpoint (bench.checkpoint; tested)
    summary = "Laplace: Gaussian at a MAP solution with GGN curvature (diagonal, or last layer full / Kronecker)"
    paper = "MacKay 1992; Ritter et al. 2018; Daxberger et al. 2021"
    Config = LaplaceConfig
    TASK_DEFAULTS = LAPLACE_DEFAULTS
    check_budget = 20.0

    def footprint(self, budget: float, n_train: int) -> Footprint:
        self.plan(budget)  # a budget the rule cannot use is refused when the run is planned, before training
        # The predictive averages its draws, but for the probit's closed form.
        averaged = self.config.samples if self.config.predictive != "probit" else 0
        return replace(super().footprint(budget, n_train), averaged=averaged)

    def plan(self, budget: float) -> int:
        """MAP epochs, or a one-line error."""
        map_epochs = math.floor(budget + 1e-9) - CURVATURE_EPOCHS
        if map_epochs < 1:
            raise budget_refusal("laplace", budget, "leaves no epoch of MAP training before the curvature epoch",
                                 self.smallest_budget(), [])
        return map_epochs

    @staticmethod
    def smallest_budget() -> int:
        """One epoch of MAP training, then the curvature's."""
        return 1 + CURVATURE_EPOCHS

    def fit(self, problem: Problem, data: MeteredData, generator: torch.Generator) -> None:
        c = self.config
        map_epochs = self.plan(data.meter.budget_epochs)
        (member,) = member_generators(generator, 1)
        start = Members.start(problem, data, [member])
        layout = start.model.layout
        if c.structure != "diagonal":
            last_layer(start.model.base, layout)  # refuse an unsuitable network before training
        theta = layout.flatten(train_members(start.model, layout.unflatten(start.params), data, problem.likelihood,
                                             problem.prior_variance, map_epochs, schedule_of(c), start.order_seeds))
        likelihood_gradient = torch.zeros(theta.shape[1], dtype=torch.float64, device=theta.device)
        curvature = _curvature_epoch(problem, data, start.model, theta, c.structure, c.batch_size, next_seed(member),
                                     likelihood_gradient)
        posterior = GaussianPosterior(c.structure, theta[0], 1.0 / problem.prior_variance, data.n_train,
                                      **({"diagonal": curvature} if c.structure == "diagonal" else {"last": curvature}))
        self.posterior = posterior  # the fitted Gaussian, for a caller of bench.api.fit (tests/science)
        gradient_norm, ratio = map_gradient(theta[0], likelihood_gradient, problem.prior_variance)
        self.report = {"map_epochs": map_epochs, "curvature_epochs": 1, "epochs_unspent": epochs_unspent(data.meter),
                       "map_gradient_norm": gradient_norm, "map_gradient_ratio": ratio}
        warning = map_warning(ratio, map_epochs)
        if warning:
            self.report["warnings"] = [warning]
        draws = checkpoint.track(torch.Generator().manual_seed(next_seed(member)))
        if c.structure != "diagonal":
            self._predictive = last_layer_predictive(problem, start.model, theta, posterior, c.predictive,
                                                     c.samples, draws, generator)
        elif c.predictive == "probit":
            self._predictive = probit_predictive(problem, *diagonal_output_moments(problem, start.model, theta,
                                                                                   posterior.std.square()), draws)
        else:
            accumulator = PredictiveAccumulator(problem, c.samples, generator)
            for _ in range(c.samples):
                delta = posterior.sample(draws).to(theta)
                if c.predictive == "sampling":
                    accumulator.add(layout.unflatten(theta + delta))
                else:
                    accumulator.add_outputs(linearised_outputs(problem, start.model, theta, delta))
            self._predictive = accumulator.result()


def features_on_test_inputs(problem: Problem, model: StackedModel,
                            theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The network's outputs f(x; theta*) ``(N_test, C)`` and last-layer features a = [phi; 1] ``(N_test, H + 1)``
    on the test inputs, from one pass over them (charged as one test pass), for parameters ``(1, D)``."""
    x = problem.x_test
    network = LastLayerFeatures(model, theta)
    release_freed_memory()  # what training freed, before the test rows' larger chunks are allocated
    with torch.no_grad():
        outputs, features = zip(*(network(x[i:i + EVAL_CHUNK]) for i in range(0, x.shape[0], EVAL_CHUNK)))
    problem.meter.record_test_pass(x.shape[0], x.shape[0])
    return torch.cat(outputs), torch.cat(features)


def last_layer_predictive(problem: Problem, model: StackedModel, theta: torch.Tensor, posterior: GaussianPosterior,
                          predictive: str, samples: int, draws: torch.Generator,
                          generator: torch.Generator) -> np.ndarray:
    """A last-layer posterior's predictive at parameters ``(1, D)`` from the test features, computed once:
    ``probit`` in closed form, or (``sampling``, ``glm``: the same predictive, the network being linear in its last
    layer) the model average of ``samples`` draws of the last layer alone, outputs a_i^T [W + dW | b + db]^T for
    all draws in one product."""
    outputs, features = features_on_test_inputs(problem, model, theta)
    if predictive == "probit":
        return probit_predictive(problem, outputs, posterior.output_covariance(features), draws)
    *_, weight, bias = model.layout.names
    mean = model.layout.unflatten(theta.detach())
    last = torch.cat([mean[weight][0], mean[bias][0].unsqueeze(1)], dim=1)  # [W | b] (C, H + 1)
    deltas = posterior.sample(draws, samples).to(last)
    weights = last + deltas.view(samples, *last.shape)  # (S, C, H + 1), as theta + Delta in the parameters' dtype
    accumulator = PredictiveAccumulator(problem, samples, generator, model)  # the task's network, not built again
    with torch.no_grad():  # one matrix product (N, H + 1) x (H + 1, S C) for all draws, then (S, N, C)
        outputs = (features @ weights.flatten(0, 1).T).view(features.shape[0], samples, -1)
        accumulator.add_outputs(outputs.transpose(0, 1).contiguous().double().cpu())
    return accumulator.result()


def diagonal_output_moments(problem: Problem, model: StackedModel, theta: torch.Tensor,
                            variances: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The outputs f(x; theta*) ``(N_test, O)`` and their covariance J diag(variances) J^T ``(N_test, O, O)`` in
    float64 under the diagonal posterior (parameters ``(1, D)``, ``variances`` ``(D,)``), from per-example Jacobians
    (:func:`per_example_jacobians`: the network runs once per test row, one test pass)."""
    x = problem.x_test
    n_outputs = problem.n_classes or _n_outputs(problem.likelihood)
    outputs, covariances = [], []
    for jacobians, out in per_example_jacobians(model, theta.detach(), x.unsqueeze(0), n_outputs):
        jacobians = jacobians[0].double()  # (rows, O, D)
        covariances.append(torch.einsum("nod,d,npd->nop", jacobians, variances.double(), jacobians))
        outputs.append(out[0].detach())
    problem.meter.record_test_pass(x.shape[0], x.shape[0])
    return torch.cat(outputs), torch.cat(covariances)


def probit_predictive(problem: Problem, outputs: torch.Tensor, covariance: torch.Tensor,
                      draws: torch.Generator) -> np.ndarray:
    """The linearised network's predictive, from the outputs' mean f = f(x; theta*) ``(N, O)`` and covariance
    F = J P^-1 J^T ``(N, O, O)``, without Monte Carlo over the weights. Classification: MacKay's (1992) probit
    approximation of E[softmax(g)], g ~ N(f, F), softmax(f / sqrt(1 + pi / 8 diag F)), laplace-torch's
    ``link_approx='probit'``. Regression: under the linearisation the outputs are N(f, F) exactly, so each of the
    task's predictive samples is y ~ p(y | g) at its own g ~ N(f, F) drawn in output space (``draws``); for a
    Gaussian of fixed noise s that is y ~ N(f, F + s^2), laplace-torch's closed form."""
    outputs, covariance = outputs.double().cpu(), covariance.double().cpu()
    if problem.kind == "classification":
        kappa = (1 + math.pi / 8 * covariance.diagonal(dim1=-2, dim2=-1)).rsqrt()
        return Categorical.probabilities(kappa * outputs).numpy()
    n, s = outputs.shape[0], problem.n_predictive_samples
    values, vectors = torch.linalg.eigh(covariance)
    root = vectors * values.clamp(min=0).sqrt().unsqueeze(1)  # root root^T = F (round-off negatives cut to 0)
    z = torch.randn(n, s, outputs.shape[1], generator=draws, dtype=torch.float64)
    g = outputs.unsqueeze(1) + z @ root.transpose(1, 2)  # (N, S, O)
    return problem.likelihood.sample(g.flatten(0, 1), 1, draws).view(n, s).numpy()


def linearised_outputs(problem: Problem, model: StackedModel, theta: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """f(x; theta*) + J(x) Delta on the test inputs, ``(K, N_test, O)`` float64 on the CPU, for K deviations
    ``delta`` ``(K, D)`` (one Jacobian-vector product per chunk of test rows, which takes each row through the
    network twice, for the primal and the tangent: 2K test passes reported)."""
    x = problem.x_test
    k = delta.shape[0]
    primal = theta.detach().expand(k, -1)
    chunks = []
    with torch.no_grad():
        for i in range(0, x.shape[0], EVAL_CHUNK):
            outputs, tangent = jvp(lambda p: model.flat(p, x[i:i + EVAL_CHUNK]), (primal,), (delta,))
            chunks.append(outputs + tangent)
    problem.meter.record_test_pass(2 * k * x.shape[0], x.shape[0])
    return torch.cat(chunks, dim=1).double().cpu()
