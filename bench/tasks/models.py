"""The five architectures of the NeurIPS 2021 "Approximate Inference in Bayesian Deep Learning"
competition, in plain ``torch.nn``, initialised as the original JAX/Haiku code initialises them.

=====================  ===========  =================================  ==============================
factory                parameters   input -> output                    weight initialisation
=====================  ===========  =================================  ==============================
``resnet20_frn``       274,042      (N, 3, 32, 32) float -> (N, 10)    He-normal (convs and logits)
``alexnet_cifar10c``   1,488,202    (N, 3, 32, 32) float -> (N, 10)    Haiku default
``cnn_lstm_imdb``      2,700,098    (N, 100) int64 ids -> (N, 2)       Haiku default; embedding N(0, 1)
``lenet5``             61,751       (N, 3, 28, 28) float -> (N, 7)     Haiku default
``mlp_uci``            552          (N, 8) float -> (N, 2)             Haiku default
=====================  ===========  =================================  ==============================

Sources (facts only, no code taken): the architectures and their initialisers are those of
google-research ``bnn_hmc/utils/models.py`` and of the starter kit's ``jax_models.py``
(izmailovpavel/neurips_bdl_starter_kit, which adds the AlexNet, LeNet-5 and UCI MLP of the
evaluation phase); Haiku's defaults are read from dm-haiku ``haiku/_src/basic.py`` (``Linear``),
``conv.py`` (``ConvND``), ``embed.py`` (``Embed``), ``recurrent.py`` (``LSTM``) and
``initializers.py`` (``TruncatedNormal``, ``VarianceScaling``). The constants are gathered below.

* Haiku default (``hk.Linear``, ``hk.ConvND``): weights from a normal truncated at two standard
  deviations, stddev ``1 / sqrt(fan_in)`` (so the sampled std is 0.88 / sqrt(fan_in)); biases zero.
* He-normal (``VarianceScaling(2.0, "fan_in", "truncated_normal")``): the same truncated normal with
  stddev ``sqrt(2 / fan_in) / 0.8796...``, so that the sampled variance is exactly ``2 / fan_in``.
* FilterResponseNorm: gamma 1, beta 0, tau 0. LSTM: one Haiku-default linear map, bias zero.

Every truncated normal is drawn with ``torch.nn.init.trunc_normal_`` from the global torch RNG only
(layers are built with ``skip_init``, so PyTorch's own default initialisation draws nothing): a
model built under ``torch.manual_seed(s)`` is a deterministic function of ``s``.

Conventions. Image models take NCHW float32 input (task code converts the official NHWC arrays once
at load time), so the flatten before the first dense layer runs in C, H, W order where Haiku's runs
in H, W, C order. That only permutes the rows of the dense weight matrix; the prior over all
parameters is an isotropic Gaussian, so the posterior is the same up to that permutation.
Convolutions marked SAME pad as TensorFlow does (see :func:`same_padding`), which is asymmetric for
even kernels and for stride 2 on even inputs.

None of the modules has buffers, in-place operations or data-dependent control flow, so K stacked
copies can be evaluated with ``torch.func.vmap(torch.func.functional_call(...))``
(``bench.functional.StackedModel``).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import skip_init

# --- Initialisation and normalisation constants ------------------------------------------------
# hk.initializers.TruncatedNormal draws a standard normal truncated to [-2, 2] and multiplies it by
# its `stddev` (dm-haiku haiku/_src/initializers.py): no weight exceeds 2 * stddev.
TRUNCATION_IN_STDDEVS = 2.0
# Standard deviation of a standard normal truncated to [-2, 2] (scipy.stats.truncnorm.std(-2, 2));
# hk.initializers.VarianceScaling with "truncated_normal" divides its stddev by it (same file).
TRUNCATED_STANDARD_NORMAL_STD = 0.87962566103423978
# bnn_hmc/utils/models.py: he_normal = hk.initializers.VarianceScaling(2.0, "fan_in",
# "truncated_normal"), used for every ResNet convolution and for the ResNet's logit layer.
HE_NORMAL_SCALE = 2.0
# hk.Embed's default w_init is hk.initializers.TruncatedNormal() with stddev 1 (haiku/_src/embed.py).
EMBEDDING_STDDEV = 1.0
# FeatureResponseNorm(eps=1e-6) in bnn_hmc/utils/models.py.
FRN_EPSILON = 1e-6
# hk.LSTM computes sigmoid(f + 1) for the forget gate (haiku/_src/recurrent.py).
LSTM_FORGET_BIAS = 1.0


def truncated_normal_(tensor: torch.Tensor, stddev: float) -> torch.Tensor:
    """Haiku's ``TruncatedNormal(stddev)``: ``stddev * z`` with ``z`` standard normal truncated to
    [-2, 2], drawn in place from the global torch RNG."""
    bound = TRUNCATION_IN_STDDEVS * stddev
    return nn.init.trunc_normal_(tensor, mean=0.0, std=stddev, a=-bound, b=bound)


def fan_in(weight: torch.Tensor) -> int:
    """Inputs feeding one output unit: ``in_features`` for a Linear weight ``(out, in)``,
    ``in_channels * prod(kernel)`` for a convolution weight ``(out, in, *kernel)``."""
    return weight[0].numel()


def haiku_default_stddev(weight: torch.Tensor) -> float:
    """Stddev parameter of Haiku's default Linear/ConvND initialiser: ``1 / sqrt(fan_in)``."""
    return 1.0 / math.sqrt(fan_in(weight))


def he_normal_stddev(weight: torch.Tensor) -> float:
    """Stddev parameter of Haiku's He-normal: ``sqrt(2 / fan_in) / 0.8796`` (the truncation then
    brings the sampled std to exactly ``sqrt(2 / fan_in)``)."""
    return math.sqrt(HE_NORMAL_SCALE / fan_in(weight)) / TRUNCATED_STANDARD_NORMAL_STD


def _init_weight_and_bias_(layer: nn.Module, stddev: float) -> nn.Module:
    with torch.no_grad():
        truncated_normal_(layer.weight, stddev)
        layer.bias.zero_()
    return layer


def haiku_linear(in_features: int, out_features: int, he_normal: bool = False) -> nn.Linear:
    """An ``nn.Linear`` initialised like ``hk.Linear`` (or with He-normal weights)."""
    layer = skip_init(nn.Linear, in_features, out_features)
    stddev = he_normal_stddev(layer.weight) if he_normal else haiku_default_stddev(layer.weight)
    return _init_weight_and_bias_(layer, stddev)


def haiku_conv(conv_class: type[nn.Module], *args, he_normal: bool = False, **kwargs) -> nn.Module:
    """``conv_class(*args, **kwargs)`` (a convolution with bias) initialised like ``hk.ConvND``
    (or with He-normal weights)."""
    layer = skip_init(conv_class, *args, **kwargs)
    stddev = he_normal_stddev(layer.weight) if he_normal else haiku_default_stddev(layer.weight)
    return _init_weight_and_bias_(layer, stddev)


# --- Layers ------------------------------------------------------------------------------------


def same_padding(size: int, kernel_size: int, stride: int) -> tuple[int, int]:
    """TensorFlow "SAME" padding ``(before, after)`` of one spatial dimension of length ``size``.

    The output has ``ceil(size / stride)`` positions; the total padding that needs is
    ``max((ceil(size / stride) - 1) * stride + kernel_size - size, 0)``, and the odd unit goes after.
    E.g. 3x3 stride 2 on 32: (0, 1); 2x2 stride 1: (0, 1); 5x5 stride 1: (2, 2).
    """
    total = max((-(-size // stride) - 1) * stride + kernel_size - size, 0)
    return total // 2, total - total // 2


class SameConv2d(nn.Conv2d):
    """2-D convolution with bias and TensorFlow "SAME" padding.

    ``(N, C_in, H, W) -> (N, C_out, ceil(H / stride), ceil(W / stride))``. Symmetric padding goes
    through the convolution's own ``padding`` argument; only asymmetric padding costs an extra pad.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=0, bias=True,
                         device=device, dtype=dtype)

    def padded_input(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """``(input, padding)`` such that ``F.conv2d(input, weight, bias, stride, padding)`` is this layer's
        output: symmetric padding is left to the convolution, asymmetric padding is applied here."""
        top, bottom = same_padding(x.shape[-2], self.kernel_size[0], self.stride[0])
        left, right = same_padding(x.shape[-1], self.kernel_size[1], self.stride[1])
        if top == bottom and left == right:
            return x, (top, left)
        return F.pad(x, (left, right, top, bottom)), (0, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, padding = self.padded_input(x)
        return F.conv2d(x, self.weight, self.bias, self.stride, padding)

    def extra_repr(self) -> str:
        return super().extra_repr() + ", padding=SAME"


class FilterResponseNorm(nn.Module):
    """Filter Response Normalisation with a thresholded linear unit, per channel:
    ``max(gamma * x / sqrt(mean_{H,W}(x^2) + eps) + beta, tau)``. ``(N, C, H, W) -> same``."""

    def __init__(self, channels: int, eps: float = FRN_EPSILON):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(channels, 1, 1))
        self.beta = nn.Parameter(torch.zeros(channels, 1, 1))
        self.tau = nn.Parameter(torch.zeros(channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean_square = x.square().mean(dim=(-2, -1), keepdim=True)
        normalised = x * torch.rsqrt(mean_square + self.eps)
        return torch.maximum(self.gamma * normalised + self.beta, self.tau)


class HaikuLSTM(nn.Module):
    """Haiku's LSTM unrolled over a whole sequence, returning the last hidden state.

    One linear map on ``concat[x_t, h_{t-1}]`` gives ``4 * hidden_size`` pre-activations split as
    ``(i, g, f, o)``; ``c_t = sigmoid(f + 1) * c_{t-1} + sigmoid(i) * tanh(g)``,
    ``h_t = sigmoid(o) * tanh(c_t)``; the state starts at zero. ``(N, T, input_size) -> (N, hidden)``.
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.linear = haiku_linear(input_size + hidden_size, 4 * hidden_size)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        return self.unroll(sequence)

    def unroll(self, sequence: torch.Tensor, on_step: Callable[[torch.Tensor, torch.Tensor], None] | None = None):
        """:meth:`forward`, calling ``on_step(gates, hidden)`` with each step's pre-activations ``(N, 4 * hidden)``
        and the hidden state they were computed from ``(N, hidden)`` (per-example gradients read them)."""
        # Splitting the weight into its input and recurrent columns lets all input projections run
        # as one matmul; it computes exactly the linear map on concat[x_t, h_{t-1}].
        input_weight, recurrent_weight = self.linear.weight.split([self.input_size, self.hidden_size], dim=1)
        input_gates = F.linear(sequence, input_weight, self.linear.bias)
        hidden = sequence.new_zeros(sequence.shape[0], self.hidden_size)
        cell = sequence.new_zeros(sequence.shape[0], self.hidden_size)
        # unbind, not indexing per step: its backward stacks the steps' gradients once, where each index's
        # backward would fill a zero tensor of the whole sequence's size.
        for step_gates in input_gates.unbind(1):
            gates = step_gates + F.linear(hidden, recurrent_weight)
            if on_step is not None:
                on_step(gates, hidden)
            hidden, cell = lstm_cell(gates, cell)
        return hidden


def lstm_cell(gates: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of :class:`HaikuLSTM` from its pre-activations ``(N, 4 * hidden)`` and cell state
    ``(N, hidden)``: ``(hidden, cell)`` after the step."""
    input_gate, cell_candidate, forget_gate, output_gate = gates.chunk(4, dim=-1)
    cell = torch.sigmoid(forget_gate + LSTM_FORGET_BIAS) * cell + torch.sigmoid(input_gate) * torch.tanh(cell_candidate)
    return torch.sigmoid(output_gate) * torch.tanh(cell), cell


# --- ResNet-20 with FRN and swish -----------------------------------------------------------------


class ConvFRN(nn.Module):
    """SAME convolution (He-normal) followed by FilterResponseNorm, no activation."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1):
        super().__init__()
        self.conv = haiku_conv(SameConv2d, in_channels, out_channels, kernel_size, stride, he_normal=True)
        self.norm = FilterResponseNorm(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))


class ResidualBlock(nn.Module):
    """Two 3x3 ConvFRN layers with swish between them, a 1x1 ConvFRN projection shortcut when the
    block downsamples, and swish after the sum. ``(N, C_in, H, W) -> (N, C_out, H / s, W / s)``."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.first = ConvFRN(in_channels, out_channels, 3, stride)
        self.second = ConvFRN(out_channels, out_channels, 3)
        self.shortcut = ConvFRN(in_channels, out_channels, 1, stride) if stride != 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = self.second(F.silu(self.first(x)))
        identity = x if self.shortcut is None else self.shortcut(x)
        return F.silu(identity + residual)


class ResNet20FRN(nn.Module):
    """ResNet-20 with FilterResponseNorm and swish (the competition's CIFAR-10 model).

    ``(N, 3, 32, 32) -> stem (N, 16, 32, 32) -> stage1 (N, 16, 32, 32) -> stage2 (N, 32, 16, 16)
    -> stage3 (N, 64, 8, 8) -> 8x8 average pool (N, 64) -> logits (N, n_classes)``.
    """

    def __init__(self, n_classes: int = 10, width: int = 16, blocks_per_stage: int = 3):
        super().__init__()
        self.stem = ConvFRN(3, width, 3)
        stages, in_channels = [], width
        for stage in range(3):
            out_channels = width * 2**stage
            blocks = [ResidualBlock(in_channels, out_channels, stride=1 if stage == 0 else 2)]
            blocks += [ResidualBlock(out_channels, out_channels, stride=1) for _ in range(blocks_per_stage - 1)]
            stages.append(nn.Sequential(*blocks))
            in_channels = out_channels
        self.stage1, self.stage2, self.stage3 = stages
        self.classifier = haiku_linear(in_channels, n_classes, he_normal=True)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.silu(self.stem(images))
        x = self.stage3(self.stage2(self.stage1(x)))
        return self.classifier(F.avg_pool2d(x, 8).flatten(-3))


def resnet20_frn(n_classes: int = 10) -> ResNet20FRN:
    """ResNet-20-FRN-swish: ``(N, 3, 32, 32) -> (N, n_classes)``, 274,042 parameters for 10 classes."""
    return ResNet20FRN(n_classes)


# --- AlexNet-like CNN for CIFAR-10-C --------------------------------------------------------------


class AlexNetCifar(nn.Module):
    """The competition's AlexNet-like CNN with swish activations.

    ``(N, 3, 32, 32) -> conv 64 3x3, pool (N, 64, 16, 16) -> conv 128 3x3, pool (N, 128, 8, 8)
    -> conv 256 2x2 -> conv 128 2x2 -> conv 64 2x2 (N, 64, 8, 8) -> flatten (N, 4096) -> 256 -> 256
    -> logits (N, n_classes)``; every convolution is SAME with stride 1.

    Unverified: the activation. One stored revision of the starter kit's ``jax_models.py``
    (commit 3bb2e36) has ReLU in ``make_cifar_alexnet``; swish follows the project's specification.
    """

    def __init__(self, n_classes: int = 10):
        super().__init__()
        self.conv1 = haiku_conv(SameConv2d, 3, 64, 3)
        self.conv2 = haiku_conv(SameConv2d, 64, 128, 3)
        self.conv3 = haiku_conv(SameConv2d, 128, 256, 2)
        self.conv4 = haiku_conv(SameConv2d, 256, 128, 2)
        self.conv5 = haiku_conv(SameConv2d, 128, 64, 2)
        self.dense1 = haiku_linear(64 * 8 * 8, 256)
        self.dense2 = haiku_linear(256, 256)
        self.classifier = haiku_linear(256, n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.silu(self.conv1(images)), 2)
        x = F.max_pool2d(F.silu(self.conv2(x)), 2)
        x = F.silu(self.conv5(F.silu(self.conv4(F.silu(self.conv3(x))))))
        x = F.silu(self.dense2(F.silu(self.dense1(x.flatten(-3)))))
        return self.classifier(x)


def alexnet_cifar10c(n_classes: int = 10) -> AlexNetCifar:
    """AlexNet-like CNN: ``(N, 3, 32, 32) -> (N, n_classes)``, 1,488,202 parameters for 10 classes."""
    return AlexNetCifar(n_classes)


# --- CNN-LSTM for IMDB --------------------------------------------------------------------------


class CnnLstm(nn.Module):
    """Embedding, 1-D convolution, ReLU, max-pool over time, Haiku LSTM, linear on the last state.

    ``(N, T) int64 ids -> embed (N, T, 128) -> conv1d 64 x 5 VALID, ReLU (N, 64, T - 4)
    -> max-pool 4 (N, 64, (T - 4) // 4) -> LSTM 128 (N, 128) -> logits (N, n_classes)``;
    for the competition's T = 100 the LSTM runs over 24 steps.
    """

    def __init__(self, vocab_size: int = 20000, n_classes: int = 2, embedding_dim: int = 128,
                 n_filters: int = 64, kernel_size: int = 5, pool_size: int = 4, hidden_size: int = 128):
        super().__init__()
        self.pool_size = pool_size
        self.embedding = skip_init(nn.Embedding, vocab_size, embedding_dim)
        with torch.no_grad():
            truncated_normal_(self.embedding.weight, EMBEDDING_STDDEV)
        self.conv = haiku_conv(nn.Conv1d, embedding_dim, n_filters, kernel_size)
        self.lstm = HaikuLSTM(n_filters, hidden_size)
        self.classifier = haiku_linear(hidden_size, n_classes)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(token_ids).transpose(-1, -2)
        x = F.max_pool1d(F.relu(self.conv(x)), self.pool_size)
        return self.classifier(self.lstm(x.transpose(-1, -2)))


def cnn_lstm_imdb(vocab_size: int = 20000, n_classes: int = 2) -> CnnLstm:
    """CNN-LSTM: ``(N, 100) int64 -> (N, n_classes)``, 2,700,098 parameters for the defaults."""
    return CnnLstm(vocab_size, n_classes)


# --- LeNet-5 for MedMNIST -------------------------------------------------------------------------


class LeNet5(nn.Module):
    """LeNet-5 with ReLU and average pooling.

    ``(N, 3, 28, 28) -> conv 6 5x5 SAME, pool (N, 6, 14, 14) -> conv 16 5x5 VALID, pool (N, 16, 5, 5)
    -> flatten (N, 400) -> 120 -> 84 -> logits (N, n_classes)``.
    """

    def __init__(self, n_classes: int = 7):
        super().__init__()
        self.conv1 = haiku_conv(SameConv2d, 3, 6, 5)
        self.conv2 = haiku_conv(nn.Conv2d, 6, 16, 5)
        self.dense1 = haiku_linear(16 * 5 * 5, 120)
        self.dense2 = haiku_linear(120, 84)
        self.classifier = haiku_linear(84, n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.avg_pool2d(F.relu(self.conv1(images)), 2)
        x = F.avg_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.dense2(F.relu(self.dense1(x.flatten(-3)))))
        return self.classifier(x)


def lenet5(n_classes: int = 7) -> LeNet5:
    """LeNet-5: ``(N, 3, 28, 28) -> (N, n_classes)``, 61,751 parameters for 7 classes."""
    return LeNet5(n_classes)


# --- MLP for UCI regression -----------------------------------------------------------------------


def mlp_uci(n_inputs: int = 8, hidden: int = 50, n_outputs: int = 2) -> nn.Sequential:
    """One-hidden-layer ReLU MLP: ``(N, n_inputs) -> (N, n_outputs)`` (mean and pre-softplus scale),
    552 parameters for the defaults. A plain ``nn.Sequential`` of ``nn.Linear`` and ``nn.ReLU`` so that
    ``StackedModel`` can take its batched-matmul fast path."""
    return nn.Sequential(haiku_linear(n_inputs, hidden), nn.ReLU(), haiku_linear(hidden, n_outputs))
