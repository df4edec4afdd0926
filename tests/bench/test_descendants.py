"""What a method's process starts is found and ended with it (bench.descendants, bench.executors' workers): a tree
two levels deep, an orphan that left the group and cleared its environment, a borrowed mark, and what the import of
a user's module starts (which lives as long as the process that imported it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bench import descendants
from bench.executors import Isolated

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="processes are found through /proc")

WAIT_SECONDS = 10.0
"""The most any wait here takes before it fails (a process to start, a state to be reached)."""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended, does not)."""
    process = descendants._stat(pid)
    return process is not None and process.state != "Z"


def _end(pids) -> None:
    """Kills what a test started (a failing test leaves nothing behind)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"waited {WAIT_SECONDS} s for {what}"
        time.sleep(0.01)


def leave_a_family(path: str) -> None:
    """Run in a method's worker: leaves a child with a child of its own, and a grandchild whose parent ended after it
    moved to a session of its own and cleared its environment; their pids go to ``path``."""
    child = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    grandchild = int(child.stdout.readline())
    parent = subprocess.Popen(["sh", "-c", "setsid env -i sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True)
    orphan = int(parent.stdout.readline())
    parent.wait(WAIT_SECONDS)
    Path(path).write_text(f"{child.pid} {grandchild} {orphan}")
    # it has left this process's group and session, and its environment holds nothing
    _until(lambda: os.getsid(orphan) == orphan and Path(f"/proc/{orphan}/environ").read_bytes() == b"", "the orphan")


def test_a_method_s_tree_two_levels_deep_and_its_detached_orphan_are_killed_after_its_call(tmp_path, capfd,
                                                                                             helper_module):
    """Issue 66, blind spot 3: a child with a living grandchild (descendants() returning only direct children left the
    grandchild running), and a grandchild orphaned while the worker lives on, out of its group and with no mark (found
    only because the worker adopts it: without adopt_orphans() it outlived the call). Issue 65, kind 4: what the
    import of the method's module started there is spared by each call and ended, named, when the worker ends."""
    name, helpers = helper_module
    pids_file = tmp_path / "pids"
    try:
        with Isolated(f"{name}:UsesHelper", threads=1) as worker:
            assert worker.check([f"{name}:UsesHelper"], [("toy-gap", ())]).exit_code == 0
            helper, = map(int, helpers.read_text().split())
            outcome = worker.call(leave_a_family, str(pids_file))
            assert outcome.exit_code == 0, outcome.failure
            child, grandchild, orphan = map(int, pids_file.read_text().split())
            assert worker.alive()
            assert not any(map(_running, (child, grandchild, orphan)))
            assert _running(helper)
        assert not _running(helper)
        err = capfd.readouterr().err
        assert "3 process(es) it started were still running after its run and were killed" in err, err
        assert f"pid {grandchild} 'sleep' below its process" in err, err
        assert f"note: importing {name} started 1 process(es) that were still running when its worker ended and " \
               f"were killed (pid {helper} 'sleep' started by the import)" in err, err
    finally:
        if pids_file.exists():
            _end(map(int, pids_file.read_text().split()))


def test_a_borrowed_mark_kills_nothing_outside_the_tree_of_a_dead_method_process(tmp_path):
    """Issue 65, kind 5: any process whose environment held the mark of a method's process that died was killed, as
    the method's. Now a process started before the method's, or below another parent, survives with a copy of the
    mark; the method's own processes, one in its group and one in a session of its own (adopted by this process), do
    not."""
    token = "borrowed"
    marked = {**os.environ, descendants.TREE_VARIABLE: token}
    started = []
    adopting = descendants.adopts_orphans()
    descendants.adopt_orphans()  # as the command's process does while it has workers
    try:
        before = subprocess.Popen(["sleep", "60"], env=marked)  # this process's child, older than the method's
        started.append(before.pid)
        method = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
            import os, subprocess, sys
            os.setpgid(0, 0)
            grouped = subprocess.Popen(["sleep", "60"])
            detached = subprocess.Popen(["sleep", "60"], start_new_session=True)
            print(grouped.pid, detached.pid, flush=True)
            sys.stdin.read()
            os._exit(0)
        """)], env=marked, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started.append(method.pid)
        method_started = descendants.started(method.pid)
        grouped, detached = map(int, method.stdout.readline().split())
        started += [grouped, detached]
        # started after the method's process, by a parent that is not the command's process (which has no mark)
        launcher = subprocess.Popen(["sh", "-c", 'env BDL_BENCH_METHOD_TREE="$1" sleep 60 & echo $!; exec sleep 60',
                                     "sh", token], stdout=subprocess.PIPE, text=True)
        started.append(launcher.pid)
        borrower = int(launcher.stdout.readline())
        started.append(borrower)
        _until(lambda: f"{descendants.TREE_VARIABLE}={token}".encode()
               in Path(f"/proc/{borrower}/environ").read_bytes().split(b"\0"), "the borrower's exec")
        method.stdin.close()
        method.wait(WAIT_SECONDS)  # it died: its children are now this process's
        _until(lambda: descendants._stat(detached).parent == os.getpid(), "the adoption")

        killed = descendants.end_tree_of(method.pid, method_started, token)

        assert {(entry.pid, entry.net) for entry in killed} == {(grouped, descendants.GROUP),
                                                               (detached, descendants.MARK)}
        assert _running(before.pid) and _running(borrower) and _running(launcher.pid)
    finally:
        if not adopting:
            descendants.adopt_orphans(False)
        _end(started)
        for process in (before, launcher):
            process.wait(WAIT_SECONDS)


HELPER_MODULE = textwrap.dedent('''
    """Starts a helper as it is imported (a server its method talks to), its pid appended to $HELPERS_FILE."""
    import os
    import subprocess

    from approximators.map import MAP

    HELPER = subprocess.Popen(["sleep", "60"])
    with open(os.environ["HELPERS_FILE"], "a") as helpers:
        helpers.write(f"{HELPER.pid}\\n")

    class UsesHelper(MAP):
        name = "uses-helper"
        summary = "needs the helper its module's import started, in each of its runs"

        def fit(self, problem, data, generator):
            if HELPER.poll() is not None:
                raise RuntimeError("the helper its module's import started is gone")
            super().fit(problem, data, generator)
''')


@pytest.fixture
def helper_module(tmp_path, monkeypatch):
    """A module (a new name each time: imported afresh) whose import starts a helper; the file its helpers' pids go
    to. Kills what is left when the test ends."""
    name = f"starts_helper_{tmp_path.name.replace('-', '_')}"
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{name}.py").write_text(HELPER_MODULE)
    helpers = tmp_path / "helpers"
    helpers.touch()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("HELPERS_FILE", str(helpers))
    yield name, helpers
    sys.modules.pop(name, None)
    _end(int(pid) for pid in helpers.read_text().split())


def test_what_an_import_starts_in_the_command_s_process_ends_with_the_command_and_is_named(helper_module, run_cli):
    """Issue 65, kind 4: a helper started by the import in the command's own process outlived the command."""
    name, helpers = helper_module
    code, out, err = run_cli("methods", "--method", f"{name}:UsesHelper")
    assert code == 0, err
    helper, = map(int, helpers.read_text().split())
    assert not _running(helper)
    assert f"note: importing {name} started 1 process(es) that were still running at the end of the command and " \
           f"were killed (pid {helper} 'sleep' started by the import)" in err, err


def test_what_an_import_starts_from_python_ends_at_the_interpreter_s_exit(helper_module, monkeypatch):
    """Issue 65, kind 4, from bench.api: the helper lives as long as the caller's interpreter (its module stays
    imported there), ended at its exit."""
    import atexit

    from bench.api import fit

    name, helpers = helper_module
    at_exit = []
    monkeypatch.setattr(atexit, "register", lambda function, *args: at_exit.append((function, args)))
    monkeypatch.setattr(descendants, "_started_by_imports", {})
    fit("toy-gap", f"{name}:UsesHelper", budget=1)
    helper, = map(int, helpers.read_text().split())
    assert _running(helper)
    for function, args in at_exit:
        function(*args)
    assert not _running(helper)


def test_what_an_import_starts_in_a_worker_serves_all_of_its_runs_then_ends(helper_module, run_cli, tmp_path):
    """Issue 65, kind 4, in a sweep: the worker's helper was killed after its first run (the second run fails here
    then), and the command's own outlived the command."""
    name, helpers = helper_module
    code, out, err = run_cli("sweep", "--method", f"{name}:UsesHelper", "--task", "toy-gap", "--budget", "1",
                             "--seed", "0", "1", "--out", tmp_path / "runs", "--quiet")
    assert code == 0, err
    started = list(map(int, helpers.read_text().split()))
    assert len(started) == 2  # the worker's and the command's
    assert not any(map(_running, started))
    assert f"note: importing {name} started 1 process(es) that were still running at the end of the command" in err
