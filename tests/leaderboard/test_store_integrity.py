"""A store is read as it is named and as it was made (issue 65): the shipped store's manifest (each record's sha256,
written by the sweep that makes it) leaves out an edited or added record and names a missing one; a record in a folder
that names another run is left out of the board and refused by ``submit``; no run counts twice."""

import json
import re
import shutil
from pathlib import Path

import pytest

from bench import records
from bench.errors import DamagedFile
from leaderboard import shipped

SHIPPED_RUNS = [("toy-gap", "sgd", 10.0, 0), ("toy-gap", "sgd", 10.0, 1), ("toy-gap", "de", 10.0, 0),
                ("toy-gap", "de", 10.0, 1), ("toy-gap", "sgd", 100.0, 1)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path, monkeypatch, make_run):
    """A small shipped store with its manifest: records alone, as the sweep leaves them."""
    root = tmp_path / "shipped"
    for task, method, budget, seed in SHIPPED_RUNS:
        folder = make_run(root, task, method=method, seed=seed, budget=budget, amount=0.2 + 0.01 * seed)
        (folder / records.PREDICTIONS).unlink()
    shipped.write_manifest(root)
    monkeypatch.setattr(shipped, "FOLDER", root)
    return root


def _folder(root, method="sgd", seed=0, budget=10.0, task="toy-gap"):
    return records.run_folder(root, task, method, budget, seed)


def _copy_record(root, to):
    """sgd's seed-0 record copied into the folder ``to`` (replacing what it held)."""
    to.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_folder(root) / records.RESULT, to / records.RESULT)
    return to


def _edited(root):
    path = _folder(root) / records.RESULT
    result = json.loads(path.read_text())
    result["metrics"] = {**result["metrics"], "w1": 0.0001, "w2": 0.0001}
    path.write_text(json.dumps(result))
    return _folder(root)


def _added(root):
    path = _folder(root, seed=2)
    path.mkdir(parents=True)
    result = json.loads((_folder(root) / records.RESULT).read_text())
    (path / records.RESULT).write_text(json.dumps({**result, "seed": 2}))
    return path


def _deleted(root):
    shutil.rmtree(_folder(root, seed=1))
    return _folder(root, seed=1) / records.RESULT


# condition: (what is done to the store, whether the manifest is then written again as a sweep would, what the line says)
CONDITIONS = {
    "edited record": (_edited, False, "is not the one the store's manifest"),
    "record missing from the manifest": (_added, False, "is not in the store's manifest"),
    "manifest entry with no record": (_deleted, False, "listed in the store's manifest"),
    "record copied to another seed": (lambda root: _copy_record(root, _folder(root, seed=7)), True,
                                      "names seed 'seed-7' where its record's is 'seed-0'"),
    "record in another method's folder": (lambda root: _copy_record(root, _folder(root, method="de")), True,
                                          "names method 'de' where its record's is 'sgd'"),
    "record in another task's folder": (lambda root: _copy_record(root, _folder(root, task="digits")), True,
                                        "names task 'digits' where its record's is 'toy-gap'"),
    "record in another budget's folder": (lambda root: _copy_record(root, _folder(root, budget=1000.0)), True,
                                          "names budget 'budget-1000' where its record's is 'budget-10'"),
}


def _keys(rows):
    return [(row.task, row.method, row.budget, row.seed) for row in rows]


@pytest.mark.parametrize("condition", CONDITIONS)
def test_the_board_leaves_out_a_record_the_store_does_not_vouch_for_with_one_line(store, condition):
    damage, manifest_again, said = CONDITIONS[condition]
    named = damage(store)
    if manifest_again:  # a store made again by the sweep: the manifest lists what it holds
        shipped.write_manifest(store)
    rows, stale = shipped.rows()
    assert len(stale) == 1 and said in stale[0] and str(named) in stale[0], stale
    keys = _keys(rows)
    assert len(keys) == len(set(keys)), "a run counted twice"
    assert all(row.metrics["all"]["w2"] != 0.0001 for row in rows)
    shown = set(SHIPPED_RUNS) - {("toy-gap", "sgd", 10.0, 0)} if condition == "edited record" \
        else set(SHIPPED_RUNS) - {("toy-gap", "sgd", 10.0, 1)} if condition == "manifest entry with no record" \
        else set(SHIPPED_RUNS) - {("toy-gap", "de", 10.0, 0)} if condition == "record in another method's folder" \
        else set(SHIPPED_RUNS)
    assert set(keys) == shown
    checked, lines = shipped.checked_records()  # docs/leaderboard.md's account of the store counts the same runs
    assert len(checked) == len(rows) and lines == stale


def test_the_leaderboard_says_the_line_and_shows_each_run_once(store, run_cli):
    _copy_record(store, _folder(store, seed=7))
    shipped.write_manifest(store)
    code, out, err = run_cli("leaderboard", "--task", "toy-gap", "--budget", "10", "--format", "md")
    assert code == 0 and "names seed 'seed-7'" in err and str(_folder(store, seed=7)) in err
    assert sum(line.startswith("| sgd (shipped)") or "sgd (shipped)" in line for line in out.splitlines()) == 1
    assert "| 2 " in out or " 2 |" in out  # sgd's two seeds, not three


@pytest.mark.parametrize("manifest", ["missing", "damaged"])
def test_a_store_without_its_manifest_shows_nothing_in_one_line(store, manifest):
    path = store / shipped.MANIFEST
    if manifest == "missing":
        path.unlink()
    else:
        path.write_text(path.read_text().replace("  ", " ", 1))
    rows, stale = shipped.rows()
    assert rows == [] and len(stale) == 1 and str(path) in stale[0] and "5 records are left out" in stale[0]


def test_a_store_s_manifest_is_its_records_hashes_in_the_format_of_sha256sum(store):
    lines = (store / shipped.MANIFEST).read_text().splitlines()
    assert len(lines) == len(SHIPPED_RUNS) and lines == sorted(lines, key=lambda line: line[66:])
    digest, _, path = lines[0].partition("  ")
    import hashlib

    assert hashlib.sha256((store / path).read_bytes()).hexdigest() == digest
    assert path == "toy-gap/de/budget-10/seed-0/result.json"


def test_the_sweep_that_makes_the_store_writes_its_manifest(tmp_path, monkeypatch, run_cli):
    root = tmp_path / "shipped"
    monkeypatch.setattr(shipped, "FOLDER", root)
    code, out, err = run_cli("sweep", "--method", "sgd", "--task", "toy-gap", "--budget", "1", "--seed", "0", "1",
                             "--no-predictions", "--quiet", "--workers", "1", "--out", root)
    assert code == 0, err
    assert "wrote the shipped store's manifest" in out
    assert (root / shipped.MANIFEST).read_text() == shipped.manifest_text(root) != ""
    rows, stale = shipped.rows()
    assert stale == [] and sorted(_keys(rows)) == [("toy-gap", "sgd", 1.0, 0), ("toy-gap", "sgd", 1.0, 1)]
    other = tmp_path / "runs"  # any other sweep's folder holds no manifest
    assert run_cli("sweep", "--method", "sgd", "--task", "toy-gap", "--budget", "1", "--no-predictions", "--quiet",
                   "--workers", "1", "--out", other)[0] == 0
    assert not (other / shipped.MANIFEST).exists()


@pytest.mark.shipped_store
def test_the_committed_manifest_is_the_committed_store_s():
    """Recomputed from the records: a record edited, added or removed without the sweep fails here (regenerate with
    `python -m leaderboard.shipped --write-manifest` only when the store was made again)."""
    assert (shipped.FOLDER / shipped.MANIFEST).read_text() == shipped.manifest_text(), \
        "the shipped store is not its manifest's"


def _version(text: str) -> tuple:
    """A version's order: 0.2.0.dev0 before 0.2.0 before 0.3.0.dev0."""
    release, _, dev = text.partition(".dev")
    return (*map(int, release.split(".")), int(dev) if dev else float("inf"))


@pytest.mark.shipped_store
def test_the_store_names_the_release_it_belongs_to_and_what_was_made_since():
    """The committed store's release record is CITATION.cff's release, rebuilds that release's manifest, and tells
    the records the release shipped (made by it or before it) from those made again since (by a later version)."""
    release = shipped.read_release()
    citation = (ROOT / "CITATION.cff").read_text()
    assert re.search(rf"^version: {re.escape(release['release'])}$", citation, flags=re.M)
    assert re.search(rf"^date-released: {release['released']}$", citation, flags=re.M)
    for path in shipped.read_manifest(shipped.FOLDER):
        made_by = json.loads((shipped.FOLDER / path).read_text())["environment"]["bdl-bench"]
        since = path in release["remade_since"]
        assert (_version(made_by) > _version(release["release"])) == since, (path, made_by, since)


def test_a_manifest_written_since_the_release_names_what_was_made_again_with_its_released_sha256(store):
    """A record made again, one added and one removed since the release are named with the sha256 each had in the
    release (null: the release had none), so the release's manifest rebuilds; one made again as it was released is
    no longer named."""
    shipped.write_release("1.0.0", "2027-01-02", store)
    released = shipped.read_manifest(store)
    assert shipped.read_release(store)["remade_since"] == {}
    remade, original = _folder(store) / records.RESULT, (_folder(store) / records.RESULT).read_bytes()
    _edited(store)
    added, removed = _added(store), _deleted(store)
    shipped.write_manifest(store)
    names = {"edited": "toy-gap/sgd/budget-10/seed-0/result.json", "added": "toy-gap/sgd/budget-10/seed-2/result.json",
             "removed": "toy-gap/sgd/budget-10/seed-1/result.json"}
    assert (added / records.RESULT).exists() and not removed.exists()
    assert shipped.read_release(store)["remade_since"] == {names["edited"]: released[names["edited"]],
                                                           names["added"]: None,
                                                           names["removed"]: released[names["removed"]]}
    remade.write_bytes(original)
    shipped.write_manifest(store)
    assert set(shipped.read_release(store)["remade_since"]) == {names["added"], names["removed"]}


@pytest.mark.parametrize("damage, line", [
    (lambda record: record["remade_since"].update({"toy-gap/sgd/budget-10/seed-0/result.json": "0" * 64}),
     "do not rebuild the manifest release 1.0.0 shipped"),
    (lambda record: record.update(released="2 January 2027"), "not a store's release record"),
])
def test_a_release_record_that_does_not_rebuild_the_release_s_manifest_is_one_line(store, damage, line):
    path = shipped.write_release("1.0.0", "2027-01-02", store)
    record = json.loads(path.read_text())
    damage(record)
    path.write_text(json.dumps(record))
    with pytest.raises(DamagedFile, match=re.escape(line)):
        shipped.read_release(store)


# --- a store a user submits -----------------------------------------------------------------------------------------

def _user_copy(runs, to):
    shutil.copytree(records.run_folder(runs, "toy-gap", "sgd", 10.0, 0), to)
    return to


USER_CONDITIONS = {
    "record copied to another seed": (lambda runs: _user_copy(runs, records.run_folder(runs, "toy-gap", "sgd", 10.0, 7)),
                                      "its folder names seed 'seed-7' where its record's is 'seed-0'"),
    "record in another method's folder": (
        lambda runs: _user_copy(runs, records.run_folder(runs, "toy-gap", "de", 10.0, 0)),
        "its folder names method 'de' where its record's is 'sgd'"),
    "record in another task's folder": (
        lambda runs: _user_copy(runs, records.run_folder(runs, "digits", "sgd", 10.0, 0)),
        "its folder names task 'digits' where its record's is 'toy-gap'"),
    "record in another budget's folder": (
        lambda runs: _user_copy(runs, records.run_folder(runs, "toy-gap", "sgd", 1000.0, 0)),
        "its folder names budget 'budget-1000' where its record's is 'budget-10'"),
    "the same run twice": (lambda runs: _user_copy(runs, runs / "a-copy"), "the same run (task, method, budget, seed"),
}


@pytest.mark.parametrize("verify", [False, True], ids=["submit", "submit --verify"])
@pytest.mark.parametrize("condition", USER_CONDITIONS)
def test_submit_refuses_a_record_in_another_run_s_folder_or_a_run_twice_in_one_line(tmp_path, make_run, run_cli,
                                                                                   db_path, condition, verify):
    """With --verify, before anything is re-executed."""
    runs = tmp_path / "runs"
    make_run(runs, "toy-gap", method="sgd", seed=0)
    damage, said = USER_CONDITIONS[condition]
    named = damage(runs)
    code, out, err = run_cli("submit", runs, "--name", "alice", *(["--verify"] if verify else []))
    assert code == 2 and err.count("\n") == 1 and said in err and str(named) in err, err
    assert not db_path.exists() or "added" not in out


def test_submit_takes_a_run_folder_copied_under_a_name_of_its_own(tmp_path, make_run, run_cli, db_path):
    """A folder not named as bdl-bench names a run folder names no run: nothing is compared."""
    runs = tmp_path / "runs"
    make_run(runs, "toy-gap", method="sgd", seed=0)
    mine = _user_copy(runs, tmp_path / "mine")
    code, out, err = run_cli("submit", mine, "--name", "alice")
    assert code == 0 and "1 added" in out, err


def test_a_run_counts_once_whatever_its_folders_are_named(store, monkeypatch):
    """The folder check allows one folder per run; behind it, a second record of one (task, method, budget, seed) is
    left out in its own line (here with the folder check switched off)."""
    monkeypatch.setattr(shipped, "_named_otherwise", lambda *_: None)
    _copy_record(store, _folder(store, seed=7))
    shipped.write_manifest(store)
    rows, stale = shipped.rows()
    assert len(stale) == 1 and "the same run (task, method, budget, seed) as" in stale[0]
    assert str(_folder(store, seed=7)) in stale[0] and sorted(_keys(rows)) == sorted(SHIPPED_RUNS)
