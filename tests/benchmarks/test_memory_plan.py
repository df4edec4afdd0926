"""benchmarks/memory_plan.py: the memory plan against what runs hold, each case in a fresh process. The plan means to
count no more than a run holds (it refuses only what cannot fit): what a run holds at its peak, over what was
resident before it, must be at least what it planned; and on the competition models not much more (the kept
measurement, ``benchmarks/results/memory-plan.json``, and the docs' table of it)."""

import importlib.util
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PATH = ROOT / "benchmarks" / "memory_plan.py"
KEPT = ROOT / "benchmarks" / "results" / "memory-plan.json"
DOC = ROOT / "docs" / "writing-a-method.md"


def _script():
    spec = importlib.util.spec_from_file_location("memory_plan", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kept_rows() -> list[dict]:
    table = json.loads(KEPT.read_text())["tables"]["competition"]
    assert table["columns"] == list(_script().COLUMNS)
    return [dict(zip(table["columns"], row)) for row in table["rows"]]


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="a run's peak is read from Linux's /proc")
@pytest.mark.parametrize("case", ["de:toy-gap:members=4000:4000", "de:digits-cnn:members=60:60"])
def test_a_run_holds_at_least_what_it_planned(case):
    done = subprocess.run([sys.executable, str(PATH), "--one", case], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    assert measured["plan (MiB)"] > 0 and measured["measured / plan"] >= 1, measured


def test_a_malformed_case_is_one_line():
    done = subprocess.run([sys.executable, str(PATH), "--cases", "de:toy-gap"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "METHOD:TASK:SETTING=VALUE:BUDGET" in done.stderr


def test_every_competition_model_and_method_was_measured(kept_rows):
    script = _script()
    assert sorted((row["task"], row["method"]) for row in kept_rows) == sorted(
        (task, method) for task in script.COMPETITION_TASKS for method in script.COMPETITION_METHODS)


def test_every_competition_run_held_at_least_its_plan_and_at_most_one_and_a_half_times_it(kept_rows):
    """The plan refuses only what cannot fit (a run holds at least what it counts) and counts most of what a run
    holds (at most :data:`HIGHEST_RATIO` times)."""
    highest = _script().HIGHEST_RATIO
    assert highest == 1.5
    for row in kept_rows:
        peak, plan = row["peak (MiB)"], row["plan (MiB)"]  # each rounded to 0.1 MiB, the ratio to 0.01 unrounded
        assert (peak - 0.05) / (plan + 0.05) - 0.005 <= row["peak / plan"] <= (peak + 0.05) / (plan - 0.05) + 0.005, row
        assert 1 <= row["peak / plan"] <= highest, f"{row['task']} {row['method']}: peak / plan {row['peak / plan']}"


def _weightless(name: str):
    """Competition task ``name`` of its official sizes whose rows are one row of zeros repeated (a view: the plan
    reads their shapes, not their values, and they take no memory)."""
    from bench.tasks.competition import OFFICIAL_ROWS, generated_task

    task, rows = generated_task(name, 10, test_rows=10), OFFICIAL_ROWS[name]

    def repeated(x: torch.Tensor, count: int) -> torch.Tensor:
        return torch.zeros_like(x[:1]).expand(count, *x.shape[1:])

    return replace(task, x_train=repeated(task.x_train, rows.train), y_train=repeated(task.y_train, rows.train),
                   x_test=repeated(task.x_test, rows.test), y_test=None)


def test_the_kept_plans_are_what_the_plan_counts_now(kept_rows, monkeypatch):
    """A change to the plan (its constants, its terms, a method's footprint) makes the kept measurement stale: measure
    again, ``python benchmarks/memory_plan.py --competition --out benchmarks/results/memory-plan.json``."""
    import functools

    from approximators import base

    measure = base.activations_per_row
    probe = functools.cache(lambda factory, shape, dtype, networks, device_type: measure(
        factory, torch.zeros(shape, dtype=dtype), networks, device_type))
    monkeypatch.setattr(base, "activations_per_row", lambda factory, x, networks=1, device_type="cpu": probe(
        factory, tuple(x.shape), x.dtype, networks, device_type))  # once per network, input and stack
    script = _script()
    for row in kept_rows:
        plan = script.planned_case(row["method"], _weightless(row["task"]))[3]
        assert round(plan / 2**20, 1) == row["plan (MiB)"], f"{row['task']} {row['method']}: measure again"


def test_the_docs_table_is_the_kept_measurement():
    from bench import docblocks

    block = re.search(r"<!-- generated: memory-plan by `[^`]*` -->\n(.*?)<!-- end: memory-plan -->", DOC.read_text(),
                      re.DOTALL)
    assert block, f"{DOC} has no memory-plan block"
    assert block[1] == docblocks.GENERATORS["memory-plan"](), "run `python -m bench.docblocks --write`"
    assert docblocks.MEASURED_TABLES["memory-plan"][:2] == (KEPT.stem, "competition")
