"""The embedded tasks' log-likelihoods in JAX, over bdl-bench's flat parameter vectors, for NumPyro comparisons.

Not part of the package and never imported by it or its tests: JAX and NumPyro are an optional extra
(``pip install -e ".[crosscheck]"``). Each function takes ``theta`` ``(D,)`` in the layout of the task's PyTorch
network (``bench.functional.ParameterLayout``: its parameters in ``named_parameters`` order, each flattened
row-major) and returns the full-data log-likelihood, so a NumPyro sample maps back to our networks one to one.
:func:`check_against_torch` evaluates both at random parameters in float64 and refuses a twin that differs.
Written from the architectures' definitions in ``bench/tasks/embedded.py``; no code taken from elsewhere.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from bench.functional import ParameterLayout, StackedModel
from bench.tasks import Task
from bench.tasks.models import LSTM_FORGET_BIAS, same_padding


def _jax():
    import jax
    import jax.numpy as jnp

    return jax, jnp


def _unflatten(layout: ParameterLayout, theta):
    out, start = {}, 0
    for name, shape in zip(layout.names, layout.shapes):
        size = math.prod(shape)
        out[name] = theta[start:start + size].reshape(tuple(shape))
        start += size
    return out


def _linear(x, p, prefix):
    return x @ p[f"{prefix}.weight"].T + p[f"{prefix}.bias"]


def _mlp(p, x, layers: list[str]):
    _, jnp = _jax()
    for i, prefix in enumerate(layers):
        if i:
            x = jnp.maximum(x, 0.0)
        x = _linear(x, p, prefix)
    return x


def _same_conv(x, weight, bias, stride: int):
    jax, _ = _jax()
    padding = [same_padding(x.shape[-2], weight.shape[-2], stride), same_padding(x.shape[-1], weight.shape[-1], stride)]
    out = jax.lax.conv_general_dilated(x, weight, (stride, stride), padding,
                                       dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return out + bias[None, :, None, None]


def _convnet(p, x):
    jax, _ = _jax()
    h = jax.nn.silu(_same_conv(x, p["conv1.weight"], p["conv1.bias"], 2))
    h = jax.nn.silu(_same_conv(h, p["conv2.weight"], p["conv2.bias"], 2))
    return _linear(h.mean(axis=(-2, -1)), p, "classifier")


def _cnn_lstm(p, rows, pool: int):
    jax, jnp = _jax()
    x = jnp.swapaxes(rows, -1, -2)  # (N, pixels as channels, rows as time)
    h = jax.lax.conv_general_dilated(x, p["conv.weight"], (1,), "VALID", dimension_numbers=("NCH", "OIH", "NCH"))
    h = jnp.maximum(h + p["conv.bias"][None, :, None], 0.0)
    n, c, t = h.shape
    h = h[..., : t // pool * pool].reshape(n, c, t // pool, pool).max(axis=-1)
    steps = jnp.swapaxes(h, -1, -2)  # (N, T', filters)
    weight, bias = p["lstm.linear.weight"], p["lstm.linear.bias"]
    hidden_size = weight.shape[0] // 4
    hidden = jnp.zeros((n, hidden_size), steps.dtype)
    cell = jnp.zeros((n, hidden_size), steps.dtype)
    for step in range(steps.shape[1]):
        gates = jnp.concatenate([steps[:, step], hidden], axis=-1) @ weight.T + bias
        i, g, f, o = jnp.split(gates, 4, axis=-1)
        cell = jax.nn.sigmoid(f + LSTM_FORGET_BIAS) * cell + jax.nn.sigmoid(i) * jnp.tanh(g)
        hidden = jax.nn.sigmoid(o) * jnp.tanh(cell)
    return _linear(hidden, p, "classifier")


def forward_fn(task: Task) -> Callable:
    """``forward(params_dict, x) -> outputs`` for the task's architecture."""
    module = task.model_factory()
    name = type(module).__name__
    if isinstance(module, torch.nn.Sequential):
        layers = [n for n, m in module.named_children() if isinstance(m, torch.nn.Linear)]
        return lambda p, x: _mlp(p, x, layers)
    if name == "DigitsConvNet":
        return _convnet
    if name == "DigitsCNNLSTM":
        return lambda p, x: _cnn_lstm(p, x, module.pool)
    raise ValueError(f"no JAX twin of {name} ({task.name})")


def log_likelihood_fn(task: Task, dtype) -> tuple[Callable, ParameterLayout]:
    """``log_likelihood(theta (D,)) -> scalar`` on the task's whole training set (closed over), and the layout."""
    jax, jnp = _jax()
    layout = ParameterLayout.of(task.model_factory())
    forward = forward_fn(task)
    x = jnp.asarray(task.x_train.numpy(), dtype)
    y = jnp.asarray(task.y_train.numpy())
    if task.kind == "classification":
        def log_likelihood(theta):
            logits = forward(_unflatten(layout, theta), x)
            return jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1).sum()
    else:
        y = y.astype(dtype)

        def log_likelihood(theta):
            out = forward(_unflatten(layout, theta), x)
            mean, std = out[:, 0], jax.nn.softplus(out[:, 1])
            return (-0.5 * ((y - mean) / std) ** 2 - jnp.log(std) - 0.5 * math.log(2 * math.pi)).sum()
    return log_likelihood, layout


def predict_fn(task: Task, dtype) -> Callable:
    """``predict(theta (D,), x) -> outputs`` (logits or mean and pre-softplus scale)."""
    layout = ParameterLayout.of(task.model_factory())
    forward = forward_fn(task)
    return lambda theta, x: forward(_unflatten(layout, theta), x)


def check_against_torch(task: Task, positions: np.ndarray, relative: float = 1e-10) -> float:
    """The largest relative difference of the JAX and PyTorch log-likelihoods at ``positions`` ``(K, D)``, in
    float64; raises if it exceeds ``relative`` (the twin would not be the same model)."""
    jax, jnp = _jax()
    if not jax.config.read("jax_enable_x64"):
        raise RuntimeError("enable JAX's float64 (jax.config.update('jax_enable_x64', True)) before the check")
    log_likelihood, _ = log_likelihood_fn(task, jnp.float64)
    model = StackedModel(task.model_factory().double())
    theta = torch.as_tensor(positions, dtype=torch.float64)
    with torch.no_grad():
        ours = task.likelihood.log_prob(model.flat(theta, task.x_train.double()),
                                        task.y_train if task.kind == "classification" else task.y_train.double())
    ours = ours.sum(-1).numpy()
    theirs = np.array([float(log_likelihood(jnp.asarray(row))) for row in positions])
    worst = float(np.max(np.abs(ours - theirs) / np.maximum(1.0, np.abs(ours))))
    if worst > relative:
        raise RuntimeError(f"{task.name}: the JAX twin's log-likelihood differs from PyTorch's by {worst:.2e} "
                           f"(relative); it is not the same model")
    return worst
