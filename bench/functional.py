"""Many copies of one ``nn.Module`` evaluated at once, with parameters stacked along a leading axis.

Ensemble members, SAE chains and HMC chains are independent networks of the same architecture.
Instead of a Python loop over copies, their parameters are stacked (``K`` copies) and the forward
pass is vectorised with ``torch.func.vmap`` over ``torch.func.functional_call``. A flat view
``(K, D)`` of the parameters serves samplers and priors that treat the network as a vector.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap


def seeded_module(factory: Callable[[], nn.Module], seed: int) -> nn.Module:
    """Builds a module with PyTorch's default initialisation drawn from ``seed``, leaving the global
    RNG untouched (so a member's initial weights depend on its own seed alone)."""
    with torch.random.fork_rng(devices=[]):
        # The CPU generator alone: torch.manual_seed would also reseed every CUDA generator, which fork_rng(devices=[])
        # does not restore, and costs more per member.
        torch.default_generator.manual_seed(seed)
        return factory()


@dataclass
class ParameterLayout:
    """Names and shapes of a module's parameters, to convert between a dict of stacked tensors
    ``{name: (K, *shape)}`` and one flat tensor ``(K, D)``."""

    names: list[str]
    shapes: list[torch.Size]

    @classmethod
    def of(cls, module: nn.Module) -> "ParameterLayout":
        named = list(module.named_parameters())
        return cls([n for n, _ in named], [p.shape for _, p in named])

    @property
    def size(self) -> int:
        return sum(s.numel() for s in self.shapes)

    def flatten(self, params: dict[str, torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
        """``{name: (K, *shape)}`` -> ``(K, D)``, into ``out`` where given."""
        return torch.cat([params[n].flatten(1) for n in self.names], dim=1, out=out)

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(K, D)`` -> ``{name: (K, *shape)}`` as views of ``flat``."""
        # split, not slicing: its backward is one concatenation, where each slice's would fill a (K, D) zero tensor
        chunks = flat.split([shape.numel() for shape in self.shapes], dim=1)
        return {name: chunk.view(flat.shape[0], *shape) for name, shape, chunk in zip(self.names, self.shapes, chunks)}


class StackedModel:
    """Evaluates ``K`` parameter sets of one architecture on shared or per-copy inputs.

    ``base`` is a parameter-less copy of the module (on the meta device) that ``functional_call``
    fills with each copy's parameters; buffers are not supported (none of our models has any).
    """

    def __init__(self, module: nn.Module, fast_path: bool = True):
        if any(True for _ in module.buffers()):
            raise ValueError("StackedModel does not support modules with buffers")
        self.layout = ParameterLayout.of(module)
        self.base = copy.deepcopy(module).to("meta")
        self.mlp_layers = _mlp_layers(module) if fast_path else None

    @staticmethod
    def stack(modules: list[nn.Module]) -> dict[str, torch.Tensor]:
        """Stacks the parameters of ``K`` modules: ``{name: (K, *shape)}`` (detached leaves)."""
        params, _ = stack_module_state(modules)
        return {n: p.detach().clone() for n, p in params.items()}

    @staticmethod
    def seeded(factory: Callable[[], nn.Module], seeds: list[int]) -> dict[str, torch.Tensor]:
        """:meth:`stack` of one :func:`seeded_module` per seed, ``{name: (K, *shape)}``, built one at a time into
        the stacked tensors: a run holds its members' parameters and one module, never ``K`` modules (a million
        members of a small network are a few GB of modules, and the memory plan counts parameters)."""
        stacked: dict[str, torch.Tensor] = {}
        for k, seed in enumerate(seeds):
            for name, parameter in seeded_module(factory, seed).named_parameters():
                if k == 0:
                    stacked[name] = torch.empty((len(seeds), *parameter.shape), dtype=parameter.dtype)
                stacked[name][k] = parameter.detach()
        return stacked

    def _single(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.base, params, (x,))

    def __call__(self, params: dict[str, torch.Tensor], x: torch.Tensor, shared_input: bool) -> torch.Tensor:
        """Outputs ``(K, N, n_outputs)``.

        ``x`` is ``(N, ...)`` when ``shared_input`` (every copy sees the same inputs, as on a test
        set or in full-batch HMC) or ``(K, N, ...)`` (each copy its own minibatch).
        """
        if self.mlp_layers is not None:
            return _batched_mlp(self.mlp_layers, params, x)
        if next(iter(params.values())).shape[0] == 1:
            # One parameter set (a one-member run, an HMC chain sampled alone) is called directly, without vmap:
            # under vmap its convolutions and dense layers become batched ones of a single set of weights, which
            # on a CPU take slower kernels (a full-batch CNN-LSTM gradient 9.7 -> 6.5 ms in float32, compiled;
            # benchmarks/hmc_speed.py). The same function, other round-off.
            single = {name: p[0] for name, p in params.items()}
            return self._single(single, x if shared_input else x[0]).unsqueeze(0)
        return vmap(self._single, in_dims=(0, None if shared_input else 0))(params, x)

    def flat(self, flat_params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Outputs ``(K, N, n_outputs)`` for flat parameters ``(K, D)`` on shared inputs ``(N, ...)``."""
        return self(self.layout.unflatten(flat_params), x, shared_input=True)


def _mlp_layers(module: nn.Module) -> list[tuple[str, str]] | None:
    """For an ``nn.Sequential`` of ``Linear`` and ``ReLU`` layers: its layers as (kind, name prefix).

    Such models take a batched-matmul fast path: on small networks the per-call overhead of
    ``vmap(functional_call)`` dominates, and HMC makes hundreds of thousands of calls.
    """
    if not isinstance(module, nn.Sequential):
        return None
    layers = []
    for name, layer in module.named_children():
        if isinstance(layer, nn.Linear) and layer.bias is not None:
            layers.append(("linear", name))
        elif isinstance(layer, nn.ReLU):
            layers.append(("relu", name))
        else:
            return None
    return layers


def _batched_mlp(layers: list[tuple[str, str]], params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``x`` ``(N, in)`` or ``(K, N, in)`` through K stacked MLPs -> ``(K, N, out)``."""
    # Per-member inputs take one fused baddbmm per layer: bitwise the matmul-then-add, with fewer autograd
    # nodes (a training step's backward costs about 2/3). Shared inputs keep matmul-then-add, with which
    # HMC's reference chains were computed.
    per_member = x.dim() == 3
    h = x
    for kind, name in layers:
        if kind == "linear":
            weight_t, bias = params[f"{name}.weight"].transpose(-1, -2), params[f"{name}.bias"].unsqueeze(-2)
            h = torch.baddbmm(bias, h, weight_t) if per_member else torch.matmul(h, weight_t) + bias
        else:
            h = torch.relu(h)
    return h
