"""A built-in method's record claims the cost its settings spend at its budget (issue 65, kind 3): the budget rule
fixes it before training, so ``submit``, ``verify`` and ``export-submission`` refuse a record claiming another, in
one line, without re-executing it; hmc's cost follows its step size, so only its bounds are checked. Every shipped
record passes."""

from __future__ import annotations

import json

import pytest

from approximators import METHODS
from approximators.base import recorded_config
from bench import records
from bench.costs import planned_cost, refused_cost, refused_passes
from bench.errors import EXIT_BAD_INPUT
from bench.tasks import get_task
from leaderboard import submission
from leaderboard.shipped import FOLDER as SHIPPED

COMMANDS = {
    "submit": lambda folder, tmp: ["submit", folder, "--name", "a", "--db", tmp / "board.sqlite"],
    "verify": lambda folder, tmp: ["verify", folder],
}

FORGED = [
    # (method, budget, claimed epochs used): each a cost its settings cannot spend at that budget
    ("sgd", 2.0, 0),
    ("sgd", 2.0, -0.0),
    ("sgd", 2.0, 1.0),
    ("sgd", 2.0, 1.5),
    ("sgd", 2.0, 0.0),
    ("de", 10.0, 5.0),
    ("de", 12.0, 12.0),  # 5 members of 2 epochs: 10, two left unspent
    ("multiswag", 100.0, 100.0),  # 3 runs of 33 epochs: 99
    ("vogn", 10.0, 10.0),  # the first minibatch, then 9 epochs: 9.2 on toy-gap
    ("laplace", 10.0, 9.0),
    ("mc-dropout", 10.0, 1e-300),
    ("hmc", 100.0, 0.0),  # hmc: only bounds (its chains' first gradients and one step, at least)
    ("hmc", 100.0, 1.0),
]


def _forge(folder, claimed) -> None:
    path = folder / records.RESULT
    result = json.loads(path.read_text())
    path.write_text(json.dumps({**result, "epochs_used": claimed}))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("method, budget, claimed", FORGED)
def test_a_record_claiming_another_cost_than_its_plan_is_refused_alike(tmp_path, run_cli, make_run, command, method,
                                                                         budget, claimed):
    folder = make_run(tmp_path / "runs", "toy-gap", method=method, budget=budget)
    if command == "submit":  # the honest record is taken (verify would train it: not here)
        (tmp_path / "honest").mkdir()
        assert run_cli(*COMMANDS[command](folder, tmp_path / "honest"))[0] == 0
    _forge(folder, claimed)
    code, _, err = run_cli(*COMMANDS[command](folder, tmp_path))
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1, err
    assert str(folder / records.RESULT) in err and "epochs used" in err and "edited after the run" in err, err
    if method == "hmc":
        assert "only bounds are checked" in err, err


PASSES_FORGED = [("sgd", 2.0, 2.0), ("sgd", 2.0, 0.0), ("de", 10.0, 1.0), ("mc-dropout", 10.0, 29.0),
                 ("swag", 10.0, 31.0), ("multiswag", 100.0, 30.0), ("sgld", 10.0, -0.0)]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("method, budget, claimed", PASSES_FORGED)
def test_a_record_claiming_other_test_passes_than_its_settings_fix_is_refused(tmp_path, run_cli, make_run, command,
                                                                              method, budget, claimed):
    folder = make_run(tmp_path / "runs", "toy-gap", method=method, budget=budget)
    path = folder / records.RESULT
    path.write_text(json.dumps({**json.loads(path.read_text()), "test_passes": claimed}))
    code, _, err = run_cli(*COMMANDS[command](folder, tmp_path))
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1 and "test passes" in err, err


def test_export_submission_refuses_a_record_claiming_another_cost(tmp_path, file_server, official_files,
                                                                  fixture_checksums, run_cli):
    """uci-gap at fixture size: a real sgd run exports; its record edited to each cost its plan does not spend is
    refused in one line, and no zip is written."""
    file_server.files.update(official_files)
    cache = str(tmp_path / "cache")
    assert run_cli("fetch", "--task", "uci-gap", "--cache", cache, "--data-url", file_server.url + "data/",
                   "--reference-url", file_server.url + "reference/", "--quiet")[0] == 0
    assert run_cli("--method", "sgd", "--budget", "2", "--task", "uci-gap", "--cache", cache,
                   "--out", str(tmp_path / "runs"), "--quiet")[0] == 0
    folder = tmp_path / "runs" / "uci-gap" / "sgd" / "budget-2" / "seed-0"
    archive = tmp_path / "submission.zip"
    assert run_cli("export-submission", str(folder), "--out", str(archive), "--cache", cache)[0] == 0
    archive.unlink()
    for claimed in (0, -0.0, 1.0, 1.999, 1e-300):
        _forge(folder, claimed)
        code, _, err = run_cli("export-submission", str(folder), "--out", str(archive), "--cache", cache)
        assert code == EXIT_BAD_INPUT and err.count("\n") == 1 and "epochs used" in err, (claimed, err)
        assert not archive.exists()


@pytest.mark.parametrize("method, budget", [("sgd", 2.0), ("de", 12.0), ("multiswag", 100.0), ("vogn", 10.0),
                                            ("sae", 1000.0), ("csgmcmc", 100.0), ("hmc", 100.0)])
def test_the_planned_cost_is_accepted_by_the_validator(tmp_path, make_run, method, budget):
    folder = make_run(tmp_path / "runs", "toy-gap", method=method, budget=budget)
    assert submission.checked_run(folder).result["epochs_used"] > 0


def test_every_built_in_method_has_a_planned_cost_and_every_shipped_record_claims_it():
    """Every method bdl-bench ships declares its cost here, and every one of the shipped store's records (made by
    real runs) claims the cost its plan fixes (hmc: within its bounds)."""
    n_train = {}
    paths = sorted(SHIPPED.rglob(records.RESULT))
    assert paths
    seen = set()
    for path in paths:
        result = json.loads(path.read_text())
        method = METHODS[result["method"]]
        n_train.setdefault(result["task"], get_task(result["task"]).n_train)
        cost = planned_cost(method(recorded_config(method, result["config"])), float(result["budget"]),
                            n_train[result["task"]])
        assert cost is not None and not refused_cost(result["epochs_used"], cost), (path, result["epochs_used"], cost)
        assert not refused_passes(result["test_passes"], cost), (path, result["test_passes"], cost)
        seen.add(result["method"])
    assert seen == set(METHODS), set(METHODS) - seen
