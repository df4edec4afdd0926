"""One run: task -> approximator under the budget meter -> predictive -> metrics -> result record.

While a method trains, nothing that could score it is within reach of its frames: the runner's
frame holds the :class:`~approximators.Problem` (test inputs, no labels) and the metered data, and
the reference and the test labels are loaded only after ``fit`` and ``predictive`` have returned.
(Before training the reference is checked and dropped, so a stale one still fails before any
epoch is spent.)
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

import bench
from approximators import Approximator, Problem, method_source, resolve_config, resolve_method
from approximators.base import check_footprint
from approximators.boundary import method_fault, users_code
from bench import checkpoint, metrics, records, rehearsal
from bench.records import MAX_LABEL_CHARS
from bench.progress import SCORING, phase
from bench.budget import BudgetMeter, MeteredData
from bench.errors import COMMAND_LINE, BenchError, ConfigError, Spelling, shown
from bench.tasks import Task, get_task
from bench.tasks.competition import files_trust
from reference.store import Reference, load_reference


def check_label(label: str | None) -> None:
    """A run's label is None or 1 to :data:`MAX_LABEL_CHARS` printable characters (it is shown on the leaderboard)."""
    if label is not None and not (isinstance(label, str) and 0 < len(label) <= MAX_LABEL_CHARS
                                  and label.isprintable() and label.strip()):
        raise ConfigError(f"a label must be 1 to {MAX_LABEL_CHARS} printable characters, not only spaces; "
                          f"got {label!r}")
    if label is not None and label.strip().casefold() == records.SHIPPED_LABEL:
        raise ConfigError(f"the label {records.SHIPPED_LABEL!r} marks the results shipped with bdl-bench; choose "
                          "another")


DEVICES = ("auto", "cpu", "cuda")
"""Where a run trains: ``auto`` is CUDA when PyTorch sees a GPU, else the CPU."""


def resolve_device(device: str, spelling: Spelling = COMMAND_LINE) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise BenchError(f"{spelling.given('device', 'cuda')} was asked for, but PyTorch sees no CUDA device")
    return torch.device(device)


def score(task: Task, predictions: np.ndarray, reference: Reference) -> tuple[dict, dict]:
    """Metrics on the whole test set (with labels where known) and on each test block (each reported as a
    :data:`~bench.progress.SCORING` phase, for a progress bar)."""
    labels = None if task.y_test is None else task.y_test.numpy()
    parts = 1 + len(task.test_blocks)

    def on(rows: slice, done: int) -> dict:
        target = None if labels is None else labels[rows]
        if task.kind == "classification":
            scored = metrics.classification_metrics(predictions[rows], reference.array[rows], target)
        else:
            scored = metrics.regression_metrics(predictions[rows], reference.array[rows], target)
        phase(SCORING, done, parts, "blocks")
        return scored

    phase(SCORING, 0, parts, "blocks")
    blocks = {b.name: on(slice(b.start, b.stop), i + 1) for i, b in enumerate(task.test_blocks)}
    return on(slice(None), parts), blocks


CPU_ID_FIELDS = ("vendor_id", "cpu family", "model", "CPU implementer", "CPU architecture", "CPU variant", "CPU part")
"""The /proc/cpuinfo fields that name a CPU's generation (x86: vendor, family, model; Arm: implementer, architecture,
variant, part): a virtual machine's model name may say no more than "AMD EPYC" for CPUs of different generations."""


def _cpu() -> tuple[str, str]:
    """(model name, identity from :data:`CPU_ID_FIELDS`) of this machine's first CPU; the processor's name and ""
    where there is no /proc/cpuinfo."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block ends
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return (fields.get("model name", platform.processor()),
            " ".join(f"{key} {fields[key]}" for key in CPU_ID_FIELDS if key in fields))


def environment() -> dict:
    """Where a run ran: versions, platform, CPU and threads (:data:`NUMERICS` names those that change its round-off)."""
    cpu, cpu_id = _cpu()
    return {"bdl-bench": bench.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "libc": " ".join(platform.libc_ver()).strip(),
            "platform": platform.platform(), "cpu": cpu, "cpu_id": cpu_id,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count()}


NUMERICS = ("torch", "numpy", "python", "libc", "cpu", "cpu_id", "cpu_capability", "torch_threads", "device")
"""What a seeded run's round-off depends on, so where two runs of one configuration agree bitwise: the libraries'
versions (libc: the maths functions), the CPU (its name and generation) and the kernels torch chose for it
(``cpu_capability``: AVX2, AVX512), torch's threads (they decide how work is split, whatever the cores they run on)
and the device. Not the operating system's kernel build (``platform``), the number of cores, or bdl-bench's own
version (what it computes is what the gate and the pinned predictions compare). The gate's exact mode, ``verify``'s
bitwise mode and the pinned-prediction tests key on it."""


def numerics_changes(recorded: dict, now: dict) -> dict[str, tuple]:
    """The :data:`NUMERICS` fields in which ``recorded`` and ``now`` differ, ``{field: (recorded, now)}``: each an
    :func:`environment` with the device of its run under ``"device"`` (``"cpu"``, or a GPU's name). A field the
    record lacks differs (None): a record that cannot say where it ran is not known to be bitwise comparable."""
    return {field: (recorded.get(field), now.get(field)) for field in NUMERICS
            if recorded.get(field) != now.get(field)}


GIT_TIMEOUT_SECONDS = 5.0


@functools.lru_cache(maxsize=1)
def source_checkout() -> dict | None:
    """The git commit of the bdl-bench checkout this code runs from (and whether tracked files differ from it),
    or None when it is installed from a wheel, git is absent, or git does not answer within a few seconds.
    Asked once per process: the code a process runs is what it imported, whatever is committed later."""
    root = Path(bench.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                              timeout=GIT_TIMEOUT_SECONDS).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def metered(task: Task, budget: float, device: torch.device = torch.device("cpu"),
            on_progress: Callable[[float], None] | None = None) -> tuple[Problem, MeteredData]:
    """What a method receives for ``task`` under a fresh meter of ``budget`` epochs: the problem
    (no training tensors, no test labels) and the metered training data. ``on_progress``: the meter's
    observer (:class:`~bench.budget.BudgetMeter`), e.g. a progress bar's."""
    meter = BudgetMeter(budget, task.n_train, on_progress)
    return Problem.for_task(task, meter, device), MeteredData(task.x_train.to(device), task.y_train.to(device), meter)


def planned(method: type[Approximator], config, problem: Problem, data: MeteredData) -> Approximator:
    """Builds ``method`` with ``config`` and checks what it would hold for this budget against the
    device's memory, before anything is trained or written (an absurd plan is one line, not an
    allocation failure hours in)."""
    with users_code(method, "settings"):
        approximator = method(config)
    with users_code(method, "footprint"):
        check_footprint(approximator, data.meter.budget_epochs, problem)
    return approximator


def resolved_config(approximator: Approximator, problem: Problem) -> dict:
    """What a run of the planned ``approximator`` on ``problem`` uses for each setting, automatic ones (0 for "the
    method's rule") replaced by the rule's choice (:meth:`Approximator.resolved`), as a dict of its fields."""
    with users_code(type(approximator), "resolved settings"):
        return asdict(approximator.resolved(problem))


def fit_and_predict(approximator: Approximator, problem: Problem, data: MeteredData,
                    seed: int, tape: checkpoint.Tape | None = None) -> tuple[np.ndarray, dict]:
    """Fits a planned approximator under the meter with the run's generator; returns its predictive
    (float64) and its report (how it spent the budget, e.g. SWAG's snapshot count). With a ``tape`` the fit writes
    its checkpoints there and resumes from the one it holds (:mod:`bench.checkpoint`); a stop raises
    :class:`~bench.checkpoint.Stopped` once the checkpoint is written."""
    method = type(approximator)
    with checkpoint.recording(tape):
        generator = checkpoint.track(torch.Generator().manual_seed(seed))
        try:
            with users_code(method, "fit"):
                approximator.fit(problem, data, generator)
        except checkpoint.Stopped:
            raise
        except KeyboardInterrupt:  # outside a training step: the end of the last engine call kept, if any
            if tape is None:
                raise
            tape.stopped_outside()
    with users_code(method, "predictive"):
        # Reading what it returned as an array runs its code too (__array__, a tensor on a device we cannot read).
        raw = np.asarray(approximator.predictive())
    predictions = _check_predictive(method, raw, problem)
    with users_code(method, "report"):
        report = approximator.report
    return predictions, check_report(method, report)


MAX_REPORT_BYTES = 2**20
"""The most a method's report may take in its result record (as JSON): what it says about how it spent the budget,
never its state."""

MAX_REPORT_DEPTH = 8
"""The deepest a method's report may nest dicts and lists (a result record's readers refuse deeper JSON)."""


def check_report(method: type[Approximator], report: object) -> dict:
    """A method's report as its result record keeps it: a dict of plain JSON values (string keys; strings, finite
    numbers, whole numbers of 64 bits, booleans, None, lists and dicts, at most :data:`MAX_REPORT_DEPTH` deep), at
    most :data:`MAX_REPORT_BYTES` of JSON; anything else is the method's failure, one line naming where."""
    if type(report) is not dict:
        method_fault(method, f"method {method.name!r}: its report is a {type(report).__name__}, not a dict")
    pending = deque([(report, "report", 1)])
    while pending:  # in order, without recursion: a report nested 100,000 deep is refused, not a RecursionError
        value, where, depth = pending.popleft()
        kind = type(value)
        if kind in (dict, list, tuple):
            if depth > MAX_REPORT_DEPTH:
                method_fault(method, f"method {method.name!r}: its {where} nests more than {MAX_REPORT_DEPTH} levels")
            items = value.items() if kind is dict else enumerate(value)
            for key, item in items:
                if kind is dict and type(key) is not str:
                    method_fault(method, f"method {method.name!r}: its {where} has a key of type {type(key).__name__}; "
                                         "a report's keys are strings")
                pending.append((item, f"{where}[{key!r}]", depth + 1))
        elif kind is float and not math.isfinite(value):
            method_fault(method, f"method {method.name!r}: its {where} is {value}; a record holds finite numbers")
        elif kind is int and not -2**63 <= value < 2**63:
            method_fault(method, f"method {method.name!r}: its {where} is a whole number beyond 64 bits")
        elif kind not in (str, int, float, bool, type(None)):
            method_fault(method, f"method {method.name!r}: its {where} is a {kind.__module__}.{kind.__qualname__}; a "
                                 "report holds plain JSON values (str, int, float, bool, None, list, dict): convert "
                                 "it, e.g. with float() or .tolist()")
    size = len(json.dumps(report, allow_nan=False))
    if size > MAX_REPORT_BYTES:
        method_fault(method, f"method {method.name!r}: its report is {size:,} bytes of JSON, more than the "
                             f"{MAX_REPORT_BYTES:,} a result record keeps; report counts and settings, not arrays")
    return report


def _check_predictive(method: type[Approximator], raw: np.ndarray, problem: Problem) -> np.ndarray:
    """The predictive exactly as ``submit`` will check it (real numbers, the task's shape, finite, rows of
    probabilities), before anything is written; returned as float64."""
    classification = problem.kind == "classification"
    key, width = ("probs", problem.n_classes) if classification else ("samples", problem.n_predictive_samples)
    try:
        metrics.validate_predictive(raw, key, (int(problem.x_test.shape[0]), width),
                                    f"method {method.name!r}: its predictive", problem.task)
    except metrics.MetricInputError as error:
        method_fault(method, str(error))
    return np.asarray(raw, dtype=np.float64)


MAX_ARCHITECTURE_CHANGE_CHARS = 1000
"""The most characters a method's description of how it changes the network may have (it is shown in tables)."""

MAX_SOURCE_CHARS = 200
"""The most characters of ``package.module:ClassName`` a record keeps as a method's source."""


def check_method_texts(method: type[Approximator], architecture_change: object) -> None:
    """The text a method gives that its record keeps (how it changes the network, where it came from) as ``submit``
    takes it, printable and short, checked before anything trains or is written: the method's failure if not."""
    if architecture_change is not None and not (
            isinstance(architecture_change, str) and 0 < len(architecture_change) <= MAX_ARCHITECTURE_CHANGE_CHARS
            and architecture_change.isprintable()):
        method_fault(method, f"method {method.name!r}: its architecture_change must be None or 1 to "
                             f"{MAX_ARCHITECTURE_CHANGE_CHARS} printable characters (no line break or terminal "
                             f"escape); got {shown(architecture_change)}")
    source = method_source(method)
    if source is not None and not (len(source) <= MAX_SOURCE_CHARS and source.isprintable()):
        method_fault(method, f"method {method.name!r}: its source {shown(source)} must be 1 to {MAX_SOURCE_CHARS} "
                             "printable characters (its module and class name)")


def execute(method: type[Approximator], config, problem: Problem, data: MeteredData,
            seed: int) -> tuple[np.ndarray, dict]:
    """:func:`planned`, then :func:`fit_and_predict`."""
    return fit_and_predict(planned(method, config, problem, data), problem, data, seed)


@dataclass(frozen=True)
class RunSpec:
    """One run. ``method``: a name as ``--method`` takes it, or an :class:`Approximator` subclass; ``label``:
    a human name for this configuration on the leaderboard; ``command``: how the run was asked for (the
    exact command line), stored in its record."""

    task: str
    method: "str | type[Approximator]"
    budget: float
    seed: int = 0
    device: str = "cpu"
    out: Path = Path("runs")
    overrides: tuple[tuple[str, str], ...] = ()
    force: bool = False
    cache: Path | None = None
    label: str | None = None
    command: str | None = None
    keep_predictions: bool = True
    """Write ``predictions.npz`` beside the record (False: the record alone, with the predictions' sha256)."""
    checkpoint_every: float | None = checkpoint.DEFAULT_EVERY_SECONDS
    """Seconds between the run's checkpoints (:mod:`bench.checkpoint`; also written on a stop); None: none at all."""
    rehearsal: rehearsal.Rehearsal | None = None
    """A rehearsal of the competition task on generated data (:mod:`bench.rehearsal`), not a run of the task."""


def task_of(spec: RunSpec) -> Task:
    """The run's task: the embedded or fetched one, or a rehearsal's, generated (:mod:`bench.rehearsal`)."""
    return get_task(spec.task, spec.cache) if spec.rehearsal is None else rehearsal.task_of(spec.task, spec.rehearsal)


def task_and_reference(spec: RunSpec) -> tuple[Task, Reference]:
    """The run's task (:func:`task_of`) and its reference, checked, or a rehearsal's stand-in reference."""
    task = task_of(spec)
    return task, load_reference(task) if spec.rehearsal is None else rehearsal.reference_of(task)


def _prepare(spec: RunSpec, device: torch.device,
             on_progress: Callable[[float], None] | None) -> tuple[Problem, MeteredData]:
    """Checks the task's reference (failing before training if it is stale) and builds the method's inputs.
    Returns nothing that holds the reference or the test labels."""
    task, _ = task_and_reference(spec)
    return metered(task, spec.budget, device, on_progress)


def run(spec: RunSpec, on_progress: Callable[[float], None] | None = None) -> dict:
    """Runs one (task, method, budget, seed); returns the result record it wrote. ``on_progress`` hears the
    epochs used as the meter charges them (a progress bar)."""
    # Paths are fixed before any of the method's code runs: a working directory it changes moves nothing we write.
    spec = replace(spec, out=Path(spec.out).absolute(),
                   cache=None if spec.cache is None else Path(spec.cache).absolute())
    checkout = source_checkout()  # asked before training: an edit during a long run is not this run's code
    method = resolve_method(spec.method)
    check_label(spec.label)
    device = resolve_device(spec.device)
    problem, data = _prepare(spec, device, on_progress)
    config = resolve_config(method, problem.task, dict(spec.overrides))
    approximator = planned(method, config, problem, data)
    resolved = resolved_config(approximator, problem)
    with users_code(method, "architecture_change"):
        architecture_change = method.architecture_change(config)
    check_method_texts(method, architecture_change)
    folder = rehearsal.run_folder(spec.out, problem.task, method.name, spec.budget, spec.seed, spec.rehearsal)
    with records.claimed(folder, spec.force, asdict(config)):
        if spec.rehearsal is not None:
            rehearsal.start(device)  # its peak memory on a GPU counts from here
        tape, resumes = _checkpointing(spec, method, config, folder, device, data)
        started = time.perf_counter()
        predictions, report = fit_and_predict(approximator, problem, data, spec.seed, tape)
        wall = time.perf_counter() - started + (tape.wall_before if tape is not None else 0.0)  # every segment's

        task, reference = task_and_reference(spec)  # labels and reference only now, after the method has returned
        overall, by_block = score(task, predictions, reference)
        env = environment()
        result = {
            "task": task.name,
            "task_version": task.version,
            "task_fingerprint": task.fingerprint(),
            "method": method.name,
            "method_source": method_source(method),
            "label": spec.label,
            "budget": spec.budget,
            "epochs_used": data.meter.epochs_used,
            "test_passes": data.meter.test_passes,
            "seed": spec.seed,
            "metrics": overall,
            "metrics_by_block": by_block,
            "noise_floor": reference.noise_floor,
            "wall_seconds": round(wall, 3),
            "device": str(device) if device.type != "cuda" else torch.cuda.get_device_name(device),
            "config": asdict(config),
            "resolved": resolved,
            "architecture_change": architecture_change,
            "method_report": report,
            "versions": {k: env[k] for k in ("bdl-bench", "torch", "numpy", "python")},
            "environment": env,
            "git": checkout,
            "command": spec.command,
            "reference": {"sha256": reference.sha256, "key": reference.key},
            "trust": files_trust(task, reference.sha256),
            "predictions_sha256": records.predictions_sha256(predictions),
            "finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            **({} if spec.rehearsal is None else {"rehearsal": rehearsal.described(task, device)}),
        }
        if resumes:
            result["resumed"] = resumes
        records.write_run(folder, reference.key, predictions, result, spec.keep_predictions)
        (folder / checkpoint.CHECKPOINT).unlink(missing_ok=True)  # the run is finished: nothing is left to resume
    return result


def resumable(method: type[Approximator]) -> bool:
    """Whether a stopped run of ``method`` continues from its checkpoint: the class that defines its ``fit`` declares
    ``resumable = True`` (a subclass that rewrites ``fit`` must declare it again; :mod:`bench.checkpoint`)."""
    owner = next((cls for cls in method.__mro__ if "fit" in vars(cls)), None)
    return owner is not None and vars(owner).get("resumable", False) is True


def _checkpointing(spec: RunSpec, method: type[Approximator], config, folder: Path, device: torch.device,
                   data: MeteredData) -> tuple[checkpoint.Tape | None, list]:
    """The run's :class:`~bench.checkpoint.Tape` (None: no checkpoints) and its resumes so far, this one included.
    A checkpoint in ``folder`` is resumed from when it is this run's; ``--force`` discards it."""
    path = folder / checkpoint.CHECKPOINT
    if spec.force:
        path.unlink(missing_ok=True)
    if spec.checkpoint_every is None or not resumable(method):
        if path.exists():
            print(f"{folder}: method {method.name!r} cannot resume from its checkpoint; the run starts again",
                  file=sys.stderr)
        return None, []
    identity = {"task": spec.task, "method": method.name, "method_source": method_source(method),
                "config": json.dumps(asdict(config), sort_keys=True, default=str), "budget": float(spec.budget),
                "seed": spec.seed, "bdl-bench": bench.__version__, "rehearsal": spec.rehearsal is not None}
    numerics = {key: str(value) for key, value in {**environment(), "device": str(device)}.items() if key in NUMERICS}
    resume, resumes = None, []
    if path.exists():
        saved = checkpoint.read_point(path, identity)
        resume, resumes = saved["point"], saved["resumes"]
        resumes.append({"from_epochs": resume["epochs_used"], "same_numerics": saved["numerics"] == numerics})
        print(f"{folder}: resuming from its checkpoint at {resume['epochs_used']:.4g} of {spec.budget:g} epochs"
              + ("" if resumes[-1]["same_numerics"] else " (on another machine or device: not bit for bit as one "
                 "uninterrupted run)"), file=sys.stderr)

    def write(point: dict) -> Path:
        return checkpoint.write_point(path, identity, point, resumes, numerics)

    return checkpoint.Tape(write, data.meter, spec.checkpoint_every, resume,
                           kept_path=path if resume is not None else None), resumes
