"""The NUTS cross-checks' results: every committed ``benchmarks/results/nuts-<task>.json`` is what its chains' files
give (``nuts_crosscheck.py --verdict-only``), and a check's chains are saved and reused as it says."""

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.tasks import get_task
from reference.settings import REFERENCE_SETTINGS
from reference.store import load_reference
from tests.conftest import assert_same_to_round_off

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _script():
    """The script as a module of its folder, as it imports its neighbours (and as worker processes find its chains'
    function by name)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module("nuts_crosscheck")


RESULTS = sorted((BENCHMARKS / "results").glob("nuts-*.json"))


def test_every_embedded_reference_has_a_committed_crosscheck():
    """Each embedded reference is checked by NUTS, with its verdict and chains in the repository (the test above
    recomputes each)."""
    assert sorted(json.loads(p.read_text())["task"] for p in RESULTS) == sorted(REFERENCE_SETTINGS)


@pytest.mark.parametrize("path", RESULTS, ids=[p.stem for p in RESULTS])
def test_every_committed_crosscheck_is_recomputed_from_its_chains(path):
    script = _script()
    stored = json.loads(path.read_text())
    task = get_task(stored["task"])
    reference = load_reference(task)
    settings = stored["settings"]
    identity = script.chain_identity(task, reference.array,
                                     *(settings[k] for k in ("warmup", "samples", "dtype", "seed")))
    _, folder = script.results_paths(task.name, path)
    chains = [script._saved_chain(folder, c, identity) for c in range(settings["chains"])]
    assert all(chains), f"{folder} lacks a finished chain of {path.name}"
    assert reference.sha256 == stored["reference_sha256"], f"{path.name} was made against another reference"
    recomputed = json.loads(json.dumps({**script.verdict(task, reference, chains, settings["seed"]),
                                        "settings": settings}))
    assert_same_to_round_off(recomputed, stored)  # to the last bits another CPU's vector sums may change


def test_a_check_keeps_its_chains_recomputes_its_verdict_and_never_overwrites_them(tmp_path, capsys):
    """toy-gap, 2 chains of 5 + 5 iterations: the chains' files are written and reused, --verdict-only recomputes the
    results bitwise from them, and a rerun with other arguments is refused rather than resampling over them."""
    pytest.importorskip("numpyro")
    script = _script()
    out = tmp_path / "nuts-toy-gap.json"
    arguments = ["--task", "toy-gap", "--chains", "2", "--warmup", "5", "--samples", "5", "--workers", "1", "--out",
                 str(out)]
    script.main(arguments)
    first = out.read_bytes()
    chains = sorted(p.name for p in (tmp_path / "nuts-toy-gap").iterdir())
    assert chains == ["chain-0.npz", "chain-1.npz"]
    script.main([*arguments, "--verdict-only"])
    assert out.read_bytes() == first
    with pytest.raises(SystemExit) as refused:
        script.main(["--task", "toy-gap", "--chains", "2", "--warmup", "5", "--samples", "6", "--workers", "1",
                     "--out", str(out)])
    assert refused.value.code == 2 and "made with other arguments" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "nuts-toy-gap").iterdir()) == chains


@pytest.mark.parametrize("held", ["chains", "seed", "damaged"])
def test_a_verdict_of_another_check_is_never_rewritten_without_restart(tmp_path, capsys, held):
    """A results file made with other settings (a committed 8-chain verdict, rerun with the default 4: its first 4
    chains are reused, so nothing else stops it), or one this script cannot read, is refused in one line before
    anything is sampled or written; --restart replaces it."""
    script = _script()
    committed = BENCHMARKS / "results" / "nuts-toy-gap.json"
    stored = json.loads(committed.read_text())
    out = tmp_path / "nuts-toy-gap.json"
    (tmp_path / "nuts-toy-gap").symlink_to(committed.with_suffix(""))
    settings = stored["settings"]
    arguments = ["--task", "toy-gap", "--verdict-only", "--out", str(out),
                 *(f"--{name}={value}" for name, value in settings.items())]
    if held == "damaged":
        out.write_text("{not json")
    else:
        out.write_text(json.dumps({**stored, "settings": {**settings, held: settings[held] * 2}}))
    before = out.read_bytes()
    with pytest.raises(SystemExit) as refused:
        script.main(arguments)
    message = capsys.readouterr().err
    assert refused.value.code == 2 and message.count("\n") == 1 and "--restart" in message, message
    assert (f"--{held} {settings[held] * 2} there, {settings[held]} here" in message if held != "damaged"
            else "damaged" in message)
    assert out.read_bytes() == before
    script.main([*arguments, "--restart"])
    # the committed verdict, recomputed here from its chains: to round-off (another CPU kind's vector kernels move
    # a W2's last bits), every setting and count exactly
    assert_same_to_round_off(json.loads(out.read_text()), stored)


def test_a_chain_is_keyed_on_the_classes_the_reference_predicts_at_the_stated_points_alone():
    """A reference sampled again that predicts the same class at every stated point keeps the chains (their draws
    take nothing else from it); one class changed there, or another argument, and they are not reused."""
    from reference.evidence import evidence_points

    script = _script()
    task = get_task("digits")
    reference = load_reference(task).array
    identity = script.chain_identity(task, reference, 500, 500, "float32", 2021)
    resampled = reference * 0.5 + 0.5 * np.eye(reference.shape[1])[reference.argmax(axis=1)]
    assert not np.array_equal(resampled, reference)
    assert script.chain_identity(task, resampled, 500, 500, "float32", 2021) == identity
    elsewhere = reference.copy()
    unstated = sorted(set(range(len(reference))) - set(evidence_points(task).tolist()))[0]
    elsewhere[unstated] = np.roll(elsewhere[unstated], 1)
    assert script.chain_identity(task, elsewhere, 500, 500, "float32", 2021) == identity
    point = evidence_points(task)[3]
    changed = reference.copy()
    changed[point] = np.roll(changed[point], 1)
    assert script.chain_identity(task, changed, 500, 500, "float32", 2021) != identity
    assert script.chain_identity(task, reference, 500, 400, "float32", 2021) != identity
    assert script.chain_identity(get_task("toy-gap"), load_reference(get_task("toy-gap")).array, 500, 500,
                                 "float32", 2021)["reference_classes"] is None


def test_a_verdict_recomputed_from_kept_chains_prints_its_test_and_writes_the_committed_results(tmp_path, capsys):
    """--verdict-only needs no NumPyro: from the committed toy-gap chains it writes the committed results (to
    round-off) and prints the permutation test's sentence, as docs/references.md writes it."""
    from reference.tables import crosscheck_sentence

    script = _script()
    committed = BENCHMARKS / "results" / "nuts-toy-gap.json"
    stored = json.loads(committed.read_text())
    out = tmp_path / "nuts-toy-gap.json"
    (tmp_path / "nuts-toy-gap").symlink_to(committed.with_suffix(""))
    script.main(["--task", "toy-gap", "--verdict-only", "--out", str(out),
                 *(f"--{name}={value}" for name, value in stored["settings"].items())])
    assert_same_to_round_off(json.loads(out.read_text()), stored)
    assert crosscheck_sentence(stored["test"]).replace("**", "") in capsys.readouterr().out
