"""Submissions do not trust the file system or the record: regular files only, every read bounded by the bytes
actually read, npy headers checked before anything is allocated, JSON bounded in size and depth, and every field
checked for type and range before the database sees it. A refusal is one line and leaves the database unchanged."""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import records
from bench.errors import EXIT_BAD_INPUT
from leaderboard import submission
from tests.leaderboard.conftest import write_run
from tests.reliability.test_error_boundary import assert_one_line

N_TEST, CLASSES = 1440, 10  # digits


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.setenv("BDL_BENCH_CACHE", str(tmp_path / "empty-cache"))
    return tmp_path / "board.sqlite"


def dump(db) -> list[str]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as connection:
        return list(connection.iterdump())


@pytest.fixture
def no_hang():
    """A read that blocks (a FIFO with no writer) fails the test after 20 s instead of hanging the suite."""
    def expired(*_):
        raise TimeoutError("the command blocked")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def submit(run_cli, db, *paths, extra=()):
    return run_cli("submit", *paths, "--db", db, "--name", "mallory", *extra)


def test_a_genuine_run_is_accepted(tmp_path, run_cli, db):
    folder = write_run(tmp_path / "runs", "digits")
    code, out, err = submit(run_cli, db, folder)
    assert code == 0 and "1 added" in out, err


@pytest.mark.parametrize("target", [records.PREDICTIONS, records.RESULT])
@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "fifo"])
def test_a_special_file_in_a_run_folder_is_refused_without_reading_it(tmp_path, run_cli, db, no_hang, target,
                                                                      special):
    folder = write_run(tmp_path / "runs", "digits")
    (folder / target).unlink()
    if special == "fifo":
        os.mkfifo(folder / target)
    else:
        (folder / target).symlink_to(special)
    code, _, err = submit(run_cli, db, folder)
    assert_one_line(code, err, EXIT_BAD_INPUT, "not a regular file")
    assert dump(db) == []


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_special_file_as_a_competition_zip_is_refused(tmp_path, run_cli, db, no_hang, special):
    path = tmp_path / "submission.zip"
    if special == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(special)
    code, _, err = submit(run_cli, db, path, extra=("--method", "mine", "--budget", "10"))
    assert_one_line(code, err, EXIT_BAD_INPUT, "not a regular file")
    assert dump(db) == []


def npy_bytes(shape, dtype="<f8", data: bytes = b"", version=(1, 0)) -> bytes:
    """An .npy stream whose header claims ``shape`` and ``dtype``, followed by ``data`` (whatever its length)."""
    header = repr({"descr": dtype, "fortran_order": False, "shape": tuple(shape)}).encode()
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    length = struct.pack("<H" if version == (1, 0) else "<I", len(header))
    return b"\x93NUMPY" + bytes(version) + length + header + data


def write_npz(folder, member_bytes: bytes, name="probs.npy", compress=zipfile.ZIP_DEFLATED):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compress) as archive:
        archive.writestr(name, member_bytes)
    (folder / records.PREDICTIONS).write_bytes(buffer.getvalue())


@pytest.mark.parametrize("shape, dtype, message", [
    ((10**12, 1000), "<f8", "of shape (1000000000000, 1000)"),
    ((N_TEST, 10**9), "<f8", "of shape (1440, 1000000000)"),
    ((N_TEST, CLASSES), "|O", "holds object"),
    ((N_TEST, CLASSES), "<c16", "holds complex128"),
    ((N_TEST * CLASSES,), "<f8", "of shape (14400,)"),
])
def test_an_npy_header_is_checked_before_anything_is_allocated(tmp_path, run_cli, db, shape, dtype, message):
    folder = write_run(tmp_path / "runs", "digits")
    write_npz(folder, npy_bytes(shape, dtype))
    tracemalloc.start()
    try:
        code, _, err = submit(run_cli, db, folder)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_one_line(code, err, EXIT_BAD_INPUT, message, "needs probs of shape (1440, 10)")
    assert peak < 2**30  # what reading the run needs (the task, its reference), not the terabytes the header claims
    assert dump(db) == []


@pytest.mark.parametrize("data_bytes, message", [
    (N_TEST * CLASSES * 8 - 8, "holds 115192 bytes of data, its header says 115200"),
    (N_TEST * CLASSES * 8 + 1, "holds 115201+ bytes of data"),
    (0, "holds 0 bytes of data"),
])
def test_data_that_does_not_match_its_header_is_refused(tmp_path, run_cli, db, data_bytes, message):
    folder = write_run(tmp_path / "runs", "digits")
    write_npz(folder, npy_bytes((N_TEST, CLASSES), data=np.full(data_bytes // 8 + 1, 0.1).tobytes()[:data_bytes]))
    code, _, err = submit(run_cli, db, folder)
    assert_one_line(code, err, EXIT_BAD_INPUT, message)
    assert dump(db) == []


def test_a_member_with_a_bad_crc_is_refused(tmp_path, run_cli, db):
    folder = write_run(tmp_path / "runs", "digits")
    probs = np.full((N_TEST, CLASSES), 0.1)
    write_npz(folder, npy_bytes(probs.shape, data=probs.tobytes()), compress=zipfile.ZIP_STORED)
    data = bytearray((folder / records.PREDICTIONS).read_bytes())
    data[200] ^= 0xFF  # a byte of the stored array: only the CRC can tell
    (folder / records.PREDICTIONS).write_bytes(bytes(data))
    code, _, err = submit(run_cli, db, folder)
    assert_one_line(code, err, EXIT_BAD_INPUT, "not a readable .npz file", "CRC")
    assert dump(db) == []


def test_a_version_2_header_is_read_like_numpy_writes_it(tmp_path, run_cli, db):
    folder = write_run(tmp_path / "runs", "digits")
    with np.load(folder / records.PREDICTIONS) as npz:
        probs = npz["probs"]
    write_npz(folder, npy_bytes(probs.shape, data=probs.tobytes(), version=(2, 0)))
    code, out, err = submit(run_cli, db, folder)
    assert code == 0 and "1 added" in out, err


@pytest.mark.parametrize("text, message", [
    ("[" * 400_000, "nested too deeply"),
    ('{"task": ' + "[" * 20 + "]" * 20 + "}", "nested 21 levels deep"),
    ("{" + '"a": 1, ' * (records.MAX_RESULT_BYTES // 8 + 1) + '"b": 2}', f"larger than {records.MAX_RESULT_BYTES} bytes"),
    ('{"task": "digits"' + " " * records.MAX_RESULT_BYTES + "}", f"larger than {records.MAX_RESULT_BYTES} bytes"),
])
def test_json_is_bounded_in_size_and_depth(tmp_path, run_cli, db, text, message):
    folder = write_run(tmp_path / "runs", "digits")
    (folder / records.RESULT).write_text(text)
    code, _, err = submit(run_cli, db, folder)
    assert_one_line(code, err, EXIT_BAD_INPUT, message)
    assert dump(db) == []


@pytest.mark.parametrize("field, value, message", [
    ("seed", 2**63, "seed 9223372036854775808 lies outside [0, 2^63)"),
    ("seed", 2**64, "lies outside [0, 2^63)"),
    ("seed", -1, "seed -1 lies outside"),
    ("seed", 1.5, "'seed' is missing or not a int"),
    ("seed", True, "'seed' is missing"),
    ("task_version", -3, "task_version -3 lies outside"),
    ("wall_seconds", -1.0, "wall_seconds must be a finite number"),
    ("wall_seconds", float("inf"), "wall_seconds must be a finite number"),
    ("wall_seconds", float("nan"), "wall_seconds must be a finite number"),
    ("test_passes", -1, "test_passes must be a non-negative number"),
    ("epochs_used", float("nan"), "epochs used, outside"),
    ("budget", 1e300, "the budget must be a number of epochs in (0, 1,000,000]"),
    ("device", "", "device must be 1 to 200 printable characters"),
    ("device", "cpu\n<script>", "device must be"),
    ("device", "x" * 201, "device must be"),
    ("versions", {"torch": 2}, "versions must map"),
    ("versions", {f"p{i}": "1" for i in range(33)}, "versions must map at most 32"),
    ("finished_at", 12, "finished_at must be null or an ISO 8601 timestamp"),
    ("method_source", ["x"], "method_source must be null"),
    ("finished_at", "x" * 65, "finished_at must be null or an ISO 8601 timestamp"),
    ("method", "de\x1b[31m", "the method name must be 1 to 100 letters, digits"),
    ("architecture_change", 7, "architecture_change must be null"),
    ("method_report", [], "method_report must be null or a table"),
    ("method_report", {"warnings": "not converged"}, "method_report.warnings must be a list"),
    ("method_report", {"warnings": ["ok", "\x1b[31m"]}, "method_report.warnings must be a list"),
    ("method_report", {"warnings": ["x" * 2001]}, "method_report.warnings must be a list"),
    ("config", [], "'config' is missing or not a dict"),
    ("metrics", {"agreement": "0.9"}, "metrics must map metric names to finite numbers"),
    ("metrics", {"agreement": float("nan")}, "metrics must map metric names to finite numbers"),
    ("metrics", {"agreement": 0.5}, "metrics do not match"),
])
def test_every_field_is_checked_for_type_and_range_before_the_database(tmp_path, run_cli, db, field, value,
                                                                         message):
    folder = write_run(tmp_path / "runs", "digits")
    record = json.loads((folder / records.RESULT).read_text())
    (folder / records.RESULT).write_text(json.dumps({**record, field: value}))
    code, _, err = submit(run_cli, db, folder)
    assert_one_line(code, err, EXIT_BAD_INPUT, message)
    assert dump(db) == []


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=8)
FIELDS = ["task", "task_version", "task_fingerprint", "method", "budget", "epochs_used", "test_passes", "seed",
          "metrics", "metrics_by_block", "wall_seconds", "device", "config", "versions", "reference", "finished_at",
          "architecture_change", "noise_floor", "method_source", "method_report"]


@pytest.fixture(scope="module")
def genuine(tmp_path_factory):
    folder = write_run(tmp_path_factory.mktemp("runs"), "digits")
    return folder, json.loads((folder / records.RESULT).read_text())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=JSON)
def test_any_json_in_any_field_is_accepted_as_valid_or_refused_in_one_line(genuine, field, value):
    """Property: whatever value a field holds, scoring either returns a row the store can hold or raises the
    one-line submission error; never another exception."""
    folder, record = genuine
    (folder / records.RESULT).write_text(json.dumps({**record, field: value}))
    try:
        row = submission.score_run(folder, "mallory")
    except submission.SubmissionError as error:
        assert "\n" not in str(error)
        return
    assert 0 <= row.seed < 2**63 and 0 <= row.task_version < 2**31 and np.isfinite(row.wall_seconds)
    json.dumps(row.config, allow_nan=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=4096), name=st.sampled_from(["probs.npy", "samples.npy"]))
def test_any_bytes_as_an_npy_member_are_refused_in_one_line(tmp_path_factory, genuine, data, name):
    folder, _ = genuine
    original = (folder / records.PREDICTIONS).read_bytes()
    try:
        write_npz(folder, b"\x93NUMPY\x01\x00" + data, name=name)
        with pytest.raises(submission.SubmissionError) as refused:
            submission.score_run(folder, "mallory")
        assert "\n" not in str(refused.value)
    finally:
        (folder / records.PREDICTIONS).write_bytes(original)
