"""Run folders made without training: predictions derived from the reference, result.json as the runner writes it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from approximators import METHODS, resolve_config
from approximators.base import recorded_config
from bench import records
from bench.costs import planned_cost
from bench.io import atomic_write_bytes, json_bytes, npz_bytes
from bench.runner import score
from bench.tasks import PREDICTIVE_SAMPLES, get_task
from leaderboard import submission
from reference.store import load_reference


def blurred_predictions(task_name: str, amount: float, seed: int = 0) -> np.ndarray:
    """The reference's predictive made worse by ``amount`` in [0, 1]: probabilities mixed with the uniform
    distribution, or samples shifted and widened. Shape as the reference: ``(N_test, C)`` or ``(N_test, 1000)``."""
    task = get_task(task_name)
    reference = load_reference(task).array
    rng = np.random.default_rng(seed)
    if task.kind == "classification":
        return (1 - amount) * reference + amount / reference.shape[1]
    samples = reference[:, :PREDICTIVE_SAMPLES]
    return samples * (1 + amount) + amount + 0.01 * rng.standard_normal(samples.shape)


PLUGIN_SOURCE = "tests.methods:Method"
"""Where a record says a method that is not built in came from (``run`` records ``package.module:ClassName``)."""


def method_fields(method: str, task: str, config: dict | None) -> dict:
    """What a record says of ``method`` as ``run`` writes it: a built-in method's configuration (its defaults for
    ``task`` unless ``config`` is given) and how it changes the network; another method's source and ``config``."""
    built_in = METHODS.get(method)
    if built_in is None:
        return {"config": config if config is not None else {}, "method_source": PLUGIN_SOURCE}
    defaults = resolve_config(built_in, task)
    return {"config": config if config is not None else records.as_recorded(dataclasses.asdict(defaults)),
            "architecture_change": built_in.architecture_change(defaults)}


def write_run(out: Path, task_name: str, method: str = "de", seed: int = 0, budget: float = 10.0,
              amount: float | None = None, config: dict | None = None, **fields) -> Path:
    """A run folder exactly as ``bench.runner.run`` writes it, with honestly computed metrics (``fields``: more
    or replaced fields of its record)."""
    task = get_task(task_name)
    reference = load_reference(task)
    predictions = blurred_predictions(task_name, 0.1 + 0.05 * seed if amount is None else amount, seed)
    overall, by_block = score(task, predictions, reference)
    result = {
        "task": task.name, "task_version": task.version, "task_fingerprint": task.fingerprint(), "method": method,
        "budget": budget, "epochs_used": budget, "test_passes": 1.0, "seed": seed, "metrics": overall,
        "metrics_by_block": by_block, "noise_floor": reference.noise_floor, "wall_seconds": 1.5, "device": "cpu",
        **method_fields(method, task.name, config), "versions": {"torch": "test"},
        "reference": {"sha256": reference.sha256, "key": reference.key},
        "predictions_sha256": records.predictions_sha256(predictions), "finished_at": "2025-01-01T00:00:00+00:00",
        "environment": {"torch": "test", "cpu": "a CPU", "torch_threads": 1, "cpu_count": 2},
    }
    try:  # as run resolves them; a record of a run that cannot exist keeps its configuration
        resolved = submission.resolved_settings(method, result["config"], task, budget)
    except submission.SubmissionError:
        resolved = None
    if resolved is not None:  # a built-in method spends what its budget rule plans (bench.costs), as its run would
        built_in = METHODS[method]
        cost = planned_cost(built_in(recorded_config(built_in, result["config"])), float(budget), task.n_train)
        if cost is not None and cost.exact:
            result["epochs_used"] = cost.most
        if cost is not None and cost.test_passes is not None:
            result["test_passes"] = cost.test_passes
    result = {**result, "resolved": result["config"] if resolved is None else resolved, **fields}
    folder = records.run_folder(out, task.name, method, budget, seed)
    # as a file anyone can edit: a record the validator would refuse is written too (records.write_run checks it)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(folder / records.PREDICTIONS, npz_bytes(**{reference.key: predictions}))
    atomic_write_bytes(folder / records.RESULT, json_bytes(result))
    return folder


@pytest.fixture
def db_path(tmp_path, monkeypatch) -> Path:
    """A fresh database path, also set as $BDL_BENCH_DB so the command line uses it by default."""
    path = tmp_path / "leaderboard.sqlite"
    monkeypatch.setenv("BDL_BENCH_DB", str(path))
    return path


@pytest.fixture
def make_run():
    return write_run


@pytest.fixture
def blurred():
    return blurred_predictions


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    """No competition task is fetched: the user's own cache folder is never read by these tests."""
    monkeypatch.setenv("BDL_BENCH_CACHE", str(tmp_path / "empty-cache"))
