"""``fetch`` of the competition tasks from a local server holding tiny files in the official formats."""

import io
import json

import numpy as np
import pytest
import torch

from bench import download as dl
from bench.download import FetchError
from bench.fetch import fetch_task
from bench.formats import FormatError
from bench.tasks import COMPETITION, get_task
from bench.tasks.competition import CIFAR10C_BLOCKS, SPECS, task_folder
from reference.store import load_reference

SIZES = {"cifar10": (6, 5), "imdb": (6, 4), "cifar10c": (6, 10), "dermamnist": (6, 4), "uci-gap": (24, 120)}


@pytest.fixture
def mirror(file_server, official_files, fixture_checksums, monkeypatch):
    """The local server holding every fixture file; returns a fetch function for one task."""
    monkeypatch.setattr(dl, "RETRY_PAUSE_SECONDS", 0.0)
    file_server.files.update(official_files)

    def fetch(name, cache, **kwargs):
        manifest, _ = fetch_task(name, cache, file_server.url + "data/", file_server.url + "reference/", **kwargs)
        return manifest

    fetch.server = file_server
    return fetch


@pytest.mark.parametrize("name", COMPETITION)
def test_fetch_converts_each_task_into_a_loadable_cache(mirror, tmp_path, official_files, name):
    manifest = mirror(name, tmp_path)
    n_train, n_test = SIZES[name]
    task = get_task(name, tmp_path)
    assert (task.n_train, task.n_test) == (n_train, n_test)
    assert task.y_test is None if "y_test" not in SPECS[name].arrays else task.y_test.shape == (n_test,)
    reference = load_reference(task)
    assert reference.key == SPECS[name].reference_key and reference.noise_floor is None
    assert reference.array.shape == ((n_test, 1000) if name == "uci-gap" else (n_test, task.n_classes))
    assert reference.sha256 == manifest["reference"]["sha256"]
    expected_trust = "first use" if name in ("cifar10c", "uci-gap") else "official"
    assert manifest["reference"]["trust"] == expected_trust
    assert not any((tmp_path / "downloads").iterdir()), "originals are removed after conversion"
    with torch.no_grad():  # the task's model takes the task's inputs
        outputs = task.model_factory()(task.x_train[:2])
    assert outputs.shape == (2, 2 if task.kind == "regression" else task.n_classes)


def test_images_are_stored_channels_first_and_labels_as_integers(mirror, tmp_path, official_files):
    mirror("cifar10", tmp_path)
    task = get_task("cifar10", tmp_path)
    rows = np.loadtxt(official_files["data/cifar10_train_x.csv"].decode().splitlines())
    n, h, w, c = 1, 4, 7, 2
    assert task.x_train.dtype == torch.float32 and task.x_train.shape == (6, 3, 32, 32)
    assert task.x_train[n, c, h, w].item() == pytest.approx(rows[n, (h * 32 + w) * 3 + c], rel=1e-6)
    labels = np.loadtxt(official_files["data/cifar10_train_y.csv"].decode().splitlines())
    assert task.y_train.dtype == torch.int64 and task.y_train.tolist() == labels.astype(int).tolist()


def test_imdb_tokens_are_integer_ids(mirror, tmp_path):
    mirror("imdb", tmp_path)
    task = get_task("imdb", tmp_path)
    assert task.x_train.dtype == torch.int64 and task.x_train.shape == (6, 100)
    assert 0 <= task.x_train.min() and task.x_train.max() < 20000


def test_uci_samples_are_transposed_to_points_by_samples(mirror, tmp_path, official_files):
    mirror("uci-gap", tmp_path)
    task = get_task("uci-gap", tmp_path)
    raw = np.loadtxt(official_files["reference/eval-phase/eval_data/uci_samples.csv"].decode().splitlines())
    assert raw.shape == (1000, 120)
    np.testing.assert_array_equal(load_reference(task).array, raw.T)
    assert [(b.name, b.start, b.stop) for b in task.test_blocks] == [("public", 0, 100)]


def test_cifar10c_test_set_has_its_five_blocks_and_public_part(mirror, tmp_path):
    mirror("cifar10c", tmp_path)
    blocks = get_task("cifar10c", tmp_path).test_blocks
    assert [b.name for b in blocks] == [*CIFAR10C_BLOCKS, "public"]
    assert [(b.start, b.stop) for b in blocks] == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (0, 2)]


def test_malformed_file_leaves_no_task_folder(mirror, tmp_path):
    mirror.server.files["data/cifar10_test_x.csv"] = b"1 2 3\n4 5\n"
    with pytest.raises(FormatError, match="cifar10_test_x.csv"):
        mirror("cifar10", tmp_path)
    assert not task_folder("cifar10", tmp_path).exists()
    assert not [p for p in (tmp_path / "tasks").iterdir()], "the staging folder is removed"


def test_failed_refetch_keeps_the_previous_complete_cache(mirror, tmp_path):
    mirror("dermamnist", tmp_path)
    before = (task_folder("dermamnist", tmp_path) / "manifest.json").read_text()
    mirror.server.files["reference/eval-phase/eval_data/medmnist_probs.csv"] = b"0.5 0.5\n"
    with pytest.raises(FetchError, match="sha256 .* does not match the official checksum"):
        mirror("dermamnist", tmp_path, force=True)
    assert (task_folder("dermamnist", tmp_path) / "manifest.json").read_text() == before
    assert load_reference(get_task("dermamnist", tmp_path)).array.shape == (4, 7)


def test_labels_out_of_range_are_refused(mirror, tmp_path):
    mirror.server.files["data/imdb_train_y.csv"] = b"0\n1\n2\n0\n1\n0\n"
    with pytest.raises(FormatError, match=r"imdb_train_y.csv: expected integers in \[0, 2\)"):
        mirror("imdb", tmp_path)


def test_reference_not_matching_the_test_set_is_refused(mirror, tmp_path, official_files):
    mirror.server.files["reference/eval-phase/eval_data/cifar_probs.csv"] = official_files[
        "reference/eval-phase/eval_data/medmnist_probs.csv"]
    with pytest.raises(FormatError, match="7 columns, expected 10"):
        mirror("cifar10c", tmp_path)


def test_reference_changed_after_the_fetch_is_refused(mirror, tmp_path):
    mirror("cifar10", tmp_path)
    path = task_folder("cifar10", tmp_path) / "reference.npy"
    array = np.load(path)
    array[0] = array[0][::-1]
    np.save(path, array)
    with pytest.raises(Exception, match="reference corrupted"):
        load_reference(get_task("cifar10", tmp_path))


def test_run_on_a_task_that_is_not_fetched_names_the_fetch_command(tmp_path, run_cli):
    code, _, err = run_cli("--method", "sgd", "--budget", "1", "--task", "cifar10", "--cache", tmp_path,
                           "--out", tmp_path / "runs", "--quiet")
    assert code == 2 and err.count("\n") == 1
    assert f"python -m bench fetch --task cifar10 --cache {tmp_path}" in err
    assert not (tmp_path / "runs").exists()


def test_fetch_command_reports_how_each_checksum_was_trusted(mirror, tmp_path, run_cli):
    url = mirror.server.url
    code, out, _ = run_cli("fetch", "--task", "uci-gap", "--cache", tmp_path, "--data-url", url + "data/",
                           "--reference-url", url + "reference/", "--quiet")
    assert code == 0
    assert "uci_samples.csv: sha256" in out and "trust on first use" in out
    manifest = json.loads((task_folder("uci-gap", tmp_path) / "manifest.json").read_text())
    assert manifest["arrays"]["x_train"]["shape"] == [24, 8]
    code, out, _ = run_cli("fetch", "--task", "uci-gap", "--cache", tmp_path, "--data-url", url + "data/",
                           "--reference-url", url + "reference/", "--quiet")
    assert code == 0 and "uci-gap: already fetched and unchanged" in out


def test_cache_folder_from_the_environment(mirror, tmp_path, monkeypatch):
    monkeypatch.setenv("BDL_BENCH_CACHE", str(tmp_path / "env-cache"))
    mirror("uci-gap", None)
    assert (tmp_path / "env-cache" / "tasks" / "uci-gap" / "manifest.json").exists()
    assert get_task("uci-gap").n_train == 24


def test_fetch_of_a_complete_cache_downloads_nothing_and_a_damaged_one_is_fetched_again(mirror, tmp_path):
    mirror("uci-gap", tmp_path)
    requests = len(mirror.server.requests)
    assert mirror("uci-gap", tmp_path)["task"] == "uci-gap"
    assert len(mirror.server.requests) == requests, "an unchanged cache is not downloaded again"
    path = task_folder("uci-gap", tmp_path) / "x_test.npy"
    path.write_bytes(path.read_bytes()[:-8] + b"\0" * 8)
    mirror("uci-gap", tmp_path)
    assert len(mirror.server.requests) == requests + 2, "a changed array makes the task's files download again"
    assert np.isfinite(get_task("uci-gap", tmp_path).x_test.numpy()).all()
    mirror("uci-gap", tmp_path, force=True)
    assert len(mirror.server.requests) == requests + 4


def test_interrupted_install_leaves_the_previous_cache_whole(mirror, tmp_path, official_files, monkeypatch):
    """The new folder replaces the old one by renames; if the swap fails, the old folder is put back."""
    import errno
    from pathlib import Path

    from bench.fetch import cached_manifest

    before = mirror("uci-gap", tmp_path)
    key = "data/evaluation_phase/energy_anon.npz"
    with np.load(io.BytesIO(official_files[key])) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["x_test"] = arrays["x_test"] + 1.0  # other data upstream: every test array differs
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    mirror.server.files[key] = buffer.getvalue()
    (tmp_path / "checksums.json").unlink()  # forget the first-use record, so the other data are accepted

    real_rename, calls = Path.rename, []

    def second_rename_fails(self, target):
        calls.append(self)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", second_rename_fails)
    with pytest.raises(OSError):
        mirror("uci-gap", tmp_path, force=True)
    monkeypatch.undo()
    assert cached_manifest("uci-gap", tmp_path) == before, "every array still matches the previous manifest"
    assert [p.name for p in (tmp_path / "tasks").iterdir()] == ["uci-gap"], "no staging or old folder is left"


# Pinning a first-use file to a sha256 the user supplies (fetch --expect-sha256, --checksums)

UCI_DATA, UCI_REFERENCE = "data/evaluation_phase/energy_anon.npz", "reference/eval-phase/eval_data/uci_samples.csv"


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _fetch_cli(run_cli, mirror, cache, *extra):
    url = mirror.server.url
    return run_cli("fetch", "--task", "uci-gap", "--cache", cache, "--data-url", url + "data/", "--reference-url",
                   url + "reference/", "--quiet", *extra)


def _trust_levels(cache) -> tuple[dict, dict]:
    """How the fetched uci-gap's files are trusted: (the manifest's, by file name; the cache's store, by file name)."""
    manifest = json.loads((task_folder("uci-gap", cache) / "manifest.json").read_text())
    store = json.loads((cache / "checksums.json").read_text())
    return ({url.rsplit("/", 1)[-1]: entry["trust"] for url, entry in manifest["files"].items()},
            {url.rsplit("/", 1)[-1]: entry.get("trust") for url, entry in store.items()})


def test_a_supplied_sha256_pins_a_first_use_file(mirror, tmp_path, official_files, run_cli):
    code, out, err = _fetch_cli(run_cli, mirror, tmp_path, "--expect-sha256",
                                f"uci_samples.csv={_sha(official_files[UCI_REFERENCE])}",
                                f"evaluation_phase/energy_anon.npz={_sha(official_files[UCI_DATA]).upper()}")
    assert code == 0, err
    assert _trust_levels(tmp_path) == ({"energy_anon.npz": "pinned", "uci_samples.csv": "pinned"},) * 2
    assert "uci_samples.csv: sha256" in out and "pinned: matches the sha256 you supplied" in out
    assert "trust on first use" not in out


def test_a_file_that_is_not_the_pinned_one_is_one_line_exit_1_and_not_kept(mirror, tmp_path, official_files, run_cli):
    code, _, err = _fetch_cli(run_cli, mirror, tmp_path, "--expect-sha256", f"uci_samples.csv={'0' * 64}")
    assert code == 1 and err.count("\n") == 1, err
    assert "uci_samples.csv: sha256" in err and "does not match the sha256 you supplied (0000000000000000...)" in err
    downloads = tmp_path / "downloads"
    assert not (downloads / "eval-phase__eval_data__uci_samples.csv").exists(), "the bad file is not kept"
    assert not task_folder("uci-gap", tmp_path).exists() and not (tmp_path / "checksums.json").exists()
    # what the failed fetch leaves, and that the next fetch reuses it (issue 67)
    size = len(official_files[UCI_DATA])
    assert f"1 download(s) of uci-gap ({size:,} bytes) stay in {downloads}: evaluation_phase__energy_anon.npz; " \
           "fetching again reuses them" in err
    code, _, err = _fetch_cli(run_cli, mirror, tmp_path)
    assert code == 0, err
    assert mirror.server.ranges(UCI_DATA) == [None], "the data downloaded before the failure were reused"


def test_a_failed_reference_download_says_which_data_downloads_stay(mirror, tmp_path, official_files, run_cli):
    """CIFAR-10's data are gigabytes: a reference that cannot be downloaded leaves them, and the line says so."""
    del mirror.server.files["reference/data/cifar10/probs.csv"]
    url = mirror.server.url
    code, _, err = run_cli("fetch", "--task", "cifar10", "--cache", tmp_path, "--data-url", url + "data/",
                           "--reference-url", url + "reference/", "--quiet")
    assert code == 2 and err.count("\n") == 1, err
    kept = [f"cifar10_{split}_{part}.csv" for split in ("train", "test") for part in "xy"]  # in the task's order
    assert sorted(p.name for p in (tmp_path / "downloads").iterdir()) == sorted(kept)
    size = sum(len(official_files[f"data/{name}"]) for name in kept)
    assert (f"4 download(s) of cifar10 ({size:,} bytes) stay in {tmp_path / 'downloads'}: "
            f"{', '.join(kept)}; fetching again reuses them, or delete them to free the space") in err


def test_a_checksums_file_pins_a_task_already_fetched_and_a_mismatch_removes_it(mirror, tmp_path, official_files,
                                                                                 run_cli):
    assert _fetch_cli(run_cli, mirror, tmp_path)[0] == 0
    assert _trust_levels(tmp_path) == ({"energy_anon.npz": "first use", "uci_samples.csv": "first use"},) * 2
    requests = len(mirror.server.requests)
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{_sha(official_files[UCI_REFERENCE])}  ./eval-phase/eval_data/uci_samples.csv\n"
                    f"{'1' * 64} *some_other_file.bin\n")  # sha256sum's binary mark; a file of no task: skipped
    code, out, err = _fetch_cli(run_cli, mirror, tmp_path, "--checksums", sums)
    assert code == 0, err
    assert len(mirror.server.requests) == requests, "a task already fetched is pinned without downloading"
    assert _trust_levels(tmp_path) == ({"energy_anon.npz": "first use", "uci_samples.csv": "pinned"},) * 2
    assert "uci_samples.csv: sha256" in out and "pinned" in out

    sums.write_text(f"{'2' * 64}  energy_anon.npz\n")
    code, _, err = _fetch_cli(run_cli, mirror, tmp_path, "--checksums", sums)
    assert code == 1 and err.count("\n") == 1, err
    assert "does not match the one you supplied" in err and "was removed from the cache" in err
    assert not task_folder("uci-gap", tmp_path).exists(), "a task converted from the bad file is not kept as trusted"
    assert json.loads((tmp_path / "checksums.json").read_text()) == {}


@pytest.mark.parametrize("given, said", [
    (["--expect-sha256", f"probs.csv={'a' * 64}"], "names several competition files"),
    (["--expect-sha256", "uci_samples.csv=abc"], "is not a sha256"),
    (["--expect-sha256", f"nosuch.csv={'a' * 64}"], "is no competition task's file"),
    (["--expect-sha256", f"cifar_probs.csv={'a' * 64}"], "a file of no task fetched now"),
], ids=["ambiguous", "malformed", "unknown", "another-task"])
def test_a_pin_that_names_no_file_of_the_fetch_is_refused_before_downloading(mirror, tmp_path, run_cli, given, said):
    code, _, err = _fetch_cli(run_cli, mirror, tmp_path, *given)
    assert code == 2 and err.count("\n") == 1 and said in err, err
    assert mirror.server.requests == []
