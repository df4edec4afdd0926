"""What a budget implies is planned before anything is allocated: an absurd budget, or settings that
multiply what a run holds beyond the machine's memory, are refused in one line before training."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from approximators import METHODS, resolve_config
from approximators import base as approximators_base
from approximators.base import settings_bounds
from bench import verify
from bench.budget import MAX_BUDGET_EPOCHS, BudgetMeter
from bench.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, BudgetExhausted, ConfigError
from bench.memory import Room
from bench.runner import metered
from bench.tasks import get_task
from tests.reliability.test_error_boundary import assert_one_line

N_TRAIN = 400


@pytest.mark.parametrize("budget", ["1e30", "1000001", "1e308", str(MAX_BUDGET_EPOCHS * (1 + 1e-12))])
@pytest.mark.parametrize("method", ["ae", "sae", "de", "sgld", "csgmcmc", "multiswag"])
def test_an_absurd_budget_is_refused_before_anything_is_built(tmp_path, run_cli, method, budget):
    code, _, err = run_cli("--method", method, "--budget", budget, "--task", "toy-gap", "--out", tmp_path, "--quiet")
    assert_one_line(code, err, EXIT_BAD_INPUT, "--budget", "at most 1,000,000 epochs")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("command", [("leaderboard", "--db", "board.sqlite"),
                                     ("submit", "anything.zip", "--db", "board.sqlite", "--method", "de")])
def test_other_commands_refuse_the_same_budgets(tmp_path, run_cli, command):
    code, _, err = run_cli(*command, "--budget", "1e30")
    assert_one_line(code, err, EXIT_BAD_INPUT, "at most 1,000,000 epochs")
    assert not any(tmp_path.iterdir())


def test_the_meter_refuses_a_budget_beyond_the_limit():
    BudgetMeter(MAX_BUDGET_EPOCHS, N_TRAIN)
    with pytest.raises(ConfigError, match="at most 1,000,000 epochs"):
        BudgetMeter(MAX_BUDGET_EPOCHS * 2, N_TRAIN)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_the_defaults_plan_within_a_small_machine_at_the_largest_budget(method):
    """Every built-in method's default plan for the largest budget fits 24 GiB with the embedded models
    (a plan is refused only when it cannot fit)."""
    approximator = METHODS[method](resolve_config(METHODS[method], "toy-gap"))
    assert approximator.footprint(MAX_BUDGET_EPOCHS, N_TRAIN).bytes(10_000) < 24 * 2**30


GiB = 2**30
MULTIPLYING = [  # method, task, setting, what the refusal names, a memory in which the defaults plan to fit
    ("de", "toy-gap", "members=1000000", "member", GiB), ("sgld", "toy-gap", "chains=1000000", "chain", GiB),
    ("csgmcmc", "digits", "chains=20000", "chain", 2 * GiB),
    ("multiswag", "toy-gap", "runs=100000", "more parameter vectors", GiB),
    ("ae", "toy-gap", "epochs=1", "member", GiB), ("sae", "digits", "chains=9000", "chain", GiB // 2)]


@pytest.mark.parametrize("method, task, setting, what, memory", MULTIPLYING)
def test_settings_that_multiply_what_a_run_holds_are_refused_before_fit(tmp_path, run_cli, monkeypatch, method, task,
                                                                       setting, what, memory):
    monkeypatch.setattr(approximators_base, "device_memory", lambda device: Room(memory, "of a small machine"))
    monkeypatch.setattr(METHODS[method], "fit", lambda *_: pytest.fail("fit ran before the plan was checked"))
    code, _, err = run_cli("--method", method, "--budget", "1000000", "--task", task, "--out", tmp_path,
                           "--quiet", "--set", setting)
    assert_one_line(code, err, EXIT_ENVIRONMENT, f"{method}: a budget of 1e+06 epochs", what, "GiB of a small machine")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("method, task, setting, what, memory", MULTIPLYING)
def test_the_defaults_plan_to_fit_the_memories_used_above(method, task, setting, what, memory):
    """So that only the multiplying setting can be what the test above sees refused."""
    problem, data = metered(get_task(task), MAX_BUDGET_EPOCHS)
    n_params = sum(p.numel() for p in problem.model_factory().parameters())
    cls = METHODS[method]
    footprint = cls(resolve_config(cls, task)).footprint(MAX_BUDGET_EPOCHS, data.n_train)
    measured = approximators_base.activations_per_row(problem.model_factory, problem.x_test[:8])
    assert footprint.bytes(n_params, measured, problem.x_test.shape[0], problem.n_classes or 1000) < memory


def test_an_anchored_ensemble_plans_its_members_together_only_when_vectorised():
    cls = METHODS["ae"]
    together = cls(resolve_config(cls, "toy-gap", {"epochs": "10"})).footprint(1000, N_TRAIN)
    one_by_one = cls(resolve_config(cls, "toy-gap", {"epochs": "10", "vectorise": "false"})).footprint(1000, N_TRAIN)
    assert (together.networks, one_by_one.networks) == (100, 1)


def test_a_method_without_a_batch_size_is_planned_as_one_network_without_a_schedule():
    """A user's method that says nothing of its schedule is not refused for one it may not hold."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class SamplerConfig:
        samples: int = 10

    class Sampler(approximators_base.Approximator):
        name, summary, Config = "sampler", "a user's method", SamplerConfig

    assert Sampler(SamplerConfig()).footprint(MAX_BUDGET_EPOCHS, 10**6) == approximators_base.Footprint(1, 0)


def test_an_edited_record_claiming_a_huge_budget_is_refused_before_verify_trains(tmp_path, run_cli, monkeypatch):
    assert run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", tmp_path, "--quiet")[0] == 0
    (record,) = tmp_path.rglob("result.json")
    result = json.loads(record.read_text())
    result["budget"] = 1e6
    record.write_text(json.dumps(result))
    metered_budgets = []

    def no_training(_task, budget, *_args, **_kwargs):  # the re-execution's meter: what training would start with
        metered_budgets.append(budget)
        raise RuntimeError("verify started training")
    monkeypatch.setattr(verify, "metered", no_training)
    for command in (("verify", record.parent), ("submit", record.parent, "--verify", "--db", tmp_path / "db.sqlite")):
        code, _, err = run_cli(*command)
        assert_one_line(code, err, EXIT_BAD_INPUT, "would train 1,000,000 epochs", "--max-epochs 1000000")
        assert metered_budgets == [], "refused before a meter was set up to train"
    assert not (tmp_path / "db.sqlite").exists()


def test_verify_plans_every_folder_it_re_executes(tmp_path, run_cli, monkeypatch):
    """Issue 48: planning was tested on one folder. Two records claiming 60,000 epochs each are 120,000 in all,
    beyond the bound, though each alone is within it."""
    assert run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--seed", "0", "1", "--out", tmp_path,
                   "--quiet")[0] == 0
    for record in tmp_path.rglob("result.json"):
        result = json.loads(record.read_text())
        result["budget"] = 60000.0
        record.write_text(json.dumps(result))
    monkeypatch.setattr(verify, "metered", lambda *_args, **_kwargs: pytest.fail("verify started training"))
    code, _, err = run_cli("verify", tmp_path)
    assert_one_line(code, err, EXIT_BAD_INPUT, "verifying 2 run(s) would train 120,000 epochs in all")


def test_a_baseline_claiming_a_huge_budget_is_refused_before_check_trains(tmp_path, run_cli):
    baseline = json.loads((Path(__file__).parents[2] / "benchmarks" / "baseline.json").read_text())
    baseline["configuration"]["budgets"]["de"] = 1e6
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    code, _, err = run_cli("check", "--baseline", tmp_path / "baseline.json", "--method", "de", "--task", "toy-gap")
    assert_one_line(code, err, EXIT_BAD_INPUT, "would train 10,000,000 epochs")
    code, _, err = run_cli("check", "--baseline", tmp_path / "baseline.json", "--method", "sgd", "--task", "toy-gap",
                           "--max-epochs", "100")
    assert_one_line(code, err, EXIT_BAD_INPUT, "would train 200 epochs", "--max-epochs 200")


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5", "abc"])
def test_the_re_execution_bound_itself_is_a_positive_finite_number(tmp_path, run_cli, value):
    code, _, err = run_cli("verify", tmp_path, "--max-epochs", value)
    assert_one_line(code, err, EXIT_BAD_INPUT, "--max-epochs")


UNCHARGED = {"samples": "a predictive's draws: a pass over the test set each",
             "rank": "SWAG's deviations: allocated whole, and each draw's cost grows with them"}
"""Settings whose work no budget charges (issue 28's audit, docs/methods.md): each must have a finite cap."""


@pytest.mark.parametrize("method", sorted(name for name, cls in METHODS.items()
                                          if UNCHARGED.keys() & settings_bounds(cls.Config).keys()))
def test_work_no_budget_charges_is_capped_and_refused_beyond_its_cap(tmp_path, run_cli, method):
    bounds = settings_bounds(METHODS[method].Config)
    for name in UNCHARGED.keys() & bounds.keys():
        high = float(bounds[name].text[1:-1].split(",")[1])
        assert math.isfinite(high), (method, name)
        code, _, err = run_cli("--method", method, "--budget", "2", "--task", "toy-gap", "--out", tmp_path,
                               "--quiet", "--set", f"{name}={int(high) + 1}")
        assert_one_line(code, err, EXIT_BAD_INPUT, f"{name} must lie in")
        assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("budget", [1.0, 2.0, 10.0])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_budget_too_small_for_a_method_is_refused_by_its_plan_not_its_training(method, budget):
    """A budget a method's rule cannot use is refused when the run is planned (what `sweep --skip-infeasible` asks),
    never after training began: a plan that accepts a budget trains within it."""
    from bench.runner import fit_and_predict, planned

    task = get_task("toy-gap")
    cls = METHODS[method]
    problem, data = metered(task, budget)
    try:
        approximator = planned(cls, resolve_config(cls, task.name, {}), problem, data)
    except (BudgetExhausted, ConfigError):
        return
    fit_and_predict(approximator, problem, data, seed=0)
    assert 0 < data.meter.epochs_used <= budget


def test_verify_plans_the_seeds_it_re_executes_for_records_made_elsewhere(tmp_path, run_cli, monkeypatch):
    """A record made on another CPU kind may need its configuration's 10 seeds re-executed natively and 10 with other
    kernels: two records of one configuration claiming 5,001 epochs are planned as 10,002 + 5,001 x (8 + 10), beyond
    the bound, where their claims alone are far within it."""
    assert run_cli("--method", "sgd", "--budget", "1", "--task", "toy-gap", "--seed", "0", "1", "--out", tmp_path,
                   "--quiet")[0] == 0
    for record in tmp_path.rglob("result.json"):
        result = json.loads(record.read_text())
        result["budget"] = 5001.0
        result["environment"] = {**result["environment"], "cpu": "another CPU kind"}
        record.write_text(json.dumps(result))
    monkeypatch.setattr(verify, "metered", lambda *_args, **_kwargs: pytest.fail("verify started training"))
    code, _, err = run_cli("verify", tmp_path)
    assert_one_line(code, err, EXIT_BAD_INPUT, "verifying 2 run(s) would train 100,020 epochs in all")
