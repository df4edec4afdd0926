"""Every competition task at fixture size through the command line: fetch, train under the meter, score
against the official reference, and export the competition's submission zip."""

import json
import re
import shutil
import zipfile

import numpy as np

from bench import download as dl, records
from bench.tasks import COMPETITION
from bench.tasks.competition import SPECS, SUBMISSION_FILES

SIZES = {"cifar10": (6, 5), "imdb": (6, 4), "cifar10c": (6, 10), "dermamnist": (6, 4), "uci-gap": (24, 120)}


def test_fetch_run_score_and_export_every_competition_task(file_server, official_files, fixture_checksums,
                                                           tmp_path, monkeypatch, run_cli):
    monkeypatch.setattr(dl, "RETRY_PAUSE_SECONDS", 0.0)
    file_server.files.update(official_files)
    cache, out = tmp_path / "cache", tmp_path / "runs"
    code, fetched, err = run_cli("fetch", "--all", "--cache", cache, "--data-url", file_server.url + "data/",
                             "--reference-url", file_server.url + "reference/", "--quiet")
    assert code == 0, err
    assert all(f"{name}: fetched into" in fetched for name in COMPETITION)
    served = {path for path, _ in file_server.requests}
    assert served == set(official_files), "each file is downloaded once, and nothing else"

    tasks = [arg for name in COMPETITION for arg in ("--task", name)]
    code, table, err = run_cli("--method", "sgd", "--budget", 1, *tasks, "--cache", cache, "--out", out, "--quiet")
    assert code == 0, err
    assert len(file_server.requests) == len(official_files), "a run downloads nothing"
    folders = {}
    for name in COMPETITION:
        folders[name] = out / name / "sgd" / "budget-1" / "seed-0"
        result = json.loads((folders[name] / "result.json").read_text())
        assert result["epochs_used"] == 1 and result["noise_floor"] is None
        official = name not in ("cifar10c", "uci-gap")  # the fixture's official checksums: the three references'
        assert result["trust"]["reference"] == {"trust": "official" if official else "first use",
                                                "sha256": result["reference"]["sha256"]}
        assert {entry["trust"] for entry in result["trust"]["data"].values()} == {"first use"}
        assert len(result["trust"]["data"]) == len({s.remote for s in SPECS[name].arrays.values()})
        metrics = result["metrics"]
        if name == "uci-gap":
            assert {"w1", "w2", "competition_w"} <= set(metrics) and "rmse" not in metrics, "test labels are hidden"
            assert set(result["metrics_by_block"]) == {"public"}
        else:
            assert 0 <= metrics["agreement"] <= 1 and 0 <= metrics["total_variation"] <= 1
            assert ("accuracy" in metrics) == (name in ("cifar10", "imdb")), "labels only where published"
        if name == "cifar10c":
            assert set(result["metrics_by_block"]) == {"clean", "gaussian_noise-2", "brightness-3", "pixelate-4",
                                                       "zoom_blur-5", "public"}
            assert result["metrics_by_block"]["public"] == result["metrics_by_block"]["clean"]
    assert "public agr" in table and "public W (competition)" in table

    zip_path = tmp_path / "submission.zip"
    code, listing, err = run_cli("export-submission", *folders.values(), "--out", zip_path, "--cache", cache)
    assert code == 0, err
    assert f"cifar10_probs.csv <- {folders['cifar10']} (scored against reference official, data first use (4 files))" \
           in listing
    assert f"uci_samples.csv <- {folders['uci-gap']} (scored against reference first use, data first use (1 file))" \
           in listing
    assert "first use: no published or supplied sha256: recorded at first download, unverified" in listing
    with zipfile.ZipFile(zip_path) as archive:
        assert sorted(archive.namelist()) == sorted(SUBMISSION_FILES.values())
        for name, file_name in SUBMISSION_FILES.items():
            exported = np.loadtxt(archive.read(file_name).decode().splitlines(), ndmin=2)
            with np.load(folders[name] / "predictions.npz") as npz:
                (predictions,) = npz.values()
            n_test = SIZES[name][1]
            assert exported.shape == predictions.shape == ((n_test, 1000) if name == "uci-gap" else (n_test, exported.shape[1]))
            np.testing.assert_array_equal(exported, predictions)

    code, _, err = run_cli("export-submission", folders["cifar10"], "--out", zip_path, "--cache", cache)
    assert code == 2 and "exists; pass --force" in err


def _fake_run(folder, task, key, array, sha="0" * 64, keep_predictions=True, **fields):
    folder.mkdir(parents=True)
    if keep_predictions:
        np.savez(folder / "predictions.npz", **{key: array})
    # every field a run record holds (export reads it as submit does); sgd at its defaults for the task
    (folder / "result.json").write_text(json.dumps({
        "task": task, "task_version": 1, "task_fingerprint": "f", "method": "sgd", "config": {}, "budget": 10.0,
        "epochs_used": 10.0, "test_passes": 1.0, "seed": 0, "metrics": {}, "metrics_by_block": {}, "wall_seconds": 1.0,
        "device": "cpu", "versions": {}, "reference": {"key": key, "sha256": sha}, **fields}))
    return folder


def _fetched_run(tmp_path, file_server, official_files, run_cli, task="dermamnist"):
    """A run of sgd at budget 1 on ``task`` fetched from the fixture files: (cache, run folder)."""
    file_server.files.update(official_files)
    cache, out = tmp_path / "cache", tmp_path / "runs"
    code, _, err = run_cli("fetch", "--task", task, "--cache", cache, "--data-url", file_server.url + "data/",
                           "--reference-url", file_server.url + "reference/", "--quiet")
    assert code == 0, err
    code, _, err = run_cli("--method", "sgd", "--budget", 1, "--task", task, "--cache", cache, "--out", out, "--quiet")
    assert code == 0, err
    return cache, out / task / "sgd" / "budget-1" / "seed-0"


def _copy_edited(folder, to, predictions=None, **changes):
    """A copy of the run ``folder`` at ``to`` with its record's fields ``changes`` (and other ``predictions``)."""
    shutil.copytree(folder, to)
    record = json.loads((to / "result.json").read_text())
    (to / "result.json").write_text(json.dumps({**record, **changes}))
    if predictions is not None:
        np.savez(to / "predictions.npz", probs=predictions)
    return to


def test_export_refuses_what_the_competition_would_not_score(tmp_path, file_server, official_files, fixture_checksums,
                                                            monkeypatch,
                                                            run_cli):
    monkeypatch.setattr(dl, "RETRY_PAUSE_SECONDS", 0.0)
    cache, good = _fetched_run(tmp_path, file_server, official_files, run_cli)
    record = json.loads((good / "result.json").read_text())
    with np.load(good / "predictions.npz") as npz:
        probs = npz["probs"]
    zip_path = tmp_path / "s.zip"
    assert run_cli("export-submission", good, "--out", zip_path, "--cache", cache)[0] == 0
    other = np.roll(probs, 1, axis=1)
    cases = {
        "not a competition task": (_fake_run(tmp_path / "digits", "digits", "probs", probs), cache),
        "fetch them first": (good, tmp_path / "empty"),
        r"dermamnist needs probs of shape \(4, 7\)": (_copy_edited(
            good, tmp_path / "short", probs[:-1], predictions_sha256=records.predictions_sha256(probs[:-1])), cache),
        "rows must sum to 1": (_copy_edited(good, tmp_path / "bad", probs * 2,
                                            predictions_sha256=records.predictions_sha256(probs * 2)), cache),
        "scored against reference sha256": (_copy_edited(good, tmp_path / "other-ref",
                                                         reference={**record["reference"], "sha256": "a" * 64}), cache),
        "with other data, settings or network": (_copy_edited(good, tmp_path / "other-task",
                                                              task_fingerprint="0" * 64), cache),
        "claims agreement = 0.001": (_copy_edited(good, tmp_path / "metric",
                                                  metrics={**record["metrics"], "agreement": 0.001}), cache),
        # an official reference publishes no floor: a claimed one (even empty) was a crash, exit 70
        "claims another noise floor than its reference publishes": (_copy_edited(good, tmp_path / "floor",
                                                                                noise_floor={}), cache),
        "holds no resolved": (_copy_edited(good, tmp_path / "unresolved", resolved=None), cache),
        "holds no finished run": (tmp_path / "nothing", cache),
        "they changed after the run": (_copy_edited(good, tmp_path / "edited", other), cache),
    }
    shutil.copytree(good, tmp_path / "alone")
    (tmp_path / "alone" / "predictions.npz").unlink()
    cases["holds its record alone"] = (tmp_path / "alone", cache)
    for message, (folder, where) in cases.items():
        code, _, err = run_cli("export-submission", folder, "--out", tmp_path / "x.zip", "--cache", where)
        assert code == 2 and err.count("\n") == 1, err
        assert re.search(message, err), (message, err)
    # the claims submit and verify check are refused by all three in the same line
    for name in ("other-ref", "other-task", "metric", "floor", "unresolved"):
        lines = [run_cli(*command, "--cache", cache)[2] for command in (
            ("export-submission", tmp_path / name, "--out", tmp_path / "x.zip"), ("verify", tmp_path / name),
            ("submit", tmp_path / name, "--db", tmp_path / "board.sqlite", "--name", "m"))]
        assert lines[0] == lines[1] == lines[2], lines
    code, _, err = run_cli("export-submission", good, good, "--out", tmp_path / "y.zip", "--cache", cache)
    assert code == 2 and "two runs for task dermamnist" in err
    monkeypatch.setattr("bench.export.official_checksums", lambda: {SPECS["dermamnist"].reference.official_url: "b" * 64})
    code, _, err = run_cli("export-submission", good, "--out", tmp_path / "x.zip", "--cache", cache)
    assert code == 2 and "not the official one" in err
    assert not (tmp_path / "x.zip").exists() and not (tmp_path / "y.zip").exists()


def test_a_first_use_reference_is_shown_as_such_by_tasks_verify_and_the_board(file_server, official_files,
                                                                              fixture_checksums, tmp_path,
                                                                              monkeypatch, run_cli):
    """UCI-Gap's reference has no official sha256: every command that shows it, or a run scored against it, says it
    was trusted on first use, and pinning it to a supplied sha256 says pinned."""
    import hashlib

    from leaderboard.store import Store

    monkeypatch.setattr(dl, "RETRY_PAUSE_SECONDS", 0.0)
    file_server.files.update(official_files)
    cache, out, db = tmp_path / "cache", tmp_path / "runs", tmp_path / "board.sqlite"
    fetch = ("fetch", "--task", "uci-gap", "--cache", cache, "--data-url", file_server.url + "data/",
             "--reference-url", file_server.url + "reference/", "--quiet")
    assert run_cli(*fetch)[0] == 0
    code, table, err = run_cli("tasks", "--cache", cache)
    assert code == 0, err
    row = next(line for line in table.splitlines() if line.startswith("uci-gap"))
    assert "first use, ok" in row and "official" not in row
    assert "uci-gap: reference first use, data first use (1 file)" in table

    code, _, err = run_cli("--method", "sgd", "--budget", 1, "--task", "uci-gap", "--cache", cache, "--out", out,
                           "--quiet")
    assert code == 0, err
    folder = out / "uci-gap" / "sgd" / "budget-1" / "seed-0"
    code, said, err = run_cli("verify", folder, "--cache", cache, "--quiet")
    assert code == 0, err
    assert "verified" in said and "scored against reference first use, data first use (1 file)" in said

    assert run_cli("submit", folder, "--name", "alice", "--cache", cache, "--db", db)[0] == 0
    with Store(db, read_only=True) as store:  # the trust of the files submit checked the run against, in the cache
        assert [row.trust for row in store.runs()] == [json.loads((folder / "result.json").read_text())["trust"]]
    code, board, err = run_cli("leaderboard", "--db", db, "--no-shipped", "--task", "uci-gap")
    assert code == 0, err
    assert "| sgd \u2021 " in board and "scored against a file trusted on first use" in board

    pinned = hashlib.sha256(official_files["reference/eval-phase/eval_data/uci_samples.csv"]).hexdigest()
    assert run_cli(*fetch, "--expect-sha256", f"uci_samples.csv={pinned}")[0] == 0
    code, table, err = run_cli("tasks", "--cache", cache)
    assert "uci-gap: reference pinned, data first use (1 file)" in table
