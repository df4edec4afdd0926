"""The digits tasks: one data set and prior under three architectures, the shifted test blocks, the models."""

import pytest
import torch
from torch import nn

from bench.functional import StackedModel, seeded_module
from bench.tasks import DEFAULT_TASKS, EMBEDDED, default_task_names, get_task
from bench.tasks.embedded import DigitsCNNLSTM, DigitsConvNet
from bench.tasks.models import HaikuLSTM, SameConv2d

DIGITS_TASKS = ("digits", "digits-cnn", "digits-lstm")


@pytest.mark.parametrize("name, input_shape, parameters", [
    ("digits", (64,), 3760), ("digits-cnn", (1, 8, 8), 1418), ("digits-lstm", (8, 8), 2682)])
def test_each_digits_task_has_its_input_layout_and_network(name, input_shape, parameters):
    task = get_task(name)
    assert tuple(task.x_train.shape) == (1437, *input_shape) and tuple(task.x_test.shape) == (1440, *input_shape)
    assert task.n_parameters() == parameters
    outputs = task.model_factory()(task.x_test[:5])
    assert outputs.shape == (5, 10) and torch.isfinite(outputs).all()


def test_the_three_digits_tasks_share_data_labels_blocks_and_prior():
    tasks = [get_task(name) for name in DIGITS_TASKS]
    first = tasks[0]
    for task in tasks[1:]:
        assert torch.equal(task.x_train.reshape(task.n_train, 64), first.x_train)
        assert torch.equal(task.x_test.reshape(task.n_test, 64), first.x_test)
        assert torch.equal(task.y_train, first.y_train) and torch.equal(task.y_test, first.y_test)
        assert task.test_blocks == first.test_blocks and task.prior_variance == first.prior_variance
        assert task.settings == first.settings and task.likelihood == first.likelihood
    assert [b.name for b in first.test_blocks] == ["clean", "gaussian-noise", "brightness", "blur"]
    assert [(b.start, b.stop) for b in first.test_blocks] == [(0, 360), (360, 720), (720, 1080), (1080, 1440)]
    # Every shifted block holds the clean block's images, shifted: same labels, other pixels.
    for block in first.test_blocks[1:]:
        assert torch.equal(first.y_test[block.start:block.stop], first.y_test[:360])
        assert not torch.equal(first.x_test[block.start:block.stop], first.x_test[:360])


def test_the_tasks_fingerprints_differ_by_architecture_and_are_stable():
    fingerprints = {name: get_task(name).fingerprint() for name in DIGITS_TASKS}
    assert len(set(fingerprints.values())) == 3
    rebuilt = {name: EMBEDDED[name]().fingerprint() for name in DIGITS_TASKS}
    assert rebuilt == fingerprints


def test_the_default_tasks_are_the_mlp_tasks_and_the_new_ones_are_listed():
    assert default_task_names() == list(DEFAULT_TASKS) == ["toy-gap", "diabetes-gap", "digits"]
    assert {"digits-cnn", "digits-lstm"} <= set(EMBEDDED)


def test_the_convnet_strides_and_pools_as_its_docstring_says():
    net = DigitsConvNet()
    assert [type(m) for m in net.children()] == [SameConv2d, SameConv2d, nn.Linear]
    x = torch.zeros(2, 1, 8, 8)
    assert net.conv1(x).shape == (2, 8, 4, 4) and net.conv2(net.conv1(x)).shape == (2, 16, 2, 2)


def test_the_cnn_lstm_reads_rows_as_steps():
    net = DigitsCNNLSTM()
    assert isinstance(net.lstm, HaikuLSTM) and isinstance(net.conv, nn.Conv1d)
    steps = []
    net.lstm.unroll = lambda sequence, on_step=None, unroll=net.lstm.unroll: (
        steps.append(sequence.shape), unroll(sequence, on_step))[1]
    net(torch.zeros(3, 8, 8))
    assert steps == [torch.Size([3, 3, 16])]  # 8 rows -> 6 by the width-3 convolution -> 3 by the max-pool


@pytest.mark.parametrize("name", ["digits-cnn", "digits-lstm"])
def test_a_network_is_a_deterministic_function_of_its_seed(name):
    factory = get_task(name).model_factory
    a, b, c = (StackedModel.stack([seeded_module(factory, s)]) for s in (3, 3, 4))
    assert all(torch.equal(a[k], b[k]) for k in a) and not all(torch.equal(a[k], c[k]) for k in a)
