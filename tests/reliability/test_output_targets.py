"""Every file a command writes goes through one atomic write (:func:`bench.io.atomic_write_bytes`), which never puts
a file in place of something that is not a regular file: ``leaderboard --output``, ``export-submission --out`` and
``check --update --baseline`` aimed at a FIFO, a socket or a folder are one line before any work, and the target is
left as it was. A symbolic link to a regular file is written through: the link stays, its file is replaced."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from bench.errors import BenchError, EXIT_BAD_INPUT
from bench.io import atomic_write_bytes, file_to_write
from leaderboard import gate
from tests.reliability.test_error_boundary import assert_one_line
from tests.reliability.test_leaderboard_output import make_board


@contextlib.contextmanager
def target(kind: str):
    """A short-named folder holding ``out`` as a FIFO, a UNIX socket, a folder, or a link to a FIFO."""
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        path = Path(folder) / "out"
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "folder":
            path.mkdir()
        elif kind == "link-to-fifo":
            os.mkfifo(Path(folder) / "fifo")
            path.symlink_to(Path(folder) / "fifo")
        if kind == "socket":
            with socket.socket(socket.AF_UNIX) as server:
                server.bind(str(path))
                yield path
        else:
            yield path


def left_as_it_was(path: Path, kind: str) -> None:
    mode = os.stat(path).st_mode
    expected = {"fifo": stat.S_ISFIFO, "link-to-fifo": stat.S_ISFIFO, "socket": stat.S_ISSOCK, "folder": stat.S_ISDIR}
    assert expected[kind](mode)
    assert sorted(p.name for p in path.parent.iterdir()) == (["fifo", "out"] if kind == "link-to-fifo" else ["out"])
    if kind == "folder":
        assert not any(path.iterdir())


KINDS = ["fifo", "socket", "folder", "link-to-fifo"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_atomic_write_refuses_what_is_not_a_regular_file(kind):
    with target(kind) as path:
        with pytest.raises(BenchError, match="the file would replace"):
            atomic_write_bytes(path, b"data")
        left_as_it_was(path, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_leaderboard_output_onto_a_special_file_is_one_line_and_leaves_it(tmp_path, run_cli, kind):
    db = make_board(tmp_path / "board.sqlite")
    with target(kind) as path:
        code, out, err = run_cli("leaderboard", "--db", db, "--output", path)
        assert_one_line(code, err, EXIT_BAD_INPUT, f"{path}: the --output file would replace", "regular file")
        assert out == ""
        left_as_it_was(path, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_export_onto_a_special_file_is_one_line_before_any_run_is_read(tmp_path, run_cli, kind):
    with target(kind) as path:
        code, _, err = run_cli("export-submission", tmp_path / "no-such-run", "--out", path, "--force")
        assert_one_line(code, err, EXIT_BAD_INPUT, f"{path}: the --out zip would replace")
        left_as_it_was(path, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_a_baseline_update_onto_a_special_file_measures_nothing(run_cli, monkeypatch, kind):
    measured = []
    monkeypatch.setattr(gate.runs, "measure", lambda *args, **kwargs: measured.append(args) or {})
    with target(kind) as path:
        code, _, err = run_cli("check", "--update", "--baseline", path, "--method", "sgd", "--task", "toy-gap")
        assert_one_line(code, err, EXIT_BAD_INPUT, f"{path}: the baseline would replace")
        left_as_it_was(path, kind)
    assert measured == []


def test_a_link_to_a_regular_file_is_written_through_and_stays_a_link(tmp_path, run_cli):
    db = make_board(tmp_path / "board.sqlite")
    (tmp_path / "real.md").write_text("old")
    (tmp_path / "link.md").symlink_to(tmp_path / "real.md")
    code, out, err = run_cli("leaderboard", "--db", db, "--output", tmp_path / "link.md")
    assert code == 0 and f"wrote {tmp_path / 'link.md'}" in out, err
    assert (tmp_path / "link.md").is_symlink() and "| method" in (tmp_path / "real.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("real", "link", "."))) == ["link.md",
                                                                                                   "real.md"]


def test_a_new_or_regular_file_is_where_the_write_goes(tmp_path):
    assert file_to_write(tmp_path / "new.txt", "the file") == tmp_path / "new.txt"
    (tmp_path / "old.txt").write_text("x")
    assert file_to_write(tmp_path / "old.txt", "the file") == tmp_path / "old.txt"
    assert file_to_write(tmp_path / "missing" / "x.txt", "the file") == tmp_path / "missing" / "x.txt"


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/stderr", "/dev/fd/1", "/proc/self/fd/1"])
def test_a_standard_stream_as_the_file_to_write_is_one_line(name):
    """/dev/stdout leads to /proc/self/fd/1: through a pipe the write failed naming a temporary file in /proc (exit 3),
    and with standard output redirected to a file the rename replaced that file behind the shell's back."""
    with pytest.raises(BenchError, match="names an open file descriptor"):
        file_to_write(Path(name), "the --output file")


def test_leaderboard_output_to_dev_stdout_through_a_pipe_is_one_line(tmp_path):
    import subprocess
    import sys

    db = make_board(tmp_path / "board.sqlite")
    done = subprocess.run([sys.executable, "-m", "bench", "leaderboard", "--db", str(db), "--output", "/dev/stdout"],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert_one_line(done.returncode, done.stderr, EXIT_BAD_INPUT, "/dev/stdout: the --output file names an open file "
                                                                   "descriptor")
    assert done.stdout == ""
