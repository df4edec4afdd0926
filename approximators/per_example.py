r"""Per-example gradient moments of the negative log-likelihood, for K stacked members at once.

For member k with parameters w_k ``(D,)`` and its minibatch of B examples, with
g_i = grad_w [-log p(y_i | x_i, w_k)] the gradient of example i alone:

    mean        = (1/B) sum_i g_i        (the usual minibatch gradient)
    mean_square = (1/B) sum_i g_i ** 2   (element-wise: the squared per-example gradients, averaged)

``mean_square`` is what VOGN's Gauss-Newton curvature estimate needs; it is not the square of
``mean`` (Adam's statistic). Two ways to compute them, both without a Python loop over examples:

- **MLPs** (``nn.Sequential`` of ``Linear`` and ``ReLU``, the fast path of :class:`StackedModel`):
  one backward pass to each layer's output z = a W^T + b gives every example's delta_i = dloss/dz_i;
  the example's weight gradient is the outer product delta_i a_i^T, so (Goodfellow 2015)
  mean_square(W) = (1/B) sum_i (delta_i ** 2) (a_i ** 2)^T and mean_square(b) = (1/B) sum_i delta_i ** 2,
  two batched matrix products, never a ``(B, D)`` tensor.
- **Any other model** (convolutions, FRN, LSTM, embeddings): ``torch.func.vmap`` over members and over
  examples of ``torch.func.grad`` of the one-example loss (``functional_call`` on the model), in
  chunks of examples that bound the ``(K, chunk, D)`` per-example gradients held at once.

Both are tested against a plain loop of one autograd call per member and example
(``tests/approximators/test_per_example.py``).
"""

from __future__ import annotations

import torch
from torch.func import functional_call, grad, vmap

from bench.functional import StackedModel
from bench.likelihoods import Likelihood

PER_EXAMPLE_VALUES = 2**25
"""The generic path holds at most about this many per-example gradient values (K x chunk x D) at once."""


def gradient_moments(model: StackedModel, likelihood: Likelihood, params: torch.Tensor, x: torch.Tensor,
                     y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean, mean_square)``, each ``(K, D)``, of the per-example gradients of -log p(y_i | x_i, w_k)
    for parameters ``params`` ``(K, D)`` on per-member minibatches ``x`` ``(K, B, ...)``, ``y`` ``(K, B)``."""
    if model.mlp_layers is not None:
        return _mlp_moments(model, likelihood, params, x, y)
    return _vmap_moments(model, likelihood, params, x, y)


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
