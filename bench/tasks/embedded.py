"""The embedded offline suite: small real or synthetic data shipped with the package or scikit-learn.

Every constant that defines a task (seeds, sizes, prior variance, architecture) is in this file, and
a change to any of them must bump the task's ``version`` and regenerate its reference.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.likelihoods import Categorical, HeteroscedasticGaussian
from bench.tasks.base import Task, TestBlock
from bench.tasks.models import HaikuLSTM, SameConv2d, haiku_conv, haiku_linear


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        if i:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


def _as_float(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


TOY_GAP = dict(seed=0, n_per_cluster=40, clusters=[[-2.0, -1.0], [1.0, 2.0]], noise_std=0.3,
               test_grid=[-3.0, 3.0, 121], function="sin(2x)")


def toy_gap() -> Task:
    """1-D regression with a gap between two clusters of inputs (Foong et al. 2019).

    Inputs are uniform in [-2, -1] and [1, 2]; targets y = sin(2x) + N(0, 0.3^2). Test inputs are
    a grid over [-3, 3] that covers both clusters, the gap and beyond; test targets come from the
    same generating process.
    """
    s = TOY_GAP
    rng = np.random.default_rng(s["seed"])
    x = np.concatenate([rng.uniform(lo, hi, s["n_per_cluster"]) for lo, hi in s["clusters"]])
    y = np.sin(2 * x) + s["noise_std"] * rng.standard_normal(x.shape)
    lo, hi, n = s["test_grid"]
    x_test = np.linspace(lo, hi, int(n))
    y_test = np.sin(2 * x_test) + s["noise_std"] * rng.standard_normal(x_test.shape)
    return Task(
        name="toy-gap", version=2,
        description="1-D regression, two input clusters with a gap (in-between uncertainty)",
        x_train=_as_float(x[:, None]), y_train=_as_float(y),
        x_test=_as_float(x_test[:, None]), y_test=_as_float(y_test),
        model_factory=lambda: mlp([1, 50, 2]), architecture="MLP 1-50-2, ReLU",
        likelihood=HeteroscedasticGaussian(), prior_variance=0.2,
        settings={"data": s},
    )


DIABETES_GAP = dict(gap_feature="bmi", gap_feature_index=2, held_out="middle third after sorting")


def diabetes_gap() -> Task:
    """scikit-learn's diabetes data (442 x 10) with a gap split, as the competition's UCI-Gap.

    Points are sorted along the body-mass index (input 2, ``bmi``: the input most correlated with
    the target, so the gap matters) and the middle third is the test set. Inputs and targets are
    standardised with the training set's mean and standard deviation.
    """
    from sklearn.datasets import load_diabetes  # where used: importing scikit-learn takes seconds, which every
                                               # command would pay, a one-line error included

    x, y = load_diabetes(return_X_y=True)
    order = np.argsort(x[:, DIABETES_GAP["gap_feature_index"]], kind="stable")
    n = len(order)
    test = np.zeros(n, dtype=bool)
    test[order[n // 3: 2 * n // 3]] = True
    x_mean, x_std = x[~test].mean(0), x[~test].std(0)
    y_mean, y_std = y[~test].mean(), y[~test].std()
    x = (x - x_mean) / x_std
    y = (y - y_mean) / y_std
    return Task(
        name="diabetes-gap", version=2,
        description="scikit-learn diabetes, middle third along bmi held out (UCI-Gap style)",
        x_train=_as_float(x[~test]), y_train=_as_float(y[~test]),
        x_test=_as_float(x[test]), y_test=_as_float(y[test]),
        model_factory=lambda: mlp([10, 50, 2]), architecture="MLP 10-50-2, ReLU",
        likelihood=HeteroscedasticGaussian(), prior_variance=1 / 30,
        settings={"data": DIABETES_GAP},
    )


DIGITS = dict(split_seed=0, test_fraction=0.2, shift_seed=1,
              shifts={"gaussian-noise": {"std": 0.25}, "brightness": {"add": 0.3},
                      "blur": {"gaussian_sigma": 0.8}})


def _shifted(images: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The clean test images under each shift of ``DIGITS['shifts']``, pixel values kept in [0, 1]."""
    from scipy.ndimage import gaussian_filter  # where used, as scikit-learn is (_digits_split)

    shifts = DIGITS["shifts"]
    noisy = images + shifts["gaussian-noise"]["std"] * rng.standard_normal(images.shape)
    bright = images + shifts["brightness"]["add"]
    blurred = np.stack([gaussian_filter(im, shifts["blur"]["gaussian_sigma"], mode="constant")
                        for im in images])
    return {name: np.clip(a, 0.0, 1.0) for name, a in
            {"gaussian-noise": noisy, "brightness": bright, "blur": blurred}.items()}


def _digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[TestBlock, ...]]:
    """The digits tasks' data as images: training ``(1437, 8, 8)`` and labels, test ``(1440, 8, 8)`` (the clean
    test images, then each shift of ``DIGITS['shifts']``) and labels, and the test blocks."""
    from sklearn.datasets import load_digits  # where used: importing scikit-learn takes seconds
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    images, labels = bunch.images / 16.0, bunch.target
    x_tr, x_te, y_tr, y_te = train_test_split(
        images, labels, test_size=DIGITS["test_fraction"], stratify=labels,
        random_state=DIGITS["split_seed"])
    shifted = _shifted(x_te, np.random.default_rng(DIGITS["shift_seed"]))
    blocks, rows, start = [], [x_te], len(x_te)
    blocks.append(TestBlock("clean", 0, start))
    for name, a in shifted.items():
        blocks.append(TestBlock(name, start, start + len(a)))
        rows.append(a)
        start += len(a)
    return x_tr, y_tr, np.concatenate(rows), np.tile(y_te, len(rows)), tuple(blocks)


def _digits_task(name: str, version: int, description: str, input_shape: tuple[int, ...], model_factory,
                 architecture: str) -> Task:
    """A task on the digits data of :func:`_digits_split` with images reshaped to ``input_shape`` per example."""
    x_tr, y_tr, x_test, y_test, blocks = _digits_split()
    return Task(
        name=name, version=version, description=description,
        x_train=_as_float(x_tr.reshape(-1, *input_shape)), y_train=torch.from_numpy(y_tr.astype(np.int64)),
        x_test=_as_float(x_test.reshape(-1, *input_shape)), y_test=torch.from_numpy(y_test.astype(np.int64)),
        model_factory=model_factory, architecture=architecture, likelihood=Categorical(),
        prior_variance=DIGITS_PRIOR_VARIANCE, settings={"data": DIGITS}, test_blocks=blocks, n_classes=10,
    )


DIGITS_PRIOR_VARIANCE = 0.1
"""The prior variance of all three digits tasks: their posteriors differ by the architecture alone."""


def digits() -> Task:
    """scikit-learn's 8x8 digits (1797 images, 10 classes) with shifted copies of the test set.

    A stratified 80/20 split (seed 0); pixels scaled to [0, 1]. The test set is the clean test
    images followed by the same images under Gaussian noise, a brightness increase and a blur, one
    block each, laid out like the competition's CIFAR-10-C test set. The model is an MLP 64-50-10;
    ``digits-cnn`` and ``digits-lstm`` put a convnet and a CNN-LSTM on the same data and prior.
    """
    return _digits_task("digits", 2, "scikit-learn 8x8 digits + shifted test copies (noise, brightness, blur)",
                        (64,), lambda: mlp([64, 50, 10]), "MLP 64-50-10, ReLU")


class DigitsConvNet(nn.Module):
    """A small convnet in the style of the competition's ResNet-20: strided SAME convolutions with swish, a
    global average pool and a dense head, initialised as Haiku initialises the competition models.

    ``(N, 1, 8, 8) -> conv 3x3 / 2, 8 channels, swish (N, 8, 4, 4) -> conv 3x3 / 2, 16 channels, swish
    (N, 16, 2, 2) -> mean over positions (N, 16) -> logits (N, 10)``: 1,418 parameters.
    """

    def __init__(self, channels: tuple[int, int] = (8, 16), n_classes: int = 10):
        super().__init__()
        self.conv1 = haiku_conv(SameConv2d, 1, channels[0], 3, 2)
        self.conv2 = haiku_conv(SameConv2d, channels[0], channels[1], 3, 2)
        self.classifier = haiku_linear(channels[1], n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.silu(self.conv2(F.silu(self.conv1(images))))
        return self.classifier(x.mean(dim=(-2, -1)))


DIGITS_CNN = dict(channels=(8, 16))


def digits_cnn() -> Task:
    """The digits data and prior of ``digits`` with :class:`DigitsConvNet` (1,418 parameters).

    Why this size (measured with full-batch HMC, one chain, one thread, float32, compiled leapfrog steps):
    a first version with 3x3 stride-1 convolutions, FilterResponseNorm and 2x2 average pooling (1,970
    parameters) needed a step size of about 7e-4, about 700 leapfrog steps per trajectory at about 19 ms
    each: a reference would take days on 2 CPU cores. Without FRN, the same network took 2.1e-3 (240 steps);
    striding instead of pooling quarters the activations and brings the step to about 5.7e-3 (90 steps of
    about 8 ms), so a reference takes under an hour (its reference: 11 minutes on 2 cores). FilterResponseNorm is
    therefore left out.
    """
    channels = DIGITS_CNN["channels"]
    return _digits_task(
        "digits-cnn", 1, "scikit-learn 8x8 digits + shifted test copies, a small strided convnet", (1, 8, 8),
        lambda: DigitsConvNet(channels),
        f"convnet: conv 3x3/2 {channels[0]} ch, swish, conv 3x3/2 {channels[1]} ch, swish, global mean, dense 10")


class DigitsCNNLSTM(nn.Module):
    """A small sequence model in the style of the competition's CNN-LSTM, reading each image as a sequence of
    its 8 rows of 8 pixels, initialised as Haiku initialises the competition models.

    ``(N, 8 rows, 8 pixels) -> conv1d over rows, 16 filters of width 3, VALID, ReLU (N, 16, 6)
    -> max-pool 2 (N, 16, 3) -> Haiku LSTM 16 over the 3 steps (N, 16) -> logits (N, 10)``: 2,682 parameters.
    """

    def __init__(self, filters: int = 16, width: int = 3, pool: int = 2, hidden: int = 16, n_classes: int = 10):
        super().__init__()
        self.pool = pool
        self.conv = haiku_conv(nn.Conv1d, 8, filters, width)
        self.lstm = HaikuLSTM(filters, hidden)
        self.classifier = haiku_linear(hidden, n_classes)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        x = F.max_pool1d(F.relu(self.conv(rows.transpose(-1, -2))), self.pool)
        return self.classifier(self.lstm(x.transpose(-1, -2)))


DIGITS_LSTM = dict(filters=16, width=3, pool=2, hidden=16)


def digits_lstm() -> Task:
    """The digits data and prior of ``digits`` with :class:`DigitsCNNLSTM` (2,682 parameters), each image read
    as a sequence of its rows.

    Why this size (measured as for ``digits-cnn``): full-batch HMC takes a step of about 2.2e-3, about 225
    leapfrog steps per trajectory, of 4-8 ms each (its reference: 28 minutes on 2 cores); a tighter prior (1/40, IMDB's) did not lengthen the step and
    fitted the data far worse (log-likelihood about -800 against -270), so the prior stays the digits tasks'.
    """
    s = DIGITS_LSTM
    return _digits_task(
        "digits-lstm", 1, "scikit-learn 8x8 digits read row by row + shifted test copies, a small CNN-LSTM",
        (8, 8), lambda: DigitsCNNLSTM(**s),
        f"CNN-LSTM: conv1d {s['filters']} x {s['width']} over rows, ReLU, max-pool {s['pool']}, "
        f"LSTM {s['hidden']}, dense 10")
