"""The leaderboard database: one SQLite file, a versioned schema, one row per scored run.

The schema version lives in SQLite's ``PRAGMA user_version``; ``MIGRATIONS[i]`` takes a database
from version ``i`` to ``i + 1`` and runs inside the same write transaction that bumps the version,
so a failed migration leaves the file as it was. A database written by a newer release (a version
beyond ``len(MIGRATIONS)``) is refused rather than guessed at.

Writers use ``BEGIN IMMEDIATE`` (the write lock is taken before anything is read, so two
submitters never both decide a row is missing) in write-ahead-log mode with a busy timeout, so
concurrent submitters queue instead of failing or corrupting the file.

Readers (``Store(path, read_only=True)``, what ``leaderboard`` opens) never write and never take the write
lock: the file is opened through a read-only URI (``mode=ro``), never created, never migrated (an older
schema is read as it is), with a short busy timeout. In write-ahead-log mode a reader does not wait for
writers at all; a rollback-journal database (one copied from elsewhere) held under ``BEGIN EXCLUSIVE`` for
longer than the timeout ends in :class:`DatabaseLocked`. A write-ahead-log database in a folder the reader
cannot write (read-only media) whose -shm index is absent and cannot be created is being written by nobody (a
writer needs that index), so it is read as ``immutable``: no lock, no -wal, -shm or -journal file created; so is a
file that nobody can write (``chattr +i``, a file system mounted read-only). If a non-empty -wal lies beside it
there, its changes cannot be read that way, and the reader refuses.

A run's identity is its key (:attr:`RunRow.key`: task, task version, method, budget, seed, reference, config hash).
Its ``label``, a human name for the configuration, is not part of it: two runs that differ only in their label are
the same run, so they neither become two entries nor replace each other. :meth:`Store.insert` refuses, in one line,
a run stored under another label, and keeps each configuration's label unambiguous on a task (task, version and
reference): one configuration (method and config hash) carries one label (or none) over every budget and seed, and
a label names at most one configuration of a method.

This module imports nothing heavier than the standard library: submitters validate and score
first (``leaderboard.submission``), then hand finished rows over.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError, MachineRefused

DB_ENVIRONMENT_VARIABLE = "BDL_BENCH_DB"
BUSY_TIMEOUT_SECONDS = 60.0
READ_BUSY_TIMEOUT_SECONDS = 2.0
"""How long a reader waits for a lock that keeps it from reading (a writer's commit in rollback-journal mode)."""

MIGRATIONS: list[str] = [
    # 0 -> 1: runs and their metrics.
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        task TEXT NOT NULL,
        task_version INTEGER NOT NULL,
        task_fingerprint TEXT NOT NULL,
        task_kind TEXT NOT NULL CHECK (task_kind IN ('classification', 'regression')),
        method TEXT NOT NULL,
        budget REAL NOT NULL CHECK (budget > 0),
        seed INTEGER NOT NULL,
        reference_sha256 TEXT NOT NULL,
        config_hash TEXT NOT NULL,
        config_json TEXT NOT NULL,
        source TEXT NOT NULL CHECK (source IN ('run', 'competition-zip')),
        predictions_sha256 TEXT NOT NULL,
        epochs_used REAL,
        test_passes REAL,
        wall_seconds REAL,
        device TEXT,
        versions_json TEXT NOT NULL,
        noise_floor_json TEXT,
        reliability_json TEXT,
        submitter TEXT NOT NULL,
        notes TEXT NOT NULL,
        finished_at TEXT,
        submitted_at TEXT NOT NULL,
        UNIQUE (task, task_version, method, budget, seed, reference_sha256, config_hash)
    );
    CREATE TABLE metrics (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        block TEXT NOT NULL,
        name TEXT NOT NULL,
        value REAL NOT NULL,
        PRIMARY KEY (run_id, block, name)
    );
    CREATE INDEX runs_by_track ON runs (task, budget);
    """,
    # 1 -> 2: runs re-executed under the meter by `submit --verify`.
    """
    ALTER TABLE runs ADD COLUMN verified INTEGER NOT NULL DEFAULT 0 CHECK (verified IN (0, 1))
    """,
    # 2 -> 3: how a method changed the task's network (MC dropout), NULL for the task's own network.
    """
    ALTER TABLE runs ADD COLUMN architecture_change TEXT
    """,
    # 3 -> 4: the submitter's name for the configuration (`run --label`, `submit --label`), NULL for none.
    """
    ALTER TABLE runs ADD COLUMN label TEXT
    """,
    # 4 -> 5: how `submit --verify` compared the re-execution (bench.verify's mode), NULL where not recorded.
    """
    ALTER TABLE runs ADD COLUMN verification TEXT
    """,
    # 5 -> 6: how far an exact run may score from the reference's noise floor (reference.evidence.floor_spread), and
    # what the method warned of its own run (its record's method_report warnings).
    """
    ALTER TABLE runs ADD COLUMN noise_floor_spread_json TEXT;
    ALTER TABLE runs ADD COLUMN warnings_json TEXT
    """,
    # 6 -> 7: how the files a run was scored against were trusted (bench.trust, as a record's `trust`), NULL where not
    # recorded.
    """
    ALTER TABLE runs ADD COLUMN trust_json TEXT
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)

APPLICATION_ID = 0x62646C62
"""``PRAGMA application_id`` of every leaderboard database (``bdlb`` in ASCII), written with the schema: the signature
by which a file is known to be ours before anything writes to it. Databases written before it carry none, and are
known by their schema instead (:func:`_signature`)."""

OVERALL_BLOCK = "all"
"""The block name under which a run's whole-test-set metrics are stored."""


def default_db_path() -> Path:
    """``$BDL_BENCH_DB``, else ``$XDG_DATA_HOME/bdl-bench/leaderboard.sqlite`` (``~/.local/share`` by default)."""
    if os.environ.get(DB_ENVIRONMENT_VARIABLE):
        return Path(os.environ[DB_ENVIRONMENT_VARIABLE])
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "bdl-bench" / "leaderboard.sqlite"


@dataclass(frozen=True)
class RunRow:
    """One scored run, ready to insert. ``metrics`` maps block (``"all"`` or a test block) to {metric: value}."""

    task: str
    task_version: int
    task_fingerprint: str
    task_kind: str
    method: str
    budget: float
    seed: int
    reference_sha256: str
    config_hash: str
    config: dict
    source: str
    predictions_sha256: str
    epochs_used: float | None
    test_passes: float | None
    wall_seconds: float | None
    device: str | None
    versions: dict
    noise_floor: dict | None
    reliability: dict | None
    submitter: str
    notes: str
    finished_at: str | None
    submitted_at: str
    metrics: dict[str, dict[str, float]]
    verified: bool = False
    """Re-executed under the meter and reproduced (``submit --verify``)."""
    verification: str | None = None
    """How the re-execution was compared with the run (:class:`bench.verify.Verification`'s mode: ``bitwise``,
    ``cross-environment``, ...); None where the run was not verified, or was verified before schema version 5."""
    architecture_change: str | None = None
    """How the method changed the task's network, so that it approximates another posterior (None: unchanged)."""
    label: str | None = None
    """The submitter's name for the configuration, shown instead of its hash (None: no label)."""
    noise_floor_spread: dict | None = None
    """How far an exact run may score from each of ``noise_floor`` (the reference's metadata), as it is keyed."""
    warnings: tuple[str, ...] = ()
    """What the method warned of its own run (its record's ``method_report["warnings"]``: a target not reached)."""
    trust: dict | None = None
    """How the reference and data files it was scored against were trusted where it was submitted (a record's
    ``trust``, :mod:`bench.trust`); None where not recorded (before schema version 7)."""

    @property
    def key(self) -> tuple:
        return (self.task, self.task_version, self.method, self.budget, self.seed,
                self.reference_sha256, self.config_hash)

    def describe(self) -> str:
        return f"{self.task} / {self.method} / budget {self.budget:g} / seed {self.seed}"


class StoreError(BenchError):
    """The database cannot be opened, is from a newer release, or holds a conflicting row."""


class DatabaseLocked(OSError):
    """Another process locks the database for longer than a reader waits. An :class:`OSError` (``EBUSY``) naming
    the file, so that the command line reports it as the machine refusing (exit code 3), with the file's name."""

    def __init__(self, path: Path, seconds: float):
        super().__init__(errno.EBUSY, f"the leaderboard database is locked by another process (waited {seconds:g} "
                                      "s); run again when it has finished", str(path))


class Store:
    """A connection to the leaderboard database (created and migrated on open unless ``must_exist``).

    ``read_only``: the database must exist and is only read; nothing is created, migrated or locked for writing.
    """

    def __init__(self, path: Path, must_exist: bool = False, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        if read_only:
            self._db = _open_for_reading(self.path)
            return
        if must_exist and not self.path.exists():
            raise StoreError(f"no leaderboard database at {self.path}; submit runs first (`python -m bench submit`)")
        # Known to be ours, through a connection that cannot write, before a connection that may: a refusal changes
        # nothing, not even the journal mode, and leaves no -wal, -shm or -journal file behind.
        if _existing_database(self.path) and _version_if_ours(self.path) > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {_version_if_ours(self.path)}, newer than this "
                             f"release's {SCHEMA_VERSION}; upgrade bdl-bench to write it")
        if self.path.is_file() and not os.access(self.path, os.W_OK):  # SQLite would open it read-only, then fail
            raise MachineRefused(f"the leaderboard database {self.path} is read-only (no write permission, or "
                                 "immutable); make it writable or choose another file with --db; nothing was written")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are opened explicitly, so BEGIN IMMEDIATE is honoured.
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._migrate()
        except sqlite3.DatabaseError as error:
            if _is_busy(error):  # the machine's refusal (exit 3), in every command alike
                raise DatabaseLocked(self.path, BUSY_TIMEOUT_SECONDS) from None
            raise StoreError(f"cannot open leaderboard database {self.path}: {error}") from None
        except DatabaseLocked:
            raise
        except OSError as error:
            raise StoreError(f"cannot create leaderboard database {self.path}: {error.strerror or error}") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise StoreError(f"{self.path} was opened for reading; open it without read_only to write")
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if _is_busy(error):  # another writer held the lock for longer than the wait
                raise DatabaseLocked(self.path, BUSY_TIMEOUT_SECONDS) from None
            raise
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    def _migrate(self) -> None:
        with self._write() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path} has schema version {version}, newer than this release's "
                                 f"{SCHEMA_VERSION}; upgrade bdl-bench to read it")
            for target, script in enumerate(MIGRATIONS[version:], start=version + 1):
                # executescript would commit the open transaction, so statements run one by one (migration
                # scripts therefore hold no ';' inside literals).
                for statement in filter(str.strip, script.split(";")):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {target}")
            if db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:  # new, or written before it
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    def insert(self, rows: list[RunRow]) -> tuple[list[RunRow], list[RunRow]]:
        """Inserts every row in one transaction: all or nothing. Returns (added, already present).

        A row whose key is already stored with the same predictions and label is "already present" (re-submitting
        is idempotent); one stored with different predictions or another label, or a label that would be ambiguous
        (see the module's docstring), is a conflict and nothing is inserted.
        """
        added, present = [], []
        with self._write() as db:
            for row in rows:
                stored = db.execute(
                    "SELECT predictions_sha256, id, verified, label, verification FROM runs WHERE task = ? AND task_version = ? "
                    "AND method = ? AND budget = ? AND seed = ? AND reference_sha256 = ? AND config_hash = ?",
                    row.key).fetchone()
                if stored is not None:
                    if stored[0] != row.predictions_sha256:
                        raise StoreError(f"{row.describe()} (config {row.config_hash[:12]}) is already on the "
                                         "leaderboard with different predictions; refusing to replace it")
                    if stored[3] != row.label:
                        raise StoreError(f"{row.describe()} (config {row.config_hash[:12]}) is already on the "
                                         f"leaderboard {_labelled(stored[3])}, submitted now "
                                         f"{_labelled(row.label)}; a run keeps the label it was first submitted with")
                    if row.verified and not (stored[2] and stored[4]):  # the same predictions, now re-executed
                        db.execute("UPDATE runs SET verified = 1, verification = ? WHERE id = ?",
                                   (row.verification or stored[4], stored[1]))
                    present.append(row)
                    continue
                _check_label(db, row)
                run_id = db.execute(
                    "INSERT INTO runs (task, task_version, task_fingerprint, task_kind, method, budget, seed, "
                    "reference_sha256, config_hash, config_json, source, predictions_sha256, epochs_used, "
                    "test_passes, wall_seconds, device, versions_json, noise_floor_json, reliability_json, "
                    "submitter, notes, finished_at, submitted_at, verified, architecture_change, label, "
                    "verification, noise_floor_spread_json, warnings_json, trust_json) VALUES (?, ?, ?, ?, ?, ?, ?, "
                    "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (row.task, row.task_version, row.task_fingerprint, row.task_kind, row.method, row.budget,
                     row.seed, row.reference_sha256, row.config_hash, _json(row.config), row.source,
                     row.predictions_sha256, row.epochs_used, row.test_passes, row.wall_seconds, row.device,
                     _json(row.versions), _json(row.noise_floor), _json(row.reliability), row.submitter,
                     row.notes, row.finished_at, row.submitted_at, int(row.verified),
                     row.architecture_change, row.label, row.verification if row.verified else None,
                     _json(row.noise_floor_spread), _json(list(row.warnings)) if row.warnings else None,
                     _json(row.trust))).lastrowid
                db.executemany("INSERT INTO metrics (run_id, block, name, value) VALUES (?, ?, ?, ?)",
                               [(run_id, block, name, value) for block, values in row.metrics.items()
                                for name, value in values.items()])
                added.append(row)
        return added, present

    def runs(self, task: str | None = None, budget: float | None = None) -> list[RunRow]:
        """Stored runs (optionally of one task and/or budget), ordered by task, budget, method, seed."""
        where, params = [], []
        if task is not None:
            where.append("task = ?")
            params.append(task)
        if budget is not None:
            where.append("budget = ?")
            params.append(budget)
        condition = " WHERE " + " AND ".join(where) if where else ""
        self._db.row_factory = sqlite3.Row
        try:
            # One read transaction, so the runs and their metrics come from the same snapshot.
            self._db.execute("BEGIN")
            records = self._db.execute(f"SELECT * FROM runs{condition} ORDER BY task, task_version, budget, "
                                       "method, config_hash, seed", params).fetchall()
            metrics: dict[int, dict[str, dict[str, float]]] = {}
            # in the order they were inserted: the whole test set first, then the task's blocks in the task's order
            for run_id, block, name, value in self._db.execute(
                    f"SELECT run_id, block, name, value FROM metrics WHERE run_id IN (SELECT id FROM runs{condition}) "
                    "ORDER BY rowid", params):
                metrics.setdefault(run_id, {}).setdefault(block, {})[name] = value
            return [_row_of(record, metrics.get(record["id"], {})) for record in records]
        except sqlite3.DatabaseError as error:
            raise _read_failure(self.path, error,
                                READ_BUSY_TIMEOUT_SECONDS if self.read_only else BUSY_TIMEOUT_SECONDS) from None
        except (IndexError, KeyError, TypeError, ValueError) as error:  # a column missing or not as written
            raise StoreError(f"{self.path} is not a bdl-bench leaderboard database or is damaged (runs table: "
                             f"{type(error).__name__}: {error}); choose another with --db") from None
        finally:
            if self._db.in_transaction:
                self._db.execute("COMMIT")
            self._db.row_factory = None

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def integrity_ok(self) -> bool:
        return self._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _labelled(label: str | None) -> str:
    return "without a label" if label is None else f"labelled {label!r}"


def _same_label_advice(row: RunRow, label: str | None) -> str:
    """How the submitter gives ``row`` the stored ``label``: a run folder's label is its record's, set by ``run``."""
    option = "without --label" if label is None else f"with --label {label!r}"
    if row.source == "competition-zip":
        return f"submit it {option}"
    return f"run it {option} (the label is its record's `label` field)"


def _check_label(db: sqlite3.Connection, row: RunRow) -> None:
    """Refuses a new run whose label would make its configuration's name ambiguous on its task (see the module's
    docstring): its configuration is stored under another label, or its label names another configuration."""
    method_on_task = (row.task, row.task_version, row.reference_sha256, row.method)
    same_method = "task = ? AND task_version = ? AND reference_sha256 = ? AND method = ?"
    other_label = db.execute(f"SELECT label FROM runs WHERE {same_method} AND config_hash = ? AND label IS NOT ? "
                             "LIMIT 1", (*method_on_task, row.config_hash, row.label)).fetchone()
    if other_label is not None:
        raise StoreError(f"{row.describe()} (config {row.config_hash[:12]}) is {_labelled(row.label)}, but another "
                         f"run of this configuration, on the leaderboard or in this submission, is "
                         f"{_labelled(other_label[0])}; one configuration keeps one label: "
                         f"{_same_label_advice(row, other_label[0])}")
    if row.label is None:
        return
    other_config = db.execute(f"SELECT config_hash FROM runs WHERE {same_method} AND config_hash != ? AND label = ? "
                              "LIMIT 1", (*method_on_task, row.config_hash, row.label)).fetchone()
    if other_config is not None:
        raise StoreError(f"{row.describe()} (config {row.config_hash[:12]}) is labelled {row.label!r}, which already "
                         f"names another configuration of {row.method} on {row.task} (config {other_config[0][:12]}), "
                         "on the leaderboard or in this submission; choose another label")


def _existing_database(path: Path) -> bool:
    """Whether ``path`` holds a file to open as a database (one of zero bytes is as none: SQLite makes it a new one);
    one line, before SQLite touches it, if something other than a regular file is there (``/dev/null``, a FIFO or a
    folder: SQLite would read a device, wait on a FIFO, or create ``/dev/null-journal`` beside it)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return False
    except OSError as error:
        raise StoreError(f"cannot open leaderboard database {path}: {error.strerror or error}") from None
    if stat.S_ISDIR(info.st_mode):
        raise StoreError(f"{path} is a folder, not a leaderboard database; choose the database file with --db")
    if not stat.S_ISREG(info.st_mode):
        raise StoreError(f"{path} is not a regular file (a device, FIFO or socket), so not a leaderboard database; "
                         "choose the database file with --db")
    return info.st_size > 0


def _schema(db: sqlite3.Connection) -> set[tuple]:
    """Every table, index, view and trigger of ``db`` with its columns (name, type, not null, primary key)."""
    objects = db.execute("SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall()
    columns = [(table, *column[1:3], column[3], column[5]) for kind, table, _ in objects if kind == "table"
               for column in db.execute(f"PRAGMA table_info({_quoted(table)})")]
    return set(objects) | set(columns)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _schema_of_version(version: int) -> set[tuple]:
    """The schema :data:`MIGRATIONS` give a database of ``version`` (built in memory)."""
    db = sqlite3.connect(":memory:")
    try:
        for script in MIGRATIONS[:version]:
            db.executescript(script)
        return _schema(db)
    finally:
        db.close()


def _signature(path: Path) -> tuple[int, int, set[tuple]]:
    """``(application_id, user_version, schema)`` of the SQLite file at ``path``, read through an ``immutable``
    read-only connection: no lock taken, no journal or -shm file created, nothing written."""
    db = sqlite3.connect(path.absolute().as_uri() + "?mode=ro&immutable=1", uri=True, isolation_level=None)
    try:
        return (db.execute("PRAGMA application_id").fetchone()[0], db.execute("PRAGMA user_version").fetchone()[0],
                _schema(db))
    finally:
        db.close()


def _version_if_ours(path: Path) -> int:
    """The schema version of the leaderboard database at ``path``, or one line, with the file untouched, unless it is
    one: it carries :data:`APPLICATION_ID`, or (written before the signature) it has exactly the schema of its
    ``user_version``, or it is empty (no schema, no version, no application id). Anything else, a table named
    ``runs`` or a lone view included, is another program's, and opening it to write would change it."""
    try:
        application_id, version, schema = _signature(path)
    except sqlite3.DatabaseError as error:
        raise StoreError(f"cannot open leaderboard database {path}: {' '.join(str(error).split())}; it was left "
                         "unchanged: restore it from a copy or choose another file with --db") from None
    if application_id == APPLICATION_ID:
        return version
    if application_id == 0 and (version == 0 and not schema
                                or 0 < version <= SCHEMA_VERSION and schema == _schema_of_version(version)):
        return version
    names = sorted(entry[1] for entry in schema if len(entry) == 3)
    raise StoreError(f"{path} is an SQLite database of another program (application id {application_id}, schema "
                     f"version {version}, {', '.join(names[:5]) or 'no tables'}), not a bdl-bench leaderboard database; it "
                     "was left unchanged; choose another file with --db")


def _open_for_reading(path: Path) -> sqlite3.Connection:
    """A read-only connection to the existing database at ``path`` (see the module's docstring); every failure is
    one :class:`StoreError` (or :class:`DatabaseLocked`) naming the file."""
    try:
        if not path.exists():
            raise StoreError(f"no leaderboard database at {path}; submit runs first (`python -m bench submit`) "
                             "or choose one with --db")
        if path.is_dir():
            raise StoreError(f"{path} is a folder, not a leaderboard database; choose the database file with --db")
        if not path.is_file():  # a FIFO or a device would block the reader, or read forever
            raise StoreError(f"{path} is not a regular file, so not a leaderboard database; choose the database "
                             "file with --db")
        if not os.access(path, os.R_OK):
            raise StoreError(f"cannot read leaderboard database {path}: permission denied; ask for read access, "
                             "or copy it and choose the copy with --db")
        folder_writable = os.access(path.parent, os.W_OK)
    except OSError as error:  # the folder cannot even be searched
        raise StoreError(f"cannot read leaderboard database {path}: {error.strerror or error}") from None
    if path.stat().st_size:
        _version_if_ours(path)  # another program's file is refused before a read could create its -shm index
    uri = path.absolute().as_uri() + "?mode=ro"
    try:
        if unwritable_by_anyone(path):  # nobody can be writing it: read without a lock or an index file
            _refuse_unread_log(path, "an immutable database or one on read-only media")
            db, version = _connect_for_reading(uri + "&immutable=1")
            return _checked_version(path, db, version)
        try:
            db, version = _connect_for_reading(uri)
        except sqlite3.OperationalError as error:
            # A write-ahead-log database whose -shm index cannot be created here (read-only folder or media):
            # nobody can be writing it either, so it is read as immutable (no lock, no file created).
            if folder_writable or not _cannot_open(error):
                raise
            _refuse_unread_log(path, "a folder this user cannot write")
            db, version = _connect_for_reading(uri + "&immutable=1")
    except sqlite3.DatabaseError as error:
        raise _read_failure(path, error, READ_BUSY_TIMEOUT_SECONDS) from None
    return _checked_version(path, db, version)


def _refuse_unread_log(path: Path, where: str) -> None:
    """Refuses to read ``path`` as immutable when a non-empty write-ahead log beside it holds changes that such a
    read would miss."""
    log = path.with_name(path.name + "-wal")
    if log.exists() and log.stat().st_size > 0:
        raise StoreError(f"cannot read leaderboard database {path}: its write-ahead log {log} holds changes that "
                         f"cannot be read in {where}; copy the database and its -wal file to a writable folder and "
                         "choose the copy with --db")


def _checked_version(path: Path, db: sqlite3.Connection, version: int) -> sqlite3.Connection:
    if version > SCHEMA_VERSION:
        db.close()
        raise StoreError(f"{path} has schema version {version}, newer than this release's {SCHEMA_VERSION}; "
                         "upgrade bdl-bench to read it")
    return db


FS_IOC_GETFLAGS = 0x80086601
"""Linux's ioctl that reads a file's attributes (``lsattr``), and the attribute ``chattr +i`` sets."""
FS_IMMUTABLE_FL = 0x10


def unwritable_by_anyone(path: Path) -> bool:
    """Whether no process can write the file at ``path``: it is immutable (``chattr +i``, which binds root too) or
    on a file system mounted read-only. False where neither can be told (not Linux)."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return True
        import array
        import fcntl

        flags = array.array("l", [0])
        with open(path, "rb") as file:
            fcntl.ioctl(file.fileno(), FS_IOC_GETFLAGS, flags, True)
        return bool(flags[0] & FS_IMMUTABLE_FL)
    except (OSError, ImportError, AttributeError):  # no such ioctl on this file system or platform
        return False


def _connect_for_reading(uri: str) -> tuple[sqlite3.Connection, int]:
    """The connection and the schema version (reading it opens the file and, in WAL mode, its index)."""
    db = sqlite3.connect(uri, uri=True, timeout=READ_BUSY_TIMEOUT_SECONDS, isolation_level=None)
    try:
        return db, db.execute("PRAGMA user_version").fetchone()[0]
    except BaseException:
        db.close()
        raise


def _cannot_open(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)  # Python >= 3.11
    return (code is not None and code & 0xFF == sqlite3.SQLITE_CANTOPEN) or "unable to open" in str(error)


def _is_busy(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(error) or "busy" in str(error)


def _read_failure(path: Path, error: sqlite3.DatabaseError, waited: float) -> Exception:
    """One error naming the file and what to do, for an SQLite error met while reading."""
    text = " ".join(str(error).split())
    if _is_busy(error):
        return DatabaseLocked(path, waited)
    if "no such table" in text or "no such column" in text:
        return StoreError(f"{path} is not a bdl-bench leaderboard database ({text}); choose another with --db")
    return StoreError(f"cannot read leaderboard database {path}: {text}; restore it from a copy or choose "
                      "another with --db")


def _json(value) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _row_of(record: sqlite3.Row, metrics: dict[str, dict[str, float]]) -> RunRow:
    def loaded(column: str):
        return None if record[column] is None else json.loads(record[column])

    return RunRow(
        task=record["task"], task_version=record["task_version"], task_fingerprint=record["task_fingerprint"],
        task_kind=record["task_kind"], method=record["method"], budget=record["budget"], seed=record["seed"],
        reference_sha256=record["reference_sha256"], config_hash=record["config_hash"],
        config=loaded("config_json"), source=record["source"], predictions_sha256=record["predictions_sha256"],
        epochs_used=record["epochs_used"], test_passes=record["test_passes"],
        wall_seconds=record["wall_seconds"], device=record["device"], versions=loaded("versions_json"),
        noise_floor=loaded("noise_floor_json"), reliability=loaded("reliability_json"),
        submitter=record["submitter"], notes=record["notes"], finished_at=record["finished_at"],
        submitted_at=record["submitted_at"], metrics=metrics,
        # read without migrating: a database of an older schema lacks the columns that later versions added
        verified=bool(record["verified"]) if "verified" in record.keys() else False,
        architecture_change=record["architecture_change"] if "architecture_change" in record.keys() else None,
        label=record["label"] if "label" in record.keys() else None,
        verification=record["verification"] if "verification" in record.keys() else None,
        noise_floor_spread=loaded("noise_floor_spread_json") if "noise_floor_spread_json" in record.keys() else None,
        warnings=tuple(loaded("warnings_json") or ()) if "warnings_json" in record.keys() else (),
        trust=loaded("trust_json") if "trust_json" in record.keys() else None)
