"""Per-example gradient moments against a plain loop: one autograd call per member and example."""

import warnings

import pytest
import torch
from torch import nn

from approximators import per_example
from approximators.per_example import gradient_moments
from bench.functional import StackedModel, seeded_module
from bench.likelihoods import Categorical, HeteroscedasticGaussian
from bench.tasks.competition import SPECS, generated_task
from bench.tasks.models import FilterResponseNorm, HaikuLSTM, SameConv2d


def _loop_moments(factory, likelihood, params, x, y):
    """(mean, mean of squares) over examples of each example's own gradient, member by member."""
    means, squares = [], []
    for k in range(params.shape[0]):
        module = factory()
        nn.utils.vector_to_parameters(params[k].clone(), module.parameters())
        grads = []
        for i in range(y.shape[1]):
            loss = -likelihood.log_prob(module(x[k, i:i + 1]), y[k, i:i + 1]).sum()
            grads.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(module.parameters()))]))
        grads = torch.stack(grads)
        means.append(grads.mean(0))
        squares.append(grads.square().mean(0))
    return torch.stack(means), torch.stack(squares)


def _unwritten(params):
    """Output buffers holding NaN: a rule that leaves any of its parameters' values unwritten shows."""
    return torch.full_like(params, float("nan")), torch.full_like(params, float("nan"))


def _members(factory, k):
    model = StackedModel(factory())
    return model, model.layout.flatten(StackedModel.stack([seeded_module(factory, s) for s in range(k)]))


def _mlp():
    return nn.Sequential(nn.Linear(3, 7), nn.ReLU(), nn.Linear(7, 5), nn.ReLU(), nn.Linear(5, 2))


@pytest.mark.parametrize("likelihood", [HeteroscedasticGaussian(), Categorical()], ids=["gaussian", "categorical"])
@pytest.mark.parametrize("fast_path", [True, False], ids=["goodfellow", "vmap"])
def test_mlp_moments_equal_the_per_example_loop(likelihood, fast_path):
    g = torch.Generator().manual_seed(0)
    _, params = _members(_mlp, 3)
    model = StackedModel(_mlp(), fast_path=fast_path)
    x = torch.randn(3, 9, 3, generator=g)
    y = torch.randn(3, 9, generator=g) if likelihood.kind == "regression" else torch.randint(0, 2, (3, 9), generator=g)
    mean, mean_square = gradient_moments(model, likelihood, params, x, y, out=_unwritten(params))
    expected_mean, expected_square = _loop_moments(_mlp, likelihood, params, x, y)
    torch.testing.assert_close(mean, expected_mean, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(mean_square, expected_square, rtol=1e-5, atol=1e-9)
    # the statistic is the mean of squares, not the square of the mean (Adam's)
    assert not torch.allclose(mean_square, mean.square(), rtol=1e-2)


def _double_batches(task, k=2, b=3):
    as_double = lambda t: t.double() if t.is_floating_point() else t  # noqa: E731 (token ids stay integers)
    return (as_double(task.x_train[:k * b]).reshape(k, b, *task.x_train.shape[1:]),
            as_double(task.y_train[:k * b]).reshape(k, b))


@pytest.mark.parametrize("path", ["layerwise", "vmap"])
@pytest.mark.parametrize("task_name", list(SPECS))
def test_competition_model_moments_equal_the_per_example_loop(task_name, path, monkeypatch):
    """Convolutions (SAME, VALID, strided, 1-D), FRN, the LSTM and the embedding, by their layer-wise rules
    and through the vmap path, one example per chunk.

    In float64: in float32 the two orders of summation differ by up to 1e-4 of the largest gradient in
    ResNet-20-FRN (its normalisation divides by small mean squares), in float64 by 1e-16."""
    monkeypatch.setattr(per_example, "PER_EXAMPLE_VALUES", 1)
    monkeypatch.setattr(per_example, "OUTER_PRODUCT_VALUES", 1)
    monkeypatch.setattr(per_example, "CONVOLUTION_WINDOW_VALUES", 1)
    if path == "vmap":
        monkeypatch.setattr(per_example, "_layerwise_moments", per_example._vmap_moments)
    task = generated_task(task_name, 6)
    factory = lambda: task.model_factory().double()  # noqa: E731
    model, params = _members(factory, 2)
    x, y = _double_batches(task)
    mean, mean_square = gradient_moments(model, task.likelihood, params, x, y, out=_unwritten(params))
    expected_mean, expected_square = _loop_moments(factory, task.likelihood, params, x, y)
    torch.testing.assert_close(mean, expected_mean, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(mean_square, expected_square, rtol=1e-9, atol=1e-14)
    if path == "layerwise" and model.mlp_layers is None:
        # every layer of the competition models has its own rule: none falls back to the vjp of its unit
        assert {unit.rule for unit in per_example._LAYER_PLANS[model]} <= {
            per_example._linear_rule, per_example._convolution_rule, per_example._filter_response_norm_rule,
            per_example._lstm_rule, per_example._embedding_rule}


def _check_layerwise_equals_the_loop(factory, x, y, rules: dict[str, str]):
    """Two members of ``factory``'s model take the layer-wise path without a warning, each unit by the rule
    ``rules`` names (module path -> rule), and both the first call (which plans) and the second (the planned
    path), into outputs pre-filled with NaN, equal the per-example loop. Returns the stacked model."""
    model, params = _members(factory, 2)
    expected_mean, expected_square = _loop_moments(factory, Categorical(), params, x, y)
    for _ in ("planning", "planned"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            mean, mean_square = gradient_moments(model, Categorical(), params, x, y, out=_unwritten(params))
        assert {unit.path: unit.rule.__name__ for unit in per_example._LAYER_PLANS[model]} == rules
        torch.testing.assert_close(mean, expected_mean, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(mean_square, expected_square, rtol=1e-9, atol=1e-14)
    return model


class _Scaled(nn.Module):
    """A layer without a rule of its own: the vjp of the unit."""

    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, n))

    def forward(self, x):
        return torch.tanh(x * self.scale)


class _Varied(nn.Module):
    """Units called twice (a convolution among them), strides, dilations, paddings, a non-square kernel, a unit
    without a rule, and FRN on an input with zeros (where its threshold ties: z = beta = tau = 0)."""

    def __init__(self):
        super().__init__()
        self.norm = FilterResponseNorm(2)
        self.conv = nn.Conv2d(2, 3, 3, stride=2, padding=1, dilation=2)
        self.conv1d = nn.Conv1d(3, 4, 2, stride=2, padding=1, bias=False)
        self.same = SameConv2d(3, 3, 2)
        self.dilated = nn.Conv2d(3, 3, (2, 3), padding=2, dilation=2)
        self.scaled = _Scaled(20)
        self.shared = nn.Linear(20, 20)
        self.embedding = nn.Embedding(5, 20)
        self.head = nn.Linear(20, 3)

    def forward(self, x):
        images, token = x[:, :-1].reshape(-1, 2, 5, 5), x[:, -1].long()
        h = self.dilated(self.same(self.same(self.conv(self.norm(images)))))  # (B, 3, 4, 2)
        h = self.conv1d(h.flatten(2)).flatten(1)  # (B, 4 * 5)
        h = self.scaled(self.scaled(h) + self.embedding(token))
        return self.head(torch.tanh(self.shared(torch.tanh(self.shared(h)))) + self.embedding(token))


def _varied_inputs(generator):
    images = torch.randn(2, 4, 50, generator=generator, dtype=torch.float64)
    images[:, :, :10] = 0.0
    return torch.cat([images, torch.randint(0, 5, (2, 4, 1), generator=generator).double()], dim=-1)


@pytest.mark.parametrize("window_values", [1, 2**30], ids=["one-example-per-chunk", "one-chunk"])
def test_layerwise_rules_equal_the_loop_for_shared_units_and_unusual_layers(monkeypatch, window_values):
    """Every kind of convolution here, its examples' windows copied one at a time or all at once."""
    monkeypatch.setattr(per_example, "OUTER_PRODUCT_VALUES", 1)
    monkeypatch.setattr(per_example, "CONVOLUTION_WINDOW_VALUES", window_values)
    g = torch.Generator().manual_seed(0)
    x, y = _varied_inputs(g), torch.randint(0, 3, (2, 4), generator=g)
    _check_layerwise_equals_the_loop(lambda: _Varied().double(), x, y, {
        "norm": "_filter_response_norm_rule", "conv": "_convolution_rule", "conv1d": "_convolution_rule",
        "same": "_convolution_rule", "dilated": "_convolution_rule", "scaled": "_unit_vjp_rule",
        "shared": "_linear_rule", "embedding": "_embedding_rule", "head": "_linear_rule"})


class _TwoLSTMCalls(nn.Module):
    """An LSTM reading the raw input (nothing before it requires grad) and called twice."""

    def __init__(self):
        super().__init__()
        self.lstm = HaikuLSTM(2, 3)
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        return self.head(self.lstm(x) + self.lstm(x.flip(1)))


def test_an_lstm_on_the_raw_input_called_twice_equals_the_loop():
    """The LSTM's rule reads the pre-activations the recorder kept: each call's own, summed per example."""
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(2, 4, 5, 2, generator=g, dtype=torch.float64), torch.randint(0, 2, (2, 4), generator=g)
    model = _check_layerwise_equals_the_loop(lambda: _TwoLSTMCalls().double(), x, y,
                                             {"lstm": "_lstm_rule", "head": "_linear_rule"})
    assert type(model.base.lstm).forward is HaikuLSTM.forward and "forward" not in vars(model.base.lstm)


class _TwoSizes(nn.Module):
    """One convolution applied at two resolutions: its calls have different numbers of output positions."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        images = x.reshape(-1, 2, 6, 6)
        pooled = self.conv(images).mean((-2, -1)) + self.conv(nn.functional.avg_pool2d(images, 2)).mean((-2, -1))
        return self.head(pooled)


@pytest.mark.parametrize("window_values", [1, 2**30], ids=["one-example-per-chunk", "one-chunk"])
def test_a_convolution_called_at_two_sizes_equals_the_loop(monkeypatch, window_values):
    monkeypatch.setattr(per_example, "CONVOLUTION_WINDOW_VALUES", window_values)
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(2, 4, 72, generator=g, dtype=torch.float64), torch.randint(0, 2, (2, 4), generator=g)
    _check_layerwise_equals_the_loop(lambda: _TwoSizes().double(), x, y,
                                     {"conv": "_convolution_rule", "head": "_linear_rule"})


class _MemoryOrders(nn.Module):
    """Convolutions on channels-last inputs (an embedding's output transposed, as in the CNN-LSTM; an image in
    ``torch.channels_last``), each called a second time on an input of the other memory order."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(6, 3)
        self.conv1d = nn.Conv1d(3, 4, 2, stride=2, dilation=2)
        self.conv = nn.Conv2d(2, 3, (2, 3), stride=(1, 2), padding=1, dilation=(2, 1))
        self.head = nn.Linear(7, 2)

    def forward(self, x):
        embedded = self.embedding(x[:, :8].long()).transpose(1, 2)  # (B, 3, 8), channels innermost
        images = x[:, 8:].reshape(-1, 2, 5, 5)
        sequences = self.conv1d(embedded).mean(-1) + self.conv1d(embedded.contiguous()).mean(-1)
        planes = self.conv(images.contiguous(memory_format=torch.channels_last)).mean((-2, -1)) + self.conv(
            images).mean((-2, -1))
        return self.head(torch.cat([sequences, planes], dim=1))


@pytest.mark.parametrize("window_values", [1, 2**30], ids=["one-example-per-chunk", "one-chunk"])
def test_convolutions_on_channels_last_inputs_equal_the_loop(monkeypatch, window_values):
    """The windows are copied in the first call's memory order (channels innermost for a channels-last one)."""
    monkeypatch.setattr(per_example, "CONVOLUTION_WINDOW_VALUES", window_values)
    g = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, 6, (2, 4, 8), generator=g).double()
    x = torch.cat([tokens, torch.randn(2, 4, 50, generator=g, dtype=torch.float64)], dim=-1)
    y = torch.randint(0, 2, (2, 4), generator=g)
    _check_layerwise_equals_the_loop(lambda: _MemoryOrders().double(), x, y, {
        "embedding": "_embedding_rule", "conv1d": "_convolution_rule", "conv": "_convolution_rule",
        "head": "_linear_rule"})


class _Leaky(nn.Module):
    """Uses its head's weight outside the head: the layer-wise path would miss that use."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(3, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        h = torch.tanh(self.hidden(x))
        return self.head(h) + 0.3 * (h @ self.head.weight.T)


def test_a_parameter_used_outside_its_module_falls_back_to_vmap_with_a_warning():
    g = torch.Generator().manual_seed(1)
    factory = lambda: _Leaky().double()  # noqa: E731
    model, params = _members(factory, 2)
    x, y = torch.randn(2, 5, 3, generator=g, dtype=torch.float64), torch.randint(0, 2, (2, 5), generator=g)
    with pytest.warns(UserWarning, match="vmap path"):
        mean, mean_square = gradient_moments(model, Categorical(), params, x, y)
    assert per_example._LAYER_PLANS[model] is None
    expected_mean, expected_square = _loop_moments(factory, Categorical(), params, x, y)
    torch.testing.assert_close(mean, expected_mean, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(mean_square, expected_square, rtol=1e-9, atol=1e-14)


class _Keyword(nn.Module):
    """Calls a unit with a keyword argument: the hooks cannot see its input."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(3, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(input=torch.tanh(self.hidden(x)))


def test_a_unit_called_with_keywords_falls_back_to_vmap_with_a_warning():
    g = torch.Generator().manual_seed(2)
    factory = lambda: _Keyword().double()  # noqa: E731
    model, params = _members(factory, 2)
    x, y = torch.randn(2, 5, 3, generator=g, dtype=torch.float64), torch.randint(0, 2, (2, 5), generator=g)
    with pytest.warns(UserWarning, match="module head is called with keyword"):
        mean, mean_square = gradient_moments(model, Categorical(), params, x, y)
    expected_mean, expected_square = _loop_moments(factory, Categorical(), params, x, y)
    torch.testing.assert_close(mean, expected_mean, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(mean_square, expected_square, rtol=1e-9, atol=1e-14)


def test_a_gpu_forms_each_layers_minibatch_in_one_product_and_a_cpu_in_cache_sized_chunks(monkeypatch):
    """On a GPU the CPU's cache-sized chunks launched thousands of small kernels (VOGN 5.4-6.1 plain epochs against
    2.4 on ResNet-20-FRN, H200): there every layer of the competition models takes a minibatch of 128 in one
    product. On a CPU the chunks stay as measured there."""
    assert per_example._chunk_values(per_example.OUTER_PRODUCT_VALUES, torch.device("cpu")) == 2**19
    on_gpu = per_example._chunk_values(per_example.CONVOLUTION_WINDOW_VALUES, torch.device("cuda", 0))
    assert on_gpu == per_example.ACCELERATOR_CHUNK_VALUES
    monkeypatch.setattr(per_example, "_chunk_values", lambda cpu_values, device: on_gpu)
    chunks = []
    spied = per_example._add_chunk_moments
    monkeypatch.setattr(per_example, "_add_chunk_moments",
                        lambda total, square, batch, chunk, gradients:
                        chunks.append((batch, chunk)) or spied(total, square, batch, chunk, gradients))
    for name in SPECS:
        task = generated_task(name, 130)
        model, params = _members(task.model_factory, 1)
        gradient_moments(model, task.likelihood, params, task.x_train[:128].unsqueeze(0),
                         task.y_train[:128].unsqueeze(0))
    assert chunks and all(chunk == batch == 128 for batch, chunk in chunks), chunks
