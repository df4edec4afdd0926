"""The tuning protocol that picks every method's defaults (benchmarks/tune_trajectory.py, tune_anchored.py), held
to its invariants (issue 48, item 6): the rows it scores on are never trained on, and the HMC reference is never
read."""

import importlib
import sys
from pathlib import Path

import pytest
import torch

from bench.budget import MeteredData
from bench.tasks import get_task

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _script(name: str):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


@pytest.fixture
def rows_trained_on(monkeypatch):
    """The training rows every minibatch read through a meter holds, as ``(inputs, targets)`` pairs of the meter's
    own data (what a method trains on), and a guard that the reference is never loaded."""
    read = []
    batch = MeteredData.batch

    def recording(self, indices, passes=1):
        x, y = batch(self, indices, passes)
        read.append((x.reshape(-1, *x.shape[indices.dim():]), y.reshape(-1)))
        return x, y

    monkeypatch.setattr(MeteredData, "batch", recording)
    from reference import store

    monkeypatch.setattr(store, "load_reference", lambda *_: pytest.fail("the tuning read the HMC reference"))
    return read


def _rows(x: torch.Tensor) -> set[bytes]:
    return {row.numpy().tobytes() for row in x.reshape(x.shape[0], -1)}


@pytest.mark.parametrize("task", ["toy-gap", "digits"])
def test_tune_trajectory_trains_on_the_other_rows_and_scores_the_held_out_ones(task, rows_trained_on):
    script = _script("tune_trajectory")
    whole = get_task(task)
    split, held = script.split_of(task, seed=0)
    assert len(held) == round(script.HELD_OUT * whole.n_train) and len(set(held.tolist())) == len(held)
    assert torch.equal(split.x_test, whole.x_train[held])  # scored on exactly the held-out rows
    assert split.n_train + len(held) == whole.n_train
    held_rows = _rows(whole.x_train[held])
    assert not held_rows & _rows(split.x_train), "a held-out row is among the rows trained on"
    scores = script.scores_on_split("sgd", task, 10, 0, factor=1.0)
    assert scores and rows_trained_on
    assert not any(held_rows & _rows(x) for x, _ in rows_trained_on), "a minibatch held a held-out row"


def test_tune_anchored_trains_on_its_fit_rows_only(rows_trained_on):
    """Members train on the split's ``fit`` rows; its ``validation`` rows are only evaluated (not through
    ``batch``)."""
    script = _script("tune_anchored")
    script.tune("toy-gap", trials=1, seed=0)
    task = get_task("toy-gap")
    from approximators.training import ValidationSplit

    split = ValidationSplit.random(task.n_train, 0.1, torch.Generator().manual_seed(0))  # as tune draws it
    validation = _rows(task.x_train[split.validation])
    assert rows_trained_on and not any(validation & _rows(x) for x, _ in rows_trained_on)
