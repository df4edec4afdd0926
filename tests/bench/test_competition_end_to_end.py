"""Every competition task at fixture size through the command line: fetch, train under the meter, score
against the official reference, and export the competition's submission zip."""

import json
import re
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


def test_export_refuses_what_the_competition_would_not_score(tmp_path, fixture_checksums, run_cli):
    probs = np.full((2000, 7), 1 / 7)
    official = fixture_checksums[SPECS["dermamnist"].reference.official_url]
    good = _fake_run(tmp_path / "derma", "dermamnist", "probs", probs, sha=official)
    zip_path = tmp_path / "s.zip"
    assert run_cli("export-submission", good, "--out", zip_path, "--cache", tmp_path / "empty")[0] == 0, \
        "without the data at hand, the official test size is required"

    cases = {
        "not a competition task": _fake_run(tmp_path / "digits", "digits", "probs", probs),
        r"dermamnist needs probs of shape \(2000, 7\)": _fake_run(tmp_path / "short", "dermamnist", "probs", probs[:1999], official),
        "rows must sum to 1": _fake_run(tmp_path / "bad", "dermamnist", "probs", probs * 2, official),
        "not the official one": _fake_run(tmp_path / "other-ref", "dermamnist", "probs", probs, "a" * 64),
        "holds no finished run": tmp_path / "nothing",
        "holds its record alone": _fake_run(tmp_path / "alone", "dermamnist", "probs", probs, official, False,
                                            predictions_sha256=records.predictions_sha256(probs)),
        "they changed after the run": _fake_run(tmp_path / "edited", "dermamnist", "probs", probs, official,
                                                predictions_sha256="0" * 64),
    }
    for message, folder in cases.items():
        code, _, err = run_cli("export-submission", folder, "--out", tmp_path / "x.zip", "--cache", tmp_path)
        assert code == 2 and err.count("\n") == 1, err
        assert re.search(message, err), err
    code, _, err = run_cli("export-submission", good, good, "--out", tmp_path / "y.zip", "--cache", tmp_path)
    assert code == 2 and "two runs for task dermamnist" in err
    assert not (tmp_path / "x.zip").exists() and not (tmp_path / "y.zip").exists()
