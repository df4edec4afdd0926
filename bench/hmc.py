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

Jitter (``jitter`` = j > 0): each iteration's trajectory length is tau * u with u ~ U(1 - j, 1 + j)
drawn per chain, so n = ceil(tau u / eps) varies from iteration to iteration and no direction whose
period divides the trajectory is left where it started: a fixed trajectory length can make HMC
non-ergodic (Neal 2011, "MCMC using Hamiltonian dynamics", on periodicity; Bou-Rabee & Sanz-Serna 2017,
"Randomized Hamiltonian Monte Carlo").
j = 0 draws nothing, so the chains of the references sampled without jitter are unchanged.

Chains are independent: each has its own step size, trajectory step count and its own
``torch.Generator`` for momenta, jitter and Metropolis uniforms. A vectorised run of C chains
therefore gives each chain the same draws as that chain run alone.

An :class:`Integrator` runs the leapfrog trajectories: all chains in one vectorised pass (shorter
trajectories masked once they finish) or chain by chain, each either eagerly or as one compiled
function per leapfrog step (``torch.compile``: the position and momentum updates and the gradient
fused, without PyTorch's per-operation overhead). The four ways compute the same trajectories up
to float round-off; each is bitwise reproducible on one machine, and chain by chain a chain's
trajectory does not depend on the other chains at all.

The core is functional: :func:`init` builds an :class:`HMCState`, :func:`step` advances it.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, replace
from typing import Callable

import torch

LogLikelihood = Callable[..., torch.Tensor]
"""Maps positions ``(C, D)`` and the data tensors a :class:`Target` reads to full-data log-likelihoods ``(C,)``,
differentiably."""


def _no_data(chains: int) -> tuple[torch.Tensor, ...]:
    return ()


@dataclass(frozen=True)
class Target:
    """A log posterior: a log-likelihood (None for a prior-only target) and an N(0, v I) prior.

    ``data(C)`` gives the tensors one evaluation of C chains' log-likelihood reads, passed to it after the
    positions: ``log_likelihood(theta, *data(C))``. Each evaluation asks for them anew, so a sampler under an
    epoch budget reads the training set through the meter at every gradient (``approximators.hmc``); the
    default reads nothing (the log-likelihood holds its data)."""

    log_likelihood: LogLikelihood | None
    prior_variance: float
    data: Callable[[int], tuple[torch.Tensor, ...]] = _no_data

    def evaluate(self, position: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns the log-likelihood and log-prior ``(C,)`` in float64, and the gradient of the
        log posterior ``(C, D)`` in the positions' dtype."""
        log_prior = self.log_prior(position)
        prior_grad = -position / self.prior_variance
        if self.log_likelihood is None:
            return torch.zeros_like(log_prior), log_prior, prior_grad
        with torch.enable_grad():
            theta = position.detach().requires_grad_(True)
            log_lik = self.log_likelihood(theta, *self.data(position.shape[0]))
            (grad,) = torch.autograd.grad(log_lik.sum(), theta)
        return log_lik.detach().double(), log_prior, grad + prior_grad

    def log_prior(self, position: torch.Tensor) -> torch.Tensor:
        """log N(theta; 0, v I) up to its constant, ``(C,)`` float64."""
        return -0.5 * position.double().square().sum(-1) / self.prior_variance


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
    def start(cls, step_size: torch.Tensor, centre: float = 10.0) -> "DualAveraging":
        """Adaptation from ``step_size``, its steps shrunk towards mu = log(``centre`` * step_size) (the paper's 10)."""
        return cls(mu=torch.log(centre * step_size), h_bar=torch.zeros_like(step_size),
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
    gradient_evaluations: int
    """Full-data gradients the iteration computed, over all chains (see :meth:`Integrator.gradient_evaluations`)."""


def init(position: torch.Tensor, target: Target, step_size: float | torch.Tensor, adapt: bool = False) -> HMCState:
    """Starts C chains at ``position`` ``(C, D)`` with an initial step size (scalar or ``(C,)``)."""
    step = torch.as_tensor(step_size, dtype=torch.float64).expand(position.shape[0]).clone()
    log_lik, log_prior, grad = target.evaluate(position)
    return HMCState(position.detach(), log_lik, log_prior, grad, step,
                    DualAveraging.start(step) if adapt else None)


def leapfrog_steps(trajectory_length: float | torch.Tensor, step_size: torch.Tensor, max_steps: int) -> torch.Tensor:
    """n = ceil(tau / eps) per chain (``tau`` a number or one per chain), at least 1 and at most ``max_steps``."""
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


def _compiled_leapfrog_step(target: Target) -> Callable:
    """One leapfrog step of ``target`` as a compiled function of ``(position, momentum, grad, eps, active, *data)``
    ``(C, D), (C, D), (C, D), (C, 1), (C, 1) bool, target.data(C)`` -> ``(position, momentum, grad, log_lik (C,)
    float64)``; chains not ``active`` keep their state (their log-likelihood is that of the unused new position)."""
    variance = target.prior_variance
    likelihood = target.log_likelihood

    def summed(theta: torch.Tensor, *data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_lik = likelihood(theta, *data).double()
        return log_lik.sum(), log_lik

    value_and_grad = torch.func.grad_and_value(summed, has_aux=True)

    def leapfrog_step(position, momentum, grad, eps, active, *data):
        half = momentum + 0.5 * eps * grad
        new_position = position + eps * half
        if likelihood is None:
            log_lik = torch.zeros(position.shape[0], dtype=torch.float64, device=position.device)
            new_grad = -new_position / variance
        else:
            likelihood_grad, (_, log_lik) = value_and_grad(new_position, *data)
            new_grad = likelihood_grad - new_position / variance
        new_momentum = half + 0.5 * eps * new_grad
        return (torch.where(active, new_position, position), torch.where(active, new_momentum, momentum),
                torch.where(active, new_grad, grad), log_lik)

    return torch.compile(_with_its_own_code(leapfrog_step), dynamic=False, fullgraph=True)


def _with_its_own_code(function: Callable) -> Callable:
    """A copy of ``function`` with a code object of its own. ``torch.compile`` keeps compiled graphs, and counts
    recompilations against its limit (8), per code object: every integrator's leapfrog step would share one count, and
    a process that samples more than 8 models, dtypes or chain counts (a sweep, a notebook, a benchmark) would fail
    on the ninth. A copy per integrator keeps each one's graphs, and its count, to itself."""
    code = function.__code__.replace()  # a new, equal code object
    return types.FunctionType(code, function.__globals__, function.__name__, function.__defaults__,
                              function.__closure__)


class Integrator:
    """Leapfrog trajectories for ``target``'s chains, in one of four equivalent ways.

    ``vectorise``: every chain in one pass over the stacked positions ``(C, D)``, chains that finish
    early frozen by masking (one call per step for all chains); otherwise chain by chain, each on its
    own ``(1, D)`` slice for exactly its own number of steps (nothing computed for another chain's
    longer trajectory). ``compiled``: each leapfrog step is one ``torch.compile``-d function (compiled
    at the first call, about 20-30 s on a CPU; needs a C++ compiler there), otherwise eager PyTorch
    (:func:`leapfrog`). Which way is fastest depends on the model and the device: ``benchmarks/hmc_speed.py``
    measures all four.
    """

    def __init__(self, target: Target, vectorise: bool = True, compiled: bool = False):
        self.target, self.vectorise, self.compiled = target, vectorise, compiled
        self._step = _compiled_leapfrog_step(target) if compiled else None

    def gradient_evaluations(self, n_steps: torch.Tensor) -> int:
        """Full-data gradients computed for trajectories of ``n_steps`` ``(C,)`` steps (vectorised, the
        finished chains are computed with the others until the longest trajectory ends)."""
        return int(n_steps.max()) * len(n_steps) if self.vectorise else int(n_steps.sum())

    def __call__(self, position: torch.Tensor, momentum: torch.Tensor, grad: torch.Tensor, step_size: torch.Tensor,
                 n_steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """As :func:`leapfrog`: position, momentum, log-likelihood, log-prior and gradient at the end points."""
        if self.vectorise:
            return self._trajectories(position, momentum, grad, step_size, n_steps)
        ends = [self._trajectories(position[c:c + 1], momentum[c:c + 1], grad[c:c + 1], step_size[c:c + 1],
                                   n_steps[c:c + 1]) for c in range(position.shape[0])]
        return tuple(torch.cat(parts) for parts in zip(*ends))

    def _trajectories(self, position, momentum, grad, step_size, n_steps):
        if self._step is None:
            return leapfrog(position, momentum, grad, step_size, n_steps, self.target)
        eps = step_size.to(device=position.device, dtype=position.dtype).unsqueeze(-1)
        log_lik = None
        for i in range(int(n_steps.max())):
            active = (i < n_steps).to(position.device).unsqueeze(-1)
            position, momentum, grad, new_log_lik = self._step(position, momentum, grad, eps, active,
                                                               *self.target.data(position.shape[0]))
            log_lik = new_log_lik if log_lik is None else torch.where(active.squeeze(-1), new_log_lik, log_lik)
        return position, momentum, log_lik, self.target.log_prior(position), grad


def _per_chain_normal(generators: list[torch.Generator], shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    draws = [torch.randn(shape, generator=g, dtype=like.dtype) for g in generators]
    return torch.stack(draws).to(like.device)


def _per_chain_uniform(generators: list[torch.Generator]) -> torch.Tensor:
    """One U(0, 1) draw per chain ``(C,)`` float64, on the CPU."""
    return torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in generators])


def step(
    state: HMCState,
    target: Target,
    trajectory_length: float,
    generators: list[torch.Generator],
    target_accept: float = 0.8,
    max_leapfrog_steps: int = 10_000,
    jitter: float = 0.0,
    integrator: Integrator | None = None,
    n_leapfrog: int | None = None,
) -> tuple[HMCState, StepInfo]:
    """One HMC iteration for every chain. ``generators`` holds one CPU generator per chain; each draws,
    in this order, the momentum, the jitter of the trajectory length (only when ``jitter`` > 0) and the
    Metropolis uniform. ``integrator`` defaults to the eager, vectorised one. ``n_leapfrog`` = L, if given,
    fixes the number of steps instead of the trajectory's length: n = ceil(L u), the step size leaving it alone.

    If ``state.adaptation`` is set, the step size is updated by dual averaging after the
    Metropolis test (burn-in); call :func:`freeze` to end adaptation.
    """
    n_chains, dim = state.position.shape
    if len(generators) != n_chains:
        raise ValueError(f"need one generator per chain: {n_chains} chains, {len(generators)} generators")
    if not 0.0 <= jitter < 1.0:
        raise ValueError(f"jitter must lie in [0, 1), got {jitter}")
    integrator = integrator or Integrator(target)
    momentum = _per_chain_normal(generators, (dim,), state.position)
    length: float | torch.Tensor = trajectory_length if n_leapfrog is None else float(n_leapfrog)
    if jitter:
        length = length * (1.0 + jitter * (2.0 * _per_chain_uniform(generators) - 1.0))
    if n_leapfrog is None:
        n_steps = leapfrog_steps(length, state.step_size, max_leapfrog_steps)
    else:
        n_steps = torch.ceil(torch.as_tensor(length, dtype=torch.float64).expand(n_chains)).clamp(
            1, max_leapfrog_steps).long()
    position, new_momentum, log_lik, log_prior, grad = integrator(
        state.position, momentum, state.grad, state.step_size, n_steps)

    kinetic_change = 0.5 * (new_momentum.double().square().sum(-1) - momentum.double().square().sum(-1))
    log_accept = (log_lik - state.log_likelihood) + (log_prior - state.log_prior) - kinetic_change
    log_accept = torch.nan_to_num(log_accept, nan=-math.inf)
    accept_prob = log_accept.clamp(max=0.0).exp()
    uniforms = _per_chain_uniform(generators)
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
    info = StepInfo(accept_prob=accept_prob, accepted=accepted, energy_error=-log_accept, n_leapfrog=n_steps,
                    gradient_evaluations=integrator.gradient_evaluations(n_steps))
    return new_state, info


def find_reasonable_step_size(state: HMCState, target: Target, generators: list[torch.Generator],
                              integrator: Integrator | None = None, max_doublings: int = 30, n_leapfrog: int = 1,
                              trajectory_length: float | None = None, max_leapfrog_steps: int = 10_000,
                              max_gradients: int | None = None, adaptation_centre: float = 1.0) -> HMCState:
    """Hoffman & Gelman's (2014) Algorithm 4 per chain, its acceptance test on the whole trajectory the sampler runs.

    Each chain draws one momentum r ~ N(0, I) (the paper's r^0) and tests its step size eps by the acceptance ratio
    exp(-Delta H) at the end of a trajectory from its position with that momentum: ``n_leapfrog`` leapfrog steps, or,
    with ``trajectory_length`` tau, ceil(tau / eps) steps (at most ``max_leapfrog_steps``). a = 1 if the first
    ratio exceeds 1/2, else -1; then eps <- 2^a eps while ratio^a > 2^-a, as in the paper. The paper tests one
    leapfrog step (``n_leapfrog`` = 1 here) and ends at the first step size past the crossing; here a chain ends
    on the accepting side of the crossing: doubling, at the last step size whose ratio exceeded 1/2 (one halving
    back from the paper's); halving, at the first whose ratio reached 1/2 (the paper's). So, unless cut off, a
    chain's trajectory ratio exceeds 1/2 at the step size found and does not at twice it.

    A round computes the trajectories of the chains still searching (chains that crossed are not computed again)
    and costs :meth:`Integrator.gradient_evaluations` of their steps. The search stops after ``max_doublings``
    rounds, or before a round that would take the gradients it computed past ``max_gradients``: a chain cut off
    while doubling keeps the last step size it tested (its ratio exceeded 1/2), one cut off while halving takes the
    next halving (the one it tested was too large), one never tested keeps its own.

    Returns the state with those step sizes and dual averaging, if on, restarted from them (the paper's Algorithm 5
    after Algorithm 4) with mu = log(``adaptation_centre`` * eps). The paper's centre is 10, a preference for larger
    steps, which cost NUTS fewer leapfrog steps; from a step size whose whole trajectory was tested it sends the
    first adapted steps to ones that trajectory rejects (at target acceptance 0.8 the first update multiplies the
    step by 14 after an accepted proposal and by 2.3 after a rejected one), so the default here is 1 (x 1.4 and
    / 4.3)."""
    integrator = integrator or Integrator(target)
    n_chains = state.position.shape[0]
    momentum = _per_chain_normal(generators, (state.position.shape[1],), state.position)
    step_size = state.step_size.clone()
    direction = torch.zeros(n_chains, dtype=torch.float64)  # 0 until a chain's first test
    searching = torch.ones(n_chains, dtype=torch.bool)
    spent = 0
    for _ in range(max_doublings):
        chains = searching.nonzero().squeeze(-1)
        if trajectory_length is None:
            n_steps = torch.full((len(chains),), n_leapfrog, dtype=torch.long)
        else:
            n_steps = leapfrog_steps(trajectory_length, step_size[chains], max_leapfrog_steps)
        cost = integrator.gradient_evaluations(n_steps)
        if max_gradients is not None and spent + cost > max_gradients:
            break
        spent += cost
        index = chains.to(state.position.device)
        _, new_momentum, log_lik, log_prior, _ = integrator(
            state.position[index], momentum[index], state.grad[index], step_size[chains], n_steps)
        log_ratio = ((log_lik - state.log_likelihood[index]) + (log_prior - state.log_prior[index])
                     - 0.5 * (new_momentum.double().square().sum(-1) - momentum[index].double().square().sum(-1))).cpu()
        log_ratio = torch.nan_to_num(log_ratio, nan=-math.inf)
        first = direction[chains] == 0
        direction[chains] = torch.where(first, torch.where(log_ratio > math.log(0.5), 1.0, -1.0), direction[chains])
        a = direction[chains]
        crossed = ~(a * log_ratio > -a * math.log(2.0))
        # crossed while doubling: back to the last step size whose ratio exceeded 1/2; halving: stay
        step_size[chains] = torch.where(crossed, torch.where(a > 0, step_size[chains] / 2.0, step_size[chains]),
                                        step_size[chains] * 2.0 ** a)
        searching[chains] = ~crossed
        if not bool(searching.any()):
            break
    # cut off while doubling: the step size last tested, not the untested doubling
    cut = searching & (direction > 0)
    step_size = torch.where(cut, step_size / 2.0, step_size)
    adaptation = DualAveraging.start(step_size, adaptation_centre) if state.adaptation is not None else None
    return replace(state, step_size=step_size, adaptation=adaptation)


def freeze(state: HMCState) -> HMCState:
    """Ends adaptation: every chain keeps its dual-averaged step size from now on (its current one if no
    adaptation step was taken)."""
    if state.adaptation is None:
        return state
    if state.adaptation.iteration == 0:
        return replace(state, adaptation=None)
    return replace(state, step_size=state.adaptation.final_step_size(), adaptation=None)


def default_trajectory_length(prior_variance: float) -> float:
    """tau = (pi / 2) sqrt(v), as in Izmailov et al. (2021)."""
    return 0.5 * math.pi * math.sqrt(prior_variance)
