"""The public API (bench.api): a stable set of names, and a run from Python that returns its record."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from approximators.map import DeepEnsemble
from bench import api, records

STABLE_NAMES = {
    "ENTRY_POINT_GROUP", "Approximator", "BenchError", "BudgetExhausted", "BudgetMeter", "Categorical", "ConfigError",
    "Fit", "FixedNoiseGaussian", "Footprint", "HeteroscedasticGaussian", "Likelihood", "MeteredData",
    "MethodFailed", "ParameterLayout", "PredictiveAccumulator", "Problem", "StackedModel", "Task", "fit", "log_prior", "make_task",
    "member_generators", "member_seeds", "read_result", "resolve_config", "run", "seeded_module", "steps_for",
    "task_names",
}


class Pair(DeepEnsemble):
    """A user's method defined in a script or notebook."""

    name = "pair"
    summary = "two MAP networks"

    def n_members(self) -> int:
        return 2


def test_the_public_names_are_the_documented_ones():
    assert set(api.__all__) == STABLE_NAMES
    assert all(hasattr(api, name) for name in api.__all__)


def test_the_contract_keeps_its_signatures():
    """A change here breaks every user's method: it needs a new major version, not a quiet edit."""
    assert list(inspect.signature(api.Approximator.fit).parameters) == ["self", "problem", "data", "generator"]
    assert list(inspect.signature(api.Approximator.footprint).parameters) == ["self", "budget", "n_train"]
    assert list(inspect.signature(api.PredictiveAccumulator).parameters) == ["problem", "n_members", "generator",
                                                                            "model"]
    assert list(inspect.signature(api.run).parameters) == ["task", "method", "budget", "seed", "settings", "device",
                                                           "out", "label", "force", "cache", "threads"]
    assert list(inspect.signature(api.fit).parameters) == ["task", "method", "budget", "seed", "settings", "device",
                                                           "threads"]
    assert list(inspect.signature(api.make_task).parameters) == ["name", "x_train", "y_train", "x_test",
                                                                 "model_factory", "likelihood", "prior_variance",
                                                                 "y_test", "description"]


def test_fit_on_a_built_in_task_is_the_run_s_predictive_without_writing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fitted = api.fit("toy-gap", "sgd", 2, seed=5)
    result = api.run("toy-gap", "sgd", 2, seed=5, out=tmp_path / "runs")
    assert list(tmp_path.iterdir()) == [tmp_path / "runs"], "fit writes nothing"
    folder = records.run_folder(tmp_path / "runs", "toy-gap", "sgd", 2, 5)
    with np.load(folder / records.PREDICTIONS) as saved:
        assert (fitted.predictive == saved[result["reference"]["key"]]).all()
    assert fitted.epochs_used == result["epochs_used"] == 2


def test_a_class_runs_from_python_and_its_record_comes_back(tmp_path):
    result = api.run("toy-gap", Pair, 2, seed=3, settings={"lr": 0.02}, out=tmp_path, label="pair, lr 0.02")
    assert (result["method"], result["seed"], result["epochs_used"], result["label"]) == ("pair", 3, 2.0,
                                                                                         "pair, lr 0.02")
    assert result["config"]["lr"] == 0.02
    assert result["method_source"].endswith(":Pair")
    assert result["command"].startswith("bench.api.run(task='toy-gap', method='Pair'")
    assert api.read_result(records.run_folder(tmp_path, "toy-gap", "pair", 2, 3)) == result


def test_a_run_from_python_equals_the_command_lines(tmp_path, run_cli):
    from_python = api.run("toy-gap", "sgd", 1, seed=5, out=tmp_path / "api")
    assert run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--seed", "5", "--out", tmp_path / "cli",
                   "--quiet")[0] == 0
    from_cli = records.read_result(records.run_folder(tmp_path / "cli", "toy-gap", "sgd", 1, 5))
    assert from_python["metrics"] == from_cli["metrics"]
    assert from_cli["command"].endswith("--method sgd --budget 1 --task toy-gap --seed 5 --out "
                                        f"{tmp_path / 'cli'} --quiet")


@pytest.mark.parametrize("call, message", [
    (dict(task="toy-gap", method=Pair, budget=1, settings={"members": 0}), "members must lie in [1, inf)"),
    (dict(task="toy-gap", method=Pair, budget=1, label=""), "a label must be"),
    (dict(task="toy-gap", method=Pair, budget=1, label="a\nb"), "a label must be"),
    (dict(task="toy-gap", method=type("Sgd", (DeepEnsemble,), {"name": "sgd", "summary": "x"}), budget=1),
     "is a built-in method's"),
    (dict(task="toy-gap", method=dict, budget=1), "is not a subclass of approximators.Approximator"),
])
def test_a_bad_call_is_a_bench_error(tmp_path, call, message):
    with pytest.raises(api.BenchError, match="^.*" + message.replace("[", r"\[").replace(")", r"\)")):
        api.run(**call, out=tmp_path)
    assert not any(tmp_path.iterdir())


def test_booleans_reach_the_config_as_booleans(tmp_path):
    result = api.run("toy-gap", "ae", 4, settings={"vectorise": False, "epochs": 2}, out=tmp_path)
    assert result["config"]["vectorise"] is False
