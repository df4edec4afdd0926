"""A refusal changes nothing: ``submit --db`` and ``leaderboard --db`` on a file that is not a leaderboard database
(another program's SQLite file, whatever it holds, or no regular file at all) are one line, and leave the file's
bytes, its journal mode and its folder exactly as they were. A file is known to be ours by the signature we write
(``PRAGMA application_id``), or, written before it, by exactly our schema; it is inspected read-only and immutable."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.errors import EXIT_BAD_INPUT
from leaderboard import store
from leaderboard.store import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, Store, StoreError
from tests.leaderboard.conftest import write_run
from tests.reliability.test_error_boundary import assert_one_line
from tests.reliability.test_output_targets import target


def state(folder: Path) -> dict[str, bytes]:
    """Every file of ``folder`` by name, with its bytes: a refusal must leave this exactly as it was."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def make_database(path: Path, statements: list[str]) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    for statement in statements:
        db.execute(statement)
    db.close()


OBJECTS = ["CREATE TABLE runs (x)", "CREATE TABLE runs (id INTEGER PRIMARY KEY, task TEXT)",
           "CREATE TABLE metrics (run_id, block, name, value)", "CREATE TABLE notes (a)", "CREATE VIEW v AS SELECT 1 AS a",
           "CREATE TABLE t (a)", "CREATE INDEX t_a ON t (a)", "CREATE TRIGGER t_insert AFTER INSERT ON t BEGIN SELECT 1; END"]


@st.composite
def foreign_database(draw) -> list[str]:
    """The statements of an SQLite file another program might write: any schema version and application id but
    ours, any of a few tables (one named ``runs`` among them), a view, an index, a trigger, rows, either journal."""
    statements = [f"PRAGMA journal_mode = {draw(st.sampled_from(['delete', 'wal', 'truncate']))}"]
    version = draw(st.sampled_from([0, *range(1, SCHEMA_VERSION + 1), SCHEMA_VERSION + 1, 99, -1]))
    application = draw(st.sampled_from([0, 1234, -1, APPLICATION_ID + 1]))
    objects = draw(st.lists(st.sampled_from(OBJECTS), unique=True, max_size=4))
    if any(" ON t " in o for o in objects) and "CREATE TABLE t (a)" not in objects:
        objects.append("CREATE TABLE t (a)")
    objects.sort(key=lambda o: not o.startswith("CREATE TABLE"))  # tables before the index and trigger on them
    tables = {o.split()[2] for o in objects if o.startswith("CREATE TABLE")}
    if len([o for o in objects if o.startswith("CREATE TABLE runs")]) > 1:
        objects.remove("CREATE TABLE runs (x)")
    rows = [f"INSERT INTO {table} DEFAULT VALUES" for table in sorted(tables) if draw(st.booleans())]
    return statements + objects + rows + [f"PRAGMA user_version = {version}", f"PRAGMA application_id = {application}"]


def _blank(statements: list[str]) -> bool:
    """A file with no schema, version or application id: SQLite's empty database, which a leaderboard may become."""
    return not any(s.startswith(("CREATE", "INSERT")) for s in statements) and statements[-2:] == [
        "PRAGMA user_version = 0", "PRAGMA application_id = 0"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(statements=foreign_database(), read_only=st.booleans())
def test_another_program_s_database_is_refused_and_left_byte_for_byte(statements, read_only):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "theirs.sqlite"
        make_database(path, statements)
        before = state(Path(folder))
        try:
            with Store(path, read_only=read_only):
                pass
        except StoreError as error:
            assert "\n" not in str(error) and str(path) in str(error)
            assert state(Path(folder)) == before
            return
        assert _blank(statements), f"a foreign database was opened as a leaderboard: {statements}"


@pytest.mark.parametrize("statements, fragment", [
    (["PRAGMA user_version = 1", "CREATE TABLE runs (x)", "INSERT INTO runs VALUES (42)"], "schema version 1, runs"),
    (["PRAGMA user_version = 99", "CREATE TABLE runs (x)"], "schema version 99, runs"),
    (["CREATE VIEW v AS SELECT 1 AS a"], "application id 0, schema version 0, v"),
    (["PRAGMA application_id = 1234"], "application id 1234"),
    (["PRAGMA journal_mode = wal", "CREATE TABLE notes (a)"], "notes"),
])
@pytest.mark.parametrize("command", ["submit", "leaderboard"])
def test_submit_and_leaderboard_refuse_another_program_s_database_unchanged(tmp_path, run_cli, statements, fragment,
                                                                           command):
    run = write_run(tmp_path / "runs", "toy-gap")
    folder = tmp_path / "theirs"
    folder.mkdir()
    make_database(folder / "f.sqlite", statements)
    before = state(folder)
    args = ("submit", run, "--name", "m") if command == "submit" else ("leaderboard",)
    code, _, err = run_cli(*args, "--db", folder / "f.sqlite")
    assert_one_line(code, err, EXIT_BAD_INPUT, str(folder / "f.sqlite"), "SQLite database of another program",
                    fragment, "left unchanged")
    assert state(folder) == before  # the same bytes, no -wal, -shm or -journal file beside it


@pytest.mark.parametrize("kind", ["fifo", "socket", "folder"])
@pytest.mark.parametrize("command", ["submit", "leaderboard"])
def test_a_database_path_that_is_not_a_regular_file_is_refused_before_sqlite_opens_it(tmp_path, run_cli, kind,
                                                                                      command):
    """SQLite given /dev/null created /dev/null-journal beside it: nothing but a regular file reaches SQLite."""
    run = write_run(tmp_path / "runs", "toy-gap")
    with target(kind) as path:
        args = ("submit", run, "--name", "m") if command == "submit" else ("leaderboard",)
        code, _, err = run_cli(*args, "--db", path)
        assert_one_line(code, err, EXIT_BAD_INPUT, str(path), "not a regular file" if kind != "folder" else "a folder")
        assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION + 1))
def test_a_database_of_an_older_release_is_ours_by_its_schema_and_gains_the_signature(tmp_path, version):
    """Releases before the signature wrote no application id: exactly their schema says the file is theirs."""
    path = tmp_path / "board.sqlite"
    make_database(path, [s for script in MIGRATIONS[:version] for s in filter(str.strip, script.split(";"))]
                  + [f"PRAGMA user_version = {version}"])
    with Store(path) as db:
        assert db.schema_version == SCHEMA_VERSION
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    raw.close()


def test_an_older_schema_with_anything_added_is_not_ours(tmp_path):
    path = tmp_path / "board.sqlite"
    make_database(path, [s for s in filter(str.strip, MIGRATIONS[0].split(";"))]
                  + ["CREATE TABLE extra (a)", "PRAGMA user_version = 1"])
    before = state(tmp_path)
    with pytest.raises(StoreError, match="SQLite database of another program"):
        Store(path)
    assert state(tmp_path) == before


def test_a_new_database_carries_the_signature_and_an_empty_file_becomes_one(tmp_path):
    for path in (tmp_path / "new.sqlite", tmp_path / "empty.sqlite"):
        if path.name == "empty.sqlite":
            path.write_bytes(b"")
        Store(path).close()
        raw = sqlite3.connect(path)
        assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        raw.close()
        assert store._version_if_ours(path) == SCHEMA_VERSION
