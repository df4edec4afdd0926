"""benchmarks/gpu_check.py, on the CPU (``--cpu``): the script a lent GPU runs first must run at once, report every
method, keep its table after every model, and say what it claims (same bits, finite, a ratio) from what it ran."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from approximators import METHODS
from bench import docblocks

ROOT = Path(__file__).resolve().parents[2]
PATH = ROOT / "benchmarks" / "gpu_check.py"


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("gpu_check", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_method_has_a_short_run(gpu_check):
    """The check runs every built-in method by default: a new method without a short run would be left out."""
    assert set(gpu_check.SHORT_RUNS) == set(METHODS)


def test_the_cpu_check_runs_every_method_asked_and_keeps_its_table(tmp_path, monkeypatch):
    out = tmp_path / f"{docblocks.GPU_CHECK}.json"
    done = subprocess.run([sys.executable, str(PATH), "--cpu", "--rows", "16", "--tasks", "uci-gap", "--methods",
                           "sgd", "de", "laplace", "--out", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0 and not done.stderr, done.stderr
    kept = json.loads(out.read_text())
    table = kept["tables"]["gpu check"]
    rows = [dict(zip(table["columns"], row)) for row in table["rows"]]
    assert [(row["task"], row["method"]) for row in rows] == [("uci-gap", "sgd"), ("uci-gap", "de"),
                                                              ("uci-gap", "laplace")]
    for row in rows:  # one thread on the CPU: a seeded run repeats bit for bit
        assert row["same bits"] is True and row["finite"] is True and row["peak MiB"] is None, row
        assert row["epoch / plain SGD"] > 0 and row["seconds"] > 0 and row.get("note") is None, row
    assert kept["device"].startswith("cpu, torch ") and kept["rows"] == 16
    monkeypatch.setattr(docblocks, "MEASUREMENTS", tmp_path)
    monkeypatch.setattr(docblocks, "ROOT", tmp_path)
    shown = docblocks.gpu_check()
    assert shown.startswith(f"On {kept['device']}:\n\n`python benchmarks/gpu_check.py --cpu --rows 16 ")
    assert "| same bits " in shown and shown.count("| uci-gap ") == 3


class _Fitted:
    def __init__(self, predictive):
        self._predictive = predictive

    def predictive(self):
        return self._predictive


def test_same_bits_and_finite_say_what_the_two_runs_gave(gpu_check, monkeypatch):
    given = iter([np.array([0.25, 0.75]), np.array([0.25, 0.75 + 1e-16]), np.array([0.5, 0.5]),
                  np.array([0.5, 0.5]), np.array([0.5, np.nan]), np.array([0.5, np.nan]),
                  np.array([0.5, 0.5], dtype=np.float32), np.array([0.5, 0.5])])
    monkeypatch.setattr(gpu_check, "short_run", lambda task, method, device: (_Fitted(next(given)), 2.0, 4.0, 8))
    cpu = gpu_check.torch.device("cpu")
    found = [gpu_check.check(None, "sgd", cpu) for _ in range(4)]
    assert [(f["same"], f["finite"]) for f in found] == [(False, True), (True, True), (True, False), (False, True)]
    assert found[0]["seconds"] == 2.0 and found[0]["epochs"] == 4.0 and found[0]["batch"] == 8


def _main(gpu_check, monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--cpu", *args])
    gpu_check.main()


def test_a_failing_method_is_its_row_and_past_the_time_limit_nothing_starts(gpu_check, monkeypatch, capsys):
    clock = iter([0.0, 0.0, 0.0, 1000.0, 1000.0, 1000.0])
    monkeypatch.setattr(gpu_check, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    monkeypatch.setattr(gpu_check, "generated_task", lambda name, rows, **_: name)
    monkeypatch.setattr(gpu_check, "plain_sgd_epoch", lambda task, batch, device: 0.5)

    def short_run(task, method, device):
        if method == "de":
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return _Fitted(np.zeros(3)), 2.0, 4.0, 8
    monkeypatch.setattr(gpu_check, "short_run", short_run)
    _main(gpu_check, monkeypatch, "--tasks", "uci-gap", "--methods", "sgd", "de", "vogn", "--seconds", "60")
    printed = capsys.readouterr().out
    assert "method: sgd, epoch / plain SGD: 1, peak MiB: None, same bits: True, finite: True" in printed
    assert "method: de, note: failed: out of memory; lower the batch size" in printed
    assert "method: vogn, note: not run: past --seconds 60" in printed


def test_a_method_without_a_short_run_is_one_line(gpu_check, monkeypatch):
    monkeypatch.delitem(gpu_check.SHORT_RUNS, "vogn")
    with pytest.raises(gpu_check.BenchError, match="no short run for vogn: add one to SHORT_RUNS"):
        _main(gpu_check, monkeypatch, "--methods", "sgd", "vogn")


def test_asking_for_the_gpu_where_there_is_none_is_one_line():
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(PATH), "--methods", "sgd", "--tasks", "uci-gap"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "PyTorch sees no CUDA device" in done.stderr
