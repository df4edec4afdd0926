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
            for seed in (0, 1, 2):
                folder = make_run(root, task, method=method, seed=seed, amount=amount + 0.01 * seed,
                                  environment={"cpu": "Test CPU"})
                (folder / records.PREDICTIONS).unlink()
    shipped.write_manifest(root)
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
    shipped.write_manifest(store)  # made so (tests/leaderboard/test_store_integrity.py: edited after)
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
    shipped.write_manifest(store)  # damaged as the store was made (edited after: test_store_integrity.py)
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
    assert "| sgd (shipped)" in out and "| **sgd (" in out, "the user's own entry is set in bold beside the shipped"
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



def test_the_sweeps_commands_are_the_sweeps():
    """Each command the docs print plans exactly its sweep: every method and task, its budgets and seeds."""
    from bench import cli

    for sweep, command in zip(shipped.SWEEPS, shipped.SWEEP_COMMANDS):
        words = command.split()
        assert words[:4] == ["python", "-m", "bench", "sweep"] and command == sweep.command()
        args = cli.build_parser().parse_args(words[3:])
        assert (tuple(args.methods), tuple(args.tasks)) == (shipped.METHODS, shipped.TASKS)
        assert (tuple(args.budgets), tuple(args.seeds)) == (sweep.budgets, sweep.seeds)
        assert (args.skip_infeasible, args.no_predictions, str(args.out)) == (True, True, "leaderboard/shipped")
        assert sweep.command(wrap=" \\\n  ").replace(" \\\n  ", " ") == command
    assert shipped.BUDGETS == (10.0, 100.0, 1000.0) and shipped.sweep_of(1000.0).seeds == tuple(range(10))
    assert shipped.sweep_of(10.0).seeds == (0, 1, 2)


def test_the_store_s_account_counts_its_records(store):
    text = shipped.store_summary()
    assert all(command in text.replace(" \\\n  ", " ") for command in shipped.SWEEP_COMMANDS)
    size = sum((folder / records.RESULT).stat().st_size for folder in shipped.folders()) / 1e6
    assert f"12 runs (12 at budget 10 over seeds 0-2), {size:.1f} MB of records, made in 0 minutes" in text
    assert "on Test CPU (each run" in text
    folder = records.run_folder(store, "digits", "sgd", 10.0, 0)
    result = json.loads((folder / records.RESULT).read_text())
    moved = records.run_folder(store, "digits", "sgd", 1000.0, 0)
    moved.mkdir(parents=True)
    (moved / records.RESULT).write_text(json.dumps({**result, "budget": 1000.0, "wall_seconds": 600.0,
                                                    "environment": {"cpu": "Other CPU"}}))
    (folder / records.RESULT).unlink()
    folder = records.run_folder(store, "digits", "sgd", 10.0, 1)
    result = json.loads((folder / records.RESULT).read_text())
    (folder / records.RESULT).write_text(json.dumps({**result, "wall_seconds": 1200.0}))
    shipped.write_manifest(store)
    text = shipped.store_summary()
    assert "12 runs (11 at budget 10 over seeds 0-2, 1 at budgets 100 and 1000 over seeds 0-0)" in text
    assert "made in 30 minutes of one core by the records' `wall_seconds` (10 of them at budget 1000)" in text
    assert "on Other CPU and Test CPU" in text


def test_the_separation_table_says_what_the_seeds_tell_apart(tmp_path, make_run):
    """Two methods whose distances differ by about their seeds' spread: 3 seeds do not tell them apart, 10 do, and the
    table says both; where both score the same on every seed, they are tied."""
    root = tmp_path / "shipped"
    scatter = [-1, 0, 1, -1, 0, 1, -1, 0, 1, 0]
    for method, centre in (("sgd", 0.13), ("de", 0.10)):
        for seed in range(10):
            make_run(root, "toy-gap", method=method, seed=seed, budget=100.0, amount=centre + 0.03 * scatter[seed])
        for seed in range(3):
            make_run(root, "digits", method=method, seed=seed, budget=1000.0, amount=0.2)
    shipped.write_manifest(root)
    table = shipped.separation_table(shipped.rows(root=root)[0])

    def cells(task):
        return [cell.strip() for cell in next(line for line in table.splitlines()
                                              if line.startswith(f"| {task} ")).strip("|").split("|")]

    assert cells("toy-gap") == ["toy-gap", "100", "10", "2", "de", "2", "1", "sgd", "yes", ""]
    assert cells("digits")[1:4] == ["1000", "3", "2"] and cells("digits")[5:] == ["2", "2", cells("digits")[7], "tied",
                                                                                  ""]
    assert table.endswith("1 of 2 boards tell their second method apart from their first. Top groups: 2 to 2 "
                          "(median 2) methods with seeds 0-2, 1 to 2 (median 1.5) with all seeds.\n")


# The store that ships: complete, current, in agreement with the README, reproducible here.

@pytest.mark.shipped_store
def test_the_store_holds_every_run_of_its_sweep_with_each_method_s_current_defaults():
    """Every run the sweep plans with each method's current defaults and its budget rule accepts is finished in the
    store, and nothing else is: a changed default or task fails here until the store is regenerated
    (leaderboard.shipped's docstring)."""
    from bench import sweep

    assert set(shipped.METHODS) == set(METHODS), "every built-in method ships"
    runs, refused = [], []
    for stored in shipped.SWEEPS:
        try:
            planned = sweep.plan(list(shipped.METHODS), list(shipped.TASKS), list(stored.budgets), list(stored.seeds),
                                 [], shipped.FOLDER, keep_predictions=False)
        except BenchError as error:  # a run folder of another configuration: a default changed since it was made
            pytest.fail(f"regenerate the shipped results (leaderboard.shipped's docstring): {error}")
        feasible, infeasible = sweep.feasible(planned)
        runs += feasible
        refused += infeasible
    assert set(shipped.folders()) == {run.folder for run in runs}, "the store's runs are not its sweeps': regenerate"
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


def test_a_board_loads_each_task_s_reference_and_hashes_its_data_once_however_many_records(store, monkeypatch,
                                                                                          run_cli, tmp_path):
    """`leaderboard --format html` of the shipped store took minutes on a busy machine: every record hashed its task's
    data again (its fingerprint), each reference was loaded twice (the shipped rows, then the floors) and each
    record's settings had their types worked out from their annotations' text twice. The cost is bounded by the
    tasks and the methods' settings classes, not by the records (12 here; the committed store holds some 1,500)."""
    import typing

    import approximators.base
    import leaderboard.submission
    from bench.tasks.base import Task

    counted = {"references": 0, "fingerprints": 0, "type hints": 0}

    def counting(what, function):
        def called(*args, **kwargs):
            counted[what] += 1
            return function(*args, **kwargs)
        return called

    monkeypatch.setattr(leaderboard.submission, "load_reference",
                        counting("references", leaderboard.submission.load_reference))
    monkeypatch.setattr(Task, "fingerprint", counting("fingerprints", Task.fingerprint))
    monkeypatch.setattr(typing, "get_type_hints", counting("type hints", typing.get_type_hints))
    approximators.base._type_hints.cache_clear()  # as in a fresh process: no method's settings read yet
    monkeypatch.setenv("BDL_BENCH_DB", str(tmp_path / "none.sqlite"))  # no database: the shipped results alone
    code, _, _ = run_cli("leaderboard", "--format", "html", "--output", tmp_path / "board.html")
    assert code == 0 and "sgd" in (tmp_path / "board.html").read_text()
    config_classes = {METHODS[method].Config for method in ("sgd", "de")}
    # each reference loaded once per task; each task's fingerprint computed once for the records, and twice by its
    # reference's load (reference.store checks both of its copies)
    assert counted["references"] == 2 and counted["fingerprints"] == 2 * 3, counted
    assert counted["type hints"] <= len(config_classes), counted
