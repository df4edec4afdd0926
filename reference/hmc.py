r"""Full-batch Hamiltonian Monte Carlo over many chains at once (Izmailov et al. 2021).

The target is a log posterior split as log p(theta | D) = L(theta) + log N(theta; 0, v I) + const,
with L the full-data log-likelihood. Each of C chains holds a position theta ``(C, D)``. One
iteration, per chain:

1. draw a momentum p ~ N(0, I) (identity mass matrix), fresh at every iteration;
2. integrate Hamilton's equations with the leapfrog (velocity Verlet) scheme, n = ceil(tau / eps)
   steps of size eps, for H(theta, p) = -L(theta) - log N(theta; 0, v I) + |p|^2 / 2::

       p <- p + eps/2 * grad log p(theta | D);  theta <- theta + eps * p;  p <- p + eps/2 * grad log p(theta | D)

3. accept the end point with probability min(1, exp(-Delta H)), where Delta H is computed in float64
   from the separate changes of the log-likelihood, the log-prior and the kinetic energy.

The default trajectory length tau = (pi / 2) sqrt(v) is a quarter period of the prior's dynamics:
on a prior-only target one iteration then yields an independent draw. During burn-in each chain's
step size is tuned by dual averaging (Hoffman & Gelman 2014, Algorithm 5) towards a target
acceptance probability and then frozen at its averaged value, so the kept samples come from a
fixed, valid Markov kernel.

Chains are independent: each has its own step size, trajectory step count (shorter chains are
masked once they finish) and its own ``torch.Generator`` for momenta and Metropolis uniforms. A
vectorised run of C chains therefore gives each chain the same draws as that chain run alone.

The core is functional: :func:`init` builds an :class:`HMCState`, :func:`step` advances it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch

LogLikelihood = Callable[[torch.Tensor], torch.Tensor]
"""Maps positions ``(C, D)`` to full-data log-likelihoods ``(C,)``, differentiably."""


@dataclass(frozen=True)
class Target:
    """A log posterior: a log-likelihood (None for a prior-only target) and an N(0, v I) prior."""

    log_likelihood: LogLikelihood | None
    prior_variance: float

    def evaluate(self, position: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns the log-likelihood and log-prior ``(C,)`` in float64, and the gradient of the
        log posterior ``(C, D)`` in the positions' dtype."""
        log_prior = -0.5 * position.double().square().sum(-1) / self.prior_variance
        prior_grad = -position / self.prior_variance
        if self.log_likelihood is None:
            return torch.zeros_like(log_prior), log_prior, prior_grad
        with torch.enable_grad():
            theta = position.detach().requires_grad_(True)
            log_lik = self.log_likelihood(theta)
            (grad,) = torch.autograd.grad(log_lik.sum(), theta)
        return log_lik.detach().double(), log_prior, grad + prior_grad


@dataclass(frozen=True)
class DualAveraging:
    """Per-chain dual-averaging state (Hoffman & Gelman 2014, Algorithm 5), all ``(C,)`` float64."""

    mu: torch.Tensor
    h_bar: torch.Tensor
    log_step_bar: torch.Tensor
    iteration: int = 0
    gamma: float = 0.05
    t0: float = 10.0
    kappa: float = 0.75

    @classmethod
    def start(cls, step_size: torch.Tensor) -> "DualAveraging":
        return cls(mu=torch.log(10 * step_size), h_bar=torch.zeros_like(step_size),
                   log_step_bar=torch.zeros_like(step_size))

    def update(self, accept_prob: torch.Tensor, target_accept: float) -> tuple["DualAveraging", torch.Tensor]:
        """One adaptation step: returns the new state and the step size to use next."""
        t = self.iteration + 1
        w = 1.0 / (t + self.t0)
        h_bar = (1 - w) * self.h_bar + w * (target_accept - accept_prob)
        log_step = self.mu - math.sqrt(t) / self.gamma * h_bar
        eta = t ** -self.kappa
        log_step_bar = eta * log_step + (1 - eta) * self.log_step_bar
        return replace(self, h_bar=h_bar, log_step_bar=log_step_bar, iteration=t), log_step.exp()

    def final_step_size(self) -> torch.Tensor:
        return self.log_step_bar.exp()


@dataclass(frozen=True)
class HMCState:
    """Positions ``(C, D)``, their log-likelihood and log-prior ``(C,)`` float64, the log-posterior
    gradient ``(C, D)``, and each chain's step size ``(C,)`` float64."""

    position: torch.Tensor
    log_likelihood: torch.Tensor
    log_prior: torch.Tensor
    grad: torch.Tensor
    step_size: torch.Tensor
    adaptation: DualAveraging | None = None


@dataclass(frozen=True)
class StepInfo:
    accept_prob: torch.Tensor
    accepted: torch.Tensor
    energy_error: torch.Tensor
    n_leapfrog: torch.Tensor


def init(position: torch.Tensor, target: Target, step_size: float | torch.Tensor, adapt: bool = False) -> HMCState:
    """Starts C chains at ``position`` ``(C, D)`` with an initial step size (scalar or ``(C,)``)."""
    step = torch.as_tensor(step_size, dtype=torch.float64).expand(position.shape[0]).clone()
    log_lik, log_prior, grad = target.evaluate(position)
    return HMCState(position.detach(), log_lik, log_prior, grad, step,
                    DualAveraging.start(step) if adapt else None)


def leapfrog_steps(trajectory_length: float, step_size: torch.Tensor, max_steps: int) -> torch.Tensor:
    """n = ceil(tau / eps) per chain, at least 1 and at most ``max_steps``."""
    return torch.ceil(trajectory_length / step_size).clamp(1, max_steps).long()


def leapfrog(
    position: torch.Tensor, momentum: torch.Tensor, grad: torch.Tensor, step_size: torch.Tensor,
    n_steps: torch.Tensor, target: Target,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Integrates each chain for its own ``n_steps`` ``(C,)``; chains that finish early are frozen.

    Returns position, momentum, log-likelihood, log-prior and gradient at the end points.
    """
    eps = step_size.to(device=position.device, dtype=position.dtype).unsqueeze(-1)
    all_active = int(n_steps.min())
    log_lik = log_prior = None
    for i in range(int(n_steps.max())):
        half = momentum + 0.5 * eps * grad
        new_position = position + eps * half
        new_log_lik, new_log_prior, new_grad = target.evaluate(new_position)
        new_momentum = half + 0.5 * eps * new_grad
        if i < all_active:
            position, momentum, grad, log_lik, log_prior = (
                new_position, new_momentum, new_grad, new_log_lik, new_log_prior)
            continue
        active = (i < n_steps).to(position.device)
        column = active.unsqueeze(-1)
        position = torch.where(column, new_position, position)
        momentum = torch.where(column, new_momentum, momentum)
        grad = torch.where(column, new_grad, grad)
        log_lik = torch.where(active, new_log_lik, log_lik)
        log_prior = torch.where(active, new_log_prior, log_prior)
    return position, momentum, log_lik, log_prior, grad


def _per_chain_normal(generators: list[torch.Generator], shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    draws = [torch.randn(shape, generator=g, dtype=like.dtype) for g in generators]
    return torch.stack(draws).to(like.device)


def step(
    state: HMCState,
    target: Target,
    trajectory_length: float,
    generators: list[torch.Generator],
    target_accept: float = 0.8,
    max_leapfrog_steps: int = 10_000,
) -> tuple[HMCState, StepInfo]:
    """One HMC iteration for every chain. ``generators`` holds one CPU generator per chain.

    If ``state.adaptation`` is set, the step size is updated by dual averaging after the
    Metropolis test (burn-in); call :func:`freeze` to end adaptation.
    """
    n_chains, dim = state.position.shape
    if len(generators) != n_chains:
        raise ValueError(f"need one generator per chain: {n_chains} chains, {len(generators)} generators")
    momentum = _per_chain_normal(generators, (dim,), state.position)
    n_steps = leapfrog_steps(trajectory_length, state.step_size, max_leapfrog_steps)
    position, new_momentum, log_lik, log_prior, grad = leapfrog(
        state.position, momentum, state.grad, state.step_size, n_steps, target)

    kinetic_change = 0.5 * (new_momentum.double().square().sum(-1) - momentum.double().square().sum(-1))
    log_accept = (log_lik - state.log_likelihood) + (log_prior - state.log_prior) - kinetic_change
    log_accept = torch.nan_to_num(log_accept, nan=-math.inf)
    accept_prob = log_accept.clamp(max=0.0).exp()
    uniforms = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in generators])
    accepted = uniforms.to(log_accept.device).log() < log_accept

    column = accepted.unsqueeze(-1)
    new_state = HMCState(
        position=torch.where(column, position, state.position),
        log_likelihood=torch.where(accepted, log_lik, state.log_likelihood),
        log_prior=torch.where(accepted, log_prior, state.log_prior),
        grad=torch.where(column, grad, state.grad),
        step_size=state.step_size,
        adaptation=state.adaptation,
    )
    if state.adaptation is not None:
        adaptation, step_size = state.adaptation.update(accept_prob.cpu(), target_accept)
        new_state = replace(new_state, adaptation=adaptation, step_size=step_size)
    info = StepInfo(accept_prob=accept_prob, accepted=accepted, energy_error=-log_accept, n_leapfrog=n_steps)
    return new_state, info


def freeze(state: HMCState) -> HMCState:
    """Ends adaptation: every chain keeps its dual-averaged step size from now on."""
    if state.adaptation is None:
        return state
    return replace(state, step_size=state.adaptation.final_step_size(), adaptation=None)


def default_trajectory_length(prior_variance: float) -> float:
    """tau = (pi / 2) sqrt(v), as in Izmailov et al. (2021)."""
    return 0.5 * math.pi * math.sqrt(prior_variance)
