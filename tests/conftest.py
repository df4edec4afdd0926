"""A local HTTP file server for the download tests, tiny files in the competition's exact formats, and an empty
shipped-results store for every test that does not ask for the committed one.

The server listens on 127.0.0.1 on an ephemeral port for one test. It honours ``Range`` requests
(``bytes=a-`` and ``bytes=a-b``: 206 with ``Content-Range``) like the organisers' bucket and GitHub's raw host, and can be told to
misbehave per path: ``faults[path]`` is a list of actions consumed one per request (``"500"``,
``"404"``, ``("cut", n)``: announce the full length but close after ``n`` bytes, ``"no-range"``:
ignore the range and send the whole file with 200).
"""

from __future__ import annotations

import io
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch

# The suite runs single-threaded, as every command does by default: torch's default threads spin on these small
# models when the cores are shared (a run measured 10x slower), and the pinned results are 1-thread ones.
torch.set_num_threads(1)


QUICK_TIER = ("tests/science/", "tests/bench/test_metrics.py", "tests/leaderboard/test_submission.py")
"""The quick tier, ``python -m pytest -m "not slow"`` (the README's test section says how long it takes): the methods'
exact answers (``tests/science``: each method against its closed form or the exact law of its own recursion), the
metrics, and the validator of a run's claims (``leaderboard/submission.py``). Every other test is marked ``slow``
(pyproject.toml registers the marker); CI runs the whole suite."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not item.nodeid.startswith(QUICK_TIER):
            item.add_marker(pytest.mark.slow)


ROUND_OFF = 1e-9
"""Relative distance within which a float64 figure recomputed here is the one a committed file holds: another CPU
kind (AVX-512 against AVX2, the same library versions) makes numpy and torch pick other vector kernels, which move a
sum's last bits (about 1e-16 relative, a few 1e-15 after a few operations); a changed computation moves it by far
more."""


def round_off_differences(actual, expected, rel: float = ROUND_OFF, abs_: float = 1e-15, where: str = "") -> list[str]:
    """Every place where ``actual`` (nested dicts and lists, as JSON holds them) differs from ``expected``, one
    ``where: expected -> actual`` line each: the structure (keys, lengths) and every non-float (str, int, bool, None)
    exactly, a float to ``rel`` of the larger magnitude (or ``abs_``; NaN equals NaN)."""
    if isinstance(expected, dict) or isinstance(actual, dict):
        if not (isinstance(expected, dict) and isinstance(actual, dict)):
            return [f"{where}: {expected!r} -> {actual!r}"]
        if set(expected) != set(actual):
            return [f"{where}: keys {sorted(map(str, expected))} -> {sorted(map(str, actual))}"]
        return [line for key in expected
                for line in round_off_differences(actual[key], expected[key], rel, abs_, f"{where}.{key}")]
    if isinstance(expected, (list, tuple)) or isinstance(actual, (list, tuple)):
        if not (isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple))) \
                or len(expected) != len(actual):
            return [f"{where}: {expected!r} -> {actual!r}"]
        return [line for i, (a, e) in enumerate(zip(actual, expected))
                for line in round_off_differences(a, e, rel, abs_, f"{where}[{i}]")]
    if isinstance(expected, float) or isinstance(actual, float):
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (actual, expected))
        same = numbers and (math.isclose(actual, expected, rel_tol=rel, abs_tol=abs_)
                            or (math.isnan(actual) and math.isnan(expected)))
    else:
        same = type(actual) is type(expected) and actual == expected
    return [] if same else [f"{where}: {expected!r} -> {actual!r}"]


def assert_same_to_round_off(actual, expected, rel: float = ROUND_OFF, abs_: float = 1e-15) -> None:
    """``actual`` (recomputed here) is ``expected`` (committed, or pinned in a test, on another machine perhaps) up to
    the round-off another CPU kind changes: :func:`round_off_differences`. For numbers a test recomputes and compares
    with a file made elsewhere; two results of this machine compare bitwise."""
    found = round_off_differences(actual, expected, rel, abs_)
    assert not found, "differs beyond round-off (expected -> actual):\n" + "\n".join(found[:20])


@pytest.fixture(autouse=True)
def no_shipped_results(request, tmp_path_factory, monkeypatch):
    """The leaderboard shows the shipped results by default; a test sees them only where it asks
    (``@pytest.mark.shipped_store``: the committed store; or its own, by setting ``leaderboard.shipped.FOLDER``),
    so that what a test asserts about a database's runs does not move when the store is regenerated."""
    if request.node.get_closest_marker("shipped_store") is None:
        from leaderboard import shipped

        monkeypatch.setattr(shipped, "FOLDER", tmp_path_factory.mktemp("no-shipped") / "shipped")


class FileServer:
    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.faults: dict[str, list] = {}
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args):  # keep test output clean
                pass

            def do_GET(self):
                path = self.path.lstrip("/")
                requested = self.headers.get("Range")
                server.requests.append((path, requested))
                fault = server.faults.get(path, [None]).pop(0) if server.faults.get(path) else None
                if fault in ("500", "404") or path not in server.files:
                    self.send_error(int(fault or 404))
                    return
                data = server.files[path]
                ranged = requested is not None and fault != "no-range"
                first, _, last = requested.split("=")[1].partition("-") if ranged else ("0", "", "")
                start, end = int(first), min(int(last), len(data) - 1) if last else len(data) - 1
                if start >= len(data) and start:
                    self.send_error(416)
                    return
                body = data[start:end + 1]
                self.send_response(206 if ranged else 200)
                garbled = fault == "garbled-size"  # a size header that is there but is no size
                if ranged:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{'12x' if garbled else len(data)}")
                self.send_header("Content-Length", "lots" if garbled else str(len(body)))
                self.end_headers()
                if isinstance(fault, tuple) and fault[0] == "cut":
                    self.wfile.write(body[:fault[1]])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # a client that read the headers only (a mirror check)
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def ranges(self, path: str) -> list[str | None]:
        return [r for p, r in self.requests if p == path]


@pytest.fixture(scope="session")
def benchmark_script():
    """``benchmark_script(NAME)``: ``benchmarks/NAME.py`` loaded as a module (the scripts are files, not a package)."""
    import importlib.util

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "benchmarks"
                                                      / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def file_server():
    server = FileServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def savetxt_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savetxt(buffer, array)
    return buffer.getvalue()


def npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _probs(rng, rows, classes):
    return rng.dirichlet(np.ones(classes), size=rows)


FIXTURE_SIZES = {"cifar10": (6, 5), "imdb": (6, 4), "cifar10c": (6, 10), "dermamnist": (6, 4), "uci-gap": (24, 120)}
"""(train, test) rows of each task's fixture: tiny, but cifar10c splits into its 5 blocks and UCI-Gap's
test set is larger than its 100-row public part."""


def official_fixture_files(seed: int = 0) -> dict[str, bytes]:
    """Every file of the five tasks, at tiny sizes, in the organisers' formats, keyed ``data/<path>`` or
    ``reference/<path>`` (the two base URLs a fetch is pointed at)."""
    rng = np.random.default_rng(seed)
    files = {}

    def text_task(prefix, n_train, n_test, x_of, n_classes, reference_path):
        for split, n in (("train", n_train), ("test", n_test)):
            files[f"data/{prefix}_{split}_x.csv"] = savetxt_bytes(x_of(n))
            files[f"data/{prefix}_{split}_y.csv"] = savetxt_bytes(rng.integers(0, n_classes, n).astype(float))
        files[f"reference/{reference_path}"] = savetxt_bytes(_probs(rng, n_test, n_classes))

    n_train, n_test = FIXTURE_SIZES["cifar10"]
    text_task("cifar10", n_train, n_test, lambda n: rng.normal(0, 1, (n, 3072)), 10, "data/cifar10/probs.csv")
    n_train, n_test = FIXTURE_SIZES["imdb"]
    text_task("imdb", n_train, n_test, lambda n: rng.integers(0, 20000, (n, 100)).astype(float), 2,
              "data/imdb/probs.csv")

    def npz_task(name, x_of, y_of, reference_path, reference):
        n_train, n_test = FIXTURE_SIZES[{"cifar_anon": "cifar10c", "dermamnist_anon": "dermamnist",
                                         "energy_anon": "uci-gap"}[name]]
        files[f"data/evaluation_phase/{name}.npz"] = npz_bytes(
            x_train=x_of(n_train), y_train=y_of(n_train), x_test=x_of(n_test), y_test=np.zeros(n_test))
        files[f"reference/eval-phase/eval_data/{reference_path}"] = savetxt_bytes(reference(n_test))

    npz_task("cifar_anon", lambda n: rng.normal(0, 1, (n, 32, 32, 3)).astype(np.float32),
             lambda n: rng.integers(0, 10, n), "cifar_probs.csv", lambda n: _probs(rng, n, 10))
    npz_task("dermamnist_anon", lambda n: rng.integers(0, 256, (n, 28, 28, 3)).astype(np.float32),
             lambda n: rng.integers(0, 7, n), "medmnist_probs.csv", lambda n: _probs(rng, n, 7))
    npz_task("energy_anon", lambda n: rng.normal(0, 1, (n, 8)), lambda n: rng.normal(0, 1, (n, 1)),
             "uci_samples.csv", lambda n: rng.normal(0, 1, (1000, n)))
    return files


@pytest.fixture(scope="session")
def official_files() -> dict[str, bytes]:
    return official_fixture_files()


@pytest.fixture
def fixture_checksums(tmp_path, monkeypatch, official_files):
    """Points the official checksum table at the fixture files' sha256 (as if they were the official
    files), so fetches of fixtures go through the official-checksum path; returns the table."""
    import hashlib
    import json

    from reference import official
    from bench.tasks.competition import DATA_URL, REFERENCE_URL

    table = {}
    for key, data in official_files.items():
        base, path = key.split("/", 1)
        if path.endswith("probs.csv") and "cifar_probs" not in path:  # the files with an official checksum
            table[(DATA_URL if base == "data" else REFERENCE_URL) + path] = hashlib.sha256(data).hexdigest()
    path = tmp_path / "official_checksums.json"
    path.write_text(json.dumps(table))
    monkeypatch.setattr(official, "OFFICIAL_CHECKSUMS_FILE", path)
    return table


@pytest.fixture
def plugins_in_process(monkeypatch):
    """A method that is not bdl-bench's runs in the test's own process, as with ``--debug``, not in a process of
    its own (:func:`bench.executors.isolates`), which takes seconds to start: for the tests of what the boundary
    catches in a process (what it catches is the same there, and the few tests of the isolation itself spawn)."""
    from bench import executors, verify

    monkeypatch.setattr(executors, "isolates", lambda method: False)
    # verify binds the name at its import: patched there too, else a test whose module imported verify earlier (a
    # whole suite's collection does) re-executed every module method in a process of its own, seconds a verify
    monkeypatch.setattr(verify, "isolates", lambda method: False)


@pytest.fixture
def run_cli(capsys):
    """``python -m bench ARGS`` run in-process: returns (exit code, stdout, stderr); argparse's exits count too."""
    from bench.cli import main

    def run(*args):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit_:
            code = exit_.code
        out, err = capsys.readouterr()
        return code, out, err
    return run


class Terminal(io.StringIO):
    """A standard error that says it is a terminal, so that progress bars draw on it."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def every_progress_update(monkeypatch):
    """tqdm draws every update, however fast the run (its rate limit would otherwise skip them); returns
    :class:`Terminal`, to be put in place of ``sys.stderr``."""
    import tqdm.auto

    class EveryUpdate(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs, mininterval=0, miniters=0)
    monkeypatch.setattr(tqdm.auto, "tqdm", EveryUpdate)
    return Terminal
