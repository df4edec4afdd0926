r"""Per-example gradient moments of the negative log-likelihood, for K stacked members at once.

For member k with parameters w_k ``(D,)`` and its minibatch of B examples, with
g_i = grad_w [-log p(y_i | x_i, w_k)] the gradient of example i alone:

    mean        = (1/B) sum_i g_i        (the usual minibatch gradient)
    mean_square = (1/B) sum_i g_i ** 2   (element-wise: the squared per-example gradients, averaged)

``mean_square`` is what VOGN's Gauss-Newton curvature estimate needs; it is not the square of
``mean`` (Adam's statistic). Three ways to compute them, none with a Python loop over examples:

- **MLPs** (``nn.Sequential`` of ``Linear`` and ``ReLU``, the fast path of :class:`StackedModel`):
  one backward pass to each layer's output z = a W^T + b gives every example's delta_i = dloss/dz_i;
  the example's weight gradient is the outer product delta_i a_i^T, so (Goodfellow 2015)
  mean_square(W) = (1/B) sum_i (delta_i ** 2) (a_i ** 2)^T and mean_square(b) = (1/B) sum_i delta_i ** 2,
  two batched matrix products, never a ``(B, D)`` tensor.
- **Models built from known layers** (``Linear``, ``Conv1d``/``Conv2d`` including SAME padding,
  ``Embedding``, ``FilterResponseNorm``, ``HaikuLSTM``; any other module with parameters, such as a
  user's layer, as one unit): layer by layer (as BackPACK does), for one member at a time. A forward
  pass with hooks keeps each unit's input a and output z; the parameters are constants, so one backward
  pass computes only the inputs' gradients, and with them every example's delta_i = dloss/dz_i. Then per unit:

  * ``Linear`` on ``(B, in)``: Goodfellow's identity above. On ``(B, P, in)`` (and a unit called P times)
    g_i = sum_p delta_ip a_ip^T, one batched matrix product per chunk of examples.
  * Convolution: the same, per kernel offset (i, j): g_i[:, :, i, j] = sum_p delta_ip x_i[p + (i, j)]^T over
    the output positions p, read in place from the padded input (no ``F.unfold`` copy) where the stride is 1.
  * ``Embedding``: g_i is the rows of delta_i added up per token; summed per (example, token) pair
    (``torch.unique``), squared, and added into the table, never a ``(B, vocabulary, dim)`` tensor.
  * ``FilterResponseNorm``: its gradients in closed form, per example and channel sums over positions.
  * ``HaikuLSTM``: its one linear map applied at every step, so the outer-product rule over the steps,
    with the gates' deltas from one backward pass through a re-run of the recurrence.
  * Any other unit: ``vmap`` over examples of the ``vjp`` of the unit alone with respect to its own
    parameters, given its input and delta_i.

  Which module a parameter belongs to is read from the modules a forward pass calls (the deepest
  called module that contains it: the LSTM's ``linear`` is used functionally by the LSTM, so the LSTM
  is the unit). A unit called several times gets g_i summed over its calls before squaring. On a model's
  first use the same single pass, with the parameters as leaves, also checks the path's mean gradient
  against autograd's and, if they differ (a parameter used outside the module that holds it), warns and
  uses the next path from then on (recomputing that one minibatch). Per-example values are formed in
  chunks of examples small enough to stay in the CPU's cache (:data:`OUTER_PRODUCT_VALUES`).
- **Any other model**: ``torch.func.vmap`` over members and over examples of ``torch.func.grad`` of the
  one-example loss (``functional_call`` on the model), in chunks of examples that bound the
  ``(K, chunk, D)`` per-example gradients held at once.

All three are tested against a plain loop of one autograd call per member and example
(``tests/approximators/test_per_example.py``).
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vjp, vmap

from bench.functional import StackedModel
from bench.likelihoods import Likelihood
from bench.tasks.models import FilterResponseNorm, HaikuLSTM, SameConv2d, lstm_cell

PER_EXAMPLE_VALUES = 2**25
"""The generic path holds at most about this many per-example gradient values (K x chunk x D) at once."""


def gradient_moments(model: StackedModel, likelihood: Likelihood, params: torch.Tensor, x: torch.Tensor,
                     y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, mean_square)``, each ``(K, D)``, of the per-example gradients of -log p(y_i | x_i, w_k)
    for parameters ``params`` ``(K, D)`` on per-member minibatches ``x`` ``(K, B, ...)``, ``y`` ``(K, B)``."""
    if model.mlp_layers is not None:
        return _mlp_moments(model, likelihood, params, x, y)
    if model in _LAYER_PLANS and _LAYER_PLANS[model] is None:
        return _vmap_moments(model, likelihood, params, x, y)
    return _layerwise_moments(model, likelihood, params, x, y)


def recorded_mlp_forward(model: StackedModel, members: dict[str, torch.Tensor], x: torch.Tensor):
    """K stacked MLPs on per-member inputs ``(K, B, in)``, keeping what the outer-product identities need:
    ``(output, names, inputs, pre_activations)``, with each linear layer's name, its input a and its output
    z = a W^T + b (a leaf that requires grad, so that d/dz of any per-row quantity gives every row's delta)."""
    names, inputs, pre_activations = [], [], []
    h = x
    for kind, name in model.mlp_layers:
        if kind == "linear":
            names.append(name)
            inputs.append(h)
            h = torch.baddbmm(members[f"{name}.bias"].unsqueeze(-2), h,
                              members[f"{name}.weight"].transpose(-1, -2)).requires_grad_(True)
            pre_activations.append(h)
        else:
            h = torch.relu(h)
    return h, names, inputs, pre_activations


def _mlp_moments(model, likelihood, params, x, y):
    layout = model.layout
    h, names, inputs, outputs = recorded_mlp_forward(model, layout.unflatten(params.detach()), x)
    # Each example's loss depends on its own row of every z, so d(sum of losses)/dz_i is example i's delta.
    deltas = torch.autograd.grad(-likelihood.log_prob(h, y).sum(), outputs)
    batch = x.shape[1]
    mean, mean_square = {}, {}
    with torch.no_grad():
        for name, a, delta in zip(names, inputs, deltas):
            mean[f"{name}.weight"] = torch.bmm(delta.transpose(1, 2), a) / batch
            mean[f"{name}.bias"] = delta.sum(1) / batch
            mean_square[f"{name}.weight"] = torch.bmm(delta.square().transpose(1, 2), a.square()) / batch
            mean_square[f"{name}.bias"] = delta.square().sum(1) / batch
    return layout.flatten(mean), layout.flatten(mean_square)


def _vmap_moments(model, likelihood, params, x, y):
    layout = model.layout

    def example_loss(flat, xi, yi):
        member = {name: p[0] for name, p in layout.unflatten(flat.unsqueeze(0)).items()}
        return -likelihood.log_prob(functional_call(model.base, member, (xi.unsqueeze(0),)), yi.unsqueeze(0)).sum()

    per_example = vmap(vmap(grad(example_loss), in_dims=(None, 0, 0)), in_dims=(0, 0, 0))
    k, batch = y.shape
    chunk = max(1, PER_EXAMPLE_VALUES // (k * layout.size))
    total = torch.zeros_like(params)
    total_square = torch.zeros_like(params)
    params = params.detach()
    for start in range(0, batch, chunk):
        g = per_example(params, x[:, start:start + chunk], y[:, start:start + chunk])  # (K, chunk, D)
        total += g.sum(1)
        total_square += g.square().sum(1)
    return total / batch, total_square / batch


# --- Layer by layer ---------------------------------------------------------------------------------

Calls = list[tuple[list[torch.Tensor], torch.Tensor]]
"""A unit's calls in one forward pass: (its tensor arguments, detached; the delta of its output), ``(B, ...)``."""
Moments = dict[str, tuple[torch.Tensor, torch.Tensor]]
"""Parameter name -> (sum over examples of g_i, sum over examples of g_i ** 2), each of the parameter's shape."""


@dataclass
class Unit:
    """A module whose parameters ``names`` (full names in the model) get their per-example gradients from
    ``rule`` over the module's calls; ``path`` is the module's name in the model."""

    path: str
    module: nn.Module
    names: list[str]
    rule: Callable[["Unit", dict[str, torch.Tensor], Calls], Moments]

    def own(self, name: str) -> str:
        """A full parameter name relative to this module."""
        return name[len(self.path) + 1:]


_LAYER_PLANS: "weakref.WeakKeyDictionary[StackedModel, list[Unit] | None]" = weakref.WeakKeyDictionary()
"""Each model's units, found on its first use; None where the model takes the vmap path."""

OUTER_PRODUCT_VALUES = 2**19
"""The layer-wise rules form at most about this many per-example gradient values at once: a chunk that stays
in the CPU's cache (the LSTM's outer products ran 3x faster in chunks of 4 examples than of 128)."""

GROUPED_CONVOLUTION_MAX_IN_CHANNELS = 8
"""Convolutions with at most this many input channels take the grouped form of their per-example moments. One
thread, 128 examples (``python benchmarks/per_example_cost.py``, layer by layer): with 3 or 6 input channels the
per-offset products are thin (out x 3 results) and the grouped form took 0.26 to 0.98 of their time (3 -> 64 at
32 x 32: 11.6 against 45.4 ms); with 16 to 128 input channels it took 0.67 to 2.8 of it (a 1 x 1 convolution
16 -> 32: 16.1 against 5.8 ms)."""

MEAN_CHECK_TOLERANCE = 1e-3
"""On a model's first use, the layer-wise mean gradient may differ from autograd's by at most this fraction
of autograd's largest component (float32 sums in another order differ by ~1e-4 in ResNet-20-FRN)."""


class _Recorder:
    """Forward hooks on ``modules`` (path -> module) keeping every call's arguments and output. An output that
    does not require grad (nothing before it does: parameters are constants here) becomes a leaf that does,
    so that the backward pass reaches every unit's output. A call with keyword arguments, a non-tensor
    argument or a non-tensor output is not recorded; its module's path goes into ``unsupported``."""

    def __init__(self, modules: dict[str, nn.Module]):
        self.modules = modules
        self.calls: dict[str, list[tuple[list[torch.Tensor], torch.Tensor]]] = {path: [] for path in modules}
        self.unsupported: set[str] = set()

    def __enter__(self) -> "_Recorder":
        self.handles = [module.register_forward_hook(self._hook(path), with_kwargs=True)
                        for path, module in self.modules.items()]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()

    def _hook(self, path: str):
        def hook(module, args, kwargs, output):
            if kwargs or not isinstance(output, torch.Tensor) or not all(isinstance(a, torch.Tensor) for a in args):
                self.unsupported.add(path)
                return None
            if not output.requires_grad:
                output = output.detach().requires_grad_(True)
            self.calls[path].append(([a.detach() for a in args], output))
            return output
        return hook


def _layerwise_moments(model, likelihood, params, x, y):
    layout, batch = model.layout, y.shape[1]
    means, squares = [], []
    for k in range(params.shape[0]):
        member = {name: p[0] for name, p in layout.unflatten(params[k:k + 1].detach()).items()}
        if model in _LAYER_PLANS:
            moments = _member_moments(model, _LAYER_PLANS[model], likelihood, member, x[k], y[k])
        else:
            moments = _planning_member_moments(model, likelihood, member, x[k], y[k])
        if moments is None:  # the model cannot take this path: see the warning
            return _vmap_moments(model, likelihood, params, x, y)
        means.append(layout.flatten({name: moments[name][0].unsqueeze(0) for name in layout.names}))
        squares.append(layout.flatten({name: moments[name][1].unsqueeze(0) for name in layout.names}))
    mean, mean_square = (means[0], squares[0]) if len(means) == 1 else (torch.cat(means), torch.cat(squares))
    return mean.div_(batch), mean_square.div_(batch)


def _fall_back(model: StackedModel, reason: str) -> None:
    _LAYER_PLANS[model] = None
    warnings.warn(f"per-example gradients: {reason}; using the slower vmap path", stacklevel=4)


def _planning_member_moments(model, likelihood, member, x, y) -> Moments | None:
    """A model's first use: the moments of :func:`_member_moments` from the same single forward and backward
    pass that finds the model's units (hooks on every module holding parameters) and checks the layer-wise mean
    gradient against autograd's (the parameters are leaves here). Stores the plan; None where the model cannot
    take the layer-wise path (a parameter outside every called module, an unsupported call of a unit, a
    parameter used outside the module that holds it)."""
    modules = dict(model.base.named_modules())
    holders = {path: module for path, module in modules.items() if path and any(True for _ in module.parameters())}
    leaves = {name: value.clone().requires_grad_(True) for name, value in member.items()}
    with _Recorder(holders) as recorder:
        output = functional_call(model.base, leaves, (x,))
    called = {path for path, calls in recorder.calls.items() if calls} | recorder.unsupported
    names_by_unit: dict[str, list[str]] = {}
    for name in model.layout.names:
        parts = name.split(".")[:-1]
        path = next((p for p in (".".join(parts[:i]) for i in range(len(parts), 0, -1)) if p in called), None)
        if path is None:
            return _fall_back(model, f"parameter {name} belongs to no module the forward pass calls")
        if path in recorder.unsupported:
            return _fall_back(model, f"module {path} is called with keyword or non-tensor arguments or returns "
                                     "a non-tensor")
        names_by_unit.setdefault(path, []).append(name)
    plan = [Unit(path, modules[path], names, _rule(modules[path], path, names)) for path, names in names_by_unit.items()]
    calls = [(unit, args, out) for unit in plan for args, out in recorder.calls[unit.path]]
    gradients = torch.autograd.grad(-likelihood.log_prob(output, y).sum(), [out for _, _, out in calls]
                                    + list(leaves.values()), allow_unused=True, materialize_grads=True)
    moments = _unit_moments(plan, member, calls, gradients[:len(calls)])
    layout = model.layout
    layer_wise = layout.flatten({name: moments[name][0].unsqueeze(0) for name in layout.names})
    autograd = layout.flatten({name: g.unsqueeze(0) for name, g in zip(leaves, gradients[len(calls):])})
    if (layer_wise - autograd).abs().max() > MEAN_CHECK_TOLERANCE * autograd.abs().max():
        return _fall_back(model, "the layer-wise path disagrees with autograd on this model (a parameter used "
                                 "outside the module that holds it?)")
    _LAYER_PLANS[model] = plan
    return moments


def _member_moments(model, plan, likelihood, member, x, y) -> Moments | None:
    """Sums over the examples of ``x`` ``(B, ...)`` of g_i and g_i ** 2 for one member's parameters."""
    with _Recorder({unit.path: unit.module for unit in plan}) as recorder:
        output = functional_call(model.base, member, (x,))
    if recorder.unsupported:
        return _fall_back(model, f"module {min(recorder.unsupported)} is called with keyword or non-tensor "
                                 "arguments or returns a non-tensor")
    calls = [(unit, args, out) for unit in plan for args, out in recorder.calls[unit.path]]
    # Each example's loss depends on its own rows of every unit's output (no layer mixes examples).
    deltas = torch.autograd.grad(-likelihood.log_prob(output, y).sum(), [out for _, _, out in calls],
                                 allow_unused=True, materialize_grads=True)
    return _unit_moments(plan, member, calls, deltas)


def _unit_moments(plan: list[Unit], member: dict[str, torch.Tensor], calls, deltas) -> Moments:
    by_unit: dict[str, Calls] = {unit.path: [] for unit in plan}
    for (unit, args, _), delta in zip(calls, deltas):
        by_unit[unit.path].append((args, delta))
    moments: Moments = {}
    with torch.no_grad():
        for unit in plan:
            if by_unit[unit.path]:
                moments.update(unit.rule(unit, member, by_unit[unit.path]))
            else:  # a unit this batch never called
                moments.update({name: (torch.zeros_like(member[name]),) * 2 for name in unit.names})
    return moments


def _rule(module: nn.Module, path: str, names: list[str]):
    own = sorted(name[len(path) + 1:] for name in names)
    if own == ["bias", "weight"] or own == ["weight"]:
        if type(module) is nn.Linear:
            return _linear_rule
        if (type(module) in (nn.Conv1d, nn.Conv2d, SameConv2d) and module.groups == 1
                and module.padding_mode == "zeros" and isinstance(module.padding, tuple)):
            return _convolution_rule
    if type(module) is FilterResponseNorm and own == ["beta", "gamma", "tau"]:
        return _filter_response_norm_rule
    if type(module) is HaikuLSTM and own == ["linear.bias", "linear.weight"]:
        return _lstm_rule
    if (own == ["weight"] and type(module) is nn.Embedding and module.padding_idx is None
            and module.max_norm is None and not module.scale_grad_by_freq):
        return _embedding_rule
    return _unit_vjp_rule


def _outer_product_moments(weight: str, bias: str | None, shape: torch.Size, inputs: torch.Tensor,
                           deltas: torch.Tensor) -> Moments:
    """Moments of g_i = sum_p deltas[i, p] inputs[i, p]^T (a weight of ``shape``, viewed as ``(out, in)``) and
    of sum_p deltas[i, p] (the bias, unless ``bias`` is None) for ``inputs`` ``(B, P, in)``, ``deltas`` ``(B, P, out)``."""
    moments = {}
    if inputs.shape[1] == 1:  # Goodfellow: no per-example weight gradient is formed
        a, d = inputs[:, 0], deltas[:, 0]
        moments[weight] = ((d.T @ a).view(shape), (d.square().T @ a.square()).view(shape))
        bias_gradients = d
    else:
        total = inputs.new_zeros(deltas.shape[-1], inputs.shape[-1])
        total_square = torch.zeros_like(total)
        chunk = max(1, OUTER_PRODUCT_VALUES // total.numel())
        for start in range(0, inputs.shape[0], chunk):
            g = torch.bmm(deltas[start:start + chunk].transpose(1, 2), inputs[start:start + chunk])
            total += g.sum(0)
            total_square += g.square_().sum(0)
        moments[weight] = (total.view(shape), total_square.view(shape))
        bias_gradients = deltas.sum(1)
    if bias is not None:
        moments[bias] = (bias_gradients.sum(0), bias_gradients.square().sum(0))
    return moments


def _linear_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls) -> Moments:
    module = unit.module
    batch = calls[0][1].shape[0]
    inputs = torch.cat([args[0].reshape(batch, -1, module.in_features) for args, _ in calls], dim=1)
    deltas = torch.cat([delta.reshape(batch, -1, module.out_features) for _, delta in calls], dim=1)
    bias = f"{unit.path}.bias" if f"{unit.path}.bias" in unit.names else None
    return _outer_product_moments(f"{unit.path}.weight", bias, module.weight.shape, inputs, deltas)


def _convolution_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls) -> Moments:
    """A convolution's per-example moments by the faster of two exact forms for its shape (a fixed rule, so that
    a run's round-off never depends on timing): one convolution grouped by example where the layer has few
    input channels, else one batched matrix product per kernel offset. Both see every call as 2-D, its input
    padded: ``(B, in, H, W)`` and its output's deltas ``(B, out, h, w)`` (a 1-D convolution has height 1)."""
    module = unit.module
    weight = member[f"{unit.path}.weight"]
    one_dimensional = weight.dim() == 3

    def planar(pair, height: int = 1) -> tuple[int, int]:
        """A 1-D convolution's size as the 2-D one of height ``height`` (1 for sizes, 0 for padding)."""
        return (height, *pair) if one_dimensional else tuple(pair)

    padded, bias_gradients = [], 0
    for args, delta in calls:
        x = args[0].unsqueeze(-2) if one_dimensional else args[0]
        delta = delta.unsqueeze(-2) if one_dimensional else delta
        x, padding = module.padded_input(x) if isinstance(module, SameConv2d) else (x, planar(module.padding, 0))
        padded.append((F.pad(x, (padding[1], padding[1], padding[0], padding[0])), delta))
        bias_gradients = bias_gradients + delta.sum((-2, -1))
    form = (_grouped_convolution_moments if module.in_channels <= GROUPED_CONVOLUTION_MAX_IN_CHANNELS
            else _offset_convolution_moments)
    total, total_square = form(padded, weight.shape[:2], planar(weight.shape[2:]), planar(module.dilation),
                               planar(module.stride))
    moments = {f"{unit.path}.weight": (total.view(weight.shape), total_square.view(weight.shape))}
    if f"{unit.path}.bias" in unit.names:
        moments[f"{unit.path}.bias"] = (bias_gradients.sum(0), bias_gradients.square().sum(0))
    return moments


def _grouped_convolution_moments(padded, channels, kernel, dilation, stride) -> tuple[torch.Tensor, torch.Tensor]:
    """Example b's weight gradient, g_b[o, c, i, j] = sum_p delta_b[o, p] x_b[c, s p + d (i, j)] (stride s, dilation
    d, over output positions p), is itself a convolution: of x_b's channel c with delta_b's channel o as the kernel,
    at stride d and dilation s. One convolution grouped by example computes every example's gradient at once,
    ``(in, B * out, kh, kw)``; returns the sums over examples of g_b and g_b ** 2, ``(out, in, kh, kw)``."""
    out_channels, in_channels = channels
    batch = padded[0][1].shape[0]
    total = padded[0][0].new_zeros(out_channels, in_channels, *kernel)
    total_square = torch.zeros_like(total)
    chunk = max(1, OUTER_PRODUCT_VALUES // total.numel())
    for start in range(0, batch, chunk):
        examples = slice(start, start + chunk)
        g = 0
        for x, delta in padded:
            x, delta = x[examples], delta[examples]
            n = x.shape[0]
            responses = F.conv2d(x.transpose(0, 1), delta.reshape(n * out_channels, 1, *delta.shape[-2:]),
                                 stride=dilation, dilation=stride, groups=n)  # (in, n * out, >= kh, >= kw)
            g = g + responses[:, :, :kernel[0], :kernel[1]].reshape(in_channels, n, out_channels, *kernel)
        total += g.sum(1).transpose(0, 1)
        total_square += g.square_().sum(1).transpose(0, 1)
    return total, total_square


def _offset_convolution_moments(padded, channels, kernel, dilation, stride) -> tuple[torch.Tensor, torch.Tensor]:
    """A convolution's weight gradient at kernel offset (i, j) is sum_p delta_p x_{p + (i, j)}^T over output
    positions p: one batched matrix product ``(B, out, P) @ (B, P, in)`` per offset gives every example's
    ``(out, in)`` slice, whose moments are added up at once. Unlike ``F.unfold`` (a copy of the input per
    offset), a stride-1 offset reads the padded input in place: flattened row by row, the inputs of
    consecutive output positions are consecutive, once the deltas get zero columns for the padding's width.
    Returns the sums over examples of g_b and g_b ** 2, ``(out, in, kh, kw)``."""
    out_channels, in_channels = channels
    (kernel_h, kernel_w), (dilation_h, dilation_w), (stride_h, stride_w) = kernel, dilation, stride
    windows = []  # per call: (deltas (B, out, positions), offset (i, j) -> inputs (B, in, positions))
    for x, delta in padded:
        height, width = delta.shape[-2:]
        if stride_h == stride_w == 1:
            padded_width = x.shape[-1]
            flat = F.pad(x.flatten(2), (0, (kernel_w - 1) * dilation_w))
            positions = height * padded_width
            deltas = F.pad(delta, (0, padded_width - width)).flatten(2)

            def inputs(i, j, flat=flat, padded_width=padded_width, positions=positions):
                start = i * dilation_h * padded_width + j * dilation_w
                return flat[:, :, start:start + positions]
        else:
            deltas = delta.flatten(2)

            def inputs(i, j, x=x, height=height, width=width):
                top, left = i * dilation_h, j * dilation_w
                return x[:, :, top:top + stride_h * (height - 1) + 1:stride_h,
                         left:left + stride_w * (width - 1) + 1:stride_w].flatten(2)
        windows.append((deltas, inputs))
    total = padded[0][0].new_zeros(out_channels, in_channels, kernel_h, kernel_w)
    total_square = torch.zeros_like(total)
    batch = padded[0][1].shape[0]
    chunk = max(1, OUTER_PRODUCT_VALUES // (out_channels * in_channels))
    for i in range(kernel_h):
        for j in range(kernel_w):
            for start in range(0, batch, chunk):
                examples = slice(start, start + chunk)
                g = sum(torch.bmm(deltas[examples], inputs(i, j)[examples].transpose(1, 2))
                        for deltas, inputs in windows)  # (chunk, out, in)
                total[:, :, i, j] += g.sum(0)
                total_square[:, :, i, j] += g.square_().sum(0)
    return total, total_square


def _filter_response_norm_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls) -> Moments:
    """FRN per channel c: y = max(z, tau) with z = gamma r x + beta and r = (mean_{H,W} x^2 + eps)^(-1/2), so
    example i's gradients are sums over its positions: d gamma = r sum dz x, d beta = sum dz and
    d tau = sum (delta - dz), with dz = delta [z > tau] (ties split in halves, as autograd's maximum does)."""
    gamma, beta, tau = (member[f"{unit.path}.{name}"] for name in ("gamma", "beta", "tau"))
    per_example = {"gamma": 0, "beta": 0, "tau": 0}
    for args, delta in calls:
        x = args[0]
        scale = torch.rsqrt(x.square().mean(dim=(-2, -1), keepdim=True) + unit.module.eps)
        z = torch.addcmul(beta, x, gamma * scale)
        weight = (z > tau).to(x.dtype).add_((z == tau).to(x.dtype), alpha=0.5)
        dz = delta * weight
        dz_sum, delta_sum = dz.sum(dim=(-2, -1)), delta.sum(dim=(-2, -1))
        per_example["gamma"] = per_example["gamma"] + (dz * x).sum(dim=(-2, -1)) * scale[..., 0, 0]
        per_example["beta"] = per_example["beta"] + dz_sum
        per_example["tau"] = per_example["tau"] + delta_sum - dz_sum
    moments = {}
    for name, g in per_example.items():  # g: (B, C)
        shape = member[f"{unit.path}.{name}"].shape
        moments[f"{unit.path}.{name}"] = (g.sum(0).view(shape), g.square().sum(0).view(shape))
    return {name: moments[name] for name in unit.names}


def _lstm_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls) -> Moments:
    """The LSTM applies one linear map to every step's concat[x_t, h_{t-1}]: re-running the recurrence
    keeps each step's gates and state, one backward pass from the last state gives the gates' deltas, and
    the linear map's per-example gradients are sums over steps (the outer-product rule with P = steps)."""
    module = unit.module
    weight, bias = f"{unit.path}.linear.weight", f"{unit.path}.linear.bias"
    inputs, deltas = [], []
    for args, delta in calls:
        sequence = args[0]
        input_weight, recurrent_weight = member[weight].split([module.input_size, module.hidden_size], dim=1)
        input_gates = F.linear(sequence, input_weight, member[bias]).detach().requires_grad_(True)
        hidden = sequence.new_zeros(sequence.shape[0], module.hidden_size)
        cell = torch.zeros_like(hidden)
        states, gates_per_step = [], []
        with torch.enable_grad():
            for step in range(sequence.shape[1]):
                states.append(hidden)
                gates = input_gates[:, step] + F.linear(hidden, recurrent_weight)
                gates_per_step.append(gates)
                hidden, cell = lstm_cell(gates, cell)
            gate_deltas = torch.autograd.grad(hidden, gates_per_step, delta)
        inputs.append(torch.cat([sequence, torch.stack(states, 1).detach()], dim=-1))
        deltas.append(torch.stack(gate_deltas, 1))
    return _outer_product_moments(weight, bias, member[weight].shape, torch.cat(inputs, 1), torch.cat(deltas, 1))


def _embedding_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls) -> Moments:
    """Example i's gradient of row v is the sum of delta_i over i's positions holding token v."""
    module = unit.module
    batch = calls[0][1].shape[0]
    ids = torch.cat([args[0].reshape(batch, -1) for args, _ in calls], dim=1)
    deltas = torch.cat([delta.reshape(batch, -1, module.embedding_dim) for _, delta in calls], dim=1)
    vocabulary = module.num_embeddings
    example = torch.arange(batch, device=ids.device).unsqueeze(1)
    pairs, pair_of_position = torch.unique((example * vocabulary + ids).flatten(), return_inverse=True)
    per_pair = deltas.new_zeros(len(pairs), module.embedding_dim).index_add_(0, pair_of_position,
                                                                             deltas.reshape(-1, module.embedding_dim))
    rows = pairs % vocabulary
    table = deltas.new_zeros(vocabulary, module.embedding_dim)
    return {f"{unit.path}.weight": (table.index_add(0, rows, per_pair), table.index_add(0, rows, per_pair.square()))}


def _unit_vjp_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls) -> Moments:
    """``vmap`` over examples of the vjp of the unit alone with respect to its own parameters."""
    prefix = unit.path + "."
    subtree = {name[len(prefix):]: p for name, p in member.items() if name.startswith(prefix)}
    own = [unit.own(name) for name in unit.names]

    def example_gradient(values, args, delta):
        def unit_output(own_values):
            return functional_call(unit.module, {**subtree, **dict(zip(own, own_values))},
                                   tuple(a.unsqueeze(0) for a in args))
        return vjp(unit_output, values)[1](delta.unsqueeze(0))[0]

    per_example = vmap(example_gradient, in_dims=(None, 0, 0))
    values = tuple(subtree[name] for name in own)
    batch = calls[0][1].shape[0]
    chunk = max(1, PER_EXAMPLE_VALUES // sum(v.numel() for v in values))
    totals = [torch.zeros_like(v) for v in values]
    squares = [torch.zeros_like(v) for v in values]
    for start in range(0, batch, chunk):
        gradients = None  # per example, summed over the unit's calls before squaring
        for args, delta in calls:
            g = per_example(values, [a[start:start + chunk] for a in args], delta[start:start + chunk])
            gradients = g if gradients is None else tuple(s + t for s, t in zip(gradients, g))
        for total, square, g in zip(totals, squares, gradients):
            total += g.sum(0)
            square += g.square().sum(0)
    return {name: (total, square) for name, total, square in zip(unit.names, totals, squares)}
