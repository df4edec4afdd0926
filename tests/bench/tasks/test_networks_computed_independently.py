"""Every shipped network pinned by what it computes (issue 48, item 3): its outputs on fixed inputs, with its own
(seeded) weights, against a forward pass written here in NumPy from the architectures' specifications (the
competition's Haiku models and the embedded tasks' docstrings), sharing no code with :mod:`bench.tasks`. A changed
activation, pooling, padding, gate order or reading axis in any of them fails here, not only in the gate.

The specifications' constants, stated here and not imported: TensorFlow's "SAME" padding (the output has
ceil(size / stride) positions, the odd unit of padding after), FilterResponseNorm's epsilon 1e-6 (bnn_hmc's
``FeatureResponseNorm``), Haiku's LSTM gate order (i, g, f, o) and forget-gate bias 1."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.tasks import get_task, models

FRN_EPSILON = 1e-6
FORGET_BIAS = 1.0


def swish(x):
    return x / (1 + np.exp(-x))


def relu(x):
    return np.maximum(x, 0)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def same_pad(size: int, kernel: int, stride: int) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def conv2d(x, weight, bias, stride=1, same=True):
    """x ``(N, C, H, W)``, weight ``(O, C, kh, kw)``: a cross-correlation, as every deep-learning library's."""
    _, _, h, w = x.shape
    _, _, kh, kw = weight.shape
    if same:
        (top, bottom), (left, right) = same_pad(h, kh, stride), same_pad(w, kw, stride)
        x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    rows, cols = (x.shape[2] - kh) // stride + 1, (x.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], weight.shape[0], rows, cols))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + stride * rows:stride, j:j + stride * cols:stride]  # (N, C, rows, cols)
            out += np.einsum("nchw,oc->nohw", patch, weight[:, :, i, j])
    return out + bias[None, :, None, None]


def conv1d_valid(x, weight, bias):
    """x ``(N, C, T)``, weight ``(O, C, k)``."""
    k = weight.shape[2]
    steps = x.shape[2] - k + 1
    return sum(np.einsum("nct,oc->not", x[:, :, j:j + steps], weight[:, :, j]) for j in range(k)) + bias[None, :, None]


def pool(x, size: int, reduce):
    """Non-overlapping pooling over the trailing axes (one for sequences, two for images), a stride of ``size``."""
    if x.ndim == 3:
        t = x.shape[2] // size
        return reduce(x[:, :, :t * size].reshape(*x.shape[:2], t, size), axis=3)
    h, w = x.shape[2] // size, x.shape[3] // size
    return reduce(x[:, :, :h * size, :w * size].reshape(*x.shape[:2], h, size, w, size), axis=(3, 5))


def frn(x, gamma, beta, tau):
    normalised = x / np.sqrt((x**2).mean(axis=(2, 3), keepdims=True) + FRN_EPSILON)
    return np.maximum(gamma[None] * normalised + beta[None], tau[None])


def dense(x, weight, bias):
    return x @ weight.T + bias


def lstm(sequence, weight, bias):
    """Haiku's LSTM over ``(N, T, F)``, state from zero: one linear map of [x_t, h_{t-1}] gives (i, g, f, o)."""
    n, hidden = sequence.shape[0], weight.shape[0] // 4
    h, c = np.zeros((n, hidden)), np.zeros((n, hidden))
    for t in range(sequence.shape[1]):
        gates = dense(np.concatenate([sequence[:, t], h], axis=1), weight, bias)
        i, g, f, o = np.split(gates, 4, axis=1)
        c = sigmoid(f + FORGET_BIAS) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
    return h


def weights_of(module: torch.nn.Module) -> dict[str, np.ndarray]:
    return {name: p.detach().double().numpy() for name, p in module.named_parameters()}


def mlp(p, x):
    """``nn.Sequential`` of linear layers named 0, 2, 4, ... with ReLU between them."""
    linear = sorted({int(name.split(".")[0]) for name in p})
    for k, index in enumerate(linear):
        x = dense(x, p[f"{index}.weight"], p[f"{index}.bias"])
        if k < len(linear) - 1:
            x = relu(x)
    return x


def conv_frn(p, prefix, x, stride=1):
    x = conv2d(x, p[f"{prefix}.conv.weight"], p[f"{prefix}.conv.bias"], stride)
    return frn(x, p[f"{prefix}.norm.gamma"], p[f"{prefix}.norm.beta"], p[f"{prefix}.norm.tau"])


def resnet20_frn(p, x):
    x = swish(conv_frn(p, "stem", x))
    for stage in (1, 2, 3):
        for block in range(3):
            prefix = f"stage{stage}.{block}"
            stride = 2 if stage > 1 and block == 0 else 1
            residual = conv_frn(p, f"{prefix}.second", swish(conv_frn(p, f"{prefix}.first", x, stride)))
            identity = conv_frn(p, f"{prefix}.shortcut", x, stride) if f"{prefix}.shortcut.conv.weight" in p else x
            x = swish(identity + residual)
    return dense(x.mean(axis=(2, 3)), p["classifier.weight"], p["classifier.bias"])


def alexnet(p, x):
    x = pool(swish(conv2d(x, p["conv1.weight"], p["conv1.bias"])), 2, np.max)
    x = pool(swish(conv2d(x, p["conv2.weight"], p["conv2.bias"])), 2, np.max)
    for layer in ("conv3", "conv4", "conv5"):
        x = swish(conv2d(x, p[f"{layer}.weight"], p[f"{layer}.bias"]))
    x = x.reshape(x.shape[0], -1)  # channels, then rows, then columns
    x = swish(dense(swish(dense(x, p["dense1.weight"], p["dense1.bias"])), p["dense2.weight"], p["dense2.bias"]))
    return dense(x, p["classifier.weight"], p["classifier.bias"])


def lenet5(p, x):
    x = pool(relu(conv2d(x, p["conv1.weight"], p["conv1.bias"])), 2, np.mean)
    x = pool(relu(conv2d(x, p["conv2.weight"], p["conv2.bias"], same=False)), 2, np.mean)
    x = relu(dense(relu(dense(x.reshape(x.shape[0], -1), p["dense1.weight"], p["dense1.bias"])),
                   p["dense2.weight"], p["dense2.bias"]))
    return dense(x, p["classifier.weight"], p["classifier.bias"])


def cnn_lstm(p, ids, pool_size):
    """Embedding ``(N, T, E)``, a VALID 1-D convolution over time, ReLU, max-pool over time, the LSTM, dense."""
    x = p["embedding.weight"][ids].transpose(0, 2, 1)  # (N, E, T): the embedding's features are the channels
    x = pool(relu(conv1d_valid(x, p["conv.weight"], p["conv.bias"])), pool_size, np.max)
    return dense(lstm(x.transpose(0, 2, 1), p["lstm.linear.weight"], p["lstm.linear.bias"]),
                 p["classifier.weight"], p["classifier.bias"])


def digits_cnn(p, x):
    x = swish(conv2d(x, p["conv1.weight"], p["conv1.bias"], stride=2))
    x = swish(conv2d(x, p["conv2.weight"], p["conv2.bias"], stride=2))
    return dense(x.mean(axis=(2, 3)), p["classifier.weight"], p["classifier.bias"])


def digits_lstm(p, rows):
    """Each image ``(N, 8 rows, 8 pixels)`` a sequence over its rows: the pixels of a row are the channels."""
    x = pool(relu(conv1d_valid(rows.transpose(0, 2, 1), p["conv.weight"], p["conv.bias"])), 2, np.max)
    return dense(lstm(x.transpose(0, 2, 1), p["lstm.linear.weight"], p["lstm.linear.bias"]),
                 p["classifier.weight"], p["classifier.bias"])


def _images(shape, seed):
    return torch.randn(3, *shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _perturbed(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """``module`` in float64 with every parameter moved off its initial value (FRN's gamma of one, beta and tau of
    zero, and zero biases would leave parts of a forward pass unseen)."""
    generator = torch.Generator().manual_seed(seed)
    module = module.double()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, dtype=torch.float64, generator=generator))
    return module


COMPETITION = {
    "resnet20_frn": (models.resnet20_frn, resnet20_frn, (3, 32, 32)),
    "alexnet_cifar10c": (models.alexnet_cifar10c, alexnet, (3, 32, 32)),
    "lenet5": (models.lenet5, lenet5, (3, 28, 28)),
    "mlp_uci": (models.mlp_uci, mlp, (8,)),
}


@pytest.mark.parametrize("name", sorted(COMPETITION))
def test_a_competition_network_computes_its_specification(name):
    factory, independent, shape = COMPETITION[name]
    torch.manual_seed(0)
    module = _perturbed(factory(), 1)
    x = _images(shape, 2)
    with torch.no_grad():
        ours = module(x).numpy()
    np.testing.assert_allclose(ours, independent(weights_of(module), x.numpy()), rtol=1e-9, atol=1e-12)


def test_the_imdb_cnn_lstm_computes_its_specification():
    torch.manual_seed(0)
    module = _perturbed(models.cnn_lstm_imdb(vocab_size=300), 1)
    ids = torch.randint(300, (3, 100), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = module(ids).numpy()
    np.testing.assert_allclose(ours, cnn_lstm(weights_of(module), ids.numpy(), 4), rtol=1e-9, atol=1e-12)


EMBEDDED = {"toy-gap": mlp, "diabetes-gap": mlp, "digits": mlp, "digits-cnn": digits_cnn, "digits-lstm": digits_lstm}


@pytest.mark.parametrize("task", sorted(EMBEDDED))
def test_an_embedded_network_computes_its_specification(task):
    loaded = get_task(task)
    torch.manual_seed(0)
    module = _perturbed(loaded.model_factory(), 1)
    x = loaded.x_test[:5].double()
    with torch.no_grad():
        ours = module(x).numpy()
    np.testing.assert_allclose(ours, EMBEDDED[task](weights_of(module), x.numpy()), rtol=1e-9, atol=1e-12)
