"""Too little memory to load PyTorch (issue 65, kind 7): the answers that need no PyTorch (``--version``, every
``--help``, a refused argument) never import it, and a command that needs it, where the process's memory is limited
below what loading it takes, ends in one line with exit 3 rather than ``std::bad_alloc``'s abort (exit 134)."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench import loading
from bench.errors import EXIT_ENVIRONMENT, MachineRefused, describe_failure

ROOT = Path(__file__).resolve().parents[2]

NO_TORCH_NEEDED = [
    ["--version"], ["--help"], [], ["run", "--help"], ["sweep", "--help"], ["tasks", "--help"], ["methods", "--help"],
    ["reference", "generate", "--help"], ["reference", "diagnose", "--help"], ["leaderboard", "--help"],
    ["check", "--help"], ["verify", "--help"], ["submit", "--help"], ["fetch", "--help"],
    ["export-submission", "--help"], ["--method", "sgd", "--budget", "many"], ["--vers"], ["tasks", "--nosuch"],
]
"""Answers the parser gives by itself: help, the version, a refused argument."""


@pytest.mark.parametrize("args", NO_TORCH_NEEDED, ids=lambda args: " ".join(args) or "no-arguments")
def test_answers_that_need_no_pytorch_do_not_import_it(args):
    code = ("import json, sys\nfrom bench.entry import main\nsys.argv = ['bench', *json.loads(sys.argv[1])]\n"
            "try:\n    code = main()\nexcept SystemExit as stop:\n    code = stop.code\n"
            "print(json.dumps(sorted(m for m in ('torch', 'numpy') if m in sys.modules)), file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.stderr.splitlines()[-1] == "[]", proc.stderr


def _limited(megabytes: int):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (megabytes * 2**20, resource.RLIM_INFINITY))
    return limit


def _bench_limited(megabytes: int, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, cwd=cwd,
                          preexec_fn=_limited(megabytes), timeout=600)


@pytest.mark.parametrize("megabytes", [300, 400])
@pytest.mark.parametrize("args", [["--version"], ["--help"], ["run", "--help"], ["reference", "diagnose", "--help"],
                                  ["--vers"]])
def test_the_version_and_help_answer_where_pytorch_cannot_load(megabytes, args, tmp_path):
    proc = _bench_limited(megabytes, args, tmp_path)
    assert proc.returncode in (0, 2), (proc.returncode, proc.stderr)  # --vers: refused as an unknown option
    assert "bad_alloc" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout or proc.stderr.count("\n") == 1


@pytest.mark.parametrize("megabytes", [300, 400])  # the import raises ImportError at 300 MB, aborts at 400 MB
@pytest.mark.parametrize("args", [["tasks"], ["methods", "--task", "toy-gap"], ["leaderboard", "--quiet"],
                                  ["--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", "runs"]])
def test_a_command_that_needs_pytorch_ends_in_one_line_where_it_cannot_load(megabytes, args, tmp_path):
    proc = _bench_limited(megabytes, args, tmp_path)
    assert proc.returncode == EXIT_ENVIRONMENT, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("error: too little memory to load PyTorch") and proc.stderr.count("\n") == 1
    assert "ulimit -v" in proc.stderr and not (tmp_path / "runs").exists()


def test_without_a_limit_nothing_is_probed(monkeypatch):
    monkeypatch.setattr(loading, "memory_limits", lambda: [])
    monkeypatch.setattr(loading.subprocess, "run", lambda *a, **k: pytest.fail("probed without a limit"))
    loading.load_torch()


@pytest.mark.parametrize("returncode, said, refused", [
    (-signal.SIGABRT, "terminate called after throwing an instance of 'std::bad_alloc'", True),
    (-signal.SIGKILL, "", True),
    (1, "ImportError: libtorch_cpu.so: failed to map segment from shared object", True),
    (1, "MemoryError", True),
    (1, "OpenBLAS error: Memory allocation still failed after 10 retries, giving up.", True),
    (1, "ModuleNotFoundError: No module named 'torch'", False),  # not memory: the import here names it
    (0, "", False),
])
def test_a_probe_that_fails_for_lack_of_memory_is_the_machine_s_refusal(monkeypatch, returncode, said, refused):
    monkeypatch.setattr(loading, "memory_limits", lambda: [(400 * 2**20, "ulimit -v")])
    monkeypatch.setattr(loading.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a[0], returncode, b"", said.encode()))
    if refused:
        with pytest.raises(MachineRefused) as caught:
            loading._probe(loading.memory_limits())
        code, line = describe_failure(caught.value)
        assert code == EXIT_ENVIRONMENT and "400 MiB (ulimit -v)" in line
    else:
        loading._probe(loading.memory_limits())


@pytest.mark.parametrize("error", [
    ImportError("libquadmath.so.0: failed to map segment from shared object"),
    RuntimeError("std::bad_alloc"),
    OSError(12, "Cannot allocate memory"),
])
def test_a_library_that_cannot_load_or_allocate_is_out_of_memory(error):
    assert describe_failure(error)[0] == EXIT_ENVIRONMENT


@pytest.mark.parametrize("failing", ["bench.cli", "bench.arguments", "argparse"])
def test_memory_refused_while_the_command_line_itself_loads_is_one_line(failing):
    """Below what even the parser needs (a limit of some 15 MB): the machine's refusal, not a bug."""
    starting = ("import builtins, runpy, sys\n"
                "real = builtins.__import__\n"
                "def refused(name, *args, **kwargs):\n"
                f"    if name == {failing!r}:\n"
                "        raise MemoryError\n"
                "    return real(name, *args, **kwargs)\n"
                "builtins.__import__ = refused\n"
                "sys.argv = ['bench', 'tasks']\n"
                "runpy.run_module('bench', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", starting], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == EXIT_ENVIRONMENT, done.stderr
    assert done.stderr.startswith("error: out of memory while starting") and done.stderr.count("\n") == 1
