"""What no process can catch in itself: a method that is not bdl-bench's ending its process (``os._exit``, a crash),
leaving a thread that never ends, or changing the working directory. `run` and `sweep` run such a method in a
process of its own (:class:`bench.executors.Isolated`), so that it ends only that process: one line naming the
method and the part, exit 4, nothing written for it, and a sweep's other runs go on.

Each test here starts processes (seconds each, PyTorch's import); the boundary's in-process cases are in
test_other_peoples_code.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench import records
from bench.errors import EXIT_METHOD
from tests.reliability.test_error_boundary import assert_one_line

ROOT = Path(__file__).resolve().parents[2]

MODULE = textwrap.dedent('''
    import ctypes
    import os
    import subprocess
    import sys
    import threading
    import time

    from approximators.map import MAP

    class Uncatchable(MAP):
        summary = "does what no process can catch in itself"

    class ExitsHard(Uncatchable):
        name = "exits-hard"
        def fit(self, problem, data, generator):
            os._exit(0)

    class Crashes(Uncatchable):
        name = "crashes"
        def fit(self, problem, data, generator):
            ctypes.string_at(0)  # reads address 0: SIGSEGV

    class LeavesThread(Uncatchable):
        name = "leaves-thread"
        def fit(self, problem, data, generator):
            threading.Thread(target=time.sleep, args=(3600,)).start()  # not a daemon: Python would wait for it
            super().fit(problem, data, generator)

    class ExitsOnce(Uncatchable):
        name = "exits-once"
        def fit(self, problem, data, generator):
            mark = os.environ.get("EXIT_ONCE_MARK")  # unset: it trains as MAP does
            if mark and not os.path.exists(mark):
                open(mark, "w").close()
                os._exit(0)
            super().fit(problem, data, generator)

    SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]

    def start_children():
        """Three sleepers: one holding the command's standard output, one in a session of its own, one in a
        session of its own with an empty environment; their pids go to the file $CHILDREN_FILE."""
        children = [subprocess.Popen(SLEEPER),
                    subprocess.Popen(SLEEPER, start_new_session=True, stdout=subprocess.DEVNULL),
                    subprocess.Popen(SLEEPER, start_new_session=True, env={}, stdout=subprocess.DEVNULL)]
        with open(os.environ["CHILDREN_FILE"], "w") as pids:
            pids.write(" ".join(str(child.pid) for child in children))

    class LeavesChildren(Uncatchable):
        name = "leaves-children"
        def fit(self, problem, data, generator):
            start_children()
            super().fit(problem, data, generator)

    class LeavesChildrenAndExits(Uncatchable):
        name = "leaves-children-and-exits"
        def fit(self, problem, data, generator):
            children = [subprocess.Popen(SLEEPER),
                        subprocess.Popen(SLEEPER, start_new_session=True, stdout=subprocess.DEVNULL)]
            with open(os.environ["CHILDREN_FILE"], "w") as pids:
                pids.write(" ".join(str(child.pid) for child in children))
            os._exit(0)

    class RaisesInterrupt(Uncatchable):
        name = "raises-interrupt"
        def fit(self, problem, data, generator):
            raise KeyboardInterrupt

    class ChangesDirectory(Uncatchable):
        name = "changes-directory"
        def fit(self, problem, data, generator):
            os.chdir("/")
            super().fit(problem, data, generator)
''')


@pytest.fixture
def site(tmp_path, monkeypatch):
    """The module above and one that ends its process at import, importable here, in spawned processes (they get
    this sys.path) and in subprocesses (PYTHONPATH)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "uncatchable.py").write_text(MODULE)
    (site / "exits_hard_at_import.py").write_text("import os\nos._exit(0)\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT)]))
    return site


def _failed(err: str, name: str, part: str, how: str) -> bool:
    return f"method {name!r}: its process {how} in its {part}, without a result" in err


def _command(*argv) -> tuple[int, str, str]:
    """``python -m bench ARGV`` in a process of its own: a method that ends the process it runs in, were it not
    isolated, would end this test session with exit 0 (nothing red) if run in the test's process."""
    done = subprocess.run([sys.executable, "-m", "bench", *map(str, argv)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    return done.returncode, done.stdout, done.stderr


def test_a_run_that_ends_its_process_is_the_method_s_failure(tmp_path, site):
    """Case 5: os._exit(0) in fit ended the whole command with exit 0 and no word."""
    code, _, err = _command("--method", "uncatchable:ExitsHard", "--budget", "2", "--task", "toy-gap", "--out",
                            tmp_path / "runs", "--quiet")
    assert_one_line(code, err, EXIT_METHOD)
    assert _failed(err, "exits-hard", "fit", "ended with exit code 0"), err
    assert not list((tmp_path / "runs").rglob(records.RESULT))


def test_an_installed_method_runs_in_a_process_of_its_own_too(tmp_path, site):
    """Issue 48: isolation was tested for the `module:Class` form only. A method an installed package registers
    under its name (an entry point of `bdl_bench.methods`, found through the distribution's metadata on the path)
    that ends its process is the method's failure in one line too, not the command ending with exit 0 and no word."""
    info = site / "uncatchable_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: uncatchable-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[bdl_bench.methods]\nexits-hard = uncatchable:ExitsHard\n")
    code, _, err = _command("--method", "exits-hard", "--budget", "2", "--task", "toy-gap", "--out", tmp_path / "runs",
                            "--quiet")
    assert_one_line(code, err, EXIT_METHOD)
    assert _failed(err, "exits-hard", "fit", "ended with exit code 0"), err
    assert not list((tmp_path / "runs").rglob(records.RESULT))


def test_a_module_that_ends_its_process_at_import_is_the_method_s_failure(tmp_path, site):
    """Case 5: a plugin module calling os._exit(0) as it is imported is loaded in a process of its own first."""
    code, _, err = _command("--method", "exits_hard_at_import:Anything", "--budget", "2", "--task", "toy-gap",
                            "--out", tmp_path / "runs", "--quiet")
    assert_one_line(code, err, EXIT_METHOD)
    assert _failed(err, "exits_hard_at_import:Anything", "import", "ended with exit code 0"), err
    assert not (tmp_path / "runs").exists()


def test_a_sweep_reports_each_uncatchable_failure_and_finishes_the_other_runs(tmp_path, run_cli, site, monkeypatch):
    """Cases 5b, 9 and 14 in one sweep, one run after another: the crash is the crashing method's failure, and the
    other runs (a built-in one, one leaving a thread, one changing the directory) finish where --out says."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("sweep", "--method", "uncatchable:Crashes", "uncatchable:LeavesThread",
                             "uncatchable:ChangesDirectory", "sgd", "--budget", "2", "--task", "toy-gap", "--out",
                             "runs", "--quiet")
    assert code == EXIT_METHOD, (out, err)
    lines = err.splitlines()
    assert len(lines) == 2 and "1 of 4 runs failed" in lines[1], err
    assert _failed(lines[0], "crashes", "fit", "was killed by SIGSEGV"), err
    for name in ("leaves-thread", "changes-directory", "sgd"):
        assert (records.run_folder(tmp_path / "runs", "toy-gap", name, 2, 0) / records.RESULT).exists(), name
    assert Path.cwd() == tmp_path


def test_a_worker_ended_by_the_method_is_the_method_s_failure(tmp_path, run_cli, site):
    """Case 6: with --workers, a worker ended by os._exit(0) was exit 70, "a bug in bdl-bench"."""
    code, out, err = run_cli("sweep", "--method", "uncatchable:ExitsHard", "sgd", "--budget", "2", "--task",
                             "toy-gap", "--workers", "2", "--out", tmp_path / "runs", "--quiet")
    lines = err.splitlines()
    assert code == EXIT_METHOD and len(lines) == 2, (out, err)
    assert _failed(lines[0], "exits-hard", "fit", "ended with exit code 0"), err
    assert (records.run_folder(tmp_path / "runs", "toy-gap", "sgd", 2, 0) / records.RESULT).exists()


def test_a_thread_left_running_in_this_process_does_not_keep_the_command_alive(tmp_path, site):
    """Case 9 with --debug, where the method runs in the command's own process: the command ends when it is done."""
    done = subprocess.run([sys.executable, "-m", "bench", "--method", "uncatchable:LeavesThread", "--budget", "2",
                           "--task", "toy-gap", "--out", str(tmp_path / "runs"), "--quiet", "--debug"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert (records.run_folder(tmp_path / "runs", "toy-gap", "leaves-thread", 2, 0) / records.RESULT).exists()


def test_the_isolated_check_names_what_was_given_as_the_caller_spells_it(tmp_path, site):
    """The import and settings checked in the method's own process say `settings['lr']` to a Python caller
    (bench.api's sweep), `--set lr` on the command line, as the caller's own process would."""
    from bench import sweep
    from bench.errors import PYTHON, FailedElsewhere

    with pytest.raises(FailedElsewhere, match=r"settings\['lr'\]"):
        sweep.plan(["uncatchable:ChangesDirectory"], ["toy-gap"], [2], [0], [("lr", "fast")], tmp_path,
                   spelling=PYTHON)
    with pytest.raises(FailedElsewhere, match="--set lr"):
        sweep.plan(["uncatchable:ChangesDirectory"], ["toy-gap"], [2], [0], [("lr", "fast")], tmp_path)


def test_verify_reports_a_re_execution_that_ends_its_process_and_verifies_the_other_folders(tmp_path, run_cli, site,
                                                                                           monkeypatch):
    """verify and submit --verify re-execute a plugin's runs in a process of its own too: a plugin ending that
    process (os._exit(0) in its first re-execution) ended `verify` with exit 0 and the other folders unverified."""
    runs = tmp_path / "runs"
    # the runs to verify, trained in this process (--debug: no process of their own to start, seconds each); with
    # its mark unset the method trains as MAP does, here as in the re-executions' processes
    code, out, err = run_cli("--method", "uncatchable:ExitsOnce", "--budget", "2", "--task", "toy-gap", "--seed",
                             "0", "1", "--out", runs, "--quiet", "--debug")
    assert code == 0, (out, err)
    monkeypatch.setenv("EXIT_ONCE_MARK", str(tmp_path / "exited"))
    code, out, err = _command("verify", runs, "--method", "uncatchable:ExitsOnce")
    assert_one_line(code, err, EXIT_METHOD)
    assert _failed(err, "exits-once", "fit", "ended with exit code 0") and "seed-0: method" in err, err
    assert "1 of 2 runs verified" in out and "predictions bitwise equal" in out, out
    (tmp_path / "exited").unlink()
    db = tmp_path / "board.sqlite"
    code, _, err = _command("submit", runs, "--verify", "--method", "uncatchable:ExitsOnce", "--db", db)
    assert_one_line(code, err, EXIT_METHOD)
    assert _failed(err, "exits-once", "fit", "ended with exit code 0"), err
    assert not db.exists()


def test_the_gate_reports_a_method_that_ends_its_process_and_never_passes_silently(tmp_path, run_cli, site,
                                                                                   monkeypatch):
    """`check` with one worker ran a plugin in its own process: os._exit(0) in fit ended the CI gate with exit 0
    and no word (it passed), os._exit(1) with exit 1 and no word (read as "check found a failure"), a module ending
    its process at import likewise, and a KeyboardInterrupt the method raised was reported as the user's Ctrl-C."""
    baseline = tmp_path / "mine.json"
    # the baseline, made in this process (--debug: the method in it too, its mark unset: it trains as MAP does);
    # only the checks that may end a process need one of their own
    code, _, err = run_cli("check", "--update", "--baseline", baseline, "--method", "uncatchable:ExitsOnce",
                           "--task", "toy-gap", "--seeds", "2", "--budget", "2", "--quiet", "--debug")
    assert code == 0, err
    monkeypatch.setenv("EXIT_ONCE_MARK", str(tmp_path / "exited"))
    code, out, err = _command("check", "--baseline", baseline, "--method", "uncatchable:ExitsOnce", "--quiet")
    assert_one_line(code, err, EXIT_METHOD)
    assert _failed(err, "exits-once", "fit", "ended with exit code 0") and "check passed" not in out, (out, err)
    for method, part in (("exits_hard_at_import:Anything", "import"), ("uncatchable:ExitsHard", "fit")):
        code, _, err = _command("check", "--update", "--baseline", tmp_path / "new.json", "--method", method,
                                "--task", "toy-gap", "--seeds", "2", "--budget", "2", "--quiet")
        assert_one_line(code, err, EXIT_METHOD)
        assert _failed(err, method if part == "import" else "exits-hard", part, "ended with exit code 0"), err
        assert not (tmp_path / "new.json").exists()
    # the command in this process, the method in its own: a KeyboardInterrupt that escaped it would stop the session
    code, _, err = run_cli("check", "--update", "--baseline", tmp_path / "new.json", "--method",
                           "uncatchable:RaisesInterrupt", "--task", "toy-gap", "--seeds", "2", "--budget", "2")
    assert_one_line(code, err, EXIT_METHOD, "method 'raises-interrupt' raised KeyboardInterrupt in its fit")


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


def _children(path: Path) -> list[int]:
    return [int(pid) for pid in path.read_text().split()]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="processes are found through Linux's /proc")
def test_processes_a_method_leaves_running_are_killed_with_its_run_and_said_so(tmp_path, site, monkeypatch):
    """Issue 49, kind 3: a child holding standard output kept `python -m bench ... | tee log` open for as long as
    the child lived (here 600 s: the timeout would fail the test), and children in sessions of their own (one with
    an empty environment) outlived the run as orphans, with nothing said."""
    monkeypatch.setenv("CHILDREN_FILE", str(tmp_path / "children"))
    done = subprocess.run([sys.executable, "-m", "bench", "--method", "uncatchable:LeavesChildren", "--budget", "2",
                           "--task", "toy-gap", "--out", str(tmp_path / "runs"), "--quiet"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1 and "method 'leaves-children': 3 process(es) it started were still running " \
                                            "after its run and were killed" in done.stderr, done.stderr
    assert not any(_running(pid) for pid in _children(tmp_path / "children"))
    assert (records.run_folder(tmp_path / "runs", "toy-gap", "leaves-children", 2, 0) / records.RESULT).exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="processes are found through Linux's /proc")
def test_processes_left_by_a_method_whose_process_died_are_killed_and_named_in_its_line(tmp_path, site, monkeypatch):
    """Issue 49, kind 3, when the method's process itself ends (os._exit): its orphans, one in a session of its own,
    are found by its group and its environment's mark."""
    monkeypatch.setenv("CHILDREN_FILE", str(tmp_path / "children"))
    done = subprocess.run([sys.executable, "-m", "bench", "--method", "uncatchable:LeavesChildrenAndExits",
                           "--budget", "2", "--task", "toy-gap", "--out", str(tmp_path / "runs"), "--quiet"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT)
    assert_one_line(done.returncode, done.stderr, EXIT_METHOD,
                    "2 process(es) it started were still running after it ended and were killed")
    assert _failed(done.stderr, "leaves-children-and-exits", "fit", "ended with exit code 0"), done.stderr
    assert not any(_running(pid) for pid in _children(tmp_path / "children"))


def test_a_keyboard_interrupt_raised_in_a_method_s_process_is_one_line(tmp_path, site):
    """Issue 49, kind 4: it printed multiprocessing's traceback of the worker process before bdl-bench's line."""
    code, _, err = _command("--method", "uncatchable:RaisesInterrupt", "--budget", "2", "--task", "toy-gap", "--out",
                            tmp_path / "runs", "--quiet")
    assert_one_line(code, err, EXIT_METHOD, "method 'raises-interrupt' raised KeyboardInterrupt in its fit")
    assert not list((tmp_path / "runs").rglob(records.RESULT))
