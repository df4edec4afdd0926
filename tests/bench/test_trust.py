"""How far a run's files are trusted (bench.trust): the record's field is validated, a record without it still loads,
and a board row stored without it is unknown on a fetched task, bdl-bench's own on an installed one."""

import pytest

from bench import records
from bench.errors import DamagedFile
from bench.trust import FIRST_USE, OURS, UNKNOWN, record_levels, summary
from leaderboard.ranking import entry_label, tracks
from leaderboard.store import RunRow
from leaderboard.submission import with_current_floors

SHA = "ab" * 32


def record(**fields) -> dict:
    """A run record as check_record takes it (sgd at its defaults), of an older version unless ``fields`` add more."""
    return {"task": "uci-gap", "task_version": 1, "task_fingerprint": "f", "method": "sgd", "config": {},
            "budget": 10.0, "epochs_used": 10.0, "test_passes": 1.0, "seed": 0, "metrics": {}, "metrics_by_block": {},
            "wall_seconds": 1.0, "device": "cpu", "versions": {}, "reference": {"key": "samples", "sha256": SHA},
            **fields}


def test_a_record_without_trust_loads_as_unknown_and_a_malformed_trust_is_refused(tmp_path):
    records.check_record(record(), tmp_path / "result.json")  # a record of an older version
    assert record_levels(record().get("trust")) == [UNKNOWN] and summary(None).startswith("files of trust unknown")
    good = {"reference": {"trust": FIRST_USE, "sha256": SHA}, "data": {"https://x/energy_anon.npz":
                                                                       {"trust": "official", "sha256": SHA}}}
    records.check_record(record(trust=good), tmp_path / "result.json")
    assert summary(good) == "reference first use, data official (1 file)"
    for bad in ({**good, "reference": {"trust": "trusted", "sha256": SHA}},
                {**good, "data": {"https://x/a.npz": {"trust": OURS, "sha256": SHA}}},  # a fetched file is not ours
                {**good, "reference": {"trust": FIRST_USE, "sha256": "nope"}},
                {"reference": good["reference"]}):
        with pytest.raises(DamagedFile, match="trust must be null or hold"):
            records.check_record(record(trust=bad), tmp_path / "result.json")


def row(task: str, kind: str, trust: dict | None) -> RunRow:
    return RunRow(task=task, task_version=1, task_fingerprint="f", task_kind=kind, method="sgd", budget=1.0, seed=0,
                  reference_sha256=SHA, config_hash="c", config={}, source="run", predictions_sha256="p",
                  epochs_used=1.0, test_passes=1.0, wall_seconds=1.0, device="cpu", versions={}, noise_floor=None,
                  reliability=None, submitter="alice", notes="", finished_at=None, submitted_at="2026",
                  metrics={"all": {"w2": 1.0}}, trust=trust)


def test_a_board_row_stored_without_trust_is_unknown_on_a_fetched_task_and_ours_on_an_installed_one():
    refreshed = with_current_floors([row("uci-gap", "regression", None), row("toy-gap", "regression", None)])
    assert [record_levels(r.trust) for r in refreshed] == [[UNKNOWN], [OURS]]
    labels = {track.task: entry_label(track.entries[0]) for track in tracks(refreshed)}
    assert labels == {"uci-gap": "sgd \u2021", "toy-gap": "sgd"}
