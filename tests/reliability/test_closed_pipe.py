"""A reader that stops reading (issue 65, kind 8): ``python -m bench methods | head -2`` ends as a Unix tool does,
quietly, with the status a shell reports for a tool stopped by SIGPIPE (141), never "error: Broken pipe"; every
command that prints holds it (tables, the leaderboard, tasks, methods, a run's and a sweep's table, help, version), and
so do the benchmark scripts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.errors import EXIT_CLOSED_PIPE, closed_pipe

ROOT = Path(__file__).resolve().parents[2]


def _with_stdout_closed(command: list[str], cwd: Path) -> tuple[int, str]:
    """Runs ``command`` with its standard output a pipe whose reader is gone before the command writes a byte."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    proc.stdout.close()
    try:
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    return proc.returncode, err.decode(errors="replace")


def _board(tmp_path: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests" / "reliability"))
    try:
        from test_leaderboard_output import make_board
    finally:
        sys.path.pop(0)
    return make_board(tmp_path / "board.sqlite")


@pytest.mark.parametrize("args", [
    ["--version"], ["--help"], ["run", "--help"], [], ["tasks"], ["methods"], ["methods", "--task", "toy-gap"],
    ["leaderboard", "--db", "{board}", "--quiet", "--no-shipped"],
    ["leaderboard", "--db", "{board}", "--quiet", "--format", "csv"],
    ["--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", "runs", "--quiet"],
    ["sweep", "--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", "runs", "--quiet"],
], ids=lambda args: " ".join(args) or "no-arguments")
def test_a_command_whose_reader_stopped_ends_quietly(args, tmp_path):
    if "{board}" in args:
        board = _board(tmp_path)
        args = [str(board) if arg == "{board}" else arg for arg in args]
    code, err = _with_stdout_closed([sys.executable, "-m", "bench", *args], tmp_path)
    assert (code, err) == (EXIT_CLOSED_PIPE, "")
    if args[:1] == ["--method"]:  # the run itself is complete: only its table went unread (a sweep, which prints its
        # plan first, stops there, as a Unix tool stopped by SIGPIPE would)
        assert list((tmp_path / "runs").rglob("result.json"))


@pytest.mark.parametrize("script", ["hmc_speed.py", "wasserstein_speed.py", "sweep_timing.py"])
def test_a_script_whose_reader_stopped_ends_quietly(script, tmp_path):
    code, err = _with_stdout_closed([sys.executable, str(ROOT / "benchmarks" / script), "--help"], tmp_path)
    assert (code, err) == (EXIT_CLOSED_PIPE, "")


def test_a_broken_pipe_that_is_not_standard_output_s_is_a_failure(capsys):
    assert not closed_pipe(BrokenPipeError(32, "Broken pipe"))  # stdout is the test's capture, still read
    assert not closed_pipe(OSError(28, "No space left on device"))
