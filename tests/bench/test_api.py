"""The public API (bench.api): a stable set of names, a run and a sweep from Python that return their records, the
records as a table, and every argument checked in the API's own words."""

from __future__ import annotations

import inspect
import json
import sys

import numpy as np
import pytest

from approximators.map import DeepEnsemble
from bench import api, executors, records, runner

STABLE_NAMES = {
    "ENTRY_POINT_GROUP", "Approximator", "BenchError", "BudgetExhausted", "BudgetMeter", "Categorical", "ConfigError",
    "Fit", "FixedNoiseGaussian", "Footprint", "HeteroscedasticGaussian", "Likelihood", "MeteredData",
    "MethodFailed", "ParameterLayout", "PredictiveAccumulator", "Problem", "StackedModel", "Task", "fit", "log_prior", "make_task",
    "member_generators", "member_seeds", "read_result", "resolve_config", "run", "seeded_module", "steps_for",
    "task_names", "sweep", "SweepFailed", "read_runs", "table", "dataframe",
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
                                                           "out", "label", "force", "cache", "threads",
                                                           "predictions"]
    assert list(inspect.signature(api.fit).parameters) == ["task", "method", "budget", "seed", "settings", "device",
                                                           "threads"]
    assert list(inspect.signature(api.sweep).parameters) == ["method", "budget", "task", "seed", "settings", "device",
                                                             "out", "force", "cache", "threads", "workers", "executor",
                                                             "ray_address", "quiet", "predictions", "skip_infeasible"]
    assert [p.kind for p in inspect.signature(api.sweep).parameters.values()] == [inspect.Parameter.KEYWORD_ONLY] * 16
    assert list(inspect.signature(api.read_runs).parameters) == ["out"]
    assert list(inspect.signature(api.table).parameters) == ["records"]
    assert list(inspect.signature(api.dataframe).parameters) == ["records"]
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


def test_a_sweep_from_python_leaves_out_what_a_budget_rule_refuses_with_a_warning(tmp_path):
    """skip_infeasible=True, as --skip-infeasible: sae's first member needs 100 epochs, so at 2 only sgd trains."""
    with pytest.warns(UserWarning, match=r"toy-gap sae budget 2, every seed: sae: a budget of 2 epochs") as caught:
        records_ = api.sweep(method=["sgd", "sae"], task="toy-gap", budget=2, seed=[0, 1], out=tmp_path,
                             skip_infeasible=True, predictions=False)
    assert [r["method"] for r in records_] == ["sgd", "sgd"] and len(caught) == 1
    assert not (tmp_path / "toy-gap" / "sae").exists()
    with pytest.raises(api.SweepFailed, match="2 of 4 runs failed"):
        api.sweep(method=["sgd", "sae"], task="toy-gap", budget=2, seed=[0, 1], out=tmp_path, predictions=False)


def test_a_record_alone_from_python_and_the_command_line(tmp_path, run_cli):
    """predictions=False (--no-predictions) writes result.json alone, with the sha256 of the predictions the same run
    writes otherwise."""
    kept = api.run("toy-gap", "sgd", 1, out=tmp_path / "kept")
    alone = api.run("toy-gap", "sgd", 1, out=tmp_path / "alone", predictions=False)
    swept = api.sweep(method="sgd", task="toy-gap", budget=1, out=tmp_path / "swept", predictions=False)
    assert run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", tmp_path / "cli", "--quiet",
                   "--no-predictions")[0] == 0
    with np.load(records.run_folder(tmp_path / "kept", "toy-gap", "sgd", 1, 0) / records.PREDICTIONS) as npz:
        digest = records.predictions_sha256(npz["samples"])
    assert kept["predictions_sha256"] == alone["predictions_sha256"] == swept[0]["predictions_sha256"] == digest
    for out in ("alone", "swept", "cli"):
        folder = records.run_folder(tmp_path / out, "toy-gap", "sgd", 1, 0)
        assert (folder / records.RESULT).is_file() and not (folder / records.PREDICTIONS).exists()
    code, _, err = run_cli("sweep", "--method", "sgd", "--task", "toy-gap", "--budget", "1", "--out", tmp_path / "s",
                           "--no-predictions", "--submit")
    assert code == 2 and "leave out --no-predictions" in err and not (tmp_path / "s").exists()


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


def test_a_record_says_what_ran_beside_what_was_asked_for(tmp_path):
    """SAE's chains and members per chain 0 mean "the allocation rule's choice": the config keeps the 0 (a
    configuration is the same at every budget, and a finished run is recognised by it), ``resolved`` says what ran,
    and the table shows it."""
    result = api.run("toy-gap", "sae", 240, out=tmp_path)
    assert (result["config"]["chains"], result["config"]["members_per_chain"]) == (0, 0)
    assert (result["resolved"]["chains"], result["resolved"]["members_per_chain"]) == (2, 5)
    assert {k: v for k, v in result["resolved"].items() if k not in ("chains", "members_per_chain")} == \
        {k: v for k, v in result["config"].items() if k not in ("chains", "members_per_chain")}
    assert result["method_report"]["members"] == 10
    row = api.table([result])[0]
    assert (row["config.chains"], row["resolved.chains"], row["resolved.members_per_chain"]) == (0, 2, 5)
    assert "resolved.lr" not in row, "only the settings the rule resolved"
    assert api.run("toy-gap", "sae", 240, out=tmp_path) == result, \
        "the same configuration, returned from its record: resolved values never enter the check"


def test_booleans_reach_the_config_as_booleans(tmp_path):
    result = api.run("toy-gap", "ae", 4, settings={"vectorise": False, "epochs": 2}, out=tmp_path)
    assert result["config"]["vectorise"] is False


TOY = dict(task="toy-gap", method="sgd", budget=1)


def test_a_finished_run_is_returned_from_its_record_and_force_trains_it_again(tmp_path, monkeypatch):
    """As ``python -m bench run`` shows a finished run and a sweep skips it (it used to be an error naming --force)."""
    first = api.run(**TOY, out=tmp_path)
    (record,) = tmp_path.rglob("result.json")
    stored, stored_inode = record.read_bytes(), record.stat().st_ino
    trained = []
    monkeypatch.setattr(api, "run_spec", lambda spec: trained.append(spec) or runner.run(spec))
    assert api.run(**TOY, out=tmp_path) == first
    assert trained == [] and record.read_bytes() == stored, "not trained again"
    assert api.run(**TOY, out=tmp_path, force=True)["config"] == first["config"]
    # The atomic write renames a new file over the record: its bytes may repeat (same seed, same rounded seconds).
    assert len(trained) == 1 and record.stat().st_ino != stored_inode, "force=True trains it again, replacing it"
    with pytest.raises(api.BenchError) as raised:
        api.run(**TOY, settings={"lr": 0.02}, out=tmp_path)
    line = str(raised.value)
    assert "already holds a finished run of another configuration (lr: 0.01 there, 0.02 here)" in line, line
    assert line.endswith("choose another out, or pass force=True to replace it") and "--" not in line, line
    assert len(trained) == 1


@pytest.mark.parametrize("function, call, words", [
    # seeds: -3 was run into seed--3/ (which verify refuses), 2^70 and 1.5 were an overflow and torch's error
    (api.run, dict(seed=-3), "seed must be a whole number in [0, 2^63), got -3"),
    (api.run, dict(seed=2**70), "seed must be a whole number in [0, 2^63), got 1180591620717411303424"),
    (api.run, dict(seed=10**5000), "seed must be a whole number in [0, 2^63), got a whole number of about 5000 digits"),
    (api.run, dict(seed=1.5), "seed must be a whole number in [0, 2^63), got 1.5"),
    (api.run, dict(seed="0"), "seed must be a whole number"),
    (api.run, dict(seed=True), "seed must be a whole number"),
    (api.fit, dict(seed=-1), "seed must be a whole number"),
    (api.sweep, dict(seed=[0, -1]), "seed must be a whole number in [0, 2^63), got -1"),
    (api.sweep, dict(seed=[]), "seed is an empty list"),
    # settings: "--set lr" was the command line's wording
    (api.run, dict(settings={"lr": "x"}), "settings['lr']: expected a value of type float, got 'x'"),
    (api.fit, dict(settings={"lr": "x"}), "settings['lr']: expected a value of type float, got 'x'"),
    (api.sweep, dict(settings={"lr": [0.1, "x"]}), "settings['lr']: expected a value of type float, got 'x'"),
    (api.run, dict(method="de", settings={"members": 1.5}), "settings['members'] must be an int for de"),
    (api.run, dict(settings={"lr": None}), "settings['lr'] must be a float for sgd"),
    (api.run, dict(settings={"batch_size": True}), "settings['batch_size'] must be an int for sgd"),
    (api.run, dict(settings={"batch_size": 2**70}), "settings['batch_size']: a whole number must lie in"),
    (api.run, dict(settings=[("lr", 1)]), "settings must be a dict"),
    (api.run, dict(settings={1: 2}), "settings: a setting's name is a str, got 1"),
    (api.sweep, dict(settings={"lr": []}), "settings['lr'] is an empty list"),
    (api.run, dict(settings={"nope": 1}), "method 'sgd' has no setting 'nope'"),
    # the other arguments, each by its name
    (api.run, dict(task=3), "task must be a task's name"),
    (api.sweep, dict(task=["toy-gap", None]), "task must be a task's name"),
    (api.run, dict(method=3), "method must be a method's name"),
    (api.run, dict(method="nomod:X"), "method='nomod:X': cannot import nomod"),
    (api.sweep, dict(method=["sgd", "nomod:X"]), "method='nomod:X': cannot import nomod"),
    (api.run, dict(budget="x"), "the budget must be a positive number of epochs, got 'x'"),
    (api.run, dict(budget=10**5000), "the budget must be at most 1,000,000 epochs"),
    (api.sweep, dict(budget=[1, -1]), "the budget must be a positive number of epochs, got -1"),
    (api.run, dict(device="tpu"), "device must be one of 'auto', 'cpu', 'cuda', got 'tpu'"),
    (api.fit, dict(device="cuda:0"), "device must be one of"),
    (api.run, dict(out=None), "out must be a folder's path"),
    (api.run, dict(cache=3), "cache must be a folder's path"),
    (api.run, dict(force="yes"), "force must be True or False, got 'yes'"),
    (api.run, dict(label=3), "a label must be 1 to 100 printable characters"),
    (api.run, dict(threads=0), "threads must be a whole number from 1"),
    (api.fit, dict(threads=10**5000), "threads must be a whole number from 1"),
    (api.sweep, dict(threads=0), "threads must be a whole number of at least 1"),
    (api.sweep, dict(workers=0), "workers must be a whole number of at least 1"),
    (api.sweep, dict(threads=executors.usable_cores() + 1), f"workers=1 x threads={executors.usable_cores() + 1} "
                                                            "would run"),
    (api.sweep, dict(executor="slurm"), "executor must be one of 'local', 'ray', got 'slurm'"),
    (api.sweep, dict(ray_address="10.0.0.1:6379"), "ray_address is for executor='ray'"),
    (api.sweep, dict(quiet=1), "quiet must be True or False"),
])
def test_a_bad_argument_is_one_line_in_the_api_s_words(tmp_path, monkeypatch, function, call, words):
    """Every argument of run, fit and sweep is checked before anything trains or is written; the error is the
    project's own (a BenchError) and names the argument as the function's signature does, never a command-line
    option."""
    monkeypatch.chdir(tmp_path)
    arguments = {**TOY, **({"out": tmp_path / "runs"} if function is not api.fit else {}), **call}
    with pytest.raises(api.BenchError) as raised:
        function(**arguments)
    line = str(raised.value)
    assert line.startswith(words) or words in line, line
    assert "\n" not in line and "--" not in line, line
    assert not (tmp_path / "runs").exists() and list(tmp_path.iterdir()) == [], "nothing was written"


def test_an_unavailable_gpu_is_named_as_the_argument(tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(api.BenchError, match=r"^device='cuda' was asked for, but PyTorch sees no CUDA device$"):
        api.run(**TOY, device="cuda", out=tmp_path)


def _counting_runs(monkeypatch) -> list:
    """The specs the sweep machinery trains, recorded as it trains them."""
    trained, attempt = [], executors.attempt

    def counted(spec, on_progress=None):
        trained.append((spec.task, spec.method, spec.budget, spec.seed, spec.overrides))
        return attempt(spec, on_progress)
    monkeypatch.setattr(executors, "attempt", counted)
    return trained


def test_a_sweep_returns_its_records_and_resumes_without_retraining(tmp_path, monkeypatch):
    trained = _counting_runs(monkeypatch)
    call = dict(method="sgd", task="toy-gap", budget=[1, 2], seed=[0, 1], settings={"lr": [0.01, 0.02]},
                out=tmp_path, quiet=True)
    first = api.sweep(**call)
    assert len(first) == len(trained) == 8
    assert [(r["config"]["lr"], r["budget"], r["seed"]) for r in first] == [
        (lr, budget, seed) for lr in (0.01, 0.02) for budget in (1.0, 2.0) for seed in (0, 1)]
    for record in first:  # each record is its folder's, under its variant's folder level as on the command line
        folder = records.run_folder(tmp_path / f"lr={record['config']['lr']}", "toy-gap", "sgd", record["budget"],
                                    record["seed"])
        assert records.read_result(folder) == record
        assert record["command"] == ("bench.api.sweep(method='sgd', budget=[1, 2], task='toy-gap', seed=[0, 1], "
                                     "settings={'lr': [0.01, 0.02]})")
    assert api.sweep(**call) == first and len(trained) == 8, "finished runs are read back, not trained again"
    (records.run_folder(tmp_path / "lr=0.02", "toy-gap", "sgd", 2, 1) / records.RESULT).unlink()  # interrupted
    again = api.sweep(**call)
    assert trained[8:] == [("toy-gap", "sgd", 2.0, 1, (("lr", "0.02"),))], "only the unfinished run trains"
    assert [r["metrics"] for r in again] == [r["metrics"] for r in first]
    with pytest.raises(api.BenchError, match="another configuration"):
        api.sweep(**{**call, "settings": {"lr": [0.01, 0.02], "min_lr": 0.0}})


def test_a_sweep_from_python_is_the_command_line_s(tmp_path, run_cli):
    from_python = api.sweep(method=["sgd", "de"], task="toy-gap", budget=5, seed=[3], out=tmp_path / "api",
                            settings={"batch_size": 8}, quiet=True)
    assert run_cli("sweep", "--method", "sgd", "de", "--task", "toy-gap", "--budget", "5", "--seed", "3", "--set",
                   "batch_size=8", "--out", tmp_path / "cli", "--quiet")[0] == 0
    from_cli = api.read_runs(tmp_path / "cli")
    assert [(r["method"], r["metrics"], r["config"]) for r in from_python] == \
        [(r["method"], r["metrics"], r["config"]) for r in sorted(from_cli, key=lambda r: r["method"] != "sgd")]


def test_a_failed_run_fails_only_itself_and_the_sweep_says_so(tmp_path):
    with pytest.raises(api.SweepFailed) as raised:
        api.sweep(method=["sgd", "de"], task="toy-gap", budget=2, out=tmp_path, quiet=True)
    failed = raised.value
    assert [r["method"] for r in failed.records] == ["sgd"]
    assert [(folder, code) for folder, code, _ in failed.failures] == [
        (records.run_folder(tmp_path, "toy-gap", "de", 2, 0), 2)]
    assert str(failed).startswith("1 of 2 runs failed, the first ") and "too small for 5 members" in str(failed)
    assert "\n" not in str(failed) and isinstance(failed, api.BenchError)


def test_runs_read_from_a_folder_are_the_same_table(tmp_path):
    made = [api.run("toy-gap", "sgd", budget, seed=seed, out=tmp_path / "runs") for seed in (1, 0)
            for budget in (10, 2)]
    api.run("digits", "sgd", 1, out=tmp_path / "runs" / "other")
    loaded = api.read_runs(tmp_path / "runs")
    assert [(r["task"], r["budget"], r["seed"]) for r in loaded] == [  # numerically sorted, the variant level first
        ("toy-gap", 2.0, 0), ("toy-gap", 2.0, 1), ("toy-gap", 10.0, 0), ("toy-gap", 10.0, 1), ("digits", 1.0, 0)]
    assert sorted(loaded[:4], key=lambda r: (r["seed"], r["budget"]), reverse=True) == made
    assert api.read_runs(tmp_path / "runs" / "other") == loaded[4:]
    assert api.read_runs(records.run_folder(tmp_path / "runs", "toy-gap", "sgd", 2, 0)) == loaded[:1]
    (tmp_path / "empty").mkdir()
    assert api.read_runs(tmp_path / "empty") == []
    with pytest.raises(api.ConfigError, match=r"^out='.*nowhere' is not a folder of runs"):
        api.read_runs(tmp_path / "nowhere")
    damaged = records.run_folder(tmp_path / "runs", "toy-gap", "sgd", 10, 1) / records.RESULT
    damaged.write_text(json.dumps({**made[0], "metrics": [1, 2]}))
    with pytest.raises(api.BenchError, match=rf"^{damaged}: not a run record \(metrics of the wrong type\); run it "
                                             r"again with force=True to replace it$"):
        api.read_runs(tmp_path / "runs")
    damaged.write_text("{")
    with pytest.raises(api.BenchError, match=f"^{damaged}: the run record is damaged"):
        api.read_runs(tmp_path / "runs")


def test_a_table_has_one_flat_row_per_run(tmp_path):
    toy = api.run("toy-gap", "sae", 120, settings={"chains": 1}, out=tmp_path)
    digits = api.run("digits", "sgd", 1, seed=2, out=tmp_path)
    rows = api.table([toy, digits])
    assert [list(row)[:8] for row in rows] == [list(api.TABLE_FIELDS)] * 2
    assert {key: rows[1][key] for key in api.TABLE_FIELDS} == {key: digits[key] for key in api.TABLE_FIELDS}
    assert rows[0]["all.w1"] == toy["metrics"]["w1"] and "clean.w1" not in rows[0]
    assert rows[1]["all.agreement"] == digits["metrics"]["agreement"]
    for block in ("clean", "gaussian-noise", "brightness", "blur"):
        assert rows[1][f"{block}.total_variation"] == digits["metrics_by_block"][block]["total_variation"]
        assert rows[1][f"noise_floor.{block}.total_variation"] == digits["noise_floor"][block]["total_variation"]
    assert rows[1]["config.batch_size"] == 64 and rows[0]["config.chains"] == 1
    assert rows[0]["report.members_per_chain"] == toy["method_report"]["members_per_chain"]
    assert all(not isinstance(value, (dict, list)) for row in rows for value in row.values()), "flat columns"


@pytest.mark.parametrize("records_, words", [
    ([{"task": "toy-gap"}], r"^records\[0\]: not a run record \(no method, budget, seed, metrics, metrics_by_block, "
                            r"config\)$"),
    ([None], r"^records\[0\]: not a run record \(a NoneType, not a dict\)$"),
    ([{"task": "toy-gap", "method": "sgd", "budget": 1, "seed": 0, "metrics": {}, "metrics_by_block": {}, "config": {},
       "resolved": [1], "method_report": "x"}], r"^records\[0\]: not a run record \(resolved, method_report of the "
                                                r"wrong type\)$"),
])
def test_a_table_of_what_is_not_a_record_is_one_line(records_, words):
    with pytest.raises(api.ConfigError, match=words):
        api.table(records_)


def test_a_dataframe_has_the_table_s_rows(tmp_path):
    pandas = pytest.importorskip("pandas")
    made = [api.run("toy-gap", "sgd", 1, seed=seed, out=tmp_path) for seed in (0, 1)]
    frame = api.dataframe(made)
    assert isinstance(frame, pandas.DataFrame)
    assert frame.to_dict("records") == api.table(made)
    assert list(frame.groupby("config.lr")["all.w1"].mean()) == [np.mean([r["metrics"]["w1"] for r in made])]


def test_without_pandas_a_dataframe_is_one_line_and_the_table_still_works(tmp_path, monkeypatch):
    made = [api.run("toy-gap", "sgd", 1, out=tmp_path)]
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if pandas were not installed
    with pytest.raises(api.ConfigError, match=r"^dataframe needs pandas, which is not installed: pip install pandas"):
        api.dataframe(made)
    assert api.table(made)[0]["all.w1"] == made[0]["metrics"]["w1"]


@pytest.mark.parametrize("budget", ["10", None, True, [1], float("nan"), 0, -1, 10**7])
def test_a_budget_that_is_no_budget_is_a_bad_argument_not_an_exhausted_budget(budget, tmp_path):
    from bench.errors import BudgetExhausted, ConfigError

    with pytest.raises(ConfigError) as raised:
        api.fit("toy-gap", "sgd", budget)
    assert not isinstance(raised.value, BudgetExhausted)


@pytest.mark.parametrize("call", [dict(task="x" * 100_000), dict(method="y" * 100_000),
                                  dict(settings={"z" * 100_000: 1}), dict(label="l" * 100_000)])
def test_an_error_message_is_cut_however_long_the_value_it_echoes(call, tmp_path):
    from bench.errors import MESSAGE_CHARS

    with pytest.raises(api.BenchError) as raised:
        api.run(**{**TOY, "out": tmp_path / "runs", **call})
    line = str(raised.value)
    assert len(line) <= MESSAGE_CHARS and line.endswith("characters, cut)") and "\n" not in line
    assert str(type(raised.value)(line)) == line  # raised again (a worker's error unpickled), it is cut no further
