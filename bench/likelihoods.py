"""Likelihoods p(y | f(x)) over a network's raw outputs.

Every likelihood works on outputs of shape ``(..., N, n_outputs)`` so that the same code serves one
network, a stack of ensemble members, or a batch of HMC chains (the leading ``...`` dimensions).

- ``categorical``: outputs are logits ``(..., N, C)``, p(y = c | f) = softmax(f)_c; targets are
  class indices ``(N,)``.
- ``heteroscedastic-gaussian``: outputs ``(..., N, 2)`` are the mean and a pre-link standard
  deviation, sigma = softplus(output[..., 1]), as in the NeurIPS 2021 BDL competition's UCI-Gap task.
- ``fixed-noise-gaussian``: outputs ``(..., N, 1)`` are the mean; the noise standard deviation is a
  known constant (used to validate the HMC sampler against closed-form Bayesian linear regression).

The link function is part of the posterior: a reference sampled with one link is not a reference for
another. So :meth:`Likelihood.describe` (which enters every task's fingerprint, and through it every
reference's) names the link **and** records the likelihood's own ``log_prob`` (and link) at a few
fixed outputs: an edit of the link or of the density changes the fingerprint even if every name is
left unchanged, and every reference of the task is then refused as stale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar, Literal

import torch
import torch.nn.functional as F

TaskKind = Literal["classification", "regression"]

LINK_PROBE_POINTS = (-3.0, -0.5, 0.0, 0.5, 3.0)
"""Raw outputs at which :meth:`Likelihood.describe` evaluates the likelihood (in float64) to fingerprint it."""
LINK_PROBE_DIGITS = 8
"""Significant digits kept: far above the effect of any link change, far below float64 round-off."""

STD_LINKS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"softplus": F.softplus}
"""Standard-deviation links a Gaussian likelihood may name (the competition's UCI-Gap uses softplus)."""


def _rounded(values: torch.Tensor) -> list[float]:
    return [float(f"{v:.{LINK_PROBE_DIGITS}g}") for v in values.flatten().tolist()]


def _probe_points() -> torch.Tensor:
    return torch.tensor(LINK_PROBE_POINTS, dtype=torch.float64)


class Likelihood:
    name: ClassVar[str]
    kind: ClassVar[TaskKind]

    def log_prob(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-example log-likelihood, shape ``(..., N)``."""
        raise NotImplementedError

    def describe(self) -> dict:
        """Everything that defines p(y | f): part of the task's fingerprint."""
        raise NotImplementedError


@dataclass(frozen=True)
class Categorical(Likelihood):
    name: ClassVar[str] = "categorical"
    kind: ClassVar[TaskKind] = "classification"

    def log_prob(self, outputs, targets):
        log_probs = torch.log_softmax(outputs, dim=-1)
        index = targets.long().expand(*outputs.shape[:-1]).unsqueeze(-1)
        return log_probs.gather(-1, index).squeeze(-1)

    @staticmethod
    def probabilities(outputs: torch.Tensor) -> torch.Tensor:
        """Softmax probabilities ``(..., N, C)``."""
        return torch.softmax(outputs, dim=-1)

    def describe(self) -> dict:
        # One row of logits (-3, -0.5, 0, 0.5, 3): the probabilities the model average uses, and log p(y = c) for each c.
        logits = _probe_points().unsqueeze(0)
        classes = torch.arange(len(LINK_PROBE_POINTS))
        return {"name": self.name, "link": "softmax", "link_values": _rounded(self.probabilities(logits)),
                "log_prob_values": _rounded(self.log_prob(logits.expand(len(classes), -1), classes))}


class _Gaussian(Likelihood):
    kind: ClassVar[TaskKind] = "regression"

    def mean_and_std(self, outputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def log_prob(self, outputs, targets):
        mean, std = self.mean_and_std(outputs)
        z = (targets - mean) / std
        return -0.5 * z.square() - torch.log(std) - 0.5 * math.log(2 * math.pi)

    def sample(self, outputs: torch.Tensor, n_samples: int, generator: torch.Generator,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """Draws from p(y | f(x)): outputs ``(N, n_outputs)`` -> samples ``(N, n_samples)``, written into ``out`` when
        given (a contiguous ``(N, n_samples)`` CPU tensor of the outputs' type: no other array of that size is made).
        The draws are mean + std * noise computed in place on the noise, bit for bit the same as out of place."""
        mean, std = self.mean_and_std(outputs)
        shape = (mean.shape[0], n_samples)
        if out is None:
            noise = torch.randn(shape, generator=generator, dtype=mean.dtype, device="cpu").to(mean.device)
        else:
            noise = torch.randn(shape, generator=generator, dtype=mean.dtype, out=out)
        return noise.mul_(std.unsqueeze(-1)).add_(mean.unsqueeze(-1))


@dataclass(frozen=True)
class HeteroscedasticGaussian(_Gaussian):
    """y ~ N(f_0, sigma^2) with sigma = ``std_link``(f_1)."""

    std_link: str = "softplus"
    name: ClassVar[str] = "heteroscedastic-gaussian"

    def __post_init__(self):
        if self.std_link not in STD_LINKS:
            raise ValueError(f"unknown standard-deviation link {self.std_link!r}; known: {', '.join(STD_LINKS)}")

    def mean_and_std(self, outputs):
        return outputs[..., 0], STD_LINKS[self.std_link](outputs[..., 1])

    def describe(self) -> dict:
        # Outputs (0, p) for each probe point p: the standard deviation, and log p(y = 1).
        outputs = torch.stack([torch.zeros(len(LINK_PROBE_POINTS), dtype=torch.float64), _probe_points()], dim=-1)
        return {"name": self.name, "outputs": ["mean", "std before link"], "std_link": self.std_link,
                "std_link_values": _rounded(self.mean_and_std(outputs)[1]),
                "log_prob_values": _rounded(self.log_prob(outputs, torch.ones(len(LINK_PROBE_POINTS))))}


@dataclass(frozen=True)
class FixedNoiseGaussian(_Gaussian):
    noise_std: float = 1.0
    name: ClassVar[str] = "fixed-noise-gaussian"

    def mean_and_std(self, outputs):
        mean = outputs[..., 0]
        return mean, torch.full_like(mean, self.noise_std)

    def describe(self) -> dict:
        return {"name": self.name, "outputs": ["mean"], "noise_std": self.noise_std,
                "log_prob_values": _rounded(self.log_prob(_probe_points().unsqueeze(-1), torch.zeros(1)))}


def log_prior(flat_or_tensors, prior_variance: float) -> torch.Tensor:
    """log N(theta; 0, v I) up to its constant, summed over the last dimension.

    Accepts a tensor ``(..., D)``. The constant -D/2 log(2 pi v) is dropped: it cancels in every
    place we use the prior (Metropolis ratios, gradients).
    """
    return -0.5 * flat_or_tensors.square().sum(-1) / prior_variance
