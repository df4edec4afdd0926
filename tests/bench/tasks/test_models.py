"""Tests for bench.tasks.models: sizes, shapes, SAME padding, FRN, the Haiku LSTM, initialisation
and evaluation of stacked copies under vmap."""

import math

import numpy as np
import pytest
import scipy.stats
import torch
import torch.nn.functional as F
from torch import nn

from bench.functional import StackedModel
from bench.tasks import models

IMDB_LENGTH = 100

# factory, parameter count, per-example input shape (None: IMDB token ids), output width
MODELS = {
    "resnet20_frn": (models.resnet20_frn, 274_042, (3, 32, 32), 10),
    "alexnet_cifar10c": (models.alexnet_cifar10c, 1_488_202, (3, 32, 32), 10),
    "cnn_lstm_imdb": (models.cnn_lstm_imdb, 2_700_098, None, 2),
    "lenet5": (models.lenet5, 61_751, (3, 28, 28), 7),
    "mlp_uci": (models.mlp_uci, 552, (8,), 2),
}


def build(name, seed=0):
    torch.manual_seed(seed)
    return MODELS[name][0]()


def example_inputs(name, *leading, generator_seed=0):
    """Inputs of shape ``(*leading, *per_example_shape)``: float images/features or int64 token ids."""
    generator = torch.Generator().manual_seed(generator_seed)
    shape = MODELS[name][2]
    if shape is None:
        return torch.randint(0, 20000, (*leading, IMDB_LENGTH), generator=generator)
    return torch.randn(*leading, *shape, generator=generator)


# --- sizes and shapes --------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
def test_parameter_count(name):
    assert sum(p.numel() for p in build(name).parameters()) == MODELS[name][1]


@pytest.mark.parametrize("name", MODELS)
def test_output_shape_and_no_buffers(name):
    model = build(name)
    out = model(example_inputs(name, 3))
    assert out.shape == (3, MODELS[name][3])
    assert out.dtype == torch.float32
    assert list(model.buffers()) == []


def test_resnet_stages_downsample_32_16_8():
    model = build("resnet20_frn")
    shapes = {}
    for stage in ("stem", "stage1", "stage2", "stage3"):
        getattr(model, stage).register_forward_hook(
            lambda module, args, out, stage=stage: shapes.__setitem__(stage, tuple(out.shape)))
    assert model(example_inputs("resnet20_frn", 2)).shape == (2, 10)
    assert shapes == {"stem": (2, 16, 32, 32), "stage1": (2, 16, 32, 32),
                      "stage2": (2, 32, 16, 16), "stage3": (2, 64, 8, 8)}


def test_mlp_is_plain_sequential_and_takes_the_fast_path():
    model = build("mlp_uci")
    assert type(model) is nn.Sequential
    assert [type(layer) for layer in model] == [nn.Linear, nn.ReLU, nn.Linear]
    assert StackedModel(model).mlp_layers is not None


# --- SAME padding --------------------------------------------------------------------------------


@pytest.mark.parametrize("size, kernel, stride, expected", [
    (32, 3, 2, (0, 1)),   # ResNet downsampling conv
    (16, 3, 2, (0, 1)),
    (33, 3, 2, (1, 1)),   # odd input: symmetric
    (32, 1, 2, (0, 0)),   # 1x1 projection shortcut needs none
    (32, 3, 1, (1, 1)),
    (8, 2, 1, (0, 1)),    # AlexNet 2x2 convs
    (28, 5, 1, (2, 2)),   # LeNet first conv
    (4, 5, 2, (1, 2)),
    (1, 3, 3, (1, 1)),
])
def test_same_padding_table(size, kernel, stride, expected):
    assert models.same_padding(size, kernel, stride) == expected


def test_same_padding_gives_tensorflow_output_size():
    for size in range(1, 41):
        for kernel in range(1, 6):
            for stride in range(1, 4):
                before, after = models.same_padding(size, kernel, stride)
                assert 0 <= before and after - before in (0, 1)
                n_out = (size + before + after - kernel) // stride + 1
                assert n_out == math.ceil(size / stride), (size, kernel, stride)
                # Minimal: one unit less padding would lose an output position (or none was needed).
                assert before + after == 0 or (size + before + after - 1 - kernel) // stride + 1 < n_out


def _same_conv(in_channels, out_channels, kernel, stride):
    torch.manual_seed(0)
    return models.haiku_conv(models.SameConv2d, in_channels, out_channels, kernel, stride)


def test_stride2_same_conv_pads_after_only_on_even_input():
    conv = _same_conv(4, 5, 3, 2)
    x = torch.randn(2, 4, 32, 32)
    expected = F.conv2d(F.pad(x, (0, 1, 0, 1)), conv.weight, conv.bias, stride=2)
    assert expected.shape == (2, 5, 16, 16)
    torch.testing.assert_close(conv(x), expected, rtol=0, atol=1e-6)


def test_stride2_same_conv_pads_symmetrically_on_odd_input():
    conv = _same_conv(4, 5, 3, 2)
    x = torch.randn(2, 4, 33, 33)
    torch.testing.assert_close(conv(x), F.conv2d(x, conv.weight, conv.bias, stride=2, padding=1), rtol=0, atol=1e-6)


def test_even_kernel_same_conv_pads_after():
    conv = _same_conv(3, 2, 2, 1)
    x = torch.randn(2, 3, 8, 8)
    expected = F.conv2d(F.pad(x, (0, 1, 0, 1)), conv.weight, conv.bias)
    assert expected.shape == (2, 2, 8, 8)
    torch.testing.assert_close(conv(x), expected, rtol=0, atol=1e-6)


# --- FilterResponseNorm ----------------------------------------------------------------------------


def test_frn_matches_formula():
    generator = torch.Generator().manual_seed(1)
    norm = models.FilterResponseNorm(3).double()
    with torch.no_grad():
        for p in norm.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64))
    x = torch.randn(2, 3, 5, 4, generator=generator, dtype=torch.float64)
    xn = x.numpy()
    gamma, beta, tau = (p.detach().numpy().reshape(1, 3, 1, 1) for p in (norm.gamma, norm.beta, norm.tau))
    nu2 = (xn ** 2).mean(axis=(2, 3), keepdims=True)
    expected = np.maximum(gamma * xn / np.sqrt(nu2 + 1e-6) + beta, tau)
    np.testing.assert_allclose(norm(x).detach().numpy(), expected, rtol=1e-12, atol=1e-12)
    assert norm.eps == 1e-6


def test_frn_initial_parameters():
    norm = models.FilterResponseNorm(4)
    assert torch.equal(norm.gamma, torch.ones(4, 1, 1))
    assert torch.equal(norm.beta, torch.zeros(4, 1, 1))
    assert torch.equal(norm.tau, torch.zeros(4, 1, 1))


# --- Haiku LSTM and the IMDB model -----------------------------------------------------------------


def reference_haiku_lstm(sequence, weight, bias, hidden_size, forget_bias=1.0):
    """Haiku's LSTM written out: one linear map on [x_t, h_{t-1}], gates (i, g, f, o)."""
    hidden = torch.zeros(sequence.shape[0], hidden_size, dtype=sequence.dtype)
    cell = torch.zeros_like(hidden)
    for x_t in sequence.unbind(1):
        gated = torch.cat([x_t, hidden], dim=-1) @ weight.T + bias
        i, g, f, o = torch.split(gated, hidden_size, dim=-1)
        cell = torch.sigmoid(f + forget_bias) * cell + torch.sigmoid(i) * torch.tanh(g)
        hidden = torch.sigmoid(o) * torch.tanh(cell)
    return hidden


def test_lstm_matches_haiku_equations():
    torch.manual_seed(0)
    lstm = models.HaikuLSTM(input_size=6, hidden_size=5).double()
    with torch.no_grad():
        lstm.linear.bias.normal_()
    sequence = torch.randn(3, 7, 6, dtype=torch.float64)
    weight, bias = lstm.linear.weight.detach(), lstm.linear.bias.detach()
    assert weight.shape == (20, 11) and bias.shape == (20,)
    for steps in (1, 2, 7):
        torch.testing.assert_close(lstm(sequence[:, :steps]), reference_haiku_lstm(sequence[:, :steps], weight, bias, 5),
                                   rtol=1e-12, atol=1e-12)
    # The comparison is sensitive to the forget bias.
    without_forget_bias = reference_haiku_lstm(sequence, weight, bias, 5, forget_bias=0.0)
    assert (lstm(sequence) - without_forget_bias).abs().max() > 1e-3


def test_imdb_model_matches_reference_pipeline_over_24_steps():
    model = build("cnn_lstm_imdb")
    lstm_inputs = []
    model.lstm.register_forward_hook(lambda module, args, out: lstm_inputs.append(args[0].shape))
    ids = example_inputs("cnn_lstm_imdb", 2)
    out = model(ids)
    assert lstm_inputs == [(2, (IMDB_LENGTH - 5 + 1) // 4, 64)] == [(2, 24, 64)]

    with torch.no_grad():
        embedded = model.embedding.weight[ids]                                     # (2, 100, 128)
        conv = F.conv1d(embedded.transpose(1, 2), model.conv.weight, model.conv.bias)  # (2, 64, 96)
        pooled = F.relu(conv).reshape(2, 64, 24, 4).amax(-1).transpose(1, 2)      # (2, 24, 64)
        last = reference_haiku_lstm(pooled, model.lstm.linear.weight, model.lstm.linear.bias, 128)
        expected = last @ model.classifier.weight.T + model.classifier.bias
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


# --- initialisation ----------------------------------------------------------------------------------

TRUNCATED_EXCESS_KURTOSIS = float(scipy.stats.truncnorm.stats(-2, 2, moments="k"))


def assert_truncated_normal(weight, stddev_parameter, n_standard_errors=5.0):
    """``weight`` looks like Haiku's TruncatedNormal(stddev_parameter): zero mean, std
    0.8796 * stddev_parameter (within a few standard errors of the sample), support [-2, 2] * stddev
    with values reaching close to both ends."""
    w = weight.detach().double().flatten()
    n = w.numel()
    sigma = models.TRUNCATED_STANDARD_NORMAL_STD * stddev_parameter
    assert abs(w.mean().item()) < n_standard_errors * sigma / math.sqrt(n)
    std_error_of_std = sigma * math.sqrt((TRUNCATED_EXCESS_KURTOSIS + 2) / (4 * n))
    assert abs(w.std().item() - sigma) < n_standard_errors * std_error_of_std
    bound = 2 * stddev_parameter
    assert w.abs().max().item() <= bound * (1 + 1e-6)
    # With n >= 10^4 draws, P(no |w| in (1.9, 2] stddev) < exp(-100).
    assert w.max().item() > 1.9 * stddev_parameter and w.min().item() < -1.9 * stddev_parameter


def test_truncated_normal_constant_matches_scipy():
    assert models.TRUNCATED_STANDARD_NORMAL_STD == pytest.approx(scipy.stats.truncnorm.std(-2, 2), rel=1e-12)


def test_resnet_convs_are_he_normal():
    model = build("resnet20_frn")
    weight = model.stage3[1].first.conv.weight                  # (64, 64, 3, 3), fan_in 576
    he_stddev = math.sqrt(2 / 576) / models.TRUNCATED_STANDARD_NORMAL_STD
    assert_truncated_normal(weight, he_stddev)
    assert weight.detach().double().std().item() == pytest.approx(math.sqrt(2 / 576), rel=0.02)
    # The logit layer is He-normal too (fan_in 64), every conv is bounded by its own He bound.
    assert model.classifier.weight.abs().max() <= 2 * math.sqrt(2 / 64) / models.TRUNCATED_STANDARD_NORMAL_STD
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            bound = 2 * math.sqrt(2 / module.weight[0].numel()) / models.TRUNCATED_STANDARD_NORMAL_STD
            assert module.weight.abs().max() <= bound * (1 + 1e-6)


def test_alexnet_layers_use_haiku_default():
    model = build("alexnet_cifar10c")
    assert_truncated_normal(model.dense1.weight, 1 / math.sqrt(4096))   # 1,048,576 weights
    assert_truncated_normal(model.conv3.weight, 1 / math.sqrt(128 * 2 * 2))


def test_imdb_layers_use_haiku_defaults():
    model = build("cnn_lstm_imdb")
    assert_truncated_normal(model.embedding.weight, 1.0)
    assert_truncated_normal(model.conv.weight, 1 / math.sqrt(128 * 5))
    assert_truncated_normal(model.lstm.linear.weight, 1 / math.sqrt(64 + 128))


def test_lenet_and_mlp_linear_bounds():
    lenet, mlp = build("lenet5"), build("mlp_uci")
    for layer in (lenet.dense1, lenet.dense2, lenet.classifier, mlp[0], mlp[2]):
        assert layer.weight.abs().max() <= 2 / math.sqrt(layer.in_features) * (1 + 1e-6)
    assert_truncated_normal(lenet.dense1.weight, 1 / math.sqrt(400))     # 48,000 weights


@pytest.mark.parametrize("name", MODELS)
def test_biases_zero_and_frn_at_identity(name):
    for param_name, p in build(name).named_parameters():
        leaf = param_name.rsplit(".", 1)[-1]
        if leaf in ("bias", "beta", "tau"):
            assert torch.count_nonzero(p) == 0, param_name
        elif leaf == "gamma":
            assert torch.all(p == 1), param_name


@pytest.mark.parametrize("name", MODELS)
def test_initialisation_is_determined_by_the_seed(name):
    first, again, other = build(name, seed=0), build(name, seed=0), build(name, seed=1)
    for (param_name, a), b, c in zip(first.named_parameters(), again.parameters(), other.parameters()):
        assert torch.equal(a, b), param_name
        if param_name.endswith("weight"):
            assert not torch.equal(a, c), param_name


# --- stacked copies under vmap ------------------------------------------------------------------------


def perturbed(name, seed):
    """A model whose every parameter (FRN and biases included) is moved off its initial value by
    about a tenth of the parameter tensor's own spread (of 1 for constant tensors)."""
    model = build(name, seed)
    generator = torch.Generator().manual_seed(100 + seed)
    with torch.no_grad():
        for p in model.parameters():
            spread = p.std().item() if p.numel() > 1 else 0.0
            p.add_(0.1 * (spread or 1.0) * torch.randn(p.shape, generator=generator))
    return model


@pytest.mark.parametrize("name, fast_path", [(name, False) for name in MODELS] + [("mlp_uci", True)])
def test_stacked_copies_match_each_module(name, fast_path):
    copies = [perturbed(name, 0), perturbed(name, 1)]
    stacked = StackedModel(copies[0], fast_path=fast_path)
    params = StackedModel.stack(copies)

    shared = example_inputs(name, 2, generator_seed=1)
    out = stacked(params, shared, shared_input=True)
    assert out.shape == (2, 2, MODELS[name][3])
    for k, module in enumerate(copies):
        torch.testing.assert_close(out[k], module(shared).detach(), rtol=1e-5, atol=1e-5)

    per_copy = example_inputs(name, 2, 2, generator_seed=2)
    out = stacked(params, per_copy, shared_input=False)
    for k, module in enumerate(copies):
        torch.testing.assert_close(out[k], module(per_copy[k]).detach(), rtol=1e-5, atol=1e-5)
