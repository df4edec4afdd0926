r"""Mean-field variational inference, Bayes by Backprop (Blundell et al. 2015): ``mfvi``.

q(w) = N(mu, diag(sigma^2)) with sigma = softplus(rho), fitted by maximising the ELBO at full-data
scale and temperature 1; per training example the loss is

    L(mu, rho) = E_q[ -(1/B) sum_{i in batch} log p(y_i | x_i, w) ] + KL(q || N(0, v I)) / N,
    KL = sum_j [ (sigma_j^2 + mu_j^2) / v - 1 - log(sigma_j^2 / v) ] / 2   (exact, in closed form).

The likelihood term's gradient is estimated by the local reparameterisation trick (Kingma et al.
2015) on MLPs (``toy-gap``, ``diabetes-gap``, ``digits`` and ``uci-gap``): each layer's pre-activations are
drawn per example from their Gaussian, so the examples of a minibatch see independent weights and the
gradient's variance falls. On the convolutional and recurrent models (``digits-cnn``, ``digits-lstm`` and the
other competition models) one reparameterised draw w = mu + sigma * eps per member and step is shared by the
minibatch, giving, with g the likelihood term's gradient at w, g and g * eps * sigmoid(rho). The KL's gradient is
exact, mu / (v N) and (sigma / v - 1 / sigma) sigmoid(rho) / N, and Adam (cosine decay from ``lr``
to ``min_lr``) steps on (mu, rho) together.

Initialisation as Izmailov et al. (2021) did for their MFVI baseline: a MAP phase inside the budget
(``map_fraction`` of it, the MAP training of ``sgd`` with the task's ``sgd`` settings, ``map_*``), then mu = the
MAP weights and sigma = ``init_std``. Prediction: the model average of ``samples`` (30) draws of q.

Deviation (stated here and in the README): Flipout, which would decorrelate the examples' draws on
convolutional and recurrent layers, is not built; those models share one draw per minibatch (an
unbiased gradient, with more variance).

Budget rule: round(``map_fraction`` x B) epochs (at least 1) of MAP, the rest, floor(B) minus
those, of VI. Defaults: ``lr`` and ``init_std`` per embedded task from ``python benchmarks/tune_trajectory.py
mfvi`` (held-out NLL on 10% of the training rows over init_std in {0.001, 0.01, 0.1} x lr in {0.003 .. 0.1}, seeds
0-2, budget 100, never the reference; only settings whose q reaches the variance of its own converged run, 10x
the budget, within 2x): lr 0.03 / 0.03 / 0.1 / 0.03 / 0.03 and init_std 0.001 / 0.01 / 0.1 / 0.001 / 0.001 on
toy-gap / diabetes-gap / digits / digits-cnn / digits-lstm (digits' lr is the grid's largest). Elsewhere (the
competition tasks, a task of one's own) lr 0.03 and init_std 0.01: on Bayesian linear regression q reaches the
mean-field optimum by 1000 steps (variances 0.96-0.99x it; the earlier 1e-3 and 1e-3 stopped below 0.1%:
``python benchmarks/converged_gap.py linear --methods mfvi``), and it trains on random data of each
competition task's shapes (``benchmarks/competition_stability.py``); untuned there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from approximators import engine
from approximators.base import (SCHEDULE_WOULD_RISE, DRAWS_BOUNDS, Approximator, Footprint, Problem, epochs_unspent,
                                mean_field_predictive, next_seed)
from approximators.engine import Objective
from approximators.map import MAP_DEFAULTS
from approximators.refusals import LEAST_FRACTION, budget_refusal, least_epochs, settings_that_lower
from approximators.sgld import chain_generators
from approximators.training import Members, schedule_of, train_members
from approximators.updates import Adam, NoiseStream, cosine_schedule
from bench.budget import MeteredData


TUNED = {"toy-gap": dict(lr=0.03, init_std=0.001), "diabetes-gap": dict(lr=0.03, init_std=0.01),
         "digits": dict(lr=0.1, init_std=0.1), "digits-cnn": dict(lr=0.03, init_std=0.001),
         "digits-lstm": dict(lr=0.03, init_std=0.001)}


@dataclass(frozen=True)
class MFVIConfig:
    batch_size: int = 128
    lr: float = 0.03
    min_lr: float = 1e-5
    map_fraction: float = 0.1
    init_std: float = 0.01
    samples: int = 30
    # the MAP phase: Adam with a cosine decay, as `sgd` (its per-task settings below)
    map_lr: float = 1e-2
    map_min_lr: float = 1e-4
    map_beta1: float = 0.9
    map_beta2: float = 0.999

    BOUNDS: ClassVar[dict[str, str]] = {
        "batch_size": "[1, inf)",
        "lr": "(0, inf)",
        "min_lr": "[0, inf)",
        "map_fraction": "(0, 1)",
        "init_std": "(0, inf)",
        "samples": DRAWS_BOUNDS,
        "map_lr": "(0, inf)",
        "map_min_lr": "[0, inf)",
        "map_beta1": "[0, 1)",
        "map_beta2": "[0, 1)",
    }
    """Each numeric setting's interval (checked before any work: :func:`approximators.base.check_settings`)."""
    AT_MOST: ClassVar[dict] = {"min_lr": ("lr", SCHEDULE_WOULD_RISE), "map_min_lr": ("map_lr", SCHEDULE_WOULD_RISE)}
    """Settings that may not exceed another (a cosine decay's end, its start), checked with the bounds."""


MFVI_DEFAULTS = {
    # lr, init_std: `python benchmarks/tune_trajectory.py mfvi` (see the docstring); the MAP
    # phase: `sgd`'s settings of the task.
    task: {"batch_size": settings["batch_size"], **{f"map_{k}": v for k, v in settings.items() if k != "batch_size"},
           **TUNED.get(task, {})}
    for task, settings in MAP_DEFAULTS.items()
}


@dataclass
class MFVIState:
    params: torch.Tensor  # mu (K, D): a view of ``adam.params``
    adam: object  # Adam's state over (mu, rho) as one (K, 2D) tensor
    noise: NoiseStream
    draw: torch.Tensor  # w (K, D), a leaf the likelihood gradient is taken at

    @property
    def rho(self) -> torch.Tensor:
        return self.adam.params[:, self.params.shape[1]:]


class MFVIRule:
    """Adam on the reparameterised ELBO of the module docstring, over stacked members."""

    def __init__(self, adam: Adam, prior_variance: float, n_train: int, generators: list[torch.Generator]):
        self.adam, self.prior_variance, self.n_train, self.generators = adam, prior_variance, n_train, generators

    def init(self, variational: torch.Tensor) -> MFVIState:
        """``variational`` ``(K, 2D)``: mu then rho."""
        dim = variational.shape[1] // 2
        adam = self.adam.init(variational.detach().clone())
        mu = adam.params[:, :dim]
        return MFVIState(mu, adam, NoiseStream(self.generators, mu), torch.empty_like(mu).requires_grad_(True))

    def gradient(self, objective: Objective, state: MFVIState, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The ELBO's gradient in (mu, rho), ``(K, 2D)``: the likelihood term's by the local
        reparameterisation trick on MLPs, by one weight draw otherwise; the KL's in closed form."""
        rho = state.rho
        with torch.no_grad():
            sigma = F.softplus(rho)
        if objective.model.mlp_layers is not None:
            grad_mu, grad_rho = local_reparameterisation_gradient(objective, state.params, rho, x, y,
                                                                 self.generators)
        else:
            with torch.no_grad():
                eps = state.noise.next()
                state.draw.copy_(torch.addcmul(state.params, sigma, eps))
            grad_mu = objective.likelihood_gradient(state.draw, x, y)
            grad_rho = grad_mu * eps * torch.sigmoid(rho)
        with torch.no_grad():
            scale = 1.0 / self.n_train
            grad_mu.add_(state.params, alpha=scale / self.prior_variance)
            grad_rho.add_((sigma / self.prior_variance - sigma.reciprocal()) * torch.sigmoid(rho), alpha=scale)
            return torch.cat([grad_mu, grad_rho], dim=1)

    def update(self, state: MFVIState, grads: torch.Tensor, step: int) -> MFVIState:
        self.adam.update(state.adam, grads, step)
        return state


def local_reparameterisation_gradient(objective: Objective, mu: torch.Tensor, rho: torch.Tensor, x: torch.Tensor,
                                      y: torch.Tensor, generators: list[torch.Generator]):
    """The likelihood term's gradient in mu and rho for an MLP, by the local reparameterisation trick
    (Kingma et al. 2015): each layer's pre-activations are drawn per example from their Gaussian,
    z ~ N(a M^T + b_mu, a^2 (S^2)^T + s_b^2), one draw of xi ~ N(0, 1) per member, example and unit
    (member k's from generator k), instead of one weight draw shared by the minibatch."""
    model = objective.model
    variational = torch.cat([mu, rho], dim=1).detach().requires_grad_(True)
    dim = mu.shape[1]
    means = model.layout.unflatten(variational[:, :dim])
    variances = model.layout.unflatten(F.softplus(variational[:, dim:]).square())
    h = x
    for kind, name in model.mlp_layers:
        if kind == "linear":
            weight, bias = f"{name}.weight", f"{name}.bias"
            mean = torch.baddbmm(means[bias].unsqueeze(-2), h, means[weight].transpose(-1, -2))
            variance = torch.baddbmm(variances[bias].unsqueeze(-2), h.square(), variances[weight].transpose(-1, -2))
            xi = torch.stack([torch.randn(mean.shape[1:], generator=g, dtype=mean.dtype, device=mean.device)
                              for g in generators])
            h = mean + variance.sqrt() * xi
        else:
            h = torch.relu(h)
    (grads,) = torch.autograd.grad(-objective.likelihood.log_prob(h, y).mean(-1).sum(), variational)
    return grads[:, :dim], grads[:, dim:]


def inverse_softplus(value: float) -> float:
    return value + math.log(-math.expm1(-value))


class MFVI(Approximator):
    name = "mfvi"
    resumable = True  # a stopped run continues from its checkpoint (bench.checkpoint; tested)
    summary = "mean-field VI (Bayes by Backprop): reparameterised Gaussian posterior, exact KL, MAP start"
    paper = "Blundell et al. 2015"
    Config = MFVIConfig
    TASK_DEFAULTS = MFVI_DEFAULTS
    check_budget = 20.0

    def footprint(self, budget: float, n_train: int) -> Footprint:
        self.plan(budget)  # a budget the rule cannot use is refused when the run is planned, before training
        return super().footprint(budget, n_train)

    def plan(self, budget: float) -> tuple[int, int]:
        """(MAP epochs, VI epochs) or a one-line error."""
        total = math.floor(budget + 1e-9)
        map_epochs = self.map_epochs(total)
        if total - map_epochs < 1:
            raise budget_refusal("mfvi", budget, f"leaves no epoch of VI after {map_epochs} of MAP",
                                 self.smallest_budget(), settings_that_lower(
                                     self, type(self).smallest_budget, {"map_fraction": LEAST_FRACTION}))
        return map_epochs, total - map_epochs

    def map_epochs(self, total: int) -> int:
        """The MAP phase's epochs of ``total``: at least one."""
        return max(1, round(self.config.map_fraction * total))

    def smallest_budget(self) -> int | None:
        """The fewest epochs that leave one of VI after the MAP phase."""
        return least_epochs(lambda total: total - self.map_epochs(total) >= 1)

    def fit(self, problem: Problem, data: MeteredData, generator: torch.Generator) -> None:
        c = self.config
        map_epochs, vi_epochs = self.plan(data.meter.budget_epochs)
        generators, noise = chain_generators(generator, 1, data.device)
        members = Members.start(problem, data, generators)
        layout = members.model.layout
        mu = layout.flatten(train_members(members.model, layout.unflatten(members.params), data, problem.likelihood,
                                          problem.prior_variance, map_epochs, schedule_of(c, "map_"),
                                          members.order_seeds))
        rho = torch.full_like(mu, inverse_softplus(c.init_std))
        steps = vi_epochs * engine.steps_per_epoch(data.n_train, c.batch_size)
        rule = MFVIRule(Adam(cosine_schedule(c.lr, c.min_lr, steps)), problem.prior_variance, data.n_train, noise)
        state = engine.run(members.objective, rule, torch.cat([mu, rho], dim=1), data, vi_epochs, c.batch_size,
                           [next_seed(g) for g in generators])
        self.report = {"map_epochs": map_epochs, "vi_epochs": vi_epochs, "epochs_unspent": epochs_unspent(data.meter)}
        with torch.no_grad():
            sigma = F.softplus(state.rho)
        self._predictive = mean_field_predictive(problem, generator, layout, state.params, sigma, state.noise,
                                                 c.samples)
