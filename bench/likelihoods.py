"""Likelihoods p(y | f(x)) over a network's raw outputs.

Every likelihood works on outputs of shape ``(..., N, n_outputs)`` so that the same code serves one
network, a stack of ensemble members, or a batch of HMC chains (the leading ``...`` dimensions).

- ``categorical``: outputs are logits ``(..., N, C)``; targets are class indices ``(N,)``.
- ``heteroscedastic-gaussian``: outputs ``(..., N, 2)`` are the mean and a pre-softplus standard
  deviation, sigma = softplus(output[..., 1]), as in the NeurIPS 2021 BDL competition's UCI-Gap task.
- ``fixed-noise-gaussian``: outputs ``(..., N, 1)`` are the mean; the noise standard deviation is a
  known constant (used to validate the HMC sampler against closed-form Bayesian linear regression).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F

TaskKind = Literal["classification", "regression"]


class Likelihood:
    name: ClassVar[str]
    kind: ClassVar[TaskKind]

    def log_prob(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-example log-likelihood, shape ``(..., N)``."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.name}


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


class _Gaussian(Likelihood):
    kind: ClassVar[TaskKind] = "regression"

    def mean_and_std(self, outputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def log_prob(self, outputs, targets):
        mean, std = self.mean_and_std(outputs)
        z = (targets - mean) / std
        return -0.5 * z.square() - torch.log(std) - 0.5 * math.log(2 * math.pi)

    def sample(self, outputs: torch.Tensor, n_samples: int, generator: torch.Generator) -> torch.Tensor:
        """Draws from p(y | f(x)): outputs ``(N, n_outputs)`` -> samples ``(N, n_samples)``."""
        mean, std = self.mean_and_std(outputs)
        noise = torch.randn(
            (mean.shape[0], n_samples), generator=generator, dtype=mean.dtype, device="cpu"
        ).to(mean.device)
        return mean.unsqueeze(-1) + std.unsqueeze(-1) * noise


@dataclass(frozen=True)
class HeteroscedasticGaussian(_Gaussian):
    name: ClassVar[str] = "heteroscedastic-gaussian"

    def mean_and_std(self, outputs):
        return outputs[..., 0], F.softplus(outputs[..., 1])


@dataclass(frozen=True)
class FixedNoiseGaussian(_Gaussian):
    noise_std: float = 1.0
    name: ClassVar[str] = "fixed-noise-gaussian"

    def mean_and_std(self, outputs):
        mean = outputs[..., 0]
        return mean, torch.full_like(mean, self.noise_std)

    def describe(self) -> dict:
        return {"name": self.name, "noise_std": self.noise_std}


def log_prior(flat_or_tensors, prior_variance: float) -> torch.Tensor:
    """log N(theta; 0, v I) up to its constant, summed over the last dimension.

    Accepts a tensor ``(..., D)``. The constant -D/2 log(2 pi v) is dropped: it cancels in every
    place we use the prior (Metropolis ratios, gradients).
    """
    return -0.5 * flat_or_tensors.square().sum(-1) / prior_variance
