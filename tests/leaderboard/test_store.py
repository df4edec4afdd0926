"""The database: schema versions and migrations, all-or-nothing inserts, idempotency, concurrent writers."""

import dataclasses
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from leaderboard import store
from leaderboard.store import RunRow, Store, StoreError


def row(seed=0, method="de", predictions="p0", **changes) -> RunRow:
    values = {
        "task": "toy-gap", "task_version": 1, "task_fingerprint": "f", "task_kind": "regression", "method": method,
        "budget": 10.0, "seed": seed, "reference_sha256": "r", "config_hash": "c", "config": {"members": 5},
        "source": "run", "predictions_sha256": predictions, "epochs_used": 10.0, "test_passes": 1.0,
        "wall_seconds": 0.5, "device": "cpu", "versions": {"torch": "x"}, "noise_floor": None, "reliability": None,
        "submitter": "alice", "notes": "", "finished_at": None, "submitted_at": "now",
        "metrics": {"all": {"w2": 0.5 + seed, "w1": 0.4}},
    }
    values.update(changes)
    return RunRow(**values)


def test_new_database_is_at_the_latest_schema_and_round_trips_rows(tmp_path):
    with Store(tmp_path / "db.sqlite") as db:
        assert db.schema_version == len(store.MIGRATIONS)
        added, present = db.insert([row(0), row(1)])
        assert (len(added), len(present)) == (2, 0)
        stored = db.runs()
    assert stored == [row(0), row(1)]


def test_reinserting_the_same_run_is_idempotent(tmp_path):
    with Store(tmp_path / "db.sqlite") as db:
        db.insert([row(0)])
        added, present = db.insert([row(0), row(1)])
        assert [r.seed for r in added] == [1] and [r.seed for r in present] == [0]
        assert db.count() == 2


def test_same_key_with_different_predictions_is_refused_and_nothing_is_inserted(tmp_path):
    with Store(tmp_path / "db.sqlite") as db:
        db.insert([row(0)])
        with pytest.raises(StoreError, match="different predictions"):
            db.insert([row(1), row(0, predictions="other")])
        assert [r.seed for r in db.runs()] == [0], "the whole batch is rolled back"


def test_a_database_from_a_newer_release_is_refused(tmp_path):
    path = tmp_path / "db.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {len(store.MIGRATIONS) + 1}")
    with pytest.raises(StoreError, match="newer than this release"):
        Store(path)


def test_a_failing_migration_leaves_the_database_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "db.sqlite"
    with Store(path) as db:
        db.insert([row(0)])
    broken = "ALTER TABLE runs ADD COLUMN extra TEXT; SELECT no_such_function()"
    monkeypatch.setattr(store, "MIGRATIONS", [*store.MIGRATIONS, broken])
    monkeypatch.setattr(store, "SCHEMA_VERSION", len(store.MIGRATIONS))
    with pytest.raises(StoreError, match="no_such_function"):
        Store(path)
    monkeypatch.undo()
    with Store(path) as db:
        assert db.schema_version == len(store.MIGRATIONS)
        assert [r.seed for r in db.runs()] == [0]
        columns = [c[1] for c in db._db.execute("PRAGMA table_info(runs)")]
        assert "extra" not in columns


def test_a_new_migration_is_applied_once_to_an_existing_database(tmp_path, monkeypatch):
    path = tmp_path / "db.sqlite"
    with Store(path) as db:
        db.insert([row(0)])
    monkeypatch.setattr(store, "MIGRATIONS", [*store.MIGRATIONS, "ALTER TABLE runs ADD COLUMN extra TEXT"])
    monkeypatch.setattr(store, "SCHEMA_VERSION", len(store.MIGRATIONS))
    for _ in range(2):  # a second open must not re-run the ALTER (it would fail on the duplicate column)
        with Store(path) as db:
            assert db.schema_version == len(store.MIGRATIONS)
            assert [r.seed for r in db.runs()] == [0]


def test_not_a_database_is_one_clear_error(tmp_path):
    path = tmp_path / "db.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open leaderboard database"):
        Store(path)


def test_a_read_only_store_reads_what_was_written_and_never_creates_or_writes(tmp_path):
    path = tmp_path / "db.sqlite"
    with pytest.raises(StoreError, match="no leaderboard database"):
        Store(path, read_only=True)
    assert not path.exists()
    with Store(path) as db:
        db.insert([row(0), row(1)])
    with Store(path, read_only=True) as db:
        assert db.runs() == [row(0), row(1)] and db.schema_version == store.SCHEMA_VERSION
        with pytest.raises(StoreError, match="opened for reading"):
            db.insert([row(2)])
        assert db.count() == 2


def test_default_path_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("BDL_BENCH_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert store.default_db_path() == tmp_path / "xdg" / "bdl-bench" / "leaderboard.sqlite"
    monkeypatch.setenv("BDL_BENCH_DB", str(tmp_path / "explicit.sqlite"))
    assert store.default_db_path() == tmp_path / "explicit.sqlite"


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_store import row
    from leaderboard.store import Store
    writer, rows, go = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    while not go.exists():  # start together
        time.sleep(0.005)
    with Store(Path(sys.argv[4])) as db:
        for i in range(rows):
            # every writer also inserts the shared seed -1: exactly one copy may survive
            db.insert([row(seed=1000 * writer + i, method=f"m{{writer}}"), row(seed=-1)])
""")


def test_concurrent_writers_lose_no_row_and_keep_the_database_intact(tmp_path):
    writers, rows = 4, 25
    go, path = tmp_path / "go", tmp_path / "db.sqlite"
    Store(path).close()
    script = WRITER.format(tests=str(Path(__file__).parent))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(w), str(rows), str(go), str(path)],
                              stderr=subprocess.PIPE, text=True) for w in range(writers)]
    go.touch()
    try:
        errors = [p.communicate(timeout=120)[1] for p in procs]
    finally:
        for p in procs:  # those left when a wait ran out
            if p.poll() is None:
                p.kill()
                p.wait(timeout=60)
    assert all(p.returncode == 0 for p in procs), errors
    with Store(path) as db:
        assert db.integrity_ok()
        stored = db.runs()
    assert len(stored) == writers * rows + 1
    assert sorted(r.seed for r in stored if r.seed >= 0) == sorted(1000 * w + i for w in range(writers)
                                                                     for i in range(rows))
    assert all(r.metrics["all"]["w1"] == 0.4 for r in stored), "every run kept its metrics"


def test_a_version_1_database_migrates_to_verified_flags_and_resubmitting_verified_marks_the_row(tmp_path):
    path = tmp_path / "db.sqlite"
    raw = sqlite3.connect(path)
    for statement in filter(str.strip, store.MIGRATIONS[0].split(";")):
        raw.execute(statement)
    raw.execute("PRAGMA user_version = 1")
    raw.commit()
    raw.close()
    with Store(path) as db:
        assert db.schema_version == store.SCHEMA_VERSION == 7
        db.insert([row(0)])
        assert db.runs()[0].verified is False
        assert db.runs()[0].architecture_change is None
        added, present = db.insert([row(0, verified=True)])
        assert (added, len(present)) == ([], 1)
        assert db.runs()[0].verified is True
        db.insert([row(1, architecture_change="dropout before the classifier")])
        assert db.runs()[1].architecture_change == "dropout before the classifier"


def _database_of_version(path, version: int):
    """A database as the release of schema ``version`` wrote it, holding one de run on toy-gap."""
    raw = sqlite3.connect(path)
    for script in store.MIGRATIONS[:version]:
        for statement in filter(str.strip, script.split(";")):
            raw.execute(statement)
    raw.execute(f"PRAGMA user_version = {version}")
    raw.execute("INSERT INTO runs (task, task_version, task_fingerprint, task_kind, method, budget, seed, "
                "reference_sha256, config_hash, config_json, source, predictions_sha256, versions_json, submitter, "
                "notes, submitted_at) VALUES ('toy-gap', 1, 'f', 'regression', 'de', 10.0, 0, 'r', 'c', '{}', 'run', "
                "'p0', '{}', 'alice', '', 'now')")
    raw.commit()
    raw.close()
    return path


def test_a_version_3_database_is_read_without_labels_and_migrates_to_them(tmp_path):
    path = _database_of_version(tmp_path / "db.sqlite", 3)
    with Store(path, read_only=True) as db:
        assert db.schema_version == 3 and [r.label for r in db.runs()] == [None]
    with Store(path) as db:
        assert db.schema_version == store.SCHEMA_VERSION == 7
        assert [r.label for r in db.runs()] == [None]
        db.insert([row(0, method="sgd", label="tuned lr")])
        assert {r.method: r.label for r in db.runs()} == {"de": None, "sgd": "tuned lr"}


def test_a_version_5_database_is_read_without_floor_spreads_and_migrates_to_them(tmp_path):
    """A row written before floor spreads and warnings were stored reads as having none; after the migration a row
    keeps its own."""
    path = _database_of_version(tmp_path / "db.sqlite", 5)
    with Store(path, read_only=True) as db:
        assert db.schema_version == 5 and [(r.noise_floor_spread, r.warnings) for r in db.runs()] == [(None, ())]
    spread = {"all": {"w2": 0.001}}
    with Store(path) as db:
        assert db.schema_version == store.SCHEMA_VERSION == 7
        db.insert([dataclasses.replace(row(0, method="sgd"), noise_floor_spread=spread)])
        assert {r.method: r.noise_floor_spread for r in db.runs()} == {"de": None, "sgd": spread}


def test_a_run_keeps_its_label_and_a_label_names_one_configuration(tmp_path):
    """The label is not part of a run's identity: the same run under another label is refused (not a second entry,
    not a silent relabelling), and on a task a configuration has one label and a label one configuration."""
    with Store(tmp_path / "db.sqlite") as db:
        db.insert([row(0, label="tuned")])
        for label in ("other", None):
            with pytest.raises(StoreError, match=r"already on the leaderboard labelled 'tuned', submitted now"):
                db.insert([row(0, label=label)])
        with pytest.raises(StoreError, match="another run of this configuration, on the leaderboard or in this "
                                             "submission, is labelled 'tuned'; .*: run it with --label 'tuned'"):
            db.insert([row(1, label="other")])  # another seed of the same configuration
        with pytest.raises(StoreError, match="submit it with --label 'tuned'"):
            db.insert([row(1, source="competition-zip")])
        with pytest.raises(StoreError, match="labelled 'tuned', which already names another configuration of de"):
            db.insert([row(1, config_hash="d", config={"members": 3}, label="tuned")])
        with pytest.raises(StoreError, match="labelled 'tuned'"):  # all or nothing: seed 2 is not kept either
            db.insert([row(2, label="tuned"), row(3, label="renamed")])
        assert [(r.seed, r.label) for r in db.runs()] == [(0, "tuned")]
        added, present = db.insert([row(0, label="tuned"), row(1, label="tuned"), row(0, budget=100.0, label="tuned"),
                                    row(0, config_hash="d", label="fewer members"),
                                    row(0, method="sgd", label="tuned")])  # another method may use the same label
        assert (len(added), len(present)) == (4, 1)
        assert sorted({(r.method, r.config_hash, r.label) for r in db.runs()}) == [
            ("de", "c", "tuned"), ("de", "d", "fewer members"), ("sgd", "c", "tuned")]


def test_how_a_run_was_verified_is_kept_and_a_run_verified_before_schema_5_learns_it_when_verified_again(tmp_path):
    path = tmp_path / "db.sqlite"
    raw = sqlite3.connect(path)
    for script in store.MIGRATIONS[:4]:
        for statement in filter(str.strip, script.split(";")):
            raw.execute(statement)
    raw.execute("PRAGMA user_version = 4")
    raw.commit()
    raw.close()
    with Store(path) as db:  # migrated, then a row verified as the release of schema version 4 stored it
        db.insert([row(0, verified=True)])
        assert db.runs()[0].verification is None
        db.insert([row(0, verified=True, verification="bitwise"), row(1, verified=True, verification="bitwise"),
                   row(2, verification="bitwise")])
        assert [(r.verified, r.verification) for r in db.runs()] == [(True, "bitwise"), (True, "bitwise"),
                                                                      (False, None)]
        db.insert([row(0, verified=True, verification="cross-environment")])  # verified already: kept as it was
        assert db.runs()[0].verification == "bitwise"


def test_a_rows_warnings_are_kept(tmp_path):
    with Store(tmp_path / "db.sqlite") as db:
        db.insert([dataclasses.replace(row(0), warnings=("first", "second")), row(1)])
        assert [r.warnings for r in db.runs()] == [("first", "second"), ()]
