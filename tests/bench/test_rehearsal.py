"""Rehearsals: every competition model runs on generated data of its official shapes (here on a few rows, a fraction of
an official epoch), marked as a rehearsal everywhere, and refused by everything that takes a result."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench import records
from bench.rehearsal import Rehearsal, reference_of, run_folder, task_of
from bench.tasks import COMPETITION
from bench.tasks.competition import OFFICIAL_ROWS

ROWS = 12
"""Training rows of the tests' rehearsals: each competition model trains on them for seconds on a CPU."""

SHORT = {"sgd": ("1", ["--set", "batch_size=4"]),
         "sae": ("2", ["--set", "first_epochs=1", "sequential_epochs=1", "batch_size=4"])}
"""Each method's budget and settings for a rehearsal of seconds: sae's first member and one sequential one."""


def rehearse(run_cli, out: Path, task: str, method: str = "sgd", *more):
    budget, settings = SHORT[method]
    return run_cli("--method", method, "--budget", budget, "--task", task, "--rehearse", "--rehearse-rows", ROWS,
                   "--out", out, "--quiet", *settings, *more)


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("method", list(SHORT))
@pytest.mark.parametrize("task", COMPETITION)
def test_each_competition_model_rehearses_and_nothing_takes_the_rehearsal_as_a_result(task, method, run_cli,
                                                                                      tmp_path):
    code, out, err = rehearse(run_cli, tmp_path / "rehearsals", task, method)
    assert code == 0, err
    folder = tmp_path / "rehearsals" / task / method / f"budget-{SHORT[method][0]}" / f"seed-0-rehearsal-{ROWS}-rows"
    record = json.loads((folder / records.RESULT).read_text())
    official = OFFICIAL_ROWS[task]
    assert record["rehearsal"]["train_rows"] == ROWS and record["epochs_used"] == float(SHORT[method][0])
    assert record["rehearsal"]["official_train_rows"] == official.train
    assert record["rehearsal"]["official_test_rows"] == official.test
    assert record["rehearsal"]["peak_resident_bytes"] > 0 and record["rehearsal"]["peak_cuda_bytes"] is None
    assert f"{task} (rehearsal, {ROWS} rows)" in out and f"rehearsal: {task} {method}" in out
    assert "rehearsals written under" in out and "results written" not in out
    records.check_record(record, folder / records.RESULT)  # what run wrote, its validator takes

    db = tmp_path / "board.sqlite"
    for command in (["submit", folder, "--db", db], ["export-submission", folder, "--out", tmp_path / "s.zip"],
                    ["check", "--baseline", folder / records.RESULT], ["verify", folder]):
        code, _, err = run_cli(*command)
        assert code == 2 and "a rehearsal's record" in err and "without --rehearse" in err, (command, err)
        assert all(line.startswith("error: ") for line in err.strip().splitlines() if "rehearsal" in line), err
    assert not db.exists() and not (tmp_path / "s.zip").exists()  # nothing reached the board


def test_a_rehearsal_reaches_the_board_by_no_command(run_cli, tmp_path):
    code, _, err = rehearse(run_cli, tmp_path, "uci-gap")
    assert code == 0, err
    db = tmp_path / "board.sqlite"
    code, _, err = run_cli("submit", tmp_path, "--db", db)  # a folder of runs holding a rehearsal
    assert code == 2 and "a rehearsal's record" in one_line(err) and not db.exists()
    code, _, err = run_cli("sweep", "--method", "sgd", "--budget", "1", "--task", "uci-gap", "--rehearse",
                           "--rehearse-rows", ROWS, "--out", tmp_path / "sweep", "--submit", "--db", db)
    assert code == 2 and "never submitted" in one_line(err) and not db.exists()
    assert not (tmp_path / "sweep").exists()  # refused before anything trained


def test_a_rehearsal_never_replaces_a_real_run_s_folder(run_cli, tmp_path):
    real = records.run_folder(tmp_path, "uci-gap", "sgd", 1, 0)
    real.mkdir(parents=True)
    (real / records.RESULT).write_text('{"a real run": true}')
    code, _, err = rehearse(run_cli, tmp_path, "uci-gap", "sgd", "--force")  # into runs/ itself, with --force
    assert code == 0, err
    assert (real / records.RESULT).read_text() == '{"a real run": true}'
    assert (real.parent / f"seed-0-rehearsal-{ROWS}-rows" / records.RESULT).exists()
    assert run_folder(tmp_path, "uci-gap", "sgd", 1, 0, Rehearsal()).name == "seed-0-rehearsal"
    assert run_folder(tmp_path, "uci-gap", "sgd", 1, 0, None) == real


def test_rehearsals_go_apart_by_default_and_a_sweep_rehearses_too(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("sweep", "--method", "sgd", "--budget", "1", "--task", "uci-gap", "dermamnist",
                             "--rehearse", "--rehearse-rows", ROWS, "--quiet")
    assert code == 0, err
    found = sorted(path.parent.relative_to(tmp_path).as_posix() for path in tmp_path.rglob(records.RESULT))
    assert found == [f"rehearsals/{task}/sgd/budget-1/seed-0-rehearsal-{ROWS}-rows" for task in ("dermamnist",
                                                                                                 "uci-gap")]
    assert f"uci-gap (rehearsal, {ROWS} rows)" in out and "rehearsals (their metrics measure nothing" in out
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args, message", [
    (["--rehearse-rows", "4", "--task", "uci-gap"], "add --rehearse"),
    (["--rehearse", "--task", "digits"], "'digits' is not one"),
    (["--rehearse", "--task", "uci-gap", "--rehearse-rows", "513"], "512 training rows (a stand-in"),
    (["--rehearse", "--task", "cifar10", "--rehearse-rows", "50001"], "the official 50,000 training rows"),
])
def test_what_a_rehearsal_cannot_be_is_one_line(args, message, run_cli, tmp_path):
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--out", tmp_path, *args)
    assert code == 2 and message in one_line(err)


def test_the_memory_plan_runs_before_a_rehearsal_trains(run_cli, tmp_path):
    code, _, err = run_cli("--method", "de", "--budget", "100000", "--task", "cifar10", "--rehearse",
                           "--rehearse-rows", ROWS, "--set", "members=50000", "--out", tmp_path)
    assert code == 3 and "GiB" in one_line(err) and not any(tmp_path.rglob(records.RESULT))


@pytest.mark.parametrize("task", COMPETITION)
def test_the_stand_in_reference_has_the_official_reference_s_form(task):
    generated = task_of(task, Rehearsal(ROWS))
    reference = reference_of(generated)
    if generated.kind == "classification":
        assert reference.key == "probs" and reference.array.shape == (generated.n_test, generated.n_classes)
        assert np.allclose(reference.array.sum(axis=1), 1) and (reference.array > 0).all()
    else:
        assert reference.key == "samples" and reference.array.shape == (generated.n_test, 1000)
    assert reference.noise_floor is None and reference.metadata["rehearsal"] is True


@pytest.mark.parametrize("edit", [{"train_rows": 0}, {"peak_resident_bytes": None}, {"official_test_rows": "2"},
                                  {"more": 1}])
def test_an_edited_rehearsal_field_is_a_damaged_record(edit, run_cli, tmp_path):
    code, _, err = rehearse(run_cli, tmp_path, "uci-gap")
    assert code == 0, err
    path = next(tmp_path.rglob(records.RESULT))
    record = json.loads(path.read_text())
    record["rehearsal"].update(edit)
    with pytest.raises(records.DamagedFile, match="rehearsal must be null or hold"):
        records.check_record(record, path)
