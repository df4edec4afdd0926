"""The command line's one error boundary: every failure is one line on stderr, a documented exit code, and
nothing lost; ``--debug`` shows the traceback instead."""

from __future__ import annotations

import errno
import json
import sqlite3

import pytest

from bench import cli, records
from bench.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_INTERNAL, EXIT_INTERRUPTED


def assert_one_line(code, err, expected_code, *fragments):
    assert code == expected_code, err
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


def _raising(error):
    def handler(_args):
        raise error
    return handler


def _patch_handler(monkeypatch, error):
    """Makes `methods` raise ``error``: a failure deep inside any command reaches the same boundary."""
    original = cli.build_parser

    def parser(prog="python -m bench"):
        built = original(prog)
        built.set_defaults(command="methods")
        return built
    monkeypatch.setattr(cli, "build_parser", parser)
    monkeypatch.setattr("bench.commands.methods.command", _raising(error))


@pytest.mark.parametrize("error, expected_code, fragment", [
    (OSError(errno.ENOSPC, "No space left on device", "/data/runs/x"), EXIT_ENVIRONMENT, "/data/runs/x: no space left"),
    (OSError(errno.EROFS, "Read-only file system", "/media/cd"), EXIT_ENVIRONMENT, "/media/cd: read-only"),
    (PermissionError(errno.EACCES, "Permission denied", "/root/x"), EXIT_ENVIRONMENT, "/root/x: permission denied"),
    (MemoryError(), EXIT_ENVIRONMENT, "out of memory"),
    (sqlite3.OperationalError("database is locked"), EXIT_ENVIRONMENT, "locked by another process"),
    (sqlite3.OperationalError("database or disk is full"), EXIT_ENVIRONMENT, "nothing was committed"),
    (sqlite3.DatabaseError("file is not a database"), EXIT_BAD_INPUT, "damaged or not a bdl-bench database"),
    (ZeroDivisionError("division by zero"), EXIT_INTERNAL, "a bug in bdl-bench: ZeroDivisionError"),
    (KeyError("probs\nsecond line"), EXIT_INTERNAL, "--debug"),
], ids=["disk-full", "read-only", "permission", "memory", "db-locked", "db-full", "db-damaged", "bug", "bug-2-lines"])
def test_every_failure_is_one_line_with_its_exit_code(monkeypatch, run_cli, error, expected_code, fragment):
    _patch_handler(monkeypatch, error)
    code, _, err = run_cli("methods")
    assert_one_line(code, err, expected_code, fragment)


def test_debug_shows_the_traceback(monkeypatch, run_cli):
    _patch_handler(monkeypatch, ZeroDivisionError("boom"))
    with pytest.raises(ZeroDivisionError):
        run_cli("methods", "--debug")
    monkeypatch.setenv("BDL_BENCH_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        run_cli("methods")


def test_an_interrupt_is_one_line_and_exit_130(monkeypatch, run_cli):
    _patch_handler(monkeypatch, KeyboardInterrupt())
    code, _, err = run_cli("methods")
    assert_one_line(code, err, EXIT_INTERRUPTED, "interrupted")


@pytest.mark.parametrize("seed", ["18446744073709551616", "-1", "9223372036854775808", "1e3", "nan"])
def test_an_out_of_range_seed_is_refused_before_any_work(tmp_path, run_cli, seed):
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--seed", seed,
                           "--out", tmp_path, "--quiet")
    assert_one_line(code, err, EXIT_BAD_INPUT, "seed" if "e" not in seed and seed != "nan" else "whole number")
    assert not any(tmp_path.iterdir())


def test_a_path_too_long_is_one_line(tmp_path, run_cli):
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out",
                           tmp_path / ("x" * 300), "--quiet")
    assert code in (EXIT_BAD_INPUT, EXIT_ENVIRONMENT)
    assert_one_line(code, err, code, "x" * 50)


def test_a_disk_full_while_writing_a_run_keeps_no_half_run(tmp_path, run_cli, monkeypatch):
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    monkeypatch.setattr(records, "atomic_write_bytes", full)
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", tmp_path, "--quiet")
    assert_one_line(code, err, EXIT_ENVIRONMENT, "no space left")
    assert not list(tmp_path.rglob(records.RESULT))


@pytest.mark.parametrize("content", [b"{", b"", b"\xff\xfe", b"[1, 2]", b"[" * 100_000 + b"]" * 100_000],
                         ids=["truncated", "empty", "not-utf8", "not-an-object", "deep"])
def test_a_damaged_reference_registry_is_one_line_naming_it(tmp_path, run_cli, monkeypatch, content):
    registry = tmp_path / "registry.json"
    registry.write_bytes(content)
    monkeypatch.setattr("reference.store.REGISTRY", registry)
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", tmp_path / "runs",
                           "--quiet")
    assert_one_line(code, err, EXIT_BAD_INPUT, str(registry), "damaged", "reinstall")


def test_a_damaged_manifest_names_the_fetch_that_repairs_it(tmp_path, run_cli):
    manifest = tmp_path / "tasks" / "dermamnist" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"version": 1, "arrays": {')
    code, _, err = run_cli("tasks", "--cache", tmp_path)
    assert_one_line(code, err, EXIT_BAD_INPUT, str(manifest), "fetch --task dermamnist", "--force")


def test_a_manifest_that_is_a_fifo_is_refused_without_blocking(tmp_path, run_cli):
    import os

    manifest = tmp_path / "tasks" / "dermamnist" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    os.mkfifo(manifest)
    code, _, err = run_cli("tasks", "--cache", tmp_path)
    assert_one_line(code, err, EXIT_BAD_INPUT, "not a regular file")


def test_a_damaged_run_record_is_one_line_for_verify(tmp_path, run_cli):
    folder = tmp_path / "toy-gap" / "sgd" / "budget-1" / "seed-0"
    folder.mkdir(parents=True)
    (folder / records.RESULT).write_text('{"task": "toy-gap", ')
    (folder / records.PREDICTIONS).write_bytes(b"")
    code, _, err = run_cli("verify", folder)
    assert_one_line(code, err, EXIT_BAD_INPUT, str(folder / records.RESULT), "damaged")


def test_a_file_that_is_not_a_database_is_one_line(tmp_path, run_cli):
    db = tmp_path / "board.db"
    db.write_bytes(b"this is not sqlite" * 100)
    code, _, err = run_cli("leaderboard", "--db", db)
    assert_one_line(code, err, EXIT_BAD_INPUT, "database")


def test_a_damaged_baseline_is_one_line(tmp_path, run_cli):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"format": 1})[:-3])
    code, _, err = run_cli("check", "--baseline", baseline)
    assert_one_line(code, err, EXIT_BAD_INPUT, str(baseline), "check --update")


def test_an_interrupt_while_starting_is_one_line_and_exit_130():
    """Ctrl-C during the seconds the heavy imports take (here: at the import of torch) ends inside the boundary."""
    import subprocess
    import sys

    starting = ("import builtins, runpy, sys\n"
                "real = builtins.__import__\n"
                "def interrupted(name, *args, **kwargs):\n"
                "    if name == 'torch':\n"
                "        raise KeyboardInterrupt\n"
                "    return real(name, *args, **kwargs)\n"
                "builtins.__import__ = interrupted\n"
                "sys.argv = ['bench', 'methods']\n"
                "runpy.run_module('bench', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", starting], capture_output=True, text=True, timeout=120)
    assert_one_line(done.returncode, done.stderr, EXIT_INTERRUPTED, "interrupted while starting")


@pytest.mark.parametrize("argv, fragment", [
    (["submit", "somewhere"], "a submission is stored whole or not at all"),
    (["leaderboard"], "the database was only read, and --output is written whole or not at all"),
    (["fetch", "--task", "dermamnist"], "the task's cached data is as it was"),
    (["export-submission", "somewhere"], "the zip is written whole or not at all"),
    (["check", "--baseline", "b.json", "--update"], "--update writes the baseline only once every measurement"),
    (["verify", "somewhere"], "verify changes no run"),
    (["run", "--method", "sgd", "--budget", "1"], "finished runs are complete, the interrupted one was not written"),
    (["methods"], None),
])
def test_an_interrupt_s_line_says_what_the_interrupted_command_left(monkeypatch, run_cli, argv, fragment):
    """Case 34: Ctrl-C during submit, leaderboard, fetch, export or check --update said "finished runs are
    complete", a line about runs."""
    handler = f"bench.commands.{argv[0].replace('-', '_')}.command"
    monkeypatch.setattr(handler, _raising(KeyboardInterrupt()))
    code, _, err = run_cli(*argv)
    assert_one_line(code, err, EXIT_INTERRUPTED, "interrupted")
    assert (fragment in err) if fragment else err == "error: interrupted\n"
    assert fragment is None or argv[0] == "run" or "runs are complete" not in err


@pytest.mark.parametrize("error", [RecursionError("maximum recursion depth exceeded"),
                                   AttributeError("module 'numpy._core' has no attribute '_multiarray_umath'")])
def test_any_failure_after_an_interrupt_arrived_is_the_interrupt(monkeypatch, run_cli, error):
    """Case 32: Ctrl-C while NumPy imports (lazily, inside the command) leaves it half-imported; the command then fails
    in NumPy's way (exit 70, or a traceback with --debug). Once the interrupt arrived, any failure is reported as the
    interrupt; the next command in the same process starts without it."""
    from bench import interrupts

    def interrupted_then_failing(args):
        interrupts._interrupted = True  # what the SIGINT handler records when Ctrl-C arrives
        raise error

    _patch_handler(monkeypatch, error)
    monkeypatch.setattr("bench.commands.methods.command", interrupted_then_failing)
    for argv in (["methods"], ["methods", "--debug"]):
        code, _, err = run_cli(*argv)
        assert_one_line(code, err, EXIT_INTERRUPTED, "interrupted")
    monkeypatch.setattr("bench.commands.methods.command", lambda args: 0)
    assert run_cli("methods") == (0, "", ""), "an earlier command's interrupt is not this one's"


_SWALLOWING_IMPORT = """
import builtins, os, runpy, signal, sys, time
real, swallowed = builtins.__import__, []
def importing(name, *args, **kwargs):
    if name == "torch" and not swallowed:  # a library catching everything around an import of its own
        swallowed.append(True)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except BaseException:
            pass
        if {broken}:
            raise AttributeError("module 'numpy._core' has no attribute '_multiarray_umath'")
    return real(name, *args, **kwargs)
builtins.__import__ = importing
sys.argv = ["bench", "methods"]
runpy.run_module("bench", run_name="__main__")
"""


@pytest.mark.parametrize("broken", [False, True], ids=["swallowed", "left-broken"])
def test_an_interrupt_a_library_swallows_while_starting_is_still_the_interrupt(broken):
    """Case 32 as it happens: the interrupt arrives inside an import that catches it; the import then fails in its
    own way, or seems to succeed with a module left half-imported. Either way: one line, exit 130."""
    import signal
    import subprocess
    import sys

    # Ctrl-C as in a terminal: a suite started as a background job hands its children SIGINT ignored.
    done = subprocess.run([sys.executable, "-c", _SWALLOWING_IMPORT.format(broken=broken)], capture_output=True,
                          text=True, timeout=120, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert_one_line(done.returncode, done.stderr, EXIT_INTERRUPTED, "interrupted while starting")
