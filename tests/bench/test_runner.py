"""The runner keeps what scores a method out of the method's reach while it trains."""

import dataclasses
import sys
import types

import numpy as np
import pytest
import torch

from approximators import METHODS
from approximators.map import MAP
from bench.runner import RunSpec, run
from bench.tasks import Task
from reference.store import Reference

_OPAQUE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, str, bytes,
           int, float, bool, type(None))


def _reachable(roots, depth: int = 4):
    """Every object reachable from ``roots`` through attributes, dataclass fields and containers, to ``depth``."""
    seen, frontier = {}, list(roots)
    for _ in range(depth):
        following = []
        for obj in frontier:
            if id(obj) in seen or isinstance(obj, _OPAQUE):
                continue
            seen[id(obj)] = obj
            if isinstance(obj, dict):
                following += list(obj.values())
            elif isinstance(obj, (list, tuple, set, frozenset)):
                following += list(obj)
            elif isinstance(obj, (torch.Tensor, np.ndarray)):
                continue
            elif dataclasses.is_dataclass(obj):
                following += [getattr(obj, f.name, None) for f in dataclasses.fields(obj)]
            else:
                following += list(getattr(obj, "__dict__", {}).values())
                following += [getattr(obj, s, None) for s in getattr(type(obj), "__slots__", ())]
        frontier = following
    return list(seen.values())


class FrameSearchingMAP(MAP):
    """``sgd`` that, while it trains, looks through every frame above it for the reference or the labels."""

    found: list = []

    def fit(self, problem, data, generator):
        frame, roots = sys._getframe(1), []
        while frame is not None:
            roots += list(frame.f_locals.values())
            frame = frame.f_back
        FrameSearchingMAP.found = [type(o).__name__ for o in _reachable(roots) if isinstance(o, (Reference, Task))]
        super().fit(problem, data, generator)


def test_neither_the_reference_nor_the_test_labels_are_reachable_from_fit(tmp_path, monkeypatch):
    monkeypatch.setitem(METHODS, "sgd", FrameSearchingMAP)
    result = run(RunSpec(task="toy-gap", method="sgd", budget=2, out=tmp_path))
    assert FrameSearchingMAP.found == []
    assert result["metrics"]["w2"] > 0  # the run was scored after fit, as usual


def test_the_numerics_key_names_what_decides_round_off_and_nothing_else():
    from bench.runner import NUMERICS, environment, numerics_changes

    here = {**environment(), "device": "cpu"}
    assert set(NUMERICS) - {"device"} <= set(environment())
    assert numerics_changes(here, {**here, "platform": "Linux-0.0-another-build", "cpu_count": 64,
                                   "bdl-bench": "0.0.1"}) == {}
    for field in NUMERICS:
        assert numerics_changes({**here, field: "elsewhere"}, here) == {field: ("elsewhere", here[field])}
    older = {key: value for key, value in here.items() if key != "cpu_capability"}
    assert numerics_changes(older, here) == {"cpu_capability": (None, here["cpu_capability"])}, \
        "a record that does not say is not known to be comparable bitwise"


def test_the_record_names_the_checkout_as_it_was_when_the_run_started(tmp_path, monkeypatch):
    """A file edited while a long run trains is not that run's code: the checkout is asked before training."""
    import bench.runner as runner

    state = {"commit": "0" * 40, "dirty": False}
    monkeypatch.setattr(runner, "source_checkout", lambda: dict(state))
    fit_and_predict = runner.fit_and_predict

    def edited_meanwhile(*args, **kwargs):
        state["dirty"] = True
        return fit_and_predict(*args, **kwargs)

    monkeypatch.setattr(runner, "fit_and_predict", edited_meanwhile)
    record = run(RunSpec(task="toy-gap", method="sgd", budget=1, seed=0, out=tmp_path))
    assert state["dirty"] and record["git"] == {"commit": "0" * 40, "dirty": False}


def test_what_run_writes_submit_takes_even_after_no_epoch(tmp_path, monkeypatch, run_cli):
    """A method that reads no training data finishes with epochs_used 0: run wrote it and submit refused it ("claims
    0.0 epochs used, outside (0, 2]"). One validator now checks the record before run writes it."""
    from approximators.base import PredictiveAccumulator
    from approximators.training import initial_members

    calls = []

    def fit(self, problem, data, generator):  # the initial network's predictive: no training datum read
        calls.append(data.meter.epochs_used)
        accumulator = PredictiveAccumulator(problem, 1, generator)
        accumulator.add(initial_members(problem.model_factory, [0]))
        self._predictive = accumulator.result()

    monkeypatch.setattr(FrameSearchingMAP, "fit", fit)
    monkeypatch.setitem(METHODS, "sgd", FrameSearchingMAP)
    result = run(RunSpec(task="toy-gap", method="sgd", budget=2, out=tmp_path))
    assert calls == [0.0] and result["epochs_used"] == 0
    folder = tmp_path / "toy-gap" / "sgd" / "budget-2" / "seed-0"
    code, _, err = run_cli("submit", folder, "--db", tmp_path / "board.sqlite", "--name", "m")
    assert code == 0, err


def test_a_record_its_own_validator_would_refuse_is_never_written(tmp_path, monkeypatch):
    """The record is checked as verify and submit read it back before it is written: a record run would write and
    they refuse is a bug here, exit 70, and the folder stays unfinished (its predictions kept)."""
    from bench import records

    monkeypatch.setattr(records, "SEED_LIMIT", 0)  # as if run wrote a field the validator no longer takes
    with pytest.raises(RuntimeError, match="its own validator refuses"):
        run(RunSpec(task="toy-gap", method="sgd", budget=1, out=tmp_path))
    folder = tmp_path / "toy-gap" / "sgd" / "budget-1" / "seed-0"
    assert not (folder / records.RESULT).exists() and (folder / records.PREDICTIONS).exists(), "predictions kept"
