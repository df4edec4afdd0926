"""Wording that pointed the wrong way (issue 65, kind 9): each line names what is wrong, in the words of the command
that was typed. An unknown or abbreviated option is named as unknown (with the did-you-mean hint) rather than what it
left missing; numbers are said as given; a missing ``--folder`` is bad input (exit 2); an unwritable doc is named, not
its temporary file, with no option of another command; a script names an unknown argument before an optional
dependency it lacks; one run's lines name its method one way."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from bench.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, BudgetExhausted, describe_failure

ROOT = Path(__file__).resolve().parents[2]


def assert_one_line(code, err, expected_code, *fragments):
    assert code == expected_code, err
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err


@pytest.mark.parametrize("args, fragments", [
    (["-V"], ["unrecognized arguments: -V", "did you mean --version?", "`python -m bench --help`"]),
    (["--vers"], ["unrecognized arguments: --vers", "did you mean --version?"]),
    (["--verison"], ["unrecognized arguments: --verison", "did you mean --version?"]),
    (["--metod", "sgd", "--budget", "1"], ["unrecognized arguments: --metod", "did you mean --method?"]),
    (["-m", "sgd", "--budget", "1"], ["unrecognized arguments: -m", "did you mean --method?"]),
    (["--method", "sgd", "-b", "1"], ["unrecognized arguments: -b", "did you mean --budget?"]),
    (["sweep", "--method", "sgd", "--budgets", "1"], ["unrecognized arguments: --budgets", "did you mean --budget?",
                                                      "`python -m bench sweep --help`"]),
    (["check", "--baselin", "b.json"], ["unrecognized arguments: --baselin", "did you mean --baseline?"]),
    (["reference", "--gen"], ["unrecognized arguments: --gen", "`python -m bench reference --help`"]),
    (["reference", "generate", "--tsk", "toy-gap"], ["unrecognized arguments: --tsk", "did you mean --task?"]),
])
def test_an_unknown_option_is_named_before_what_it_left_missing(run_cli, args, fragments):
    code, _, err = run_cli(*args)
    assert_one_line(code, err, EXIT_BAD_INPUT, *fragments)
    assert "the following arguments are required" not in err


@pytest.mark.parametrize("epochs, limit, said", [
    (1.0, 0.5, "would train 1 epochs in all, more than --max-epochs 0.5;"),
    (0.75, 0.25, "would train 0.75 epochs in all, more than --max-epochs 0.25;"),
    (120_000.0, 100_000, "would train 120,000 epochs in all, more than --max-epochs 100,000;"),
    (1234.5, 1000.0, "would train 1,234.5 epochs in all, more than --max-epochs 1,000;"),
    (0.1 + 0.2, 0.29, "would train 0.3 epochs in all, more than --max-epochs 0.29;"),
])
def test_numbers_are_said_as_given(epochs, limit, said):
    from bench.budget import check_planned_epochs

    with pytest.raises(BudgetExhausted) as caught:
        check_planned_epochs(epochs, limit, "verify")
    assert said in str(caught.value)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from bench.cli import main

    out = tmp_path_factory.mktemp("runs")
    assert main(["--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", str(out), "--quiet"]) == 0
    return next(out.rglob("result.json")).parent


@pytest.mark.parametrize("given", ["0.5", "0.25", "0.999"])
def test_verify_says_a_fractional_max_epochs_as_given(run_cli, finished_run, given):
    code, _, err = run_cli("verify", finished_run, "--max-epochs", given, "--quiet")
    assert_one_line(code, err, EXIT_BAD_INPUT, f"more than --max-epochs {given};", "would train 1 epochs")


@pytest.mark.parametrize("args", [["--method", "sgd", "--budget", "2000000"], ["leaderboard", "--budget", "1e30"]])
def test_the_largest_budget_is_said_in_digits(run_cli, args):
    code, _, err = run_cli(*args)
    assert code == EXIT_BAD_INPUT and "at most 1,000,000 epochs" in err and "1e+06" not in err


@pytest.mark.parametrize("make, extra, fragment", [
    (lambda path: path / "absent", [], "no such folder"),
    (lambda path: (path / "a-file").write_text("x") and path / "a-file", [], "not a folder"),
    (lambda path: path, [], "holds no reference of toy-gap"),
    (lambda path: path, ["--task", "digits"], "holds no reference of digits (no digits.json)"),
    (lambda path: path, ["--update"], "holds no reference"),
])
def test_a_reference_folder_that_is_not_there_is_bad_input(run_cli, tmp_path, make, extra, fragment):
    folder = make(tmp_path)
    code, _, err = run_cli("reference", "diagnose", "--folder", folder, *extra)
    assert_one_line(code, err, EXIT_BAD_INPUT, f"--folder {folder}", fragment)


@pytest.mark.parametrize("error_number", [errno.EPERM, errno.EACCES, errno.EROFS])
def test_an_unwritable_doc_is_named_without_its_temporary_file_or_another_command_s_options(
        monkeypatch, tmp_path, capsys, error_number):
    """``chattr +i`` on a doc (an immutable file: EPERM at the rename), a read-only folder (EACCES), a read-only
    file system (EROFS), simulated where the rename into place is refused."""
    from bench import docblocks, io, scripts

    doc = tmp_path / "doc.md"
    doc.write_text("text\n")

    def refused(source, target):
        raise OSError(error_number, errno.errorcode[error_number], str(source), None, str(target))

    monkeypatch.setattr(docblocks, "doc_files", lambda: [doc])
    monkeypatch.setattr(docblocks, "rewritten", lambda text, path: text + "more\n")
    monkeypatch.setattr(io.os, "replace", refused)
    monkeypatch.setattr(sys, "argv", ["docblocks", "--write"])
    with pytest.raises(SystemExit) as ended:
        scripts.run(lambda: docblocks.main(["--write"]))
    err = capsys.readouterr().err
    assert_one_line(ended.value.code, err, EXIT_ENVIRONMENT, f"cannot rewrite {doc}", "chmod u+w")
    assert ".tmp" not in err and "--out" not in err and "--db" not in err and "--cache" not in err
    assert doc.read_text() == "text\n" and [p.name for p in tmp_path.iterdir()] == ["doc.md"]


@pytest.mark.parametrize("error_number", [errno.EPERM, errno.EACCES, errno.ENOSPC])
def test_a_refused_atomic_write_names_the_file_written_not_its_temporary_file(monkeypatch, tmp_path, error_number):
    from bench import io

    monkeypatch.setattr(io.os, "replace", lambda source, target: (_ for _ in ()).throw(
        OSError(error_number, errno.errorcode[error_number], str(source), None, str(target))))
    with pytest.raises(OSError) as caught:
        io.atomic_write_bytes(tmp_path / "record.json", b"{}")
    code, line = describe_failure(caught.value)
    assert line.startswith(f"{tmp_path / 'record.json'}:") and ".tmp" not in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["--tasks", "nosuch"], ["--tasks", "digits", "nosuch"], ["--tasks", "toy_gap"]])
def test_a_script_names_an_unknown_task_before_an_optional_dependency(args):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "hmc_speed.py"), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert_one_line(done.returncode, done.stderr, EXIT_BAD_INPUT, "--tasks", f"invalid choice: {args[-1]!r}")
    assert "pip install" not in done.stderr


@pytest.mark.parametrize("records", [[{"task": "x"}], [1], ["a record"]])
def test_the_api_names_records_that_are_no_records_before_pandas(records):
    from bench import api
    from bench.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        api.dataframe(records)
    assert "records[0]" in str(caught.value)


@pytest.mark.parametrize("spec, name", [("mymethod_a:Mine", "mine"), ("mymethod_b:Other", "other-one")])
def test_a_run_s_progress_names_its_method_as_its_rows_do(run_cli, tmp_path, monkeypatch, plugins_in_process, spec,
                                                          name):
    from bench import progress

    module, cls = spec.split(":")
    (tmp_path / f"{module}.py").write_text(f"from approximators import METHODS\n\n\nclass {cls}(METHODS['sgd']):\n"
                                           f"    name = {name!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    described = []

    class Recording(progress.Progress):
        def __init__(self, runs, quiet, description="runs"):
            described.append(description)
            super().__init__(runs, quiet, description)

    monkeypatch.setattr(progress, "Progress", Recording)
    code, out, err = run_cli("--method", spec, "--budget", "1", "--task", "toy-gap", "--out", tmp_path / "runs",
                             "--quiet")
    assert code == 0, err
    assert described == [f"{name} @ 1 epochs"] and f" {name} " in out and spec not in out + err


@pytest.mark.parametrize("spec, name", [("mymethod_a:Mine", "mine"), ("pkg.sub:Other", "other-one")])
def test_a_worker_s_notes_name_its_method_as_the_worker_does(capsys, monkeypatch, spec, name):
    """The worker's own note (after a run) says the method's name; the note when its process ended said
    ``package.module:Class``: one run's notes named one method two ways."""
    from bench import descendants, executors

    class Connection:
        def __init__(self, messages):
            self.messages = list(messages)

        def poll(self):
            return bool(self.messages)

        def recv(self):
            return self.messages.pop(0)

        def close(self):
            pass

    class Process:
        pid, exitcode = 12345, 0

        def is_alive(self):
            return True

        terminate = kill = join = lambda self, *args: None

    worker = object.__new__(executors._Worker)
    worker.connection, worker.process, worker.method = Connection([("in", name, "fit"), ("in", None, None)]), \
        Process(), spec
    worker.inside, worker.named = None, None
    assert worker.take() is None and worker.named == name
    monkeypatch.setattr(worker, "end_left_behind", lambda: [descendants.Killed(4242, "sleep", descendants.BELOW)])
    worker.stop(kill=False)
    err = capsys.readouterr().err
    assert f"note: method {name!r}:" in err and spec not in err


@pytest.mark.parametrize("error_number", [errno.EACCES, errno.EPERM, errno.EROFS])
def test_a_script_s_refused_write_advises_no_option_of_the_command_line(monkeypatch, capsys, tmp_path, error_number):
    from bench import scripts
    from bench.cli import main

    def refused():
        raise OSError(error_number, errno.errorcode[error_number], str(tmp_path / "out.json"))

    monkeypatch.setattr(sys, "argv", ["script.py"])
    with pytest.raises(SystemExit) as ended:
        scripts.run(refused)
    err = capsys.readouterr().err
    assert_one_line(ended.value.code, err, EXIT_ENVIRONMENT, str(tmp_path / "out.json"))
    assert "--db" not in err and "--cache" not in err
    # the command line, which takes them, still names them
    monkeypatch.setattr("bench.commands.tasks.command", lambda args: refused())
    assert main(["tasks"]) == EXIT_ENVIRONMENT and "(--out, --db, --cache)" in capsys.readouterr().err
