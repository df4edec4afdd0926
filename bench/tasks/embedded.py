"""The embedded offline suite: small real or synthetic data shipped with the package or scikit-learn.

Every constant that defines a task (seeds, sizes, prior variance, architecture) is in this file, and
a change to any of them must bump the task's ``version`` and regenerate its reference.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.ndimage import gaussian_filter
from sklearn.datasets import load_diabetes, load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from bench.likelihoods import Categorical, HeteroscedasticGaussian
from bench.tasks.base import Task, TestBlock


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
    shifts = DIGITS["shifts"]
    noisy = images + shifts["gaussian-noise"]["std"] * rng.standard_normal(images.shape)
    bright = images + shifts["brightness"]["add"]
    blurred = np.stack([gaussian_filter(im, shifts["blur"]["gaussian_sigma"], mode="constant")
                        for im in images])
    return {name: np.clip(a, 0.0, 1.0) for name, a in
            {"gaussian-noise": noisy, "brightness": bright, "blur": blurred}.items()}


def digits() -> Task:
    """scikit-learn's 8x8 digits (1797 images, 10 classes) with shifted copies of the test set.

    A stratified 80/20 split (seed 0); pixels scaled to [0, 1]. The test set is the clean test
    images followed by the same images under Gaussian noise, a brightness increase and a blur, one
    block each, laid out like the competition's CIFAR-10-C test set. The model is an MLP 64-50-10:
    a convnet made full-batch HMC on a CPU too slow to reach R-hat <= 1.05 in reasonable time.
    """
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
    x_test = np.concatenate(rows).reshape(-1, 64)
    y_test = np.tile(y_te, len(rows))
    return Task(
        name="digits", version=2,
        description="scikit-learn 8x8 digits + shifted test copies (noise, brightness, blur)",
        x_train=_as_float(x_tr.reshape(-1, 64)), y_train=torch.from_numpy(y_tr.astype(np.int64)),
        x_test=_as_float(x_test), y_test=torch.from_numpy(y_test.astype(np.int64)),
        model_factory=lambda: mlp([64, 50, 10]), architecture="MLP 64-50-10, ReLU",
        likelihood=Categorical(), prior_variance=0.1,
        settings={"data": DIGITS}, test_blocks=tuple(blocks), n_classes=10,
    )
