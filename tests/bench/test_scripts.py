"""bench.scripts: the benchmark scripts behind the command line's boundary and grammar, so that a bad argument or a
failure is one line and an exit code, never a traceback."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from bench import scripts
from bench.errors import ConfigError

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(path for path in BENCHMARKS.glob("*.py") if "__main__" in path.read_text())


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_every_script_parses_with_the_shared_grammar_and_runs_inside_the_boundary(path):
    tree = ast.parse(path.read_text())
    guard = next(node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test))
    assert [ast.unparse(statement) for statement in guard.body] == ["scripts.run(main)"]
    calls = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert "scripts.parser" in calls and "argparse.ArgumentParser" not in calls
    plain_types = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.keyword)
                   and node.arg == "type" and ast.unparse(node.value) in ("int", "float")]
    assert plain_types == [], "int and float take ' 1', 1_0 and nan: use bench.arguments' types"


@pytest.mark.parametrize("args, fragment", [
    (["tune_trajectory.py", "--budget", "nan"], "not a number written in digits: 'nan'"),
    (["tune_trajectory.py", "nope"], "invalid choice: 'nope'"),
    (["fidelity_table.py", "--budgets", "0"], "must be a positive number of epochs"),
    (["fidelity_table.py", "--methods", "nope"], "unknown method 'nope'"),
    (["converged_gap.py", "linear", "--rows", "0"], "must be at least 1"),
    (["converged_gap.py", "linear", "--seeds", "-1"], "must be at least 1"),
    (["converged_gap.py", "linear", "--row", "3"], "did you mean --rows?"),
    (["nuts_crosscheck.py", "--task", "nope"], "unknown task 'nope'"),
    (["gate_calibration.py", "--seeds", "1_0"], "not a whole number written in digits"),
    (["gate_calibration.py", "--baseline", "/nonexistent/baseline.json"], "/nonexistent/baseline.json"),
])
def test_a_script_s_bad_argument_is_one_line_and_exit_code_2(args, fragment):
    done = subprocess.run([sys.executable, str(BENCHMARKS / args[0]), *args[1:]], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert fragment in done.stderr and "Traceback" not in done.stderr


NAMING_OPTIONS = ("--methods", "--method", "--tasks", "--task", "--device")
"""Options that name a method, a task or a device: an unknown name is bad input, refused before anything runs."""
NAMING_CASES = [(path, option) for path in SCRIPTS for option in NAMING_OPTIONS if f'"{option}"' in path.read_text()]


@pytest.mark.parametrize("path, option", NAMING_CASES, ids=[f"{path.stem}{option}" for path, option in NAMING_CASES])
def test_an_unknown_name_is_bad_input_at_once(path, option):
    """Found on several scripts at once: an unknown task or device ended in 'internal error, a bug' (a KeyError, torch's
    RuntimeError), a sweep's failure in exit 1 and several lines, and an unknown method source in a calibration that
    ran for minutes."""
    done = subprocess.run([sys.executable, str(path), option, "nope"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "internal error" not in done.stderr


@pytest.mark.parametrize("failure, code, line", [
    (ConfigError("no such thing"), 2, "error: no such thing\n"),
    (RuntimeError("broke"), 70, "error: internal error, a bug in bdl-bench: RuntimeError: broke"),
    (KeyboardInterrupt(), 130, "error: interrupted\n"),
    (OSError(28, "No space left on device", "out.json"), 3, "error: out.json: "),
])
def test_the_boundary_turns_each_failure_into_one_line_and_its_exit_code(failure, code, line, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["script.py"])

    def main():
        raise failure

    with pytest.raises(SystemExit) as ended:
        scripts.run(main)
    err = capsys.readouterr().err
    assert ended.value.code == code and err.startswith(line) and err.count("\n") == 1, err


def test_debug_lets_the_failure_raise_and_a_finished_script_exits_0(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["script.py", "--debug"])

    def broken():
        raise RuntimeError("broke")

    with pytest.raises(RuntimeError, match="broke"):
        scripts.run(broken)
    monkeypatch.setattr(sys, "argv", ["script.py"])
    with pytest.raises(SystemExit) as ended:
        scripts.run(lambda: None)
    assert ended.value.code == 0
