"""The five tasks of the NeurIPS 2021 "Approximate Inference in Bayesian Deep Learning" competition.

Facts from the organisers' starter kit and Izmailov et al. (2021), "What are Bayesian neural network
posteriors really like?". Every task: isotropic Gaussian prior N(0, v I) on all parameters,
temperature 1, no data augmentation, full-data likelihood. The data are the organisers' files,
already preprocessed as in their HMC runs, used as they are (sizes are read from the files).

Prior variances (``PRIOR_VARIANCE``): the HMC paper's values. Two differ from the starter kit:
CIFAR-10's notebook says 5, a slip for the paper's 1/5; IMDB's notebook and the SAE authors' code use
1 while the HMC paper and the HMC code's published command (trajectory length 0.24 = (pi/2)
sqrt(1/40)) use 1/40, which we follow.

A task's data are downloaded only by ``python -m bench fetch --task NAME`` (see :mod:`bench.fetch`)
and converted once into ``.npy`` files in ``<cache>/tasks/NAME/``; here they are memory-mapped, after
their sha256 has been checked against the manifest's (:func:`verify_cached_files`; about 0.13 s per
200 MB, once per process and file). A manifest or an array that is damaged or changed is refused with
one line naming the file and ``python -m bench fetch --task NAME --force``, which repairs it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from bench.download import FetchError, default_cache, resolve_cache
from bench.errors import DamagedFile
from bench.io import HASH_CHUNK_BYTES, open_regular_file, read_json
from bench.likelihoods import Categorical, HeteroscedasticGaussian, Likelihood
from bench.tasks import models
from bench.tasks.base import Task, TestBlock
from bench.trust import FETCHED_LEVELS, OURS

DATA_URL = "https://storage.googleapis.com/neurips2021_bdl_competition/"
REFERENCE_URL = "https://raw.githubusercontent.com/izmailovpavel/neurips_bdl_starter_kit/main/"

PRIOR_VARIANCE = {"cifar10": 1 / 5, "cifar10c": 0.05, "imdb": 1 / 40, "dermamnist": 0.01, "uci-gap": 1 / 30}

CIFAR10C_BLOCKS = ("clean", "gaussian_noise-2", "brightness-3", "pixelate-4", "zoom_blur-5")
"""The CIFAR-10-C test set: the clean CIFAR-10 test set, then four corruptions (name-severity), equal blocks."""

PUBLIC_ROWS = {"dermamnist": 1_000, "uci-gap": 100}
"""The competition's public score used the first rows of the test set (for CIFAR-10-C: its clean block, the
first 10,000 rows); both the public and the full score are reported."""

SUBMISSION_FILES = {"cifar10": "cifar10_probs.csv", "imdb": "imdb_probs.csv", "cifar10c": "cifar_probs.csv",
                    "dermamnist": "medmnist_probs.csv", "uci-gap": "uci_samples.csv"}
"""The competition's submission file of each task (in a zip, at its root)."""

IMDB_VOCABULARY = 20_000


@dataclass(frozen=True)
class Remote:
    """A file at ``base`` + ``path``: ``base`` is ``"data"`` (the organisers' bucket) or ``"reference"`` (the starter kit)."""

    base: str
    path: str

    @property
    def official_url(self) -> str:
        return self.url()

    def url(self, data_url: str = DATA_URL, reference_url: str = REFERENCE_URL) -> str:
        """The file under the two base URLs of a mirror (by default the official ones): ``<base>/<path>``, whether
        or not the base ends with a slash."""
        base = data_url if self.base == "data" else reference_url
        return base.rstrip("/") + "/" + self.path

    @property
    def file_name(self) -> str:
        return self.path.replace("/", "__")


@dataclass(frozen=True)
class ArraySource:
    """Where one array of a task comes from: a text file (``key`` None) or one key of an ``.npz``,
    and ``convert``, which maps the file's rows to stored rows (layout and dtype)."""

    remote: Remote
    convert: Callable[[np.ndarray], np.ndarray]
    key: str | None = None


def images(side: int) -> Callable[[np.ndarray], np.ndarray]:
    """NHWC rows (``(n, side*side*3)`` or ``(n, side, side, 3)``) -> float32 NCHW ``(n, 3, side, side)``."""
    def convert(rows: np.ndarray) -> np.ndarray:
        if rows.size != len(rows) * side * side * 3:
            raise ValueError(f"expected rows of {side}x{side}x3 values, got shape {rows.shape}")
        return np.ascontiguousarray(rows.reshape(len(rows), side, side, 3).transpose(0, 3, 1, 2), dtype=np.float32)
    return convert


def integers(low: int, high: int) -> Callable[[np.ndarray], np.ndarray]:
    """Rows of integer-valued numbers in [low, high) (labels, token ids) -> int64, shape kept (a column is dropped)."""
    def convert(rows: np.ndarray) -> np.ndarray:
        values = np.asarray(rows)
        if values.ndim == 2 and values.shape[1] == 1:
            values = values[:, 0]
        rounded = np.rint(values)
        if not np.array_equal(rounded, values) or rounded.min(initial=low) < low or rounded.max(initial=low) >= high:
            raise ValueError(f"expected integers in [{low}, {high})")
        return rounded.astype(np.int64)
    return convert


def features(n_features: int) -> Callable[[np.ndarray], np.ndarray]:
    def convert(rows: np.ndarray) -> np.ndarray:
        if rows.ndim != 2 or rows.shape[1] != n_features:
            raise ValueError(f"expected rows of {n_features} features, got shape {rows.shape}")
        return rows.astype(np.float32)
    return convert


def targets(rows: np.ndarray) -> np.ndarray:
    """Regression targets ``(n,)`` or ``(n, 1)`` -> float32 ``(n,)``."""
    values = np.asarray(rows)
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim != 1:
        raise ValueError(f"expected one target per row, got shape {rows.shape}")
    return values.astype(np.float32)


@dataclass(frozen=True)
class CompetitionSpec:
    """Everything about a competition task except its data, which :mod:`bench.fetch` downloads.

    ``arrays`` maps ``x_train``, ``y_train``, ``x_test`` and (where the organisers published the
    labels) ``y_test`` to their sources. The reference is ``probs`` ``(N_test, C)`` or ``samples``
    ``(N_test, 1000)``; ``reference_transposed`` marks a file stored as samples x points.
    """

    name: str
    description: str
    architecture: str
    model_factory: Callable[[], nn.Module] = field(repr=False)
    likelihood: Likelihood
    n_classes: int | None
    arrays: dict[str, ArraySource]
    reference: Remote
    reference_key: str
    reference_transposed: bool = False
    version: int = 1

    @property
    def prior_variance(self) -> float:
        return PRIOR_VARIANCE[self.name]

    def remotes(self) -> list[Remote]:
        """Every file the task needs, each once, the reference last."""
        unique = list(dict.fromkeys(source.remote for source in self.arrays.values()))
        return [*unique, self.reference]

    def test_blocks(self, n_test: int, public_rows: int | None = None) -> tuple[TestBlock, ...]:
        """The blocks of ``n_test`` test rows: CIFAR-10-C's five, and the public block (``public_rows``: its rows,
        default :data:`PUBLIC_ROWS`'s)."""
        blocks = []
        if self.name == "cifar10c":
            if n_test % len(CIFAR10C_BLOCKS):
                raise FetchError(f"cifar10c: {n_test} test rows do not split into {len(CIFAR10C_BLOCKS)} equal blocks")
            size = n_test // len(CIFAR10C_BLOCKS)
            blocks = [TestBlock(name, i * size, (i + 1) * size) for i, name in enumerate(CIFAR10C_BLOCKS)]
            blocks.append(TestBlock("public", 0, size))
        if self.name in PUBLIC_ROWS:
            blocks.append(TestBlock("public", 0, min(public_rows or PUBLIC_ROWS[self.name], n_test)))
        return tuple(blocks)


def _text(path: str, convert) -> ArraySource:
    return ArraySource(Remote("data", path), convert)


def _npz(path: str, key: str, convert) -> ArraySource:
    return ArraySource(Remote("data", f"evaluation_phase/{path}"), convert, key)


SPECS: dict[str, CompetitionSpec] = {spec.name: spec for spec in (
    CompetitionSpec(
        name="cifar10", description="CIFAR-10, ResNet-20-FRN (swish); official HMC reference",
        architecture="ResNet-20, FilterResponseNorm, swish (274,042 parameters)",
        model_factory=models.resnet20_frn, likelihood=Categorical(), n_classes=10,
        arrays={"x_train": _text("cifar10_train_x.csv", images(32)),
                "y_train": _text("cifar10_train_y.csv", integers(0, 10)),
                "x_test": _text("cifar10_test_x.csv", images(32)),
                "y_test": _text("cifar10_test_y.csv", integers(0, 10))},
        reference=Remote("reference", "data/cifar10/probs.csv"), reference_key="probs"),
    CompetitionSpec(
        name="cifar10c", description="CIFAR-10 training set, CIFAR-10-C test set (clean + 4 corruptions), AlexNet-like",
        architecture="AlexNet-like convnet, swish (1,488,202 parameters)",
        model_factory=models.alexnet_cifar10c, likelihood=Categorical(), n_classes=10,
        arrays={"x_train": _npz("cifar_anon.npz", "x_train", images(32)),
                "y_train": _npz("cifar_anon.npz", "y_train", integers(0, 10)),
                "x_test": _npz("cifar_anon.npz", "x_test", images(32))},
        reference=Remote("reference", "eval-phase/eval_data/cifar_probs.csv"), reference_key="probs"),
    CompetitionSpec(
        name="imdb", description="IMDB reviews (100 token ids, Keras pre-padding), CNN-LSTM; official HMC reference",
        architecture="embedding 20000x128, Conv1D 64, max-pool 4, LSTM 128 (2,700,098 parameters)",
        model_factory=models.cnn_lstm_imdb, likelihood=Categorical(), n_classes=2,
        arrays={"x_train": _text("imdb_train_x.csv", integers(0, IMDB_VOCABULARY)),
                "y_train": _text("imdb_train_y.csv", integers(0, 2)),
                "x_test": _text("imdb_test_x.csv", integers(0, IMDB_VOCABULARY)),
                "y_test": _text("imdb_test_y.csv", integers(0, 2))},
        reference=Remote("reference", "data/imdb/probs.csv"), reference_key="probs"),
    CompetitionSpec(
        name="dermamnist", description="DermaMNIST 28x28x3 (unnormalised 0-255 pixels), LeNet-5",
        architecture="LeNet-5, ReLU, average pooling (61,751 parameters)",
        model_factory=models.lenet5, likelihood=Categorical(), n_classes=7,
        arrays={"x_train": _npz("dermamnist_anon.npz", "x_train", images(28)),
                "y_train": _npz("dermamnist_anon.npz", "y_train", integers(0, 7)),
                "x_test": _npz("dermamnist_anon.npz", "x_test", images(28))},
        reference=Remote("reference", "eval-phase/eval_data/medmnist_probs.csv"), reference_key="probs"),
    CompetitionSpec(
        name="uci-gap", description="UCI Energy with a gap split (organisers' split), MLP, heteroscedastic Gaussian",
        architecture="MLP 8-50-2, ReLU (552 parameters)",
        model_factory=models.mlp_uci, likelihood=HeteroscedasticGaussian(), n_classes=None,
        arrays={"x_train": _npz("energy_anon.npz", "x_train", features(8)),
                "y_train": _npz("energy_anon.npz", "y_train", targets),
                "x_test": _npz("energy_anon.npz", "x_test", features(8))},
        reference=Remote("reference", "eval-phase/eval_data/uci_samples.csv"), reference_key="samples",
        reference_transposed=True),
)}

ARRAY_FILES = ("x_train", "y_train", "x_test", "y_test")
MANIFEST = "manifest.json"
REFERENCE_ARRAY = "reference.npy"


def task_folder(name: str, cache: Path | str | None = None) -> Path:
    return resolve_cache(cache) / "tasks" / name


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _cache_option(cache: Path | str | None) -> str:
    """`` --cache X`` for a command line, unless ``cache`` is the default folder."""
    if cache is None or resolve_cache(cache) == default_cache():
        return ""
    return f" --cache {cache}"


def repair_hint(name: str, cache: Path | str | None = None) -> str:
    """The command that downloads and converts task ``name`` again, replacing whatever is in its folder."""
    return f"repair it with `python -m bench fetch --task {name}{_cache_option(cache)} --force`"


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_sha256(value) -> bool:
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


def _is_shape(value) -> bool:
    return isinstance(value, list) and len(value) >= 1 and all(_is_count(n) for n in value)


def manifest_problem(name: str, manifest: dict) -> str | None:
    """What in ``manifest`` is not as the fetch writes it for the current version of task ``name``, or None.
    A manifest of another version is only checked for its version (it is fetched again, not read)."""
    spec = SPECS[name]
    version = manifest.get("version")
    if not _is_count(version):
        return "no version number"
    if version != spec.version:
        return None
    task = manifest.get("task")
    if task != name:
        return "no task name" if task is None else f"it is for task {task!r}"
    arrays = manifest.get("arrays")
    if not isinstance(arrays, dict) or set(arrays) != set(spec.arrays):
        return "its arrays are not the task's"
    for array, entry in arrays.items():
        if not (isinstance(entry, dict) and _is_shape(entry.get("shape")) and _is_sha256(entry.get("sha256"))):
            return f"the entry of {array} is malformed"
    reference = manifest.get("reference")
    if not (isinstance(reference, dict) and reference.get("url") == spec.reference.official_url
            and reference.get("key") == spec.reference_key and reference.get("array") == REFERENCE_ARRAY
            and _is_sha256(reference.get("sha256")) and _is_sha256(reference.get("array_sha256"))
            and reference.get("trust") in FETCHED_LEVELS and _is_shape(reference.get("shape"))):
        return "the entry of the reference is malformed"
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != {remote.official_url for remote in spec.remotes()}:
        return "its downloaded files are not the task's"
    for url, entry in files.items():
        if not (isinstance(entry, dict) and _is_sha256(entry.get("sha256")) and entry.get("trust") in FETCHED_LEVELS
                and _is_count(entry.get("bytes"))):
            return f"the entry of {url} is malformed"
    return None


def read_manifest(name: str, cache: Path | str | None = None) -> dict | None:
    """The fetched task's manifest (written last by the fetch), or None if the task is not fetched; one
    :class:`DamagedFile` line naming it and the fetch that repairs it if it is not as the fetch wrote it."""
    path = task_folder(name, cache) / MANIFEST
    if not path.exists():
        return None
    what = f"manifest of the fetched task {name}"
    manifest = read_json(path, what, repair_hint(name, cache))
    problem = manifest_problem(name, manifest)
    if problem:
        raise DamagedFile(f"{path}: the {what} is damaged ({problem}); {repair_hint(name, cache)}")
    return manifest


def manifest_trust(manifest: dict) -> dict:
    """A run record's ``trust`` field for a run on the fetched task of ``manifest``: how its reference and each of its
    data files (by official URL) were trusted, with their sha256 (:mod:`bench.trust`)."""
    reference = manifest["reference"]
    return {"reference": {"trust": reference["trust"], "sha256": reference["sha256"]},
            "data": {url: {"trust": entry["trust"], "sha256": entry["sha256"]}
                     for url, entry in manifest["files"].items() if url != reference["url"]}}


def files_trust(task: Task, reference_sha256: str) -> dict:
    """The ``trust`` field of a run on ``task`` scored against the reference of sha256 ``reference_sha256``: a fetched
    task's from its manifest (:func:`manifest_trust`), an installed task's (or a rehearsal's) bdl-bench's own reference
    and no fetched data."""
    if task.data_folder is None:
        return {"reference": {"trust": OURS, "sha256": reference_sha256}, "data": {}}
    manifest = read_manifest(task.name, task.data_folder.parents[1])
    if manifest is None:
        raise FetchError(f"the data of task {task.name} are no longer in {task.data_folder}; "
                         f"{fetch_hint(task.name, task.data_folder.parents[1])}")
    return manifest_trust(manifest)


def fetch_hint(name: str, cache: Path | str | None) -> str:
    where = f" --cache {cache}" if cache else ""
    return f"run `python -m bench fetch --task {name}{where}`"


_VERIFIED: dict[tuple, str] = {}
"""sha256 of the cached files this process has hashed, keyed by path and identity (device, inode, size,
modification and change times): a file written since (in place or replaced) has another key and is
hashed again. The change time cannot be set back by a program, so an edit cannot hide behind it."""


def _identity(path: Path, st: os.stat_result) -> tuple:
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def cached_sha256(path: Path, what: str, repair: str) -> str:
    """``path``'s sha256 (a regular file only: :func:`~bench.io.open_regular_file`), hashed once per process
    while the file is unchanged."""
    try:
        known = _VERIFIED.get(_identity(path, os.stat(path)))
    except FileNotFoundError:
        raise DamagedFile(f"{path}: the {what} is missing; {repair}") from None
    if known is not None:
        return known
    with open_regular_file(path, what, repair) as f:
        key = _identity(path, os.fstat(f.fileno()))
        digest = hashlib.sha256()
        for chunk in iter(lambda: f.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    _VERIFIED[key] = digest.hexdigest()
    return _VERIFIED[key]


def verify_cached_files(name: str, cache: Path | str | None, manifest: dict, reference: bool = False) -> None:
    """Checks every cached array of task ``name`` (and the reference array if ``reference``) against the
    sha256 the manifest recorded; one :class:`DamagedFile` line naming the file and the repairing fetch."""
    folder, repair = task_folder(name, cache), repair_hint(name, cache)
    expected = {f"{array}.npy": entry["sha256"] for array, entry in manifest["arrays"].items()}
    if reference:
        expected[manifest["reference"]["array"]] = manifest["reference"]["array_sha256"]
    for file, sha256 in expected.items():
        what = f"cached array {file} of task {name}"
        actual = cached_sha256(folder / file, what, repair)
        if actual != sha256:
            raise DamagedFile(f"{folder / file}: the {what} changed after the fetch (sha256 {actual[:16]}..., the "
                              f"manifest's {sha256[:16]}...); {repair}")


def load_task(name: str, cache: Path | str | None = None) -> Task:
    """The fetched task from the cache (arrays memory-mapped); one clear error if it is not fetched."""
    spec = SPECS[name]
    folder = task_folder(name, cache)
    manifest = read_manifest(name, cache)
    if manifest is None:
        raise FetchError(f"the data of task {name} are not in {folder}; {fetch_hint(name, cache)}")
    if manifest.get("version") != spec.version:
        raise FetchError(f"the cached data of {name} are for task version {manifest.get('version')}, "
                         f"this is version {spec.version}; {fetch_hint(name, cache)}")
    verify_cached_files(name, cache, manifest)
    arrays = {}
    for array in ARRAY_FILES:
        if array in spec.arrays:
            # Copy-on-write mapping: pages load on demand and torch gets a writable array.
            arrays[array] = torch.from_numpy(np.load(folder / f"{array}.npy", mmap_mode="c"))
    n_test = int(arrays["x_test"].shape[0])
    data_digest = hashlib.sha256(json.dumps(manifest["arrays"], sort_keys=True).encode()).hexdigest()
    return Task(
        name=name, version=spec.version, description=spec.description,
        x_train=arrays["x_train"], y_train=arrays["y_train"], x_test=arrays["x_test"],
        y_test=arrays.get("y_test"), model_factory=spec.model_factory, architecture=spec.architecture,
        likelihood=spec.likelihood, prior_variance=spec.prior_variance,
        settings={"data": {"source": "NeurIPS 2021 BDL competition",
                           "files": [r.official_url for r in spec.remotes()[:-1]]},
                  "reference_url": spec.reference.official_url},
        test_blocks=spec.test_blocks(n_test), n_classes=spec.n_classes,
        data_digest=data_digest, data_folder=folder,
    )


INPUT_SHAPES = {"cifar10": (3, 32, 32), "cifar10c": (3, 32, 32), "imdb": (100,), "dermamnist": (3, 28, 28),
                "uci-gap": (8,)}
"""One example's input shape per competition task, as the official files hold them."""


@dataclass(frozen=True)
class OfficialRows:
    """How many rows a competition task's official training and test sets have, each with where that is stated.
    ``train_published``: False where the organisers never stated their training file's size (it is then the stand-in
    the note explains, which a rehearsal uses; a run on the fetched task reads the true size from the file)."""

    train: int
    test: int
    train_source: str
    test_source: str
    train_published: bool = True

    @property
    def train_said(self) -> str:
        """The training rows as a sentence says them: ``the official 50,000 training rows``, or for a stand-in
        ``512 training rows (a stand-in: the official count is not published)``."""
        if self.train_published:
            return f"the official {self.train:,} training rows"
        return f"{self.train:,} training rows (a stand-in: the official count is not published)"


STARTER_KIT = "the starter kit (github.com/izmailovpavel/neurips_bdl_starter_kit, commit af42869)"

OFFICIAL_ROWS: dict[str, OfficialRows] = {
    "cifar10": OfficialRows(
        50_000, 10_000,
        "CIFAR-10's training set (Krizhevsky 2009; www.cs.toronto.edu/~kriz/cifar.html, where the starter kit's "
        "data/cifar10/README.md points: 50,000 training and 10,000 test images)",
        "the official reference data/cifar10/probs.csv: 10,000 rows of 10 probabilities"),
    "cifar10c": OfficialRows(
        50_000, 50_000,
        f"{STARTER_KIT}, eval-phase/README.md: x_train holds the 50k CIFAR-10 training images",
        f"{STARTER_KIT}: eval-phase/submission-score-evaluation.ipynb scores 50,000 rows x 10 (the public score its "
        "first 10,000); eval-phase/README.md: five test sets of 10k, the clean one and four corruptions"),
    "imdb": OfficialRows(
        25_000, 25_000,
        "the Large Movie Review Dataset (Maas et al. 2011; ai.stanford.edu/~amaas/data/sentiment, where the starter "
        "kit's data/imdb/README.md points): 25,000 training and 25,000 test reviews",
        "the official reference data/imdb/probs.csv: 25,000 rows of 2 probabilities"),
    "dermamnist": OfficialRows(
        7_007, 2_000,
        "not published for the competition's dermamnist_anon.npz; the stand-in is MedMNIST's DermaMNIST training "
        "split (Yang et al. 2023), 7,007 images (the competition's 2,000 test rows are not MedMNIST's 2,005, so its "
        "split may differ)",
        "the official reference eval-phase/eval_data/medmnist_probs.csv: 2,000 rows of 7 probabilities (the public "
        "score its first 1,000)",
        train_published=False),
    "uci-gap": OfficialRows(
        512, 256,
        "not published for the competition's energy_anon.npz; the stand-in is UCI Energy Efficiency's 768 rows (UCI "
        "repository, dataset 242) less the 256 test rows, the most the gap split can train on",
        f"{STARTER_KIT}: the evaluation-phase notebooks' samples of shape (256, 1000), and "
        "eval-phase/submission-score-evaluation.ipynb's 256 x 1000 (the public score its first 100 rows)",
        train_published=False),
}
"""The official sizes a rehearsal (:func:`generated_task`) reproduces, with their sources: the test counts are the
official references' row counts (the three in the starter kit's git tree were counted; the other two are the sizes the
organisers' scoring notebook reads), the training counts the data sets' published splits. The organisers published no
training count for DermaMNIST and UCI-Gap: their stand-ins are marked (``train_published``)."""


def generated_test_rows(name: str, rows: int) -> int:
    """The test rows of a rehearsal on ``rows`` training rows: the official test set in proportion to the official
    training set (so that training and scoring shrink alike), at least one row per test block, at most the official
    count; for CIFAR-10-C a multiple of its five blocks."""
    official = OFFICIAL_ROWS[name]
    blocks = len(CIFAR10C_BLOCKS) if name == "cifar10c" else 1
    scaled = max(blocks, round(rows * official.test / official.train))
    return min(official.test, -(-scaled // blocks) * blocks)


def generated_task(name: str, rows: int | None = None, *, test_rows: int | None = None,
                   device: torch.device = torch.device("cpu"), seed: int = 0,
                   description: str = "generated data of the official shapes") -> Task:
    """Competition task ``name`` on generated data, without its files: its model, likelihood, prior and test blocks,
    with ``rows`` training rows (default: the official count, :data:`OFFICIAL_ROWS`) of the official input shape and
    ``test_rows`` test rows (default: the official count, or :func:`generated_test_rows` for fewer training rows),
    seeded by ``seed``. Inputs are standard normal (token ids uniform over the vocabulary), labels uniform (regression
    targets standard normal); where the official files publish test labels (``cifar10``, ``imdb``) it has generated
    ones too. The public block covers the official share of the test rows. The one way generated data of a competition
    task are made: rehearsals (``run --rehearse``) and the benchmarks that time the real models (the training rows
    for a given ``rows`` and ``seed`` do not depend on ``test_rows``)."""
    spec, official = SPECS[name], OFFICIAL_ROWS[name]
    rows = official.train if rows is None else rows
    if test_rows is None:
        test_rows = official.test if rows == official.train else generated_test_rows(name, rows)
    g = torch.Generator().manual_seed(seed)

    def inputs(count: int) -> torch.Tensor:
        shape = (count, *INPUT_SHAPES[name])
        return torch.randint(0, IMDB_VOCABULARY, shape, generator=g) if name == "imdb" else torch.randn(shape,
                                                                                                         generator=g)

    def targets(count: int) -> torch.Tensor:
        return (torch.randn(count, generator=g) if spec.n_classes is None
                else torch.randint(0, spec.n_classes, (count,), generator=g))

    x, y = inputs(rows), targets(rows)  # first: the training rows of (rows, seed) are the same whatever the test
    x_test = inputs(test_rows)
    y_test = targets(test_rows) if "y_test" in spec.arrays else None
    public = None
    if name in PUBLIC_ROWS:
        public = max(1, round(test_rows * PUBLIC_ROWS[name] / official.test))
    # The data are what (task, rows, test rows, seed) generate: the fingerprint names those, not a hash of 100s of MB.
    made_of = {"generated": name, "rows": rows, "test_rows": test_rows, "seed": seed}
    return Task(name=name, version=spec.version, description=description, x_train=x.to(device),
                y_train=y.to(device), x_test=x_test.to(device), y_test=None if y_test is None else y_test.to(device),
                model_factory=spec.model_factory, architecture=spec.architecture, likelihood=spec.likelihood,
                prior_variance=spec.prior_variance, settings={"data": {"source": description, "seed": seed}},
                test_blocks=spec.test_blocks(test_rows, public), n_classes=spec.n_classes,
                data_digest=hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest())
