"""Reference files: checksums verified on load, stale or corrupted files refused; shipped ones valid."""

import json

import numpy as np
import pytest

from bench.errors import ReferenceMismatch
from bench.io import sha256_file
from bench.tasks import get_task, task_names
from reference import store
from reference.settings import R_HAT_LIMIT


def _write(tmp_path, task):
    metadata = {"task": task.describe(), "task_fingerprint": task.fingerprint(),
                "test_targets_sha256": task.test_targets_sha256(), "noise_floor": {}}
    entry = store.write_reference(tmp_path, task.name, "samples", np.zeros((task.n_test, 4)), metadata, b"evidence")
    store.register(task.name, entry, tmp_path / "registry.json")
    return tmp_path / "registry.json"


def test_round_trip(tmp_path):
    task = get_task("toy-gap")
    registry = _write(tmp_path, task)
    ref = store.load_reference(task, tmp_path, registry)
    assert ref.array.shape == (task.n_test, 4) and ref.key == "samples"
    assert ref.sha256 == sha256_file(tmp_path / "toy-gap.npz")


def test_corrupted_file_is_refused(tmp_path):
    task = get_task("toy-gap")
    registry = _write(tmp_path, task)
    path = tmp_path / "toy-gap.npz"
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(ReferenceMismatch, match="corrupted"):
        store.load_reference(task, tmp_path, registry)


def test_reference_of_another_task_version_is_refused(tmp_path):
    task = get_task("toy-gap")
    registry = _write(tmp_path, task)
    entries = json.loads(registry.read_text())
    entries["toy-gap"]["fingerprint"] = "0" * 64
    registry.write_text(json.dumps(entries))
    with pytest.raises(ReferenceMismatch, match="stale"):
        store.load_reference(task, tmp_path, registry)


@pytest.mark.parametrize("name", task_names())
def test_changed_test_targets_stale_the_reference(name):
    """The fingerprint hashes the inputs, not ``y_test``; the reference's evidence holds each draw's test
    log-likelihood, computed on them, so changed targets (here: each rolled by one) are refused as stale."""
    import dataclasses

    task = get_task(name)
    store.load_reference(task)
    changed = dataclasses.replace(task, y_test=task.y_test.roll(1))
    assert changed.fingerprint() == task.fingerprint()
    with pytest.raises(ReferenceMismatch, match="stale: .*test targets"):
        store.load_reference(changed)


def test_a_reference_without_the_test_targets_sha256_is_refused(tmp_path):
    task = get_task("toy-gap")
    registry = _write(tmp_path, task)
    metadata = json.loads((tmp_path / "toy-gap.json").read_text())
    del metadata["test_targets_sha256"]
    (tmp_path / "toy-gap.json").write_text(json.dumps(metadata))
    entries = json.loads(registry.read_text())
    entries["toy-gap"]["json_sha256"] = sha256_file(tmp_path / "toy-gap.json")
    registry.write_text(json.dumps(entries))
    with pytest.raises(ReferenceMismatch, match="damaged: .*test targets"):
        store.load_reference(task, tmp_path, registry)


def test_missing_and_unregistered(tmp_path):
    task = get_task("toy-gap")
    with pytest.raises(ReferenceMismatch, match="unregistered"):
        store.load_reference(task, tmp_path, tmp_path / "registry.json")
    registry = _write(tmp_path, task)
    (tmp_path / "toy-gap.json").unlink()
    with pytest.raises(ReferenceMismatch, match="missing"):
        store.load_reference(task, tmp_path, registry)
    assert store.reference_status(task, tmp_path, registry) == "missing"


@pytest.mark.parametrize("name", task_names())
def test_shipped_reference_is_valid_and_converged(name):
    task = get_task(name)
    ref = store.load_reference(task)
    meta = ref.metadata
    assert meta["diagnostics"]["max_split_rhat"] <= R_HAT_LIMIT
    assert np.all(np.isfinite(ref.array))
    if task.kind == "classification":
        assert ref.array.shape == (task.n_test, task.n_classes)
        np.testing.assert_allclose(ref.array.sum(1), 1, atol=1e-6)
        assert set(meta["noise_floor"]) == {"all"} | {b.name for b in task.test_blocks}
    else:
        assert ref.array.shape == (task.n_test, 1000)
        assert meta["noise_floor"]["all"]["w1"] > 0
    assert meta["hmc"]["n_chains"] % 2 == 0 and meta["kept_samples_total"] >= 1000
