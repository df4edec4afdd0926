"""Every file a benchmark script or command reads (chain files, results files, predictions, reference evidence,
checkpoints) is read defensively: a damaged one is one line naming it, exit 2 for the user's file and 3 for a file of
the installation, never an internal error (issue 65, kind 1)."""

from __future__ import annotations

import importlib
import io
import json
import pickle
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bench import scripts
from bench.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, describe_failure
from bench.io import read_npz, read_torch

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _torch_bytes(value) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


GOOD_NPZ = _npz(a=np.arange(1000.0), b=np.ones((30, 3)))
GOOD_TORCH = _torch_bytes({"x": torch.arange(1000.0)})


class _Code:  # unpickling it would run code: weights_only refuses it
    def __reduce__(self):
        return (print, ("ran",))


DAMAGE = {
    "truncated": lambda good: good[: len(good) // 2],
    "empty": lambda good: b"",
    "header only": lambda good: good[:40],
    "garbage": lambda good: b"\x00\xffnot an archive at all" * 50,
    "text": lambda good: b'{"a": 1}',
    "pickle": lambda good: pickle.dumps({"a": [1, 2]}),
    "code": lambda good: pickle.dumps(_Code()),
    "tail cut": lambda good: good[:-30],
}


def _described(error: BaseException) -> tuple[int, str]:
    return describe_failure(error)


@pytest.mark.parametrize("installed", [False, True], ids=["user's", "installation's"])
@pytest.mark.parametrize("reader, good", [(read_npz, GOOD_NPZ), (read_torch, GOOD_TORCH)], ids=["npz", "torch"])
@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_archive_is_one_line_naming_it(tmp_path, reader, good, damage, installed):
    path = tmp_path / "kept.bin"
    path.write_bytes(DAMAGE[damage](good))
    with pytest.raises(Exception) as raised:
        reader(path, "kept file", "delete it", installed=installed)
    code, line = _described(raised.value)
    assert code == (EXIT_ENVIRONMENT if installed else EXIT_BAD_INPUT), line
    assert str(path) in line and "delete it" in line and "\n" not in line


@pytest.mark.parametrize("reader", [read_npz, read_torch], ids=["npz", "torch"])
@pytest.mark.parametrize("what", ["missing", "folder"])
def test_a_missing_archive_or_a_folder_in_its_place_is_one_line(tmp_path, reader, what):
    path = tmp_path / "kept.npz"
    if what == "folder":
        path.mkdir()
    with pytest.raises(Exception) as raised:
        reader(path, "kept file", "delete it")
    code, line = _described(raised.value)
    assert code == EXIT_BAD_INPUT and str(path) in line, line


def _script(name: str):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)


def _bounded(main, capsys) -> tuple[int, str]:
    """``main`` run inside the benchmark scripts' boundary: its exit code and standard error."""
    with pytest.raises(SystemExit) as ended:
        scripts.run(main)
    return ended.value.code, capsys.readouterr().err


CHAIN_DAMAGE = {
    **{name: damage for name, damage in DAMAGE.items() if name != "code"},
    "no meta": lambda good: _npz(traces=np.zeros((3, 2))),
    "meta not JSON": lambda good: _npz(meta=np.array("{not json"), traces=np.zeros((3, 2))),
    "meta a list": lambda good: _npz(meta=np.array("[1, 2]"), traces=np.zeros((3, 2))),
}


@pytest.mark.parametrize("damage", [*CHAIN_DAMAGE, "folder"])
def test_a_damaged_chain_file_is_named_by_the_nuts_crosscheck(tmp_path, capsys, damage):
    """``nuts_crosscheck.py --verdict-only`` with one of the committed toy-gap chains damaged: one line naming the
    file, exit 2, nothing written; --restart discards it (then the chain has not finished)."""
    script = _script("nuts_crosscheck")
    committed = BENCHMARKS / "results" / "nuts-toy-gap.json"
    stored = json.loads(committed.read_text())
    out = tmp_path / "nuts-toy-gap.json"
    shutil.copytree(committed.with_suffix(""), tmp_path / "nuts-toy-gap")
    chain = tmp_path / "nuts-toy-gap" / "chain-1.npz"
    if damage == "folder":
        chain.unlink()
        chain.mkdir()
    else:
        chain.write_bytes(CHAIN_DAMAGE[damage](chain.read_bytes()))
    arguments = ["--task", "toy-gap", "--verdict-only", "--out", str(out),
                 *(f"--{name}={value}" for name, value in stored["settings"].items())]
    code, err = _bounded(lambda: script.main(arguments), capsys)
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1 and str(chain) in err and "--restart" in err, err
    assert "internal error" not in err and not out.exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "no arrays", "shapes"])
def test_the_installations_damaged_evidence_is_exit_3(tmp_path, damage):
    from reference import evidence
    from reference.store import RESTORE_EVIDENCE, evidence_path, PACKAGE_DATA

    good = evidence_path(PACKAGE_DATA, "toy-gap").read_bytes()
    path = tmp_path / "toy-gap.npz"
    path.write_bytes({"truncated": good[: len(good) // 3], "garbage": b"nonsense" * 9,
                      "no arrays": _npz(other=np.zeros(3)),
                      "shapes": _npz(**{name: np.zeros(2) for name in evidence.ARRAYS})}[damage])
    with pytest.raises(Exception) as raised:
        evidence.load(path, RESTORE_EVIDENCE, installed=True)
    code, line = _described(raised.value)
    assert code == EXIT_ENVIRONMENT and str(path) in line and "git checkout" in line, line
    with pytest.raises(Exception) as raised:
        evidence.load(path, "regenerate it")
    assert _described(raised.value)[0] == EXIT_BAD_INPUT


RESULTS_DAMAGE = {
    "truncated": lambda text: text[: len(text) // 2],
    "a list": lambda text: "[1, 2, 3]",
    "no blocks": lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "blocks"}),
    "chains a number": lambda text: json.dumps({**json.loads(text), "chains": 3}),
    "settings a string": lambda text: json.dumps({**json.loads(text), "settings": "x"}),
}


@pytest.mark.parametrize("damage", RESULTS_DAMAGE)
def test_a_damaged_committed_results_file_is_named_by_the_docs_table(tmp_path, damage):
    from reference.tables import nuts_table

    committed = BENCHMARKS / "results" / "nuts-toy-gap.json"
    path = tmp_path / committed.name
    path.write_text(RESULTS_DAMAGE[damage](committed.read_text()))
    with pytest.raises(Exception) as raised:
        nuts_table(tmp_path)
    code, line = _described(raised.value)
    assert code == EXIT_ENVIRONMENT and str(path) in line and "--verdict-only" in line, line


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other key", "folder"])
def test_a_runs_damaged_predictions_are_named_by_the_scripts_that_read_them(tmp_path, damage):
    from bench import records

    result = {"reference": {"key": "probs", "sha256": "0" * 64}}
    path = tmp_path / records.PREDICTIONS
    good = _npz(probs=np.full((4, 2), 0.5))
    if damage == "folder":
        path.mkdir()
    else:
        path.write_bytes({"truncated": good[:100], "garbage": b"x" * 300,
                          "other key": _npz(mean=np.zeros((4, 2)))}[damage])
    with pytest.raises(Exception) as raised:
        records.read_predictions_array(tmp_path, result)
    code, line = _described(raised.value)
    assert code == EXIT_BAD_INPUT and str(path) in line, line


KEPT_DAMAGE = {
    "no tables": {"command": "x"},
    "rows a number": {"tables": {"probes": {"columns": ["a"], "rows": 3}}},
    "no load average": {"tables": {"probes": {"columns": ["a"], "rows": [[1.0]]}}, "command": "x", "cpu": "c",
                        "cpu_count": 2, "torch": "t", "threads": 1, "date": "d", "minutes": 1.0},
    "tables a list": {"tables": ["probes"]},
    "columns missing": {"tables": {"probes": {"rows": [[1.0]]}}},
}


@pytest.mark.parametrize("block", ["honesty-probes", "honesty-summary"])
@pytest.mark.parametrize("damage", KEPT_DAMAGE)
def test_a_kept_measurement_lacking_a_field_is_named_by_the_docs_blocks(tmp_path, monkeypatch, block, damage):
    from bench import docblocks

    monkeypatch.setattr(docblocks, "MEASUREMENTS", tmp_path)
    monkeypatch.setattr(docblocks, "ROOT", tmp_path)
    path = tmp_path / "honesty.json"
    path.write_text(json.dumps(KEPT_DAMAGE[damage]))
    with pytest.raises(Exception) as raised:
        docblocks.GENERATORS[block]()
    code, line = _described(raised.value)
    assert code == EXIT_BAD_INPUT and str(path) in line and "internal error" not in line, line
