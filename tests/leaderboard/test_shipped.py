"""The shipped results (leaderboard.shipped): records alone, shown by the leaderboard by default and marked, the
README's table generated from them; the store itself complete, with each method's current defaults, and bitwise
reproducible here."""

import json

import pytest

from approximators import METHODS
from bench import records
from bench.errors import BenchError
from bench.tasks import get_task
from leaderboard import shipped
from reference.store import load_reference


@pytest.fixture
def store(tmp_path, monkeypatch, make_run):
    """A small shipped store: sgd and de on digits and toy-gap, budget 10, seeds 0-2, records alone."""
    root = tmp_path / "shipped"
    for task in ("digits", "toy-gap"):
        for method, amount in (("sgd", 0.3), ("de", 0.1)):
            for seed in shipped.SEEDS:
                folder = make_run(root, task, method=method, seed=seed, amount=amount + 0.01 * seed)
                (folder / records.PREDICTIONS).unlink()
    monkeypatch.setattr(shipped, "FOLDER", root)
    return root


def test_shipped_records_become_rows_labelled_shipped(store):
    rows, stale = shipped.rows()
    assert len(rows) == 12 and stale == []
    assert {(r.label, r.source, r.submitter) for r in rows} == {(shipped.LABEL, "shipped", shipped.SUBMITTER)}
    assert len(shipped.rows(tasks=["digits"], budgets=[10.0])[0]) == 6 and shipped.rows(budgets=[100.0])[0] == []


def test_a_record_made_for_another_task_version_is_left_out_and_said(store):
    folder = records.run_folder(store, "digits", "sgd", 10.0, 0)
    result = json.loads((folder / records.RESULT).read_text())
    (folder / records.RESULT).write_text(json.dumps({**result, "task_fingerprint": "0" * 64}))
    rows, stale = shipped.rows()
    assert len(rows) == 11 and len(stale) == 1 and "made for another version of digits" in stale[0]


@pytest.mark.parametrize("damage", ["truncated", "no predictions sha256"])
def test_a_damaged_shipped_record_is_left_out_with_a_line_and_every_board_still_shows(store, run_cli, damage):
    """One damaged file of the installed store once refused every board, even for another budget, and its advice
    named a file inside the installed package as if the user had written it."""
    folder = records.run_folder(store, "digits", "sgd", 10.0, 0)
    path = folder / records.RESULT
    if damage == "truncated":
        path.write_text(path.read_text()[:100])
    else:
        path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "predictions_sha256"}))
    rows, stale = shipped.rows()
    assert len(rows) == 11 and len(stale) == 1
    assert "left out, damaged" in stale[0] and "part of the installed bdl-bench, not yours" in stale[0]
    code, out, err = run_cli("leaderboard", "--task", "toy-gap")
    assert code == 0 and "| sgd (shipped)" in out and "left out, damaged" in err


def test_the_leaderboard_shows_the_shipped_results_beside_the_database_s_runs(store, tmp_path, db_path, make_run,
                                                                             run_cli):
    code, out, err = run_cli("leaderboard", "--task", "digits")
    assert code == 0 and "showing the shipped results" in err
    assert "| sgd (shipped)" in out and "| de (shipped)" in out and "bdl-bench" in out
    mine = make_run(tmp_path / "runs", "digits", method="sgd", amount=0.2)
    assert run_cli("submit", mine, "--name", "alice")[0] == 0
    code, out, err = run_cli("leaderboard", "--task", "digits")
    assert code == 0 and err == ""
    assert "| sgd (shipped)" in out and "| sgd " in out.replace("| sgd (shipped)", "")
    code, out, _ = run_cli("leaderboard", "--task", "digits", "--no-shipped")
    assert code == 0 and "(shipped)" not in out and "| sgd " in out


def test_without_a_database_and_without_the_shipped_results_there_is_nothing_to_show(store, db_path, run_cli):
    code, _, err = run_cli("leaderboard", "--no-shipped")
    assert code != 0 and err.count("\n") == 1 and str(db_path) in err


def test_no_run_takes_the_shipped_label(tmp_path, run_cli):
    code, _, err = run_cli("run", "--method", "sgd", "--task", "toy-gap", "--budget", "1", "--label", " shipped",
                           "--out", tmp_path)
    assert code == 2 and "marks the results shipped with bdl-bench" in err and not (tmp_path / "toy-gap").exists()


def test_the_readme_table_ranks_each_task_s_best_entries_at_the_largest_budget(store, monkeypatch):
    monkeypatch.setattr(shipped, "BUDGETS", (10.0,))
    table = shipped.readme_table(shipped.rows()[0])
    lines = table.splitlines()
    assert lines[0] == shipped.README_BEGIN and lines[-1] == shipped.README_END
    floor = load_reference(get_task("digits")).noise_floor["all"]
    digits = lines.index(f"| digits | | HMC noise floor | {floor['agreement']:.4f} | {floor['total_variation']:.4f} | | |")
    assert lines[digits + 1].startswith("| | 1 | de | ") and lines[digits + 2].startswith("| | 2 | sgd | ")
    assert any(line.startswith("| toy-gap | | HMC noise floor | ") for line in lines)
    text = f"# x\n\n{shipped.README_BEGIN}\nold\n{shipped.README_END}\n\nafter\n"
    assert shipped.readme_with_table(text, table) == f"# x\n\n{table}\n\nafter\n"



# The store that ships: complete, current, in agreement with the README, reproducible here.

@pytest.mark.shipped_store
def test_the_store_holds_every_run_of_its_sweep_with_each_method_s_current_defaults():
    """Every run the sweep plans with each method's current defaults and its budget rule accepts is finished in the
    store, and nothing else is: a changed default or task fails here until the store is regenerated
    (leaderboard.shipped's docstring)."""
    from bench import sweep

    assert set(shipped.METHODS) == set(METHODS), "every built-in method ships"
    try:
        planned = sweep.plan(list(shipped.METHODS), list(shipped.TASKS), list(shipped.BUDGETS), list(shipped.SEEDS),
                             [], shipped.FOLDER, keep_predictions=False)
    except BenchError as error:  # a run folder of another configuration: a default changed since the store was made
        pytest.fail(f"regenerate the shipped results (leaderboard.shipped's docstring): {error}")
    runs, refused = sweep.feasible(planned)
    assert set(shipped.folders()) == {run.folder for run in runs}, "the store's runs are not the sweep's: regenerate"
    assert all(run.finished for run in runs), "a shipped run holds another configuration than the defaults: regenerate"
    assert refused and all(f" budget {min(shipped.BUDGETS):g}, " in line for line in refused), refused
    rows, stale = shipped.rows()
    assert stale == [] and len(rows) == len(runs)


@pytest.mark.shipped_store
def test_the_readme_table_is_the_store_s():
    readme = (shipped.FOLDER.parent.parent / "README.md").read_text()
    assert shipped.readme_table(shipped.rows()[0]) in readme, "run `python -m leaderboard.shipped --write README.md`"


@pytest.mark.shipped_store
@pytest.mark.parametrize("method", shipped.METHODS)
def test_each_method_s_cheapest_shipped_run_reproduces_bitwise_here(method):
    """Re-executed from its record: bitwise where the store's numerics are this machine's (CPU, libraries, one thread),
    by its metrics on another CPU kind (to round-off, or against its configuration's other seeds)."""
    from bench.verify import _changes, verify

    folder = min((records.run_folder(shipped.FOLDER, "toy-gap", method, budget, 0) for budget in shipped.BUDGETS),
                 key=lambda f: not (f / records.RESULT).is_file())
    verification = verify(folder)
    assert verification.passed, verification.line()
    elsewhere = bool(_changes(records.checked_result(folder)))
    assert verification.mode.startswith("cross-environment") if elsewhere else verification.mode == "bitwise"
