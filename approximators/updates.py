r"""Update rules of the training engine: ``init(params) -> state``, ``update(state, grads, step) -> state``.

Every rule works on stacked parameters ``(K, D)`` and is element-wise, so one rule over the stack
is exactly K independent rules. ``g`` below is the engine's gradient of the per-example negative
log posterior U (:mod:`approximators.engine`); the stochastic-gradient estimate of the full-data
log posterior's gradient is ``-N g`` (N = N_train). A schedule is the sequence of step sizes
indexed by the step, built once per engine run (no per-step scheduler object). Buffers are updated
in place under ``torch.no_grad``; the returned state is the same object.

Randomness: a sampler draws member k's noise from member k's own generator (on the parameters'
device) through a :class:`NoiseStream`, so K chains run together equal the same chains run alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from bench.errors import TrainingDiverged

FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def float32_step(scale: float) -> float:
    """A step's scale as float32 parameters take it (``alpha=``, ``value=``): one beyond float32's range
    (about 3.4e38, a step size times a bias correction or N_train) would make every parameter it touches infinite, and
    torch refuses to convert it, so the training has diverged: :class:`TrainingDiverged`, never an overflow error."""
    if not abs(scale) <= FLOAT32_MAX:
        raise TrainingDiverged(f"training diverged: a step scaled to {scale:.3g} lies beyond float32's range; lower "
                               "the step size (--set lr=...)")
    return scale


def cosine_schedule(lr: float, min_lr: float, steps: int) -> list[float]:
    """Cosine decay from ``lr`` to ``min_lr`` over ``steps`` steps, computed by the same recursion as
    ``torch.optim.lr_scheduler.CosineAnnealingLR`` (so the rates agree with it to the last bit):

        lr_0 = lr,   lr_t = (1 + cos(pi t / T)) / (1 + cos(pi (t - 1) / T)) (lr_{t-1} - min_lr) + min_lr.
    """
    horizon = max(steps, 1)
    rates = [lr]
    for t in range(1, steps):
        rates.append((1 + math.cos(math.pi * t / horizon)) / (1 + math.cos(math.pi * (t - 1) / horizon))
                     * (rates[-1] - min_lr) + min_lr)
    return rates


@dataclass
class AdamState:
    params: torch.Tensor
    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    denom: torch.Tensor


class Adam:
    r"""Adam (Kingma & Ba 2015) with a step-size schedule, operation for operation as ``torch.optim.Adam``
    (no weight decay: the prior is in the objective):

        m <- beta1 m + (1 - beta1) g,   s <- beta2 s + (1 - beta2) g^2,
        theta <- theta - lr_t / (1 - beta1^t) * m / (sqrt(s) / sqrt(1 - beta2^t) + eps).
    """

    def __init__(self, schedule: Sequence[float], beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8):
        self.schedule, self.beta1, self.beta2, self.eps = schedule, beta1, beta2, eps

    def init(self, params: torch.Tensor) -> AdamState:
        zeros = lambda: torch.zeros_like(params, memory_format=torch.preserve_format)  # noqa: E731
        return AdamState(params, zeros(), zeros(), zeros())

    def update(self, state: AdamState, grads: torch.Tensor, step: int) -> AdamState:
        count = float(step + 1)
        with torch.no_grad():
            state.exp_avg.lerp_(grads, 1 - self.beta1)
            state.exp_avg_sq.mul_(self.beta2).addcmul_(grads, grads, value=1 - self.beta2)
            step_size = self.schedule[step] / (1 - self.beta1**count)
            torch.sqrt(state.exp_avg_sq, out=state.denom)
            state.denom.div_((1 - self.beta2**count) ** 0.5).add_(self.eps)
            state.params.addcdiv_(state.exp_avg, state.denom, value=-float32_step(step_size))
        return state


@dataclass
class MomentumState:
    params: torch.Tensor
    velocity: torch.Tensor


class SGD:
    r"""SGD with heavy-ball momentum, as ``torch.optim.SGD`` (no dampening, no weight decay: the prior
    is in the objective):

        b <- mu b + g  (b = g at the first step),   theta <- theta - lr_t b.
    """

    def __init__(self, schedule: Sequence[float], momentum: float = 0.9):
        self.schedule, self.momentum = schedule, momentum

    def init(self, params: torch.Tensor) -> MomentumState:
        return MomentumState(params, torch.zeros_like(params))

    def update(self, state: MomentumState, grads: torch.Tensor, step: int) -> MomentumState:
        with torch.no_grad():
            if step == 0:
                state.velocity.copy_(grads)
            else:
                state.velocity.mul_(self.momentum).add_(grads)
            state.params.add_(state.velocity, alpha=-self.schedule[step])
        return state


@dataclass
class LangevinState:
    params: torch.Tensor
    velocity: torch.Tensor
    noise: NoiseStream


NOISE_BLOCK_VALUES = 2**20
"""Noise values drawn per generator call, at most (and at most ``NOISE_BLOCK_STEPS`` steps): small
models draw a block of steps at once instead of paying a call per chain per step."""
NOISE_BLOCK_STEPS = 64


class NoiseStream:
    """Standard normal noise ``(K, D)`` per step, row k from generator k alone.

    Generator k fills a block of ``steps`` rows ``(steps, D)`` per call, where ``steps`` depends on D
    only; so a chain's noise is the same whether it runs alone or with others.
    """

    def __init__(self, generators: list[torch.Generator], like: torch.Tensor):
        k, dim = like.shape
        self.generators = generators
        self.buffer = torch.empty(k, max(1, min(NOISE_BLOCK_STEPS, NOISE_BLOCK_VALUES // dim)), dim,
                                  dtype=like.dtype, device=like.device)
        self.position = self.buffer.shape[1]

    def state_dict(self) -> dict:
        """What a run's checkpoint keeps: the block drawn, the position in it, the generators' states."""
        return {"buffer": self.buffer, "position": self.position,
                "generators": [g.get_state() for g in self.generators]}

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            self.buffer.copy_(state["buffer"])
        self.position = int(state["position"])
        for generator, saved in zip(self.generators, state["generators"], strict=True):
            generator.set_state(saved)

    def next(self) -> torch.Tensor:
        if self.position == self.buffer.shape[1]:
            for block, generator in zip(self.buffer, self.generators):
                torch.randn(block.shape, generator=generator, out=block)
            self.position = 0
        self.position += 1
        return self.buffer[:, self.position - 1]


class SGLD:
    r"""Stochastic gradient Langevin dynamics (Welling & Teh 2011) at temperature 1:

        theta <- theta + (eps_t / 2) (-N g) + sqrt(eps_t) z,   z ~ N(0, I),

    ``eps_t`` from the schedule (posterior units: the step of the full-data log posterior).
    ``noisy[t]`` False turns step t into plain gradient descent with step eps_t / 2 on the log
    posterior (the exploration stage of cyclical SG-MCMC).
    """

    def __init__(self, schedule: Sequence[float], n_train: int, generators: list[torch.Generator],
                 noisy: Sequence[bool] | None = None):
        self.schedule, self.n_train, self.generators, self.noisy = schedule, n_train, generators, noisy

    def init(self, params: torch.Tensor) -> LangevinState:
        return LangevinState(params, torch.zeros(0), NoiseStream(self.generators, params))

    def update(self, state: LangevinState, grads: torch.Tensor, step: int) -> LangevinState:
        eps = self.schedule[step]
        with torch.no_grad():
            state.params.add_(grads, alpha=-float32_step(0.5 * eps * self.n_train))
            if self.noisy is None or self.noisy[step]:
                state.params.add_(state.noise.next(), alpha=math.sqrt(eps))
        return state


class SGHMC:
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen et al. 2014) in the form cyclical SG-MCMC
    (Zhang et al. 2020) uses, with friction ``alpha`` (1 - momentum), at temperature 1:

        v <- (1 - alpha) v + eta_t (-N g) + sqrt(2 alpha eta_t) z,   theta <- theta + v,

    ``eta_t`` from the schedule (posterior units). ``noisy[t]`` False drops the noise at step t
    (momentum SGD on the log posterior: the exploration stage).
    """

    def __init__(self, schedule: Sequence[float], n_train: int, generators: list[torch.Generator],
                 alpha: float, noisy: Sequence[bool] | None = None):
        self.schedule, self.n_train, self.generators = schedule, n_train, generators
        self.alpha, self.noisy = alpha, noisy

    def init(self, params: torch.Tensor) -> LangevinState:
        return LangevinState(params, torch.zeros_like(params), NoiseStream(self.generators, params))

    def update(self, state: LangevinState, grads: torch.Tensor, step: int) -> LangevinState:
        eta = self.schedule[step]
        with torch.no_grad():
            state.velocity.mul_(1 - self.alpha).add_(grads, alpha=-float32_step(eta * self.n_train))
            if self.noisy is None or self.noisy[step]:
                state.velocity.add_(state.noise.next(), alpha=math.sqrt(2 * self.alpha * eta))
            state.params.add_(state.velocity)
        return state
