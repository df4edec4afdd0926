"""Reference files and their checksum registry.

A reference is two files in ``reference/data/``: ``<task>.npz`` with one array (``probs``: the
HMC Bayesian model average ``(N_test, C)``, or ``samples``: predictive draws ``(N_test, 1000)``)
and ``<task>.json`` with its metadata (task settings and fingerprint, HMC settings, diagnostics,
noise floor). ``reference/registry.json`` records both files' sha256; loading recomputes them and
refuses any mismatch, so a corrupted or hand-edited reference never gets scored against. It also records the sha256
of the reference's evidence (:mod:`reference.evidence`), which ``reference diagnose`` checks before recomputing the
metadata's figures from it; scoring never reads the evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.errors import ReferenceMismatch
from bench.io import atomic_write_bytes, json_bytes, npz_bytes, read_json, sha256_file
from bench.tasks import Task
from reference.format import Reference, checked_entry, read_array

PACKAGE_DATA = Path(__file__).parent / "data"
EVIDENCE = Path(__file__).parent / "evidence"
RESTORE_EVIDENCE = "restore it from the repository (git checkout -- reference/evidence) or reinstall from a clone"
"""How a damaged file of the shipped evidence is repaired (it is the installation's, not the user's: exit 3)."""
"""The shipped references' evidence (:mod:`reference.evidence`): in the repository, not in the wheel."""
REGISTRY = Path(__file__).parent / "registry.json"


def read_registry(path: Path | None = None) -> dict:
    path = path or REGISTRY
    if not path.exists():
        return {}
    return read_json(path, "reference checksum registry", "reinstall bdl-bench (the registry is part of the package)")


def evidence_path(folder: Path, task: str) -> Path:
    """Where the evidence of the reference in ``folder`` lives: the repository's ``reference/evidence/<task>.npz`` for
    the shipped references, ``<task>.evidence.npz`` beside any other."""
    return EVIDENCE / f"{task}.npz" if Path(folder).resolve() == PACKAGE_DATA.resolve() \
        else Path(folder) / f"{task}.evidence.npz"


def write_reference(folder: Path, task: str, key: str, array: np.ndarray, metadata: dict, evidence: bytes) -> dict:
    """Writes ``<task>.npz``, ``<task>.json`` and the evidence (:func:`evidence_path`) atomically, the evidence
    first; returns their registry entry."""
    evidence_file = evidence_path(folder, task)
    evidence_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(evidence_file, evidence)
    atomic_write_bytes(folder / f"{task}.npz", npz_bytes(**{key: array}))
    atomic_write_bytes(folder / f"{task}.json", json_bytes(metadata))
    return {
        "version": metadata["task"]["version"],
        "fingerprint": metadata["task_fingerprint"],
        "npz_sha256": sha256_file(folder / f"{task}.npz"),
        "json_sha256": sha256_file(folder / f"{task}.json"),
        "evidence_sha256": sha256_file(evidence_file),
    }


def register(task: str, entry: dict, path: Path | None = None) -> None:
    path = path or REGISTRY
    registry = read_registry(path)
    registry[task] = entry
    atomic_write_bytes(path, json_bytes(registry))


def reference_status(task: Task, folder: Path | None = None, registry_path: Path | None = None) -> str:
    """One word for ``bench tasks``: ``ok``, ``missing``, ``unregistered``, ``corrupted`` or ``stale``."""
    try:
        load_reference(task, folder, registry_path)
    except ReferenceMismatch as error:
        return str(error).split(":", 1)[0].split()[-1]
    return "ok"


def load_reference(task: Task, folder: Path | None = None, registry_path: Path | None = None) -> Reference:
    """Loads and verifies a task's reference (from the package unless ``folder`` and ``registry_path``
    are given); raises :class:`ReferenceMismatch` with one clear line. A competition task's reference
    is the official one fetched with its data (:mod:`reference.official`)."""
    if task.data_folder is not None:
        from reference.official import load_official_reference

        return load_official_reference(task)
    folder = folder or PACKAGE_DATA
    entry = read_registry(registry_path).get(task.name)
    regenerate = f"run `python -m bench reference generate --task {task.name} --install`"
    if entry is None:
        raise ReferenceMismatch(f"reference unregistered: no registry entry for task {task.name!r}; {regenerate}")
    entry = checked_entry(entry, ("npz_sha256", "json_sha256", "fingerprint"), f"the registry's entry for {task.name}",
                          f"reinstall bdl-bench or {regenerate}")
    npz_path, json_path = folder / f"{task.name}.npz", folder / f"{task.name}.json"
    for path in (npz_path, json_path):
        if not path.exists():
            raise ReferenceMismatch(f"reference missing: {path} does not exist; reinstall the package or {regenerate}")
    for path, expected in ((npz_path, entry["npz_sha256"]), (json_path, entry["json_sha256"])):
        actual = sha256_file(path)
        if actual != expected:
            raise ReferenceMismatch(
                f"reference corrupted: {path} has sha256 {actual[:16]}..., the registry expects "
                f"{expected[:16]}...; refusing to score against it")
    metadata = read_json(json_path, "reference metadata", f"reinstall the package or {regenerate}")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("task_fingerprint"), str):
        raise ReferenceMismatch(f"reference damaged: {json_path} holds no task fingerprint; {regenerate}")
    if entry["fingerprint"] != task.fingerprint() or metadata["task_fingerprint"] != task.fingerprint():
        raise ReferenceMismatch(
            f"reference stale: {task.name} v{task.version} differs from the task the reference was generated for "
            f"(v{entry.get('version', '?')}) in {_what_changed(task, metadata.get('task'))}; {regenerate}")
    if "test_targets_sha256" not in metadata:
        raise ReferenceMismatch(f"reference damaged: {json_path} holds no sha256 of the test targets; {regenerate}")
    if metadata["test_targets_sha256"] != task.test_targets_sha256():
        raise ReferenceMismatch(
            f"reference stale: {task.name}'s test targets differ from those its evidence's test log-likelihoods "
            f"were computed on; {regenerate}")
    key, array = read_array(npz_path, regenerate)
    return Reference(task.name, key, array, metadata, entry["npz_sha256"])


def _what_changed(task: Task, described) -> str:
    """The settings of ``task.describe()`` that differ from ``described`` (what the reference's metadata recorded of
    the task), as ``network_probe, prior_variance``; ``its data`` when none does (the fingerprint's other part)."""
    if not isinstance(described, dict):
        return "its data or settings"
    current = json.loads(json.dumps(task.describe()))  # as the metadata holds it: lists, not tuples
    changed = sorted(key for key in set(current) | set(described) if current.get(key) != described.get(key))
    return ", ".join(changed) if changed else "its data"


@dataclass(frozen=True)
class Diagnosis:
    """A reference's metadata checked against its evidence: ``summary`` the figures recomputed
    (:func:`reference.evidence.summarise`), ``differences`` each one the ``.json`` states otherwise (empty when all
    agree), ``gold_standard`` the diagnostics against :data:`reference.settings.GOLD_STANDARD`."""

    task: str
    summary: dict
    differences: list[str]
    gold_standard: dict


def diagnose(task: Task, folder: Path | None = None) -> Diagnosis:
    """Recomputes every figure of ``task``'s reference metadata that its evidence decides and compares them.

    ``folder`` None: the shipped reference (its three files checked against the registry first); else the reference
    ``reference generate --out folder`` wrote (the evidence checked against the sha256 its ``.json`` records)."""
    from reference import evidence

    regenerate = f"run `python -m bench reference generate --task {task.name} --install`"
    if folder is None:
        reference = load_reference(task)
        metadata, array = reference.metadata, reference.array
        expected = read_registry().get(task.name, {}).get("evidence_sha256")
        path = evidence_path(PACKAGE_DATA, task.name)
        if not path.exists():
            raise ReferenceMismatch(f"reference evidence missing: {path} does not exist (the evidence ships in the "
                                    f"repository, not in the wheel: diagnose from a clone), or {regenerate}")
    else:
        metadata = read_json(Path(folder) / f"{task.name}.json", "reference metadata", regenerate)
        _, array = read_array(Path(folder) / f"{task.name}.npz", regenerate)
        expected = metadata.get("evidence_sha256") if isinstance(metadata, dict) else None
        path = evidence_path(folder, task.name)
        if not path.exists():
            raise ReferenceMismatch(f"reference evidence missing: {path} does not exist; {regenerate}")
    if not isinstance(expected, str):
        raise ReferenceMismatch(f"reference evidence unregistered: nothing records the sha256 of {task.name}'s "
                                f"evidence; {regenerate}")
    actual = sha256_file(path)
    if actual != expected:
        raise ReferenceMismatch(f"reference evidence corrupted: {path} has sha256 {actual[:16]}..., "
                                f"{expected[:16]}... was recorded; refusing to diagnose from it")
    kept = evidence.load(path, regenerate, installed=folder is None)
    seed = metadata.get("hmc", {}).get("seed") if isinstance(metadata, dict) else None
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ReferenceMismatch(f"reference damaged: its metadata states no integer HMC seed; {regenerate}")
    why = evidence.consistent_with(task, array, kept, seed)
    if why is not None:
        raise ReferenceMismatch(f"reference evidence stale: {path} is not the evidence of {task.name}'s reference "
                                f"({why}); {regenerate}")
    summary = evidence.summarise(task, array, kept)
    return Diagnosis(task.name, summary, evidence.differences(metadata, summary),
                     evidence.gold_standard(task, summary, evidence.generation_rhat(metadata)))


def restate(task: Task, folder: Path | None = None) -> list[str]:
    """Rewrites the figures of ``task``'s reference metadata that its evidence decides, recomputed from the evidence
    (after a change of how they are computed: the chains, and so the reference, are untouched), and for the shipped
    reference the registry's sha256 of the ``.json``; returns the lines :func:`diagnose` found different before."""
    found = diagnose(task, folder)
    if not found.differences:
        return []
    json_path = (folder or PACKAGE_DATA) / f"{task.name}.json"
    metadata = read_json(json_path, "reference metadata", "regenerate the reference")
    atomic_write_bytes(json_path, json_bytes({**metadata, **found.summary}))
    if folder is None:
        entry = dict(read_registry()[task.name])
        entry["json_sha256"] = sha256_file(json_path)
        register(task.name, entry)
    return found.differences
