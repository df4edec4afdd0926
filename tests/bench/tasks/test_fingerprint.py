"""A task's fingerprint covers what its network computes: a one-line change of an activation, a pooling or the axis a
recurrent layer reads changes it, and every reference made for the task is then refused as stale."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench import functional
from bench.errors import ConfigError, ReferenceMismatch
from bench.tasks import EMBEDDED, get_task
from bench.tasks import embedded
from reference.store import load_reference


class ReluCNN(embedded.DigitsConvNet):
    def forward(self, images):  # swish -> ReLU in the first layer
        x = F.silu(self.conv2(F.relu(self.conv1(images))))
        return self.classifier(x.mean(dim=(-2, -1)))


class MaxPoolCNN(embedded.DigitsConvNet):
    def forward(self, images):  # global mean -> global max
        x = F.silu(self.conv2(F.silu(self.conv1(images))))
        return self.classifier(x.amax(dim=(-2, -1)))


class ColumnsLSTM(embedded.DigitsCNNLSTM):
    def forward(self, rows):  # reads the image's columns instead of its rows
        x = F.max_pool1d(F.relu(self.conv(rows)), self.pool)
        return self.classifier(self.lstm(x.transpose(-1, -2)))


class MeanPoolLSTM(embedded.DigitsCNNLSTM):
    def forward(self, rows):  # max-pool -> average pool
        x = F.avg_pool1d(F.relu(self.conv(rows.transpose(-1, -2))), self.pool)
        return self.classifier(self.lstm(x.transpose(-1, -2)))


class DropoutCNN(embedded.DigitsConvNet):
    def forward(self, images):  # dropout before the classifier: random, and on in training mode
        x = F.silu(self.conv2(F.silu(self.conv1(images))))
        return self.classifier(F.dropout(x.mean(dim=(-2, -1)), 0.2, self.training))


class DropoutLSTM(embedded.DigitsCNNLSTM):
    def forward(self, rows):
        x = F.max_pool1d(F.relu(self.conv(rows.transpose(-1, -2))), self.pool)
        return self.classifier(F.dropout(self.lstm(x.transpose(-1, -2)), 0.2, self.training))


class ModeScaledCNN(embedded.DigitsConvNet):
    def forward(self, images):  # no randomness, but another output in training mode
        return super().forward(images) * (2.0 if self.training else 1.0)


def _dropout_mlp(sizes):
    return nn.Sequential(nn.Linear(sizes[0], sizes[1]), nn.ReLU(), nn.Dropout(0.2), nn.Linear(sizes[1], sizes[2]))


def _tanh_mlp(sizes):
    return nn.Sequential(nn.Linear(sizes[0], sizes[1]), nn.Tanh(), nn.Linear(sizes[1], sizes[2]))


CHANGES = {
    "toy-gap, tanh": ("toy-gap", lambda: _tanh_mlp([1, 50, 2])),
    "diabetes-gap, tanh": ("diabetes-gap", lambda: _tanh_mlp([10, 50, 2])),
    "digits, tanh": ("digits", lambda: _tanh_mlp([64, 50, 10])),
    "digits-cnn, relu": ("digits-cnn", lambda: ReluCNN(embedded.DIGITS_CNN["channels"])),
    "digits-cnn, max pool": ("digits-cnn", lambda: MaxPoolCNN(embedded.DIGITS_CNN["channels"])),
    "digits-lstm, columns": ("digits-lstm", lambda: ColumnsLSTM(**embedded.DIGITS_LSTM)),
    "digits-lstm, mean pool": ("digits-lstm", lambda: MeanPoolLSTM(**embedded.DIGITS_LSTM)),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_changed_computation_changes_the_fingerprint_and_stales_the_reference(change):
    name, factory = CHANGES[change]
    task = get_task(name)
    changed = dataclasses.replace(task, model_factory=factory)
    assert changed.describe()["architecture"] == task.describe()["architecture"], "the description alone is unchanged"
    assert changed.fingerprint() != task.fingerprint()
    load_reference(task)
    with pytest.raises(ReferenceMismatch, match="stale: .* in network_probe;"):  # names what changed
        load_reference(changed)


def test_the_probe_depends_on_the_network_alone(monkeypatch):
    """Not on torch's random state or its initialisation: the probe sets every parameter itself."""
    for name in EMBEDDED:
        torch.manual_seed(0)
        first = EMBEDDED[name]().network_probe
        torch.manual_seed(12345)
        monkeypatch.setattr(nn.Linear, "reset_parameters", lambda self: None)  # another initialisation entirely
        assert EMBEDDED[name]().network_probe == first
        monkeypatch.undo()


NOT_ONE_NETWORK = {
    "toy-gap, dropout": ("toy-gap", lambda: _dropout_mlp([1, 50, 2])),
    "digits, dropout": ("digits", lambda: _dropout_mlp([64, 50, 10])),
    "digits-cnn, dropout": ("digits-cnn", lambda: DropoutCNN(embedded.DIGITS_CNN["channels"])),
    "digits-cnn, mode-dependent": ("digits-cnn", lambda: ModeScaledCNN(embedded.DIGITS_CNN["channels"])),
    "digits-lstm, dropout": ("digits-lstm", lambda: DropoutLSTM(**embedded.DIGITS_LSTM)),
}


@pytest.mark.parametrize("change", NOT_ONE_NETWORK)
def test_a_network_that_is_not_one_deterministic_function_is_refused(change):
    """The probe runs ``forward`` in evaluation mode, where a dropout is off; methods and HMC run the network in
    training mode, stacked. A network whose outputs differ between the two would leave the fingerprint, and so its
    reference, unchanged while everything sampled and trained on it changed: it is refused in one line."""
    name, factory = NOT_ONE_NETWORK[change]
    changed = dataclasses.replace(get_task(name), model_factory=factory)
    with pytest.raises(ConfigError, match="deterministic network") as refused:
        changed.fingerprint()
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="deterministic network"):
        load_reference(changed)


@pytest.mark.parametrize("name", ["toy-gap", "diabetes-gap", "digits"])
def test_a_fast_path_that_disagrees_with_the_module_is_refused(monkeypatch, name):
    """The MLP tasks are evaluated by :func:`bench.functional._batched_mlp`, not by the module's ``forward`` the probe
    runs: a change to the fast path alone (an activation, a dropped bias) is refused, not scored under the old
    fingerprint."""
    task = get_task(name)
    task.fingerprint()
    original = functional._batched_mlp
    monkeypatch.setattr(functional, "_batched_mlp", lambda layers, params, x: original(
        layers, {key: value * 0 if key.endswith("bias") else value for key, value in params.items()}, x))
    with pytest.raises(ConfigError, match="deterministic network"):
        dataclasses.replace(task).fingerprint()
