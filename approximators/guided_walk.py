r"""Guided-walk Metropolis-Hastings on an isotropic Gaussian prior (Gustafson 1998), vectorised.

Every scalar coordinate is its own 1-D chain targeting N(0, v). The state holds the current value
a and a direction d in {-1, +1}. One step, for all coordinates at once:

    y = a + d |z|,  z ~ N(0, s^2)
    accept with probability min(1, N(y; 0, v) / N(a; 0, v))
    accepted: a <- y (d kept);  rejected: a kept, d <- -d

The proposal is a deterministic reflection of the direction combined with a symmetric step on
the augmented space (a, d), so the walk leaves N(0, v) invariant while moving in persistent
directions between rejections, which suppresses random-walk behaviour. ``s`` is an absolute step,
not relative to sqrt(v). SAE (Delaunoy & Louppe 2021) uses one step per new ensemble member to move
each network's anchor.

State tensors have shape ``(C, D)``: C independent walks (SAE chains) of D coordinates, each row
drawing from its own generator so that the walks do not depend on how many run together.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GuidedWalkState:
    anchor: torch.Tensor
    direction: torch.Tensor


def _rows(generators: list[torch.Generator], dim: int, kind: str) -> torch.Tensor:
    draw = torch.randn if kind == "normal" else torch.rand
    return torch.stack([draw(dim, generator=g) for g in generators])


def init(generators: list[torch.Generator], dim: int, prior_variance: float) -> GuidedWalkState:
    """a ~ N(0, v I), d uniform on {-1, +1}; one row per generator."""
    anchor = _rows(generators, dim, "normal") * prior_variance**0.5
    direction = torch.where(_rows(generators, dim, "uniform") < 0.5, -1.0, 1.0)
    return GuidedWalkState(anchor, direction)


def step(state: GuidedWalkState, generators: list[torch.Generator], step_size: float,
         prior_variance: float) -> tuple[GuidedWalkState, torch.Tensor]:
    """One guided-walk step for every coordinate; returns the new state and the acceptance mask."""
    dim = state.anchor.shape[1]
    proposal = state.anchor + state.direction * (_rows(generators, dim, "normal") * step_size).abs()
    log_ratio = 0.5 * (state.anchor.square() - proposal.square()) / prior_variance
    accepted = _rows(generators, dim, "uniform").log() < log_ratio
    return GuidedWalkState(
        anchor=torch.where(accepted, proposal, state.anchor),
        direction=torch.where(accepted, state.direction, -state.direction),
    ), accepted
