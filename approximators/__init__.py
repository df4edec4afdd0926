"""Approximate inference methods, one module each, registered by their command-line name."""

from __future__ import annotations

from approximators.anchored import AnchoredEnsemble
from approximators.csgmcmc import CyclicalSGMCMC
from approximators.base import Approximator, Problem, resolve_config
from approximators.laplace import Laplace
from approximators.map import MAP, DeepEnsemble
from approximators.mc_dropout import MCDropout
from approximators.mfvi import MFVI
from approximators.sae import SequentialAnchoredEnsemble
from approximators.sgld import StochasticGradientLangevin
from approximators.swag import SWAG, MultiSWAG, SWAGDiagonal
from approximators.vogn import VOGN
from bench.errors import ConfigError

METHODS: dict[str, type[Approximator]] = {m.name: m for m in (
    MAP, DeepEnsemble, AnchoredEnsemble, SequentialAnchoredEnsemble, SWAG, SWAGDiagonal, MultiSWAG,
    StochasticGradientLangevin, CyclicalSGMCMC, VOGN, MFVI, MCDropout, Laplace)}


def get_method(name: str) -> type[Approximator]:
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}")
    return METHODS[name]


__all__ = ["METHODS", "Approximator", "Problem", "get_method", "resolve_config"]
