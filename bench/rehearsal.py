"""Rehearsals: a competition task's real model at its real size on generated data, before paying for a GPU.

``run --rehearse`` (and ``sweep --rehearse``) trains a method on a competition task as ``run`` would, but on data
generated in the official shapes (:func:`bench.tasks.competition.generated_task`: the official numbers of training
and test rows and the task's test blocks, :data:`~bench.tasks.competition.OFFICIAL_ROWS`) and scores it against a
stand-in reference of the official reference's form (probabilities, or 1000 samples per test point), generated too.
Nothing is downloaded and the organisers' files are never read. It answers what a run on the real task would meet:
whether the method runs on the model, how long its epochs take on this device, and whether it fits in memory (the
memory plan runs before training, as for every run). ``--rehearse-rows N`` rehearses on N training rows and the
official test set in proportion (:func:`~bench.tasks.competition.generated_test_rows`).

A rehearsal is marked wherever it shows: its run folder's last level is ``seed-S-rehearsal`` (``-N-rows`` added for
fewer rows), a name no run of a real task has, under ``rehearsals/`` unless ``--out`` says otherwise; its record holds
``rehearsal`` (:func:`described`), which :mod:`bench.records` validates and which ``submit``, ``export-submission``,
``verify`` and ``check`` refuse in one line; its table rows and progress bars name it. Its metrics compare generated
predictions with a generated reference: they measure nothing.
"""

from __future__ import annotations

import functools
import hashlib
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench import records
from bench.errors import ConfigError
from bench.tasks import COMPETITION, PREDICTIVE_SAMPLES, Task
from bench.tasks.competition import OFFICIAL_ROWS, generated_task
from reference.format import Reference

DEFAULT_OUT = Path("rehearsals")
"""Where rehearsals are written unless ``--out`` says otherwise: apart from ``runs/``."""

DATA_SEED = 0
"""The seed of a rehearsal's generated data and stand-in reference: every rehearsal of a task at one size trains on
the same rows, whatever the run's ``--seed`` (which seeds the method, as in any run)."""


@dataclass(frozen=True)
class Rehearsal:
    """A run is a rehearsal of its task on ``rows`` training rows (None: the official count)."""

    rows: int | None = None


def check(tasks: list[str], rehearsal: Rehearsal) -> None:
    """Every task is a competition task, and ``rows`` at most its official training rows; else one line."""
    others = [task for task in tasks if task not in COMPETITION]
    if others:
        raise ConfigError(f"--rehearse rehearses the competition tasks ({', '.join(COMPETITION)}) without their data; "
                          f"{others[0]!r} is not one (the embedded tasks ship their data: run them without "
                          "--rehearse)")
    for task in tasks:
        official = OFFICIAL_ROWS[task]
        if rehearsal.rows is not None and rehearsal.rows > official.train:
            raise ConfigError(f"--rehearse-rows {rehearsal.rows} is more than {task}'s rows: {official.train_said}; "
                              "leave --rehearse-rows out to rehearse at that size")


def run_folder(out: Path, task: str, method: str, budget: float, seed: int, rehearsal: Rehearsal | None) -> Path:
    """The run's folder (:func:`bench.records.run_folder`); a rehearsal's last level is ``seed-S-rehearsal`` (and
    ``-N-rows`` for N rows), a name no run of a real task takes, so neither can be mistaken for or replace the other."""
    folder = records.run_folder(out, task, method, budget, seed)
    if rehearsal is None:
        return folder
    rows = "" if rehearsal.rows is None else f"-{rehearsal.rows}-rows"
    return folder.with_name(f"{folder.name}-rehearsal{rows}")


def label(task: str, rehearsal: Rehearsal | None) -> str:
    """How tables and progress bars name a run's task: ``cifar10``, ``cifar10 (rehearsal)``, ``cifar10 (rehearsal, 64
    rows)``."""
    if rehearsal is None:
        return task
    return f"{task} (rehearsal{'' if rehearsal.rows is None else f', {rehearsal.rows:,} rows'})"


@functools.lru_cache(maxsize=1)
def task_of(name: str, rehearsal: Rehearsal) -> Task:
    """The rehearsal's task: ``name``'s model, likelihood, prior and blocks on generated data (on the CPU, as a
    fetched task's arrays are; the run moves them to its device). Kept for the run's second look after training."""
    return generated_task(name, rehearsal.rows, seed=DATA_SEED,
                          description=f"rehearsal: generated data of {name}'s official shapes (seed {DATA_SEED})")


def reference_of(task: Task) -> Reference:
    """A stand-in for the task's official reference, of its form and shape, generated: rows of probabilities
    (softmax of standard normal logits) for a classification task, ``PREDICTIVE_SAMPLES`` standard normal samples
    per test point for a regression one. No noise floor, as the official references publish none."""
    generator = np.random.default_rng(DATA_SEED)
    if task.kind == "classification":
        logits = generator.standard_normal((task.n_test, task.n_classes))
        exp = np.exp(logits - logits.max(axis=1, keepdims=True))
        key, array = "probs", exp / exp.sum(axis=1, keepdims=True)
    else:
        key, array = "samples", generator.standard_normal((task.n_test, PREDICTIVE_SAMPLES))
    metadata = {"rehearsal": True, "noise_floor": None, "task_fingerprint": task.fingerprint(),
                "note": "a rehearsal's stand-in reference: generated, it is no posterior's"}
    return Reference(task.name, key, array, metadata, hashlib.sha256(array.tobytes()).hexdigest())


def start(device: torch.device) -> None:
    """Before the rehearsal trains: on a CUDA device, its peak memory is counted from here."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def described(task: Task, device: torch.device) -> dict:
    """What a rehearsal's record says of it (its ``rehearsal`` field, :data:`bench.records.REHEARSAL_FIELDS`): its
    rows and the official ones, and the peak memory it reached: on a CUDA device the most PyTorch allocated there
    during the run, and the process's peak resident memory since it started (for a sweep run one after another in
    one process, the largest of its runs so far)."""
    official = OFFICIAL_ROWS[task.name]
    resident = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return {"train_rows": task.n_train, "test_rows": task.n_test, "official_train_rows": official.train,
            "official_test_rows": official.test,
            "peak_resident_bytes": int(resident if sys.platform == "darwin" else resident * 1024),
            "peak_cuda_bytes": int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None}


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"


def summary(result: dict) -> str:
    """One line of what a finished rehearsal measured: seconds per charged epoch, the whole run scaled linearly to the
    official rows (its test rows shrink in proportion, so scoring scales too), and the peak memory."""
    facts = result["rehearsal"]
    used, wall = result["epochs_used"], result["wall_seconds"]
    scale = facts["official_train_rows"] / facts["train_rows"]
    per_epoch = f"{_duration(wall / used)} per charged epoch (its predictive included), " if used else ""
    official = OFFICIAL_ROWS.get(result["task"])
    rows = official.train_said if official else f"the official {facts['official_train_rows']:,} training rows"
    estimate = ("" if scale == 1 else f"; at {rows} about {_duration(wall * scale)} (scaled linearly from "
                f"{facts['train_rows']:,} rows, an over-estimate where fixed costs dominate)")
    memory = f"peak memory {facts['peak_resident_bytes'] / 2**30:.2f} GiB resident"
    if facts.get("peak_cuda_bytes") is not None:
        memory += f", {facts['peak_cuda_bytes'] / 2**30:.2f} GiB on the GPU"
    return (f"rehearsal: {result['task']} {result['method']} budget {result['budget']:g} seed {result['seed']} on "
            f"{facts['train_rows']:,} training rows on {result['device']}: {per_epoch}{_duration(wall)} in all"
            f"{estimate}; {memory}")
