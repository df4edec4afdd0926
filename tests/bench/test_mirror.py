"""``fetch --check-mirror``: the layout a mirror must have (the docs' table is the code's), and the check of a mirror
served by a local HTTP server or held in a folder, with a file missing and one of the wrong size or content."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import pytest

from bench import mirror
from bench.tasks.competition import SPECS
from tests.reliability.test_error_boundary import assert_one_line

ROOT = Path(__file__).resolve().parents[2]
MISSING = "data/imdb_test_y.csv"
RESIZED = "reference/data/imdb/probs.csv"
"""Two files of the fixture mirror: one deleted, one whose size is known (here: the fixture's, as if official)."""


@pytest.fixture
def sizes(monkeypatch, official_files):
    """The official size table pointed at the fixture files of the three references that have one."""
    table = {remote.official_url: len(official_files[f"{remote.base}/{remote.path}"])
             for name in SPECS for remote in SPECS[name].remotes() if remote.official_url in mirror.OFFICIAL_SIZES}
    assert len(table) == 3
    monkeypatch.setattr(mirror, "OFFICIAL_SIZES", table)
    return table


def _lines(out: str) -> dict[str, str]:
    """The check's lines keyed by the file's path under its base."""
    found = {}
    for line in out.splitlines():
        for key in ("reference/", "data/"):  # the reference paths hold data/ too
            if f"/{key}" in line:
                found[key + line.split(f"/{key}", 1)[1].split(" ")[0]] = line
                break
    return found


def test_the_docs_state_the_layout_the_code_fetches():
    table = mirror.layout_table()
    assert table in (ROOT / "docs" / "tasks.md").read_text(), \
        "regenerate docs/tasks.md's mirror table: python -c 'from bench.mirror import layout_table; print(layout_table())'"
    rows = table.splitlines()[2:]
    assert len(rows) == sum(len(spec.remotes()) for spec in SPECS.values()) == 16
    assert "| `cifar10` | `--reference-url` | `data/cifar10/probs.csv` | 2,500,000 | `4299e2e90a44" in table


def test_an_http_mirror_with_a_missing_and_a_wrong_size_file(file_server, official_files, sizes, tmp_path, run_cli):
    served = dict(official_files)
    del served[MISSING]
    served[RESIZED] = served[RESIZED] + b"0.5 0.5\n"
    file_server.files.update(served)
    code, out, err = run_cli("fetch", "--all", "--check-mirror", "--cache", tmp_path, "--data-url",
                             file_server.url + "data/", "--reference-url", file_server.url + "reference")
    assert_one_line(code, err, 1, "does not hold 2 of the 16 files")
    lines = _lines(out)
    assert len(lines) == 16 and set(lines) == set(official_files)
    assert lines[MISSING] == f"missing: imdb: {file_server.url}{MISSING} (the server answered 404 Not Found)"
    assert lines[RESIZED].startswith(f"wrong size: imdb: {file_server.url}{RESIZED} (")
    assert f"{len(official_files[RESIZED]) + 8:,} bytes; expected {len(official_files[RESIZED]):,} (official)" \
        in lines[RESIZED]
    assert sum(line.startswith("present: ") for line in lines.values()) == 14
    assert "mirror: 16 files of 5 task(s) checked: 14 present, 1 missing, 1 wrong size" in out
    assert {requested for _, requested in file_server.requests} == {"bytes=0-0"}, "one byte asked for, never a file"


def test_a_complete_mirror_passes_and_a_server_ignoring_ranges_is_read_from_its_headers(
        file_server, official_files, sizes, tmp_path, run_cli):
    file_server.files.update(official_files)
    file_server.faults[RESIZED] = ["no-range"]
    code, out, err = run_cli("fetch", "--task", "imdb", "--check-mirror", "--cache", tmp_path, "--data-url",
                             file_server.url + "data/", "--reference-url", file_server.url + "reference/")
    assert code == 0 and err == "", err
    assert f"present: imdb: {file_server.url}{RESIZED} ({len(official_files[RESIZED]):,} bytes, as official)" in out
    assert "5 files of 1 task(s) checked: 5 present" in out


def test_a_size_header_that_is_no_size_is_unreadable_not_present(file_server, official_files, sizes, tmp_path,
                                                                  run_cli):
    file_server.files.update(official_files)
    file_server.faults[RESIZED] = ["garbled-size"]
    code, out, err = run_cli("fetch", "--task", "imdb", "--check-mirror", "--cache", tmp_path, "--data-url",
                             file_server.url + "data/", "--reference-url", file_server.url + "reference/")
    assert code == 1, err
    assert _lines(out)[RESIZED].startswith(f"unreadable: imdb: {file_server.url}{RESIZED} (")
    assert "states its size as '12x' in its Content-Range, not a number of bytes" in _lines(out)[RESIZED]
    assert "4 present" in out


def test_a_size_recorded_by_an_earlier_fetch_is_checked(file_server, official_files, fixture_checksums, tmp_path,
                                                        run_cli):
    file_server.files.update(official_files)
    # Bases without a slash at the end: fetch and the check both add it.
    urls = ("--data-url", file_server.url + "data", "--reference-url", file_server.url + "reference")
    assert run_cli("fetch", "--task", "uci-gap", "--cache", tmp_path, "--quiet", *urls)[0] == 0
    data = "data/evaluation_phase/energy_anon.npz"
    file_server.files[data] = official_files[data][:-10]
    code, out, err = run_cli("fetch", "--task", "uci-gap", "--check-mirror", "--cache", tmp_path, *urls)
    assert_one_line(code, err, 1, "1 of the 2 files")
    assert f"{len(official_files[data]) - 10:,} bytes; expected {len(official_files[data]):,} (the fetch of uci-gap " \
           "in this cache)" in _lines(out)[data]


@pytest.mark.parametrize("as_url", [False, True])
def test_a_mirror_in_a_folder_is_checked_by_size_and_sha256(official_files, fixture_checksums, sizes, tmp_path,
                                                            run_cli, as_url):
    for key, data in official_files.items():
        if key != MISSING:
            (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / key).write_bytes(data)
    changed = "reference/data/cifar10/probs.csv"  # same size, other content: only its sha256 tells
    (tmp_path / changed).write_bytes(official_files[changed].replace(b"e-", b"e+", 1))
    (tmp_path / RESIZED).write_bytes(official_files[RESIZED][:-1])
    base = (tmp_path.as_uri() + "/") if as_url else str(tmp_path) + "/"
    code, out, err = run_cli("fetch", "--all", "--check-mirror", "--cache", tmp_path / "cache",
                             "--data-url", base + "data", "--reference-url", base + "reference/")
    assert_one_line(code, err, 1, "does not hold 3 of the 16 files")
    lines = {key: line.replace(str(tmp_path) + "/", "") for key, line in _lines(out).items()}
    assert lines[MISSING] == f"missing: imdb: {MISSING}"
    assert lines[RESIZED].startswith(f"wrong size: imdb: {RESIZED} (")
    actual = hashlib.sha256((tmp_path / changed).read_bytes()).hexdigest()
    assert lines[changed] == (f"wrong sha256: cifar10: {changed} (sha256 {actual[:16]}..., expected "
                              f"{fixture_checksums[mirror.SPECS['cifar10'].reference.official_url][:16]}... (official))")
    assert lines["reference/eval-phase/eval_data/medmnist_probs.csv"].endswith("bytes, sha256 as official)")
    assert "BDL_BENCH_FETCH_ANY_SOURCE=1" in out


def test_an_unreachable_server_is_one_line_and_its_other_files_are_not_checked(official_files, tmp_path, run_cli):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "eval-phase/eval_data").mkdir(parents=True)
    (tmp_path / "eval-phase/eval_data/uci_samples.csv").write_bytes(official_files[
        "reference/eval-phase/eval_data/uci_samples.csv"])
    code, out, err = run_cli("fetch", "--task", "uci-gap", "cifar10c", "--check-mirror", "--cache", tmp_path / "c",
                             "--data-url", f"http://127.0.0.1:{port}/", "--reference-url", tmp_path)
    assert_one_line(code, err, 1)
    assert sum(line.startswith("unreachable: ") for line in out.splitlines()) == 1
    assert sum(line.startswith("not checked: ") for line in out.splitlines()) == 1
    assert "present: uci-gap:" in out and "missing: cifar10c:" in out


@pytest.mark.parametrize("arguments, fragments", [
    (("--data-url", "ftp://example.org/x/"), ("--data-url ftp://example.org/x/", "not over ftp")),
    (("--reference-url", "/no/such/folder"), ("--reference-url /no/such/folder: no such folder",)),
    (("--force",), ("--check-mirror downloads nothing",)),
    (("--keep-downloads",), ("--check-mirror downloads nothing",)),
])
def test_bad_input_is_one_line(tmp_path, run_cli, arguments, fragments):
    code, out, err = run_cli("fetch", "--task", "imdb", "--check-mirror", "--cache", tmp_path, *arguments)
    assert_one_line(code, err, 2, *fragments)
    assert out == "" and not any(tmp_path.iterdir()), "nothing checked or written"
