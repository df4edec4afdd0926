"""The official reference parser and checksum registry, on the organisers' real files where present.

The real files live in ``../shared/references/starter-kit/`` (not in the package); the tests that
need them skip cleanly when that folder is absent.
"""

import hashlib
import io
from pathlib import Path

import numpy as np
import pytest

from bench import download as dl
from bench.download import FetchError
from bench.fetch import fetch_task
from bench.formats import FormatError
from bench.tasks import get_task
from bench.tasks.competition import SPECS
from reference.official import official_checksums, parse_reference
from reference.store import load_reference

SHARED = Path(__file__).resolve().parents[3] / "shared" / "references" / "starter-kit"
REAL = {"cifar10": ("cifar10_probs.csv", (10000, 10)), "imdb": ("imdb_probs.csv", (25000, 2)),
        "dermamnist": ("medmnist_probs.csv", (2000, 7))}
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/references/starter-kit is absent")


@needs_shared
@pytest.mark.parametrize("task", REAL)
def test_real_reference_parses_and_matches_the_shipped_checksum(task):
    name, shape = REAL[task]
    path = SHARED / name
    assert hashlib.sha256(path.read_bytes()).hexdigest() == official_checksums()[SPECS[task].reference.official_url]
    probs = parse_reference(path, "probs", n_classes=SPECS[task].n_classes)
    assert probs.shape == shape and probs.dtype == np.float64
    assert np.abs(probs.sum(1) - 1).max() < 1e-6 and probs.min() >= 0
    with open(path) as f:  # every digit of the %.18e text is kept
        first = np.array(f.readline().split(), dtype=np.float64)
    np.testing.assert_array_equal(probs[0], first)


def _dermamnist_npz(n_train: int, n_test: int) -> bytes:
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, x_train=np.zeros((n_train, 28, 28, 3), np.uint8), y_train=rng.integers(0, 7, n_train),
                        x_test=np.zeros((n_test, 28, 28, 3), np.uint8), y_test=np.zeros(n_test))
    return buffer.getvalue()


@needs_shared
def test_real_reference_is_fetched_under_its_official_checksum_and_a_modified_copy_is_refused(
        file_server, tmp_path, monkeypatch):
    """DermaMNIST with the real medmnist_probs.csv (2000 x 7) and a 2000-row fixture test set."""
    monkeypatch.setattr(dl, "RETRY_PAUSE_SECONDS", 0.0)
    real = (SHARED / "medmnist_probs.csv").read_bytes()
    file_server.files["data/evaluation_phase/dermamnist_anon.npz"] = _dermamnist_npz(10, 2000)
    file_server.files["reference/eval-phase/eval_data/medmnist_probs.csv"] = real
    urls = (file_server.url + "data/", file_server.url + "reference/")

    manifest, downloaded = fetch_task("dermamnist", tmp_path / "good", *urls)
    assert downloaded
    assert manifest["reference"]["trust"] == "official"
    reference = load_reference(get_task("dermamnist", tmp_path / "good"))
    assert reference.array.shape == (2000, 7) and reference.sha256 == hashlib.sha256(real).hexdigest()
    assert [(b.name, b.start, b.stop) for b in get_task("dermamnist", tmp_path / "good").test_blocks] == \
        [("public", 0, 1000)]

    file_server.files["reference/eval-phase/eval_data/medmnist_probs.csv"] = real.replace(b"e-01", b"e-02", 1)
    with pytest.raises(FetchError, match="does not match the official checksum"):
        fetch_task("dermamnist", tmp_path / "bad", *urls)
    assert not (tmp_path / "bad" / "tasks" / "dermamnist").exists()
    assert not list((tmp_path / "bad" / "downloads").glob("*medmnist*")), "the bad file is deleted"


def _write(tmp_path, array, name="ref.csv"):
    path = tmp_path / name
    np.savetxt(path, array)
    return path


def test_samples_file_is_transposed_to_points_by_samples(tmp_path):
    samples = np.random.default_rng(1).normal(size=(1000, 7))
    parsed = parse_reference(_write(tmp_path, samples), "samples", transposed=True)
    np.testing.assert_array_equal(parsed, samples.T)


def test_wrong_sample_count_is_refused(tmp_path):
    with pytest.raises(FormatError, match="999 samples per test point, expected 1000"):
        parse_reference(_write(tmp_path, np.zeros((999, 3))), "samples", transposed=True)


def test_rows_that_are_not_probabilities_are_refused(tmp_path):
    probs = np.full((4, 2), 0.5)
    probs[2] = [0.6, 0.6]
    with pytest.raises(FormatError, match="not probabilities"):
        parse_reference(_write(tmp_path, probs), "probs", n_classes=2)
    probs[2] = [np.nan, 0.5]
    with pytest.raises(FormatError, match="non-finite"):
        parse_reference(_write(tmp_path, probs), "probs", n_classes=2)


def test_text_that_is_not_a_matrix_is_refused(tmp_path):
    path = tmp_path / "ref.csv"
    path.write_text("0.5 0.5\n0.25 0.75 0.0\n")
    with pytest.raises(FormatError, match="rows of 3 values after rows of 2|not a whitespace-separated"):
        parse_reference(path, "probs", n_classes=2)
    path.write_text("<html>rate limited</html>\n")
    with pytest.raises(FormatError, match="not a whitespace-separated numeric matrix"):
        parse_reference(path, "probs", n_classes=2)
