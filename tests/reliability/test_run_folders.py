"""A run folder's identity: its exact budget in the name, its configuration in the record (another one is
refused with both shown, never replaced), and an exclusive lock while a run works in it."""

from __future__ import annotations

import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench import records
from bench.budget import budget_label
from bench.errors import EXIT_BAD_INPUT
from tests.reliability.test_error_boundary import assert_one_line

RUN = ("--method", "sgd", "--task", "toy-gap", "--quiet", "--seed", "0")


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("first, second", [("2", "2.0000001"), ("1.5", "1.50000000001"), ("3", "3.5")])
def test_budgets_that_differ_at_all_have_their_own_folders(tmp_path, run_cli, first, second):
    for budget in (first, second):
        code, _, err = run_cli(*RUN, "--budget", budget, "--out", tmp_path)
        assert code == 0, err
    folders = sorted(p.name for p in (tmp_path / "toy-gap" / "sgd").iterdir())
    assert len(folders) == 2 and all((tmp_path / "toy-gap" / "sgd" / f / "seed-0" / records.RESULT).is_file()
                                     for f in folders)


@pytest.mark.parametrize("budget, label", [(2.0, "2"), (1e6, "1000000"), (2.0000001, "2.0000001"),
                                           (1e-05, "1e-05"), (0.1 + 0.2, "0.30000000000000004")])
def test_the_folder_name_gives_the_budget_back_exactly(budget, label):
    assert budget_label(budget) == label and float(label) == budget


@pytest.mark.parametrize("setting, shown", [("lr=0.02", "lr: 0.01 there, 0.02 here"),
                                            ("batch_size=7", "batch_size: 16 there, 7 here"), ("beta1=0.5", "beta1")])
def test_a_finished_run_of_another_configuration_is_refused_naming_both(tmp_path, run_cli, setting, shown):
    code, _, err = run_cli(*RUN, "--budget", "2", "--out", tmp_path)
    assert code == 0, err
    before = snapshot(tmp_path)
    code, _, err = run_cli(*RUN, "--budget", "2", "--out", tmp_path, "--set", setting)
    assert_one_line(code, err, EXIT_BAD_INPUT, "another configuration", shown, "--force")
    assert snapshot(tmp_path) == before


def test_the_same_configuration_again_is_shown_not_retrained_and_force_replaces_it(tmp_path, run_cli):
    assert run_cli(*RUN, "--budget", "2", "--out", tmp_path)[0] == 0
    before = snapshot(tmp_path)
    code, out, err = run_cli(*RUN, "--budget", "2", "--out", tmp_path)
    assert code == 0 and "finished earlier with the same settings" in out, err
    assert snapshot(tmp_path) == before
    code, _, err = run_cli(*RUN, "--budget", "2", "--out", tmp_path, "--set", "lr=0.02", "--force")
    assert code == 0, err
    assert records.read_result(tmp_path / "toy-gap/sgd/budget-2/seed-0")["config"]["lr"] == 0.02


def test_a_finished_run_is_found_before_any_task_trains(tmp_path, run_cli):
    """With several tasks, the second task's finished run of another configuration stops the command before the
    first task trains."""
    assert run_cli(*RUN, "--budget", "1", "--out", tmp_path, "--set", "lr=0.02")[0] == 0
    before = snapshot(tmp_path)
    code, _, err = run_cli("--method", "sgd", "--task", "diabetes-gap", "--task", "toy-gap", "--budget", "1",
                           "--out", tmp_path, "--quiet")
    assert_one_line(code, err, EXIT_BAD_INPUT, "toy-gap", "already holds a finished run")
    assert snapshot(tmp_path) == before


TWINS = textwrap.dedent("""
    from approximators.map import MAP

    class First(MAP):
        name = "twin"

    class Second(MAP):
        name = "twin"
        summary = "another class of the same name and settings"
""")


def test_a_finished_run_of_another_class_of_the_same_name_is_refused_not_shown_as_its_own(tmp_path, run_cli,
                                                                                          monkeypatch):
    """Two classes may share a method's name and settings: a finished run of one was shown by `run`, `sweep` and
    the API as the other's, "finished earlier", its record naming the first class's code."""
    from bench import api

    (tmp_path / "twins.py").write_text(TWINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "runs"
    assert run_cli("--method", "twins:First", "--task", "toy-gap", "--budget", "1", "--out", out, "--quiet")[0] == 0
    before = snapshot(out)
    for command in (("--method", "twins:Second"), ("sweep", "--method", "twins:Second")):
        code, _, err = run_cli(*command, "--task", "toy-gap", "--budget", "1", "--out", out, "--quiet")
        assert_one_line(code, err, EXIT_BAD_INPUT, "another method's code ('twins:First', not 'twins:Second')",
                        "--force")
    with pytest.raises(records.BenchError, match="another method's code .*force=True"):
        api.run("toy-gap", "twins:Second", 1, out=out)
    assert snapshot(out) == before
    code, out_text, err = run_cli("--method", "twins:First", "--task", "toy-gap", "--budget", "1", "--out", out)
    assert code == 0 and "finished earlier with the same settings" in out_text, err


@pytest.mark.parametrize("tasks", [("toy-gap", "toy-gap"), ("toy-gap", "digits", "toy-gap")])
def test_a_repeated_task_runs_once(tmp_path, run_cli, tasks):
    code, out, err = run_cli("--method", "sgd", "--budget", "1", "--out", tmp_path, "--quiet",
                             *[a for task in tasks for a in ("--task", task)])
    assert code == 0, err
    assert out.count("toy-gap") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(set(tasks))


HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from bench import records
    with records.claimed(Path(sys.argv[1]), force=False):
        print("holding", flush=True)
        sys.stdin.read()
""")


def test_a_second_run_into_a_folder_in_use_fails_at_once_and_leaves_it_alone(tmp_path, run_cli):
    """Another process holds the folder (as a run does while it trains): this run must not train into it."""
    folder = records.run_folder(tmp_path, "toy-gap", "sgd", 2, 0)
    folder.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert select.select([holder.stdout], [], [], 120)[0], "the holder did not hold the folder within 120 s"
        assert holder.stdout.readline().strip() == "holding"
        code, _, err = run_cli(*RUN, "--budget", "2", "--out", tmp_path)
        assert_one_line(code, err, EXIT_BAD_INPUT, str(folder), "in use by another run")
        assert not (folder / records.RESULT).exists()
    finally:
        try:
            holder.communicate("", timeout=60)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait(timeout=60)
    assert run_cli(*RUN, "--budget", "2", "--out", tmp_path)[0] == 0  # released when the holder ends


def test_a_run_that_finished_while_this_one_waited_is_not_replaced(tmp_path, monkeypatch):
    """The check is repeated under the lock: a result that appears between the first check and the lock stands."""
    folder = records.run_folder(tmp_path, "toy-gap", "sgd", 2, 0)
    folder.mkdir(parents=True)
    calls = []
    original = records.check_unfinished

    def finished_meanwhile(*args):
        calls.append(args)
        if len(calls) == 2:
            (folder / records.RESULT).write_text('{"config": {}}')
        original(*args)
    monkeypatch.setattr(records, "check_unfinished", finished_meanwhile)
    with pytest.raises(Exception, match="already holds a finished run"):
        with records.claimed(folder, force=False, config={"lr": 0.01}):
            pytest.fail("the block ran over a finished run")
