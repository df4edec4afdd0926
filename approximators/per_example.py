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
  user's layer, as one unit): layer by layer (as BackPACK does, Dangel et al. 2020, arXiv:1912.10985), for one
  member at a time. A forward pass with hooks keeps each unit's input a and output z; the parameters are constants,
  so one backward pass computes only the inputs' gradients, and with them every example's delta_i = dloss/dz_i.
  Then per unit:

  * ``Linear`` on ``(B, in)``: Goodfellow's identity above. On ``(B, P, in)`` (and a unit called P times)
    g_i = sum_p delta_ip a_ip^T, one batched matrix product per chunk of examples.
  * Convolution: the same over output positions p, g_i = sum_p delta_ip u_ip^T, with u_ip the input window
    that position p reads (im2col), copied from a strided view of the padded input, in the input's memory
    order, for a chunk of examples at a time, so that it stays in the CPU's cache.
  * ``Embedding``: g_i is the rows of delta_i added up per token; summed per (example, token) pair
    (``torch.unique``), squared, and added into the table, never a ``(B, vocabulary, dim)`` tensor.
  * ``FilterResponseNorm``: its gradients in closed form, per example and channel sums over positions.
  * ``HaikuLSTM``: its one linear map applied at every step, so the outer-product rule over the steps. The
    forward pass runs it through ``HaikuLSTM.unroll``, keeping each step's hidden state and pre-activations,
    so the one backward pass gives the pre-activations' deltas too (the recurrence is not run again).
  * Any other unit: ``vmap`` over examples of the ``vjp`` of the unit alone with respect to its own
    parameters, given its input and delta_i.

  Which module a parameter belongs to is read from the modules a forward pass calls (the deepest
  called module that contains it: the LSTM's ``linear`` is used functionally by the LSTM, so the LSTM
  is the unit). A unit called several times gets g_i summed over its calls before squaring. On a model's
  first use the same single pass, with the parameters as leaves, also checks the path's mean gradient
  against autograd's and, if they differ (a parameter used outside the module that holds it), warns and
  uses the next path from then on (recomputing that one minibatch). Per-example values are formed in
  chunks of examples small enough to stay in the CPU's cache (:data:`OUTER_PRODUCT_VALUES`,
  :data:`CONVOLUTION_WINDOW_VALUES`; on a GPU, whole minibatches: :data:`ACCELERATOR_CHUNK_VALUES`), and every
  rule writes its sums into the caller's flat ``(K, D)`` outputs (no per-step allocation of ``D`` values: on a
  CPU, fresh tensors of tens of megabytes cost more in page faults than the arithmetic on them).
- **Any other model**: ``torch.func.vmap`` over members and over examples of ``torch.func.grad`` of the
  one-example loss (``functional_call`` on the model), in chunks of examples that bound the
  ``(K, chunk, D)`` per-example gradients held at once.

All three are tested against a plain loop of one autograd call per member and example
(``tests/approximators/test_per_example.py``).
"""

from __future__ import annotations

import functools
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
from bench.tasks.models import FilterResponseNorm, HaikuLSTM, SameConv2d

PER_EXAMPLE_VALUES = 2**25
"""The generic path holds at most about this many per-example gradient values (K x chunk x D) at once."""


def gradient_moments(model: StackedModel, likelihood: Likelihood, params: torch.Tensor, x: torch.Tensor,
                     y: torch.Tensor, out: tuple[torch.Tensor, torch.Tensor] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, mean_square)``, each ``(K, D)``, of the per-example gradients of -log p(y_i | x_i, w_k)
    for parameters ``params`` ``(K, D)`` on per-member minibatches ``x`` ``(K, B, ...)``, ``y`` ``(K, B)``;
    written into ``out`` (two ``(K, D)`` tensors, overwritten whole) where given, as a training loop does."""
    if out is None:
        out = (torch.empty_like(params, requires_grad=False), torch.empty_like(params, requires_grad=False))
    if model.mlp_layers is not None:
        return _mlp_moments(model, likelihood, params, x, y, out)
    if model in _LAYER_PLANS and _LAYER_PLANS[model] is None:
        return _vmap_moments(model, likelihood, params, x, y, out)
    return _layerwise_moments(model, likelihood, params, x, y, out)


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


def _mlp_moments(model, likelihood, params, x, y, out):
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
    return layout.flatten(mean, out=out[0]), layout.flatten(mean_square, out=out[1])


def _vmap_moments(model, likelihood, params, x, y, out):
    layout = model.layout

    def example_loss(flat, xi, yi):
        member = {name: p[0] for name, p in layout.unflatten(flat.unsqueeze(0)).items()}
        return -likelihood.log_prob(functional_call(model.base, member, (xi.unsqueeze(0),)), yi.unsqueeze(0)).sum()

    per_example = vmap(vmap(grad(example_loss), in_dims=(None, 0, 0)), in_dims=(0, 0, 0))
    k, batch = y.shape
    chunk = max(1, PER_EXAMPLE_VALUES // (k * layout.size))
    total, total_square = out[0].zero_(), out[1].zero_()
    params = params.detach()
    for start in range(0, batch, chunk):
        g = per_example(params, x[:, start:start + chunk], y[:, start:start + chunk])  # (K, chunk, D)
        total += g.sum(1)
        total_square += g.square().sum(1)
    return total.div_(batch), total_square.div_(batch)


# --- Layer by layer ---------------------------------------------------------------------------------

Calls = list[tuple[list[torch.Tensor], list[torch.Tensor]]]
"""A unit's calls in one forward pass: (its tensor arguments, detached; the deltas of its recorded outputs),
``(B, ...)``. The recorded output is the unit's output, except for the LSTM (see :class:`_Recorder`)."""
Moments = dict[str, tuple[torch.Tensor, torch.Tensor]]
"""Parameter name -> (sum over examples of g_i, sum over examples of g_i ** 2), each of the parameter's shape:
views into the flat outputs of :func:`gradient_moments`, which a unit's rule fills whole for its parameters."""


@dataclass
class Unit:
    """A module whose parameters ``names`` (full names in the model) get their per-example gradients from
    ``rule`` over the module's calls; ``path`` is the module's name in the model."""

    path: str
    module: nn.Module
    names: list[str]
    rule: Callable[["Unit", dict[str, torch.Tensor], Calls, Moments], None]

    def own(self, name: str) -> str:
        """A full parameter name relative to this module."""
        return name[len(self.path) + 1:]


_LAYER_PLANS: "weakref.WeakKeyDictionary[StackedModel, list[Unit] | None]" = weakref.WeakKeyDictionary()
"""Each model's units, found on its first use; None where the model takes the vmap path."""

OUTER_PRODUCT_VALUES = 2**19
"""The layer-wise rules form at most about this many per-example gradient values at once: a chunk that stays
in the CPU's cache (the LSTM's outer products ran 3x faster in chunks of 4 examples than of 128)."""

CONVOLUTION_WINDOW_VALUES = 2**19
"""A convolution's rule copies at most about this many input-window values (examples x in x kh x kw x positions)
at once. One thread, 128 examples, the layers of the competition models: chunks of 2**19 values took 0.6 to 0.9
of the time of chunks of 2**17 or 2**20, and of the earlier forms (a batched product per kernel offset; a
convolution grouped by example for thin layers), e.g. 15 against 26 ms for the CNN-LSTM's 128 -> 64 one and
4.3 against 8.1 ms for LeNet-5's 3 -> 6 one; the summed weight gradient alone takes 12.7 and 2.7 ms."""

ACCELERATOR_CHUNK_VALUES = 2**25
"""On a GPU both rules form up to this many values at once (128 MiB in float32), a minibatch of 128 of every
layer of the competition models in one product: chunks sized for a CPU's cache launch thousands of small kernels, and
VOGN on the AlexNet-like net of CIFAR-10-C spent 146 ms of its 1.7 s on the GPU, the rest launching them (H200,
2048 rows; docs/speed.md)."""


def _chunk_values(cpu_values: int, device: torch.device) -> int:
    """How many values a rule forms at once on ``device``: ``cpu_values`` on a CPU, else
    :data:`ACCELERATOR_CHUNK_VALUES`."""
    return cpu_values if device.type == "cpu" else ACCELERATOR_CHUNK_VALUES


MEAN_CHECK_TOLERANCE = 1e-3
"""On a model's first use, the layer-wise mean gradient may differ from autograd's by at most this fraction
of autograd's largest component (float32 sums in another order differ by ~1e-4 in ResNet-20-FRN)."""


class _Recorder:
    """Forward hooks on ``modules`` (path -> module) keeping every call's arguments and output. An output that
    does not require grad (nothing before it does: parameters are constants here) becomes a leaf that does,
    so that the backward pass reaches every unit's output. A call with keyword arguments, a non-tensor
    argument or a non-tensor output is not recorded; its module's path goes into ``unsupported``.

    A :class:`HaikuLSTM` runs through its ``unroll`` while recording: its call keeps as arguments the sequence
    and the hidden state each step read ``(B, T, hidden)``, and as outputs the steps' pre-activations."""

    def __init__(self, modules: dict[str, nn.Module]):
        self.modules = modules
        self.calls: dict[str, list[tuple[list[torch.Tensor], list[torch.Tensor]]]] = {path: [] for path in modules}
        self.unsupported: set[str] = set()
        self._steps: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}  # by id(module), until its hook

    def __enter__(self) -> "_Recorder":
        self.handles = [module.register_forward_hook(self._hook(path), with_kwargs=True)
                        for path, module in self.modules.items()]
        self.unrolled = [module for module in self.modules.values() if type(module) is HaikuLSTM]
        for module in self.unrolled:  # an instance attribute shadows the class's forward until __exit__
            module.forward = functools.partial(self._unroll, module)
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()
        for module in self.unrolled:
            del module.forward

    def _unroll(self, module: HaikuLSTM, sequence: torch.Tensor) -> torch.Tensor:
        if not sequence.requires_grad:  # so that the backward pass reaches the pre-activations
            sequence = sequence.detach().requires_grad_(True)
        gates, states = [], []
        output = module.unroll(sequence, on_step=lambda g, h: (gates.append(g), states.append(h)))
        self._steps[id(module)] = gates, states
        return output

    def _hook(self, path: str):
        def hook(module, args, kwargs, output):
            steps = self._steps.pop(id(module), None)
            if kwargs or not isinstance(output, torch.Tensor) or not all(isinstance(a, torch.Tensor) for a in args):
                self.unsupported.add(path)
                return None
            if steps is not None:
                gates, states = steps
                self.calls[path].append(([args[0].detach(), torch.stack(states, 1).detach()], gates))
                return output
            if not output.requires_grad:
                output = output.detach().requires_grad_(True)
            self.calls[path].append(([a.detach() for a in args], [output]))
            return output
        return hook


def _layerwise_moments(model, likelihood, params, x, y, out):
    layout, batch = model.layout, y.shape[1]
    mean, mean_square = out
    for k in range(params.shape[0]):
        member = {name: p[0] for name, p in layout.unflatten(params[k:k + 1].detach()).items()}
        sums = {name: (m[0], s[0]) for (name, m), s in zip(layout.unflatten(mean[k:k + 1]).items(),
                                                           layout.unflatten(mean_square[k:k + 1]).values())}
        if model in _LAYER_PLANS:
            complete = _member_moments(model, _LAYER_PLANS[model], likelihood, member, x[k], y[k], sums)
        else:
            complete = _planning_member_moments(model, likelihood, member, x[k], y[k], sums)
        if not complete:  # the model cannot take this path: see the warning
            return _vmap_moments(model, likelihood, params, x, y, out)
    return mean.div_(batch), mean_square.div_(batch)


def _fall_back(model: StackedModel, reason: str) -> bool:
    _LAYER_PLANS[model] = None
    warnings.warn(f"per-example gradients: {reason}; using the slower vmap path", stacklevel=4)
    return False


def _recorded_outputs(calls) -> list[torch.Tensor]:
    return [output for _, _, outputs in calls for output in outputs]


def _planning_member_moments(model, likelihood, member, x, y, sums: Moments) -> bool:
    """A model's first use: the sums of :func:`_member_moments` from the same single forward and backward
    pass that finds the model's units (hooks on every module holding parameters) and checks the layer-wise mean
    gradient against autograd's (the parameters are leaves here). Stores the plan; False where the model cannot
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
    calls = [(unit, args, outputs) for unit in plan for args, outputs in recorder.calls[unit.path]]
    outputs = _recorded_outputs(calls)
    gradients = torch.autograd.grad(-likelihood.log_prob(output, y).sum(), outputs + list(leaves.values()),
                                    allow_unused=True, materialize_grads=True)
    _unit_moments(plan, member, calls, gradients[:len(outputs)], sums)
    layer_wise = torch.cat([sums[name][0].flatten() for name in model.layout.names])
    autograd = torch.cat([g.flatten() for g in gradients[len(outputs):]])
    if (layer_wise - autograd).abs().max() > MEAN_CHECK_TOLERANCE * autograd.abs().max():
        return _fall_back(model, "the layer-wise path disagrees with autograd on this model (a parameter used "
                                 "outside the module that holds it?)")
    _LAYER_PLANS[model] = plan
    return True


def _member_moments(model, plan, likelihood, member, x, y, sums: Moments) -> bool:
    """Fills ``sums`` with the sums over the examples of ``x`` ``(B, ...)`` of g_i and g_i ** 2 for one member's
    parameters; False where the model turns out unable to take this path."""
    with _Recorder({unit.path: unit.module for unit in plan}) as recorder:
        output = functional_call(model.base, member, (x,))
    if recorder.unsupported:
        return _fall_back(model, f"module {min(recorder.unsupported)} is called with keyword or non-tensor "
                                 "arguments or returns a non-tensor")
    calls = [(unit, args, outputs) for unit in plan for args, outputs in recorder.calls[unit.path]]
    # Each example's loss depends on its own rows of every unit's output (no layer mixes examples).
    deltas = torch.autograd.grad(-likelihood.log_prob(output, y).sum(), _recorded_outputs(calls),
                                 allow_unused=True, materialize_grads=True)
    _unit_moments(plan, member, calls, deltas, sums)
    return True


def _unit_moments(plan: list[Unit], member: dict[str, torch.Tensor], calls, deltas, sums: Moments) -> None:
    by_unit: dict[str, Calls] = {unit.path: [] for unit in plan}
    position = 0
    for unit, args, outputs in calls:
        by_unit[unit.path].append((args, list(deltas[position:position + len(outputs)])))
        position += len(outputs)
    with torch.no_grad():
        for unit in plan:
            if by_unit[unit.path]:
                unit.rule(unit, member, by_unit[unit.path], sums)
            else:  # a unit this batch never called
                for name in unit.names:
                    for total in sums[name]:
                        total.zero_()


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
    if type(module) is HaikuLSTM:  # recorded step by step (its parameters are always linear.weight and .bias)
        return _lstm_rule
    if (own == ["weight"] and type(module) is nn.Embedding and module.padding_idx is None
            and module.max_norm is None and not module.scale_grad_by_freq):
        return _embedding_rule
    return _unit_vjp_rule


def _fill_moments(per_example: torch.Tensor, sums: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Writes sum_i g_i and sum_i g_i ** 2 of a parameter's per-example gradients ``(B, *shape)`` (any shape of its
    values) into its sums."""
    total, total_square = sums
    torch.sum(per_example.flatten(1), 0, out=total.view(-1))
    torch.sum(per_example.flatten(1).square(), 0, out=total_square.view(-1))


def _add_chunk_moments(total: torch.Tensor, total_square: torch.Tensor, batch: int, chunk: int,
                       gradients: Callable[[slice, torch.Tensor], torch.Tensor]) -> None:
    """Fills ``total`` and ``total_square`` (a weight's sums, any view of ``(rows, columns)`` values) with the sums
    over ``batch`` examples of g_i and g_i ** 2, where ``gradients(examples, out)`` writes the per-example gradients
    of a chunk of at most ``chunk`` examples into ``out`` ``(len, rows, columns)`` and returns it. Summing the
    per-example gradients costs less than a separate product for ``total`` (LSTM of the CNN-LSTM: 12 against
    17 ms)."""
    total.zero_()
    total_square.zero_()
    # One buffer, reused: fresh megabytes per chunk cost more in page faults than the products.
    per_example = total.new_empty(chunk, total.shape[0], total[0].numel())
    for start in range(0, batch, chunk):
        g = gradients(slice(start, min(start + chunk, batch)), per_example)
        total += g.sum(0).view(total.shape)
        total_square += g.square_().sum(0).view(total.shape)


def _outer_product_moments(weight: str, bias: str | None, inputs: torch.Tensor, deltas: torch.Tensor,
                           sums: Moments) -> None:
    """Sums of g_i = sum_p deltas[i, p] inputs[i, p]^T (the weight, viewed as ``(out, in)``) and of
    sum_p deltas[i, p] (the bias, unless ``bias`` is None) for ``inputs`` ``(B, P, in)``, ``deltas`` ``(B, P, out)``."""
    total, total_square = (t.view(deltas.shape[-1], inputs.shape[-1]) for t in sums[weight])
    if inputs.shape[1] == 1:  # Goodfellow: no per-example weight gradient is formed
        a, d = inputs[:, 0], deltas[:, 0]
        torch.mm(d.T, a, out=total)
        torch.mm(d.square().T, a.square(), out=total_square)
        bias_gradients = d
    else:
        batch = inputs.shape[0]
        values = _chunk_values(OUTER_PRODUCT_VALUES, total.device)
        _add_chunk_moments(total, total_square, batch, min(batch, max(1, values // total.numel())),
                           lambda examples, out: torch.bmm(deltas[examples].transpose(1, 2), inputs[examples],
                                                           out=out[:examples.stop - examples.start]))
        bias_gradients = deltas.sum(1)
    if bias is not None:
        _fill_moments(bias_gradients, sums[bias])


def _joined(per_call: list[torch.Tensor]) -> torch.Tensor:
    """A unit's calls' tensors ``(B, P_c, ...)`` as one ``(B, sum_c P_c, ...)``; a single call's as it is (no copy)."""
    return per_call[0] if len(per_call) == 1 else torch.cat(per_call, dim=1)


def _linear_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls, sums: Moments) -> None:
    module = unit.module
    batch = calls[0][1][0].shape[0]
    inputs = _joined([args[0].reshape(batch, -1, module.in_features) for args, _ in calls])
    deltas = _joined([delta.reshape(batch, -1, module.out_features) for _, (delta,) in calls])
    bias = f"{unit.path}.bias" if f"{unit.path}.bias" in unit.names else None
    _outer_product_moments(f"{unit.path}.weight", bias, inputs, deltas, sums)


def _convolution_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls, sums: Moments) -> None:
    """Example b's weight gradient is g_b[o, (c, i, j)] = sum_p delta_b[o, p] x_b[c, s p + d (i, j)] (stride s,
    dilation d, over output positions p): the product of its deltas ``(out, P)`` with its input windows
    ``(P, in kh kw)``, read from the padded input by a strided view and copied a chunk of examples at a time
    (:data:`CONVOLUTION_WINDOW_VALUES`). Every call is seen as 2-D, its input padded, ``(B, in, H, W)``, and its
    output's deltas ``(B, out, h, w)`` (a 1-D convolution has height 1); a unit's calls add up before squaring.

    The copy follows the input's memory order: for a channels-last input (an embedding's output transposed, as
    in the CNN-LSTM) the windows are laid out ``(P, kh, kw, in)``, channels innermost, so that the copy reads
    contiguous runs (there 0.7 against 5.6 ms per minibatch of 128 for gathering every channel's positions; the
    whole rule 15.5 against 19.4 ms) and g_b comes out in the order ``(out, kh, kw, in)``; otherwise
    ``(in, kh, kw, P)``, positions innermost."""
    module = unit.module
    weight = member[f"{unit.path}.weight"]
    one_dimensional = weight.dim() == 3

    def planar(pair, height: int = 1) -> tuple[int, int]:
        """A 1-D convolution's size as the 2-D one of height ``height`` (1 for sizes, 0 for padding)."""
        return (height, *pair) if one_dimensional else tuple(pair)

    (kernel_h, kernel_w), (dilation_h, dilation_w) = planar(weight.shape[2:]), planar(module.dilation)
    stride_h, stride_w = planar(module.stride)
    windows, bias_gradients = [], 0  # per call: (deltas (B, out, P), its input windows, a view in the copy's order)
    channels_last = None  # the first call's memory order decides the layout of every call's windows
    for args, (delta,) in calls:
        x = args[0].unsqueeze(-2) if one_dimensional else args[0]
        delta = delta.unsqueeze(-2) if one_dimensional else delta
        x, padding = module.padded_input(x) if isinstance(module, SameConv2d) else (x, planar(module.padding, 0))
        if any(padding):
            x = F.pad(x, (padding[1], padding[1], padding[0], padding[0]))
        batch_stride, channel_stride, row_stride, column_stride = x.stride()
        if channels_last is None:
            channels_last = channel_stride < column_stride
        view = x.as_strided((*x.shape[:2], kernel_h, kernel_w, *delta.shape[-2:]),
                            (batch_stride, channel_stride, dilation_h * row_stride, dilation_w * column_stride,
                             stride_h * row_stride, stride_w * column_stride))
        windows.append((delta.flatten(2), view.permute(0, 4, 5, 2, 3, 1) if channels_last else view))
        bias_gradients = bias_gradients + delta.sum((-2, -1))
    out_channels = weight.shape[0]
    total, total_square = (t.view(out_channels, -1) for t in sums[f"{unit.path}.weight"])
    if channels_last:  # g_b's columns in the order (kh, kw, in)
        total, total_square = (t.view(out_channels, -1, kernel_h, kernel_w).permute(0, 2, 3, 1)
                               for t in (total, total_square))
    largest = max(view[0].numel() for _, view in windows)  # one example's windows in its largest call
    batch = windows[0][0].shape[0]
    chunk = min(batch, max(1, _chunk_values(CONVOLUTION_WINDOW_VALUES, weight.device) // largest))
    window = weight.new_empty(chunk * largest)  # reused, as the products' buffer is

    def gradients(examples: slice, out: torch.Tensor) -> torch.Tensor:
        for call, (deltas, view) in enumerate(windows):
            part = view[examples]
            u = window[:part.numel()].view(part.shape).copy_(part)
            u = u.flatten(1, 2).flatten(2) if channels_last else u.flatten(1, 3).flatten(2).transpose(1, 2)
            if call == 0:  # u: (chunk, P, in kh kw)
                g = torch.bmm(deltas[examples], u, out=out[:len(u)])
            else:
                g.baddbmm_(deltas[examples], u)
        return g

    _add_chunk_moments(total, total_square, batch, chunk, gradients)
    if f"{unit.path}.bias" in unit.names:
        _fill_moments(bias_gradients, sums[f"{unit.path}.bias"])


def _filter_response_norm_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls, sums: Moments) -> None:
    """FRN per channel c: y = max(z, tau) with z = gamma r x + beta and r = (mean_{H,W} x^2 + eps)^(-1/2), so
    example i's gradients are sums over its positions: d gamma = r sum dz x, d beta = sum dz and
    d tau = sum (delta - dz), with dz = delta [z > tau] (ties split in halves, as autograd's maximum does)."""
    gamma, beta, tau = (member[f"{unit.path}.{name}"] for name in ("gamma", "beta", "tau"))
    per_example = {"gamma": 0, "beta": 0, "tau": 0}
    for args, (delta,) in calls:
        x = args[0]
        scale = torch.rsqrt(x.square().mean(dim=(-2, -1), keepdim=True) + unit.module.eps)
        z = torch.addcmul(beta, x, gamma * scale)
        weight = (z > tau).to(x.dtype).add_((z == tau).to(x.dtype), alpha=0.5)
        dz = delta * weight
        dz_sum, delta_sum = dz.sum(dim=(-2, -1)), delta.sum(dim=(-2, -1))
        per_example["gamma"] = per_example["gamma"] + (dz * x).sum(dim=(-2, -1)) * scale[..., 0, 0]
        per_example["beta"] = per_example["beta"] + dz_sum
        per_example["tau"] = per_example["tau"] + delta_sum - dz_sum
    for name, g in per_example.items():  # g: (B, C)
        _fill_moments(g, sums[f"{unit.path}.{name}"])


def _lstm_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls, sums: Moments) -> None:
    """The LSTM applies one linear map to every step's concat[x_t, h_{t-1}]: with each step's hidden state and
    the deltas of its pre-activations (both recorded by :class:`_Recorder`), the linear map's per-example
    gradients are sums over steps (the outer-product rule with P = steps)."""
    inputs = _joined([torch.cat([sequence, states], dim=-1) for (sequence, states), _ in calls])
    deltas = _joined([torch.stack(gate_deltas, 1) for _, gate_deltas in calls])
    _outer_product_moments(f"{unit.path}.linear.weight", f"{unit.path}.linear.bias", inputs, deltas, sums)


def _embedding_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls, sums: Moments) -> None:
    """Example i's gradient of row v is the sum of delta_i over i's positions holding token v."""
    module = unit.module
    batch = calls[0][1][0].shape[0]
    ids = _joined([args[0].reshape(batch, -1) for args, _ in calls])
    deltas = _joined([delta.reshape(batch, -1, module.embedding_dim) for _, (delta,) in calls])
    vocabulary = module.num_embeddings
    example = torch.arange(batch, device=ids.device).unsqueeze(1)
    pairs, pair_of_position = torch.unique((example * vocabulary + ids).flatten(), return_inverse=True)
    per_pair = deltas.new_zeros(len(pairs), module.embedding_dim).index_add_(0, pair_of_position,
                                                                             deltas.reshape(-1, module.embedding_dim))
    rows = pairs % vocabulary
    total, total_square = sums[f"{unit.path}.weight"]
    total.zero_().index_add_(0, rows, per_pair)
    total_square.zero_().index_add_(0, rows, per_pair.square())


def _unit_vjp_rule(unit: Unit, member: dict[str, torch.Tensor], calls: Calls, sums: Moments) -> None:
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
    batch = calls[0][1][0].shape[0]
    chunk = max(1, PER_EXAMPLE_VALUES // sum(v.numel() for v in values))
    totals = [sums[name][0].zero_() for name in unit.names]
    squares = [sums[name][1].zero_() for name in unit.names]
    for start in range(0, batch, chunk):
        gradients = None  # per example, summed over the unit's calls before squaring
        for args, (delta,) in calls:
            g = per_example(values, [a[start:start + chunk] for a in args], delta[start:start + chunk])
            gradients = g if gradients is None else tuple(s + t for s, t in zip(gradients, g))
        for total, square, g in zip(totals, squares, gradients):
            total += g.sum(0)
            square += g.square().sum(0)
