r"""Mid-run checkpoints: a run stopped by SIGTERM, Ctrl-C or a time limit continues where it stopped, bit for bit.

**What a checkpoint holds.** One *resume point*: either the end of the run's engine call R
(:func:`approximators.engine.run`, the loop every built-in method trains in) or call R between two of its steps, and
with it everything that lives on across calls at that moment:

- the call's own state: the update rule's state (parameters, optimiser moments, a sampler's noise buffer), its
  generators, the members' data orders and order generators, the epoch and step;
- every *tracked* object alive then: the objects that register themselves with :func:`track` (the predictive
  accumulated so far and its samples, SWAG's moments, the best weights kept, every member's and chain's generator,
  the run's own generator) through ``state_dict()`` / ``load_state_dict()``, or field by field for a dataclass;
- the meter's counts (epochs charged, test passes).

**How a run resumes (replay).** The method's ``fit`` runs again from its start. Until the resume point nothing is
trained: each engine call before R returns at once with its starting state (what it would have fed is restored at
R), the predictive's :meth:`~approximators.base.PredictiveAccumulator.add` does nothing, and the meter is restored
at R. At R the call's state and every tracked object are restored, and training goes on live. This is exact when
what a method does between engine calls is deterministic, cheap, and lasts beyond R only in tracked objects: true
of every built-in method whose ``resumable`` is True (each is tested, interrupted at several points, to give the
predictions of an uninterrupted run bit for bit). A method of one's own declares it by ``resumable = True`` and
:func:`track`; without it, a stopped run starts again from scratch, and says so.

**When it is written.** Every ``every_seconds`` (``--checkpoint-every``), at the first step boundary after that
time; and when SIGTERM or Ctrl-C arrives: inside an engine call the stop waits for the end of the current step
(a second one stops at once), outside one (a Laplace curvature pass, the predictive's evaluation) the last end of a
call that was kept in memory is written. Files are written atomically (:func:`bench.io.atomic_write_bytes`) and read
with ``torch.load(weights_only=True)``: a checkpoint holds tensors and plain values, never code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import time
import weakref
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from bench import interrupts
from bench.errors import DamagedFile
from bench.io import atomic_write_bytes, open_regular_file
from bench.limits import DEFAULT_EVERY_SECONDS  # set there, where the parser reads it without torch

CHECKPOINT = "checkpoint.pt"
"""The file name of a run's checkpoint, in its run folder."""

FORMAT = 1
"""The checkpoint format this code writes and reads."""

KEEP_IN_MEMORY_SECONDS = 60.0
"""How often, at most, the end of an engine call is kept in memory for a stop that arrives outside a call (each copy
costs a clone of the call's state and the tracked objects): such a stop loses at most this much training beyond the
call's end, and never more than the checkpoint interval."""


class Stopped(KeyboardInterrupt):
    """The run stopped on SIGTERM or Ctrl-C after writing its checkpoint at ``path`` (``None``: nothing to keep)."""

    def __init__(self, path: Path | None):
        super().__init__()
        self.path = path


_kept_on_stop: Path | None = None


def kept_on_stop() -> Path | None:
    """The checkpoint the last stopped run wrote (None: none), for the command's one line."""
    return _kept_on_stop


_restarts: str | None = None


def restarts() -> str | None:
    """The method whose stopped run kept no checkpoint because it does not resume (None: none), for the one line."""
    return _restarts


def remember_kept(folder: Path, method: str | None = None) -> None:
    """A run in ``folder`` was stopped, perhaps in another process (a method of one's own runs in a process of its
    own): its checkpoint, if it wrote one, is what the command's one line names; else, given the name of a ``method``
    that does not resume, the line says that the run starts again."""
    global _kept_on_stop, _restarts
    if (Path(folder) / CHECKPOINT).exists():
        _kept_on_stop = Path(folder) / CHECKPOINT
    else:
        _restarts = method


def capture(value: Any) -> Any:
    """A detached copy of ``value``'s state: tensors cloned, generators' states, dataclasses field by field,
    objects with ``state_dict()`` through it, lists and tuples item by item, plain values as they are."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, torch.Generator):
        return {"generator": value.get_state()}
    if hasattr(value, "state_dict"):
        return {"state": capture(value.state_dict())}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"fields": {f.name: capture(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, dict):
        return {"dict": {key: capture(item) for key, item in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"items": [capture(item) for item in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"a checkpoint cannot hold a {type(value).__name__}")


def restore(target: Any, saved: Any) -> Any:
    """Puts the state :func:`capture` took back into ``target`` in place where it can (tensors, generators, objects
    with ``load_state_dict``, dataclasses' fields, lists' items); returns the restored value (for plain values and
    dicts, the saved ones)."""
    if isinstance(target, torch.Tensor):
        if target.shape != saved.shape or target.dtype != saved.dtype:
            raise DamagedFile(f"a checkpoint's tensor of shape {tuple(saved.shape)} does not fit the run's "
                              f"{tuple(target.shape)}")
        with torch.no_grad():
            target.copy_(saved)
        return target
    if isinstance(target, torch.Generator):
        target.set_state(saved["generator"])
        return target
    if hasattr(target, "load_state_dict"):
        target.load_state_dict(_plain(saved["state"]))
        return target
    if dataclasses.is_dataclass(target) and not isinstance(target, type):
        for name, item in saved["fields"].items():
            current = getattr(target, name)
            restored = restore(current, item)
            if restored is not current:
                object.__setattr__(target, name, restored)
        return target
    if isinstance(target, list) and "items" in saved:
        for index, item in enumerate(saved["items"]):
            restored = restore(target[index], item)
            if restored is not target[index]:
                target[index] = restored
        return target
    return _plain(saved)


def _plain(saved: Any) -> Any:
    """The value :func:`capture` took, rebuilt (tensors as they were saved)."""
    if isinstance(saved, torch.Tensor):
        return saved
    if "value" in saved:
        return saved["value"]
    if "dict" in saved:
        return {key: _plain(item) for key, item in saved["dict"].items()}
    if "items" in saved:
        return [_plain(item) for item in saved["items"]]
    if "state" in saved:
        return _plain(saved["state"])
    raise DamagedFile("a checkpoint holds a value this version cannot rebuild")


class Tape:
    """One run's checkpointing: counts its engine calls, keeps its tracked objects, writes and replays resume points.

    ``write(point)`` stores a resume point (the runner's: atomically, into the run folder); ``resume`` is the point
    a stopped run wrote (None: a fresh run); ``meter`` is the run's :class:`~bench.budget.BudgetMeter`."""

    def __init__(self, write: Callable[[dict], Path], meter, every_seconds: float = DEFAULT_EVERY_SECONDS,
                 resume: dict | None = None, clock: Callable[[], float] = time.monotonic,
                 kept_path: Path | None = None):
        self._write, self.meter, self.every_seconds, self._clock = write, meter, every_seconds, clock
        self._resume = resume
        self._started = clock()
        self.wall_before = float(resume.get("wall_seconds", 0.0)) if resume is not None else 0.0
        """Seconds the run trained before this process took it up (every earlier segment, to its checkpoint)."""
        self._calls = 0
        self._tracked: list[weakref.ref] = []
        self._in_call = False
        self._last_write = self._last_kept = clock()
        self._kept: dict | None = None
        self._steps = 0
        self.kept_path: Path | None = kept_path
        """The checkpoint on disk (the one resumed from, then each written): what a stop that writes none names."""

    stop_after_steps: int | None = None
    """Tests only: act as if SIGTERM arrived after this many training steps of the run (all engine calls counted)."""

    # -- what methods and the engine see ----------------------------------------------------------------------
    @property
    def replaying(self) -> bool:
        """Whether the run is replaying toward its resume point (nothing is trained or added)."""
        return self._resume is not None

    def track(self, obj):
        """Registers ``obj`` (alive objects only are saved: a weak reference)."""
        self._tracked.append(weakref.ref(obj))
        return obj

    def enter_call(self) -> dict | None:
        """The engine's call starts: None to run it live, else what replaying says of it: ``{"skip": True}`` (return
        at once), or the saved call to restore (``"kind"`` ``"end"`` or ``"step"``) after which the run is live."""
        index = self._calls
        self._calls += 1
        self._in_call = True
        if self._resume is None:
            return None
        if index < self._resume["call"]:
            return {"skip": True}
        return self._resume["engine"]

    def resumed_here(self) -> None:
        """The engine restored the saved call: every tracked object and the meter take their saved state, and the
        run is live from here."""
        point, self._resume = self._resume, None
        alive = self._alive()
        for index, item in point["tracked"].items():
            if int(index) >= len(alive) or alive[int(index)] is None:
                raise DamagedFile("the checkpoint holds state the method's replay did not rebuild: it was written by "
                                  "other code; pass --force to start the run again")
            restore(alive[int(index)], item)
        self.meter.restore_counts(**point["meter"])
        self._last_write = self._last_kept = self._clock()

    def after_step(self, engine_state: Callable[[], dict]) -> None:
        """After each step of a call: writes the resume point when the interval has passed, and when a stop arrived
        writes it and stops the run (:class:`Stopped`). ``engine_state()`` gives the call's state."""
        self._steps += 1
        if self.stop_after_steps is not None and self._steps >= self.stop_after_steps:
            interrupts.request_stop()
        stop = interrupts.stop_requested()
        if stop or self._clock() - self._last_write >= self.every_seconds:
            path = self._store(self._point(engine_state()))
            if stop:
                self._stopped(path)

    def leave_call(self, engine_state: Callable[[], dict]) -> None:
        """The call ended: a stop that waited for its last step writes its end and stops the run; otherwise its end
        is kept in memory (for a stop outside calls) when the last copy is old enough."""
        self._in_call = False
        if self.replaying:  # a skipped call: nothing of it is the run's to keep; the checkpoint on disk stays
            if interrupts.stop_requested():
                self._stopped(self.kept_path)
            return
        if interrupts.stop_requested():
            self._stopped(self._store(self._point(engine_state())))
        if self._clock() - self._last_kept >= min(KEEP_IN_MEMORY_SECONDS, self.every_seconds):
            self._kept = self._point(engine_state())
            self._last_kept = self._clock()

    @property
    def in_call(self) -> bool:
        return self._in_call

    def stopped_outside(self) -> None:
        """A stop arrived outside engine calls: writes the resume point last kept in memory (if any) and stops the
        run (:class:`Stopped`)."""
        if self.replaying:
            self._stopped(self.kept_path)
        self._stopped(self._store(self._kept) if self._kept is not None else self.kept_path)

    # -- inside ----------------------------------------------------------------------------------------------
    def _alive(self) -> list:
        """Every tracked object by its registration's index, None where it is gone."""
        return [ref() for ref in self._tracked]

    def _point(self, engine_state: dict) -> dict:
        """The resume point now: the call's state (``engine_state``, captured by the engine), a copy of every tracked
        object alive, the meter's counts."""
        return {"call": self._calls - 1, "engine": engine_state,
                "tracked": {str(i): capture(obj) for i, obj in enumerate(self._alive()) if obj is not None},
                "meter": self.meter.counts(), "epochs_used": self.meter.epochs_used,
                "wall_seconds": self.wall_before + (self._clock() - self._started)}

    def _store(self, point: dict) -> Path:
        self.kept_path = self._write(point)
        self._last_write = self._clock()
        return self.kept_path

    def _stopped(self, path: Path | None):
        global _kept_on_stop
        _kept_on_stop = path
        raise Stopped(path)


_active: ContextVar[Tape | None] = ContextVar("bdl_bench_checkpoint", default=None)


def active() -> Tape | None:
    """The running run's tape, or None (checkpointing off: a run outside the runner, a method not resumable)."""
    return _active.get()


def track(obj):
    """Registers ``obj``'s state with the running run's checkpoint (nothing when there is none); returns ``obj``.
    ``obj`` is a dataclass of tensors and plain values, or has ``state_dict()`` and ``load_state_dict(state)``; a
    method of one's own tracks what it keeps across engine calls, as the built-in methods do."""
    tape = active()
    return obj if tape is None else tape.track(obj)


@contextlib.contextmanager
def recording(tape: Tape | None) -> Iterator[Tape | None]:
    """Within the block, ``tape`` is the active one, and a stop inside an engine call waits for its step's end."""
    if tape is None:
        yield None
        return
    token = _active.set(tape)
    try:
        with interrupts.deferred(lambda: tape.in_call):
            yield tape
    finally:
        _active.reset(token)


def point_bytes(identity: dict, point: dict, resumes: list, numerics: dict) -> bytes:
    """The file's bytes: format, the run's identity, the resume point, the run's earlier resumes, and what decides its
    round-off where it was written (``numerics``: a resume elsewhere is not bit for bit)."""
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, "identity": identity, "point": point, "resumes": resumes, "numerics": numerics},
               buffer)
    return buffer.getvalue()


def write_point(path: Path, identity: dict, point: dict, resumes: list, numerics: dict) -> Path:
    atomic_write_bytes(path, point_bytes(identity, point, resumes, numerics), "the run's checkpoint")
    return path


def read_point(path: Path, identity: dict) -> dict:
    """The checkpoint at ``path`` (``{"point", "resumes"}``), checked to be this version's and of the run
    ``identity`` names; one :class:`DamagedFile` line otherwise."""
    repair = "pass --force to start the run again (the checkpoint is then discarded)"
    try:
        with open_regular_file(path, "the run's checkpoint", repair) as f:
            saved = torch.load(f, map_location="cpu", weights_only=True)
    except DamagedFile:
        raise
    except Exception as error:  # a truncated or foreign file: pickle, zip and torch each fail in their own way
        raise DamagedFile(f"{path}: the run's checkpoint cannot be read ({type(error).__name__}); {repair}") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT or not isinstance(saved.get("point"), dict):
        raise DamagedFile(f"{path}: not a checkpoint this version of bdl-bench writes; {repair}")
    if saved.get("identity") != identity:
        held = saved.get("identity") if isinstance(saved.get("identity"), dict) else {}
        differs = sorted(key for key in set(held) | set(identity) if held.get(key) != identity.get(key))
        raise DamagedFile(f"{path}: the checkpoint is of another run (its {', '.join(differs) or 'identity'} "
                          f"differ); {repair}")
    return {"point": saved["point"], "resumes": list(saved.get("resumes") or []), "numerics": saved.get("numerics")}
