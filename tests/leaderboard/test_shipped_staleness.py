"""A shipped record is shown only where it was made for this installation's task and reference: each condition of
:func:`leaderboard.shipped.rows` alone (the task's version, its fingerprint, the reference's sha256) leaves it out
with one line, and the records beside it stay."""

import json
import shutil

import pytest

from bench import records
from leaderboard import shipped
from tests.leaderboard.conftest import write_run


@pytest.fixture(scope="module")
def made_store(tmp_path_factory):
    """sgd on digits and toy-gap, budget 10, seeds 0 and 1, records alone (made once: each test edits a copy)."""
    root = tmp_path_factory.mktemp("shipped") / "store"
    for task in ("digits", "toy-gap"):
        for seed in (0, 1):
            folder = write_run(root, task, method="sgd", seed=seed, environment={"cpu": "Test CPU"})
            (folder / records.PREDICTIONS).unlink()
    shipped.write_manifest(root)
    return root


@pytest.fixture
def small_store(made_store, tmp_path, monkeypatch):
    root = tmp_path / "shipped"
    shutil.copytree(made_store, root)
    monkeypatch.setattr(shipped, "FOLDER", root)
    return root


STALE = {
    "task version": lambda result: {"task_version": result["task_version"] + 1},
    "task fingerprint": lambda result: {"task_fingerprint": "0" * 64},
    "reference sha256": lambda result: {"reference": {**result["reference"], "sha256": "0" * 64}},
    "reference sha256 past its first 16 characters": lambda result: {
        "reference": {**result["reference"], "sha256": result["reference"]["sha256"][:16] + "0" * 48}},
}


@pytest.mark.parametrize("task", ["digits", "toy-gap"])
@pytest.mark.parametrize("condition", STALE)
def test_a_record_made_for_another_task_or_reference_is_left_out_by_each_condition(small_store, task, condition):
    folder = records.run_folder(small_store, task, "sgd", 10.0, 1)
    result = json.loads((folder / records.RESULT).read_text())
    (folder / records.RESULT).write_text(json.dumps({**result, **STALE[condition](result)}))
    shipped.write_manifest(small_store)  # made so, not edited after (test_store_integrity.py)
    rows, stale = shipped.rows()
    assert sorted((row.task, row.seed) for row in rows) == sorted(
        {("digits", 0), ("digits", 1), ("toy-gap", 0), ("toy-gap", 1)} - {(task, 1)})
    assert stale == [f"{folder}: left out, made for another version of {task} or its reference than this "
                     "installation's"]
