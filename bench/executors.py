"""Where a sweep's runs execute: in this process one after another, in N local worker processes, or as tasks of
a Ray cluster. Every executor gives each run the same number of torch threads (``threads``), because the
thread count changes a run's round-off (``sgd`` on ``diabetes-gap`` differs between 1 and 2 threads): a seeded
run's result must not depend on which executor or how many workers ran it.

A run that fails does not stop the others: each executor hands back an :class:`Outcome` per run, holding
either the result record or the failure's exit code and one line (:func:`bench.errors.describe_failure`).

This module imports neither torch nor numpy: a worker process imports it first, sets the thread variables
that OpenMP, MKL and OpenBLAS read once when they load, and only then imports torch.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import secrets
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, NoReturn

from bench import descendants, interrupts
from bench.errors import (COMMAND_LINE, EXIT_ENVIRONMENT, EXIT_INTERNAL, EXIT_METHOD, BenchError,
                          FailedElsewhere, Spelling, describe_failure, terminal_text)

if TYPE_CHECKING:  # the real import would load torch before a worker has set its thread variables
    from bench.runner import RunSpec

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

OTHER_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"}
"""The environment of a process that computes as a CPU of another kind would: ATen's kernels without vector
instructions (``cpu_capability`` DEFAULT, where this CPU's are AVX2 or AVX-512), MKL's code path that gives one result
on every x86 processor, oneDNN at SSE4.1. Each is read once, when torch loads, so only a process started with them
(:class:`Isolated`, :func:`run_in_workers` with ``kernels``) computes so. Another CPU kind moves a run's round-off in
the same places (the order of a vector sum, a fused multiply-add, a transcendental's last bits), so a run that drifts
here beyond round-off, against this process's kernels, is one whose round-off grows chaotically: what
:mod:`bench.verify` and the gate (:mod:`leaderboard.gate`) measure with it. Where this machine's kernels are those
already (:func:`other_kernels_differ` false: no vector unit ATen uses), such a process computes as this one does."""

PARENT_CHECK_SECONDS = 0.5
"""How often a local worker checks that the sweep that started it is alive (it stops when it is not)."""

RAY_MISSING = "install the ray extra: pip install -e '.[ray]'"

RAY_CONNECT_SECONDS = 10.0
"""How long a Ray head may take to accept a TCP connection before its address is refused."""


@dataclass(frozen=True)
class Outcome:
    """What became of one run: its result record, or the exit code and one line of its failure."""

    result: object
    """A run's record (a dict), what :meth:`Isolated.call` returned, or None after a failure."""
    exit_code: int = 0
    failure: str = ""


def usable_cores() -> int:
    """The CPU cores this process may use (its affinity, which Slurm and containers narrow), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1


def thread_environment(threads: int) -> dict[str, str]:
    return {name: str(threads) for name in THREAD_VARIABLES}


def _kernel_environment(kernels: dict[str, str]) -> dict[str, str]:
    """``kernels`` and, where they choose other kernels, a ``torch.compile`` cache of their own: the shared one keys
    its compiled code without the kernels ATen was told to use, and code compiled for this CPU's vector kernels fails
    to build against the default ones (``at::vec`` undeclared)."""
    if not kernels:
        return {}
    return {**kernels, "TORCHINDUCTOR_CACHE_DIR": os.path.join(tempfile.gettempdir(),
                                                               f"bdl-bench-inductor-other-kernels-{os.getuid()}")}


def other_kernels_differ() -> bool:
    """Whether a process started with :data:`OTHER_KERNELS` computes with other kernels than this one: ATen picks
    vector kernels here (torch is imported)."""
    import torch

    return torch.backends.cpu.get_cpu_capability() != "DEFAULT"


def called(function: Callable, *args) -> Outcome:
    """``function(*args)``'s value as an :class:`Outcome`'s result; any failure becomes the outcome's code and line."""
    try:
        return Outcome(function(*args))
    except Exception as error:
        code, line = describe_failure(error)
        return Outcome(None, code, line)


def attempt(spec: "RunSpec", on_progress: Callable[[float], None] | None = None) -> Outcome:
    """Runs ``spec``; any failure becomes an :class:`Outcome`, so one bad run does not end a sweep."""
    from bench.runner import run

    return called(lambda: run(spec, on_progress=on_progress))


def check_methods(methods: list[str], cases: list[tuple[str, tuple[tuple[str, str], ...]]],
                  spelling: Spelling = COMMAND_LINE) -> Outcome:
    """Loads ``methods`` (as ``--method`` names them) and resolves each one's settings for every ``(task,
    overrides)`` of ``cases``: what the command's own process does next with someone else's code, done here
    first, so that what cannot be caught there (``os._exit`` at import, a crash) is reported as the method's.
    ``spelling``: how a failure names what was given, as the caller's own process would."""
    from approximators import resolve_config, resolve_method

    try:
        for given in methods:
            method = resolve_method(given, spelling)
            for task, overrides in cases:
                resolve_config(method, task, dict(overrides), spelling)
    except Exception as error:
        code, line = describe_failure(error)
        return Outcome(None, code, line)
    return Outcome(None)


def check_isolated(methods: list, cases: list[tuple[str, tuple[tuple[str, str], ...]]], threads: int = 1,
                   isolated: "Isolated | None" = None, spelling: Spelling = COMMAND_LINE) -> None:
    """:func:`check_methods` for those of ``methods`` that :func:`isolates`, in a process of their own (``isolated``,
    else a new one), before this process loads them: a failure there is raised here as
    :class:`~bench.errors.FailedElsewhere`, one line, whatever ended it."""
    foreign = [method for method in dict.fromkeys(methods) if isolates(method)]
    if not foreign:
        return
    with contextlib.ExitStack() as stack:
        if isolated is None:
            isolated = stack.enter_context(Isolated(foreign[0], threads))
        outcome = isolated.check(foreign, cases, spelling)
    if outcome.exit_code:
        raise FailedElsewhere(outcome.exit_code, outcome.failure)


def isolates(method: object) -> bool:
    """Whether a run of ``method`` (as a run spec holds it) runs in a process of its own, away from the command's:
    a method that is not bdl-bench's given by name (``package.module:ClassName`` or an installed one's name). A
    class given from Python runs in the caller's process (a notebook's class may not be importable elsewhere), and
    so does a name that is neither (no code of anyone's runs to find that it is unknown: one line, at once)."""
    from approximators import METHODS, installed_methods

    return isinstance(method, str) and method not in METHODS and (":" in method or method in installed_methods())


def run_in_process(specs: Iterable["RunSpec"], threads: int, on_finished: Callable[["RunSpec", Outcome], None],
                   epoch_progress: Callable[["RunSpec"], object], isolate: bool = True,
                   spare: "Isolated | None" = None) -> None:
    """One run after another with ``threads`` torch threads (restored afterwards): in this process, or, for a
    method that :func:`isolates` (with ``isolate``), in a process of its own method's (:class:`Isolations`; the
    runs of one method share it; ``spare``: one started already, which this executor ends). ``epoch_progress(spec)``
    is a context manager yielding the meter's progress callback for that run."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        # Ctrl-C, SIGTERM: a run in flight in a process of its own is stopped, its folder left unfinished.
        with Isolations(threads, spare) as isolations:
            for spec in specs:
                with epoch_progress(spec) as on_progress:
                    outcome = (isolations.of(spec.method).attempt(spec, on_progress)
                               if isolate and isolates(spec.method) else attempt(spec, on_progress))
                on_finished(spec, outcome)
    finally:
        torch.set_num_threads(previous)


def _exit_with_parent(parent_pid: int) -> None:
    """A worker whose sweep is gone (killed, even with SIGKILL) stops at once, with every process its method
    started, instead of finishing its run and keeping the run folder locked."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_SECONDS)
    descendants.end_own_tree()
    os._exit(1)


def end_process(code: int) -> NoReturn:
    """Ends this process now with ``code``, its output flushed, without waiting for threads a method started and
    left running (Python would wait for them forever)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a stream someone closed or broke: nothing more to flush
            stream.flush()
    os._exit(code)


def _serve(connection, threads: int, parent_pid: int, token: str, kernels: dict[str, str] | None = None) -> None:
    """A local worker process: answers each request it receives (``("run", spec, progress)``: the run's
    :class:`Outcome`, with ``("epochs", used)`` and ``("phase", Phase)`` messages before it when ``progress``;
    ``("check", methods, cases)``: :func:`check_methods`'s; ``("call", function, args)``: :func:`called`'s), telling
    the parent which method's code it is in as it enters and leaves it (``("in", name, part)``). It leads a process
    group of its own, adopts what its method's processes orphan and marks its environment with ``token``
    (:mod:`bench.descendants`): after each request, what the method started and left running is killed, with a
    note, but for what the import of its module started, which serves all of its runs and is ended, with a note,
    when the worker ends. A ``KeyboardInterrupt`` raised here is the method's (this process receives no Ctrl-C: it
    is in a group of its own and ignores SIGINT), and nothing it raises prints a traceback. ``kernels``: variables
    that choose torch's kernels (:data:`OTHER_KERNELS`), set before torch loads."""
    try:
        _serve_requests(connection, threads, parent_pid, token, _kernel_environment(kernels or {}))
    except BaseException:  # noqa: BLE001 - an interrupt or exit between requests: the parent reports the death
        end_process(1)
    end_process(0)


def _serve_requests(connection, threads: int, parent_pid: int, token: str, kernels: dict[str, str]) -> None:
    os.environ.update({**thread_environment(threads), **kernels})  # before torch loads them: each is read once
    os.environ[descendants.TREE_VARIABLE] = token
    descendants.lead_group()
    descendants.adopt_orphans()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the sweep stops us
    # by SIGTERM (as a scheduler stops every process of a job): the run writes its checkpoint, then ends
    signal.signal(signal.SIGTERM, interrupts.on_sigterm)
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    import torch

    from approximators import boundary

    torch.set_num_threads(threads)
    entered: list = [None, None]
    """The method and part whose code ran last (what a KeyboardInterrupt and a left-behind process are said of)."""

    def on_call(name, part):
        if name is not None:
            entered[:] = [name, part]
        connection.send(("in", name, part))

    boundary.on_call = on_call
    while True:
        try:
            request = connection.recv()
        except EOFError:  # the sweep closed its end: nothing more to run
            break
        entered[:] = [None, None]
        try:
            if request[0] == "run":
                from bench.progress import observed  # here: it loads torch, after the thread variables are set

                _, spec, progress = request
                # The run's phases beside training (bench.progress.Phase: its predictive, its scoring) go where its
                # epochs go.
                with observed((lambda phase: connection.send(("phase", phase))) if progress else None):
                    outcome = attempt(spec, (lambda used: connection.send(("epochs", used))) if progress else None)
            elif request[0] == "call":
                outcome = called(request[1], *request[2])
            else:
                outcome = check_methods(*request[1:])
        except KeyboardInterrupt:
            name, part = entered
            who = f"method {name!r}" if name else "the method"
            outcome = Outcome(None, EXIT_METHOD, f"{who} raised KeyboardInterrupt in its {part or 'code'} (not a "
                                                 "Ctrl-C of the command's, which its process does not receive); it is "
                                                 "the method's failure, not bdl-bench's")
        _say_left_behind(descendants.end_own_tree(descendants.started_by_imports()), entered[0], "after its run")
        try:
            connection.send(outcome)
        except OSError:  # the sweep is gone
            break
    descendants.end_started_by_imports("when its worker ended")


def _say_left_behind(killed: list[descendants.Killed], name: str | None, where: str) -> None:
    """A note on standard error when a method's processes had to be killed."""
    if killed:
        who = f"method {terminal_text(repr(name))}" if name else "a method"
        print(f"note: {who}: {descendants.left_behind_line(killed, where)}", file=sys.stderr, flush=True)


STOP_SECONDS = 10.0
"""How long a worker told to stop may take to end before it is killed."""


DIED = object()
"""What a worker's messages say when it ended without an outcome."""


_adopting_for: set["_Worker"] = set()
"""The workers alive for whose sake this process adopts orphans (:func:`bench.descendants.adopt_orphans`; it did not
before the first): what a worker that died leaves becomes this process's child, which
:func:`bench.descendants.end_tree_of` knows for one of the worker's."""


class _Worker:
    def __init__(self, context, threads: int, kernels: dict[str, str] | None = None):
        self.connection, theirs = context.Pipe()
        self.token = secrets.token_hex(16)
        """What marks the environment of the worker and of every process its method starts."""
        self.process = context.Process(target=_serve, args=(theirs, threads, os.getpid(), self.token, kernels),
                                       daemon=True)
        if _adopting_for or not descendants.adopts_orphans():  # else it adopts them anyway (a worker's own worker)
            descendants.adopt_orphans()
            _adopting_for.add(self)
        self.process.start()
        self.started = descendants.started(self.process.pid)
        """When the worker started (clock ticks since boot): a process it left is one started after."""
        theirs.close()  # only the worker holds its end, so it sees end-of-file when the sweep closes ours
        self.method: str | None = None
        """The method of the runs it ran (:func:`_kind`): it runs no other's, so that nothing a method leaves behind
        in the process (threads, changed state) reaches another method's run."""
        self.inside: tuple[str, str] | None = None
        """The method and part whose code it runs now, as it said: what a death is reported as."""
        self.named: str | None = None
        """The name of the method it ran (``mine``), as it said: what its notes call it, as the worker's own notes
        and the run's table do, never ``method``'s ``package.module:Class``."""

    def take(self, on_progress: Callable[[float], None] | None = None) -> "Outcome | object | None":
        """Takes in the messages waiting, without waiting for more (progress goes to ``on_progress``, where it is to
        ``inside``): the :class:`Outcome` when it came, :data:`DIED` when the worker ended without one, else None."""
        while self.connection.poll():
            try:
                message = self.connection.recv()
            except (EOFError, OSError):
                return DIED
            if isinstance(message, Outcome):
                return message
            if message[0] == "in":
                self.inside = None if message[1] is None else (message[1], message[2])
                self.named = message[1] or self.named
            elif on_progress is not None:
                on_progress(message[1])
        return None if self.process.is_alive() else DIED

    def receive(self, on_progress: Callable[[float], None] | None = None) -> "Outcome | object":
        """:meth:`take` until the :class:`Outcome` or :data:`DIED` comes."""
        while True:
            multiprocessing.connection.wait([self.connection, self.process.sentinel])
            taken = self.take(on_progress)
            if taken is not None:
                return taken

    def ready(self, connections: list) -> bool:
        return self.connection in connections or self.process.sentinel in connections

    def stop(self, kill: bool, running: bool = False) -> None:
        """Ends the worker (at once with ``kill``, an interrupt's; else once it has answered) and every process its
        method started, with a note when there were any (none after an interrupt: all is stopped). A worker
        ``running`` a run is stopped by SIGTERM rather than killed, so that its run writes its checkpoint at the end of
        its training step (:mod:`bench.checkpoint`), within :data:`STOP_SECONDS`."""
        self.connection.close()
        if kill:
            (self.process.terminate if running else self.process.kill)()
        self.process.join(STOP_SECONDS)
        if self.process.is_alive():  # held up by something it runs: it has had its chance
            self.process.kill()
            self.process.join()
        killed = self.end_left_behind()
        if not kill:
            _say_left_behind(killed, self.named or self.method or None, "when its process ended")
        if self in _adopting_for:
            _adopting_for.discard(self)
            if not _adopting_for:
                descendants.adopt_orphans(False)

    def end_left_behind(self) -> list[descendants.Killed]:
        """Kills what the ended worker's method left running (:func:`bench.descendants.end_tree_of`)."""
        return descendants.end_tree_of(self.process.pid, self.started, self.token)


def _kind(method: object) -> str:
    """Which runs may share a worker: a method that :func:`isolates` only with its own, built-in ones together."""
    return method if isolates(method) else ""


def _death(worker: _Worker, method: str | None, part: str | None = None) -> Outcome:
    """The failure of what a worker process ran when it died under it: the failure of a method that is not
    bdl-bench's (exit 4) when its code was running, or when ``method`` is the one whose code the process ran (in
    its ``part``, where known), else a bug (exit 70); killed by SIGKILL, the machine's (out of memory, exit 3)."""
    process = worker.process
    process.join()
    code = process.exitcode
    killed = worker.end_left_behind()
    left = f"; {descendants.left_behind_line(killed, 'after it ended')}" if killed else ""
    how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0 and
           -code in signal.Signals._value2member_map_ else f"ended with exit code {code}")
    name, part = worker.inside or (worker.named or method, part)
    if code == -signal.SIGKILL:  # what the kernel's out-of-memory killer sends
        whose = f"method {name!r}: its process" if name else "its worker process"
        return Outcome(None, EXIT_ENVIRONMENT, f"{whose} was killed by SIGKILL (out of memory, or killed by hand); "
                                               f"run again to retry it{left}")
    if name is None:
        return Outcome(None, EXIT_INTERNAL, f"its worker process {how}{left}")
    where = f" in its {part}" if part else ""
    return Outcome(None, EXIT_METHOD, f"method {name!r}: its process {how}{where}, without a result (os._exit, a "
                                      "crash or a signal in the method's code); it is the method's failure, not "
                                      f"bdl-bench's{left}")


class Isolated:
    """A process of its own for someone else's method ``method`` (as ``--method`` names it): its runs
    (:meth:`attempt`) and the loading of its code (:meth:`check`) happen there, so that what no process can catch
    in itself (``os._exit``, a crash, a thread that never ends, a changed working directory) ends only that
    process, reported as the method's failure in one line. Spawned (not forked: torch's threads do not survive a
    fork), it starts in a few seconds (PyTorch's import); Ctrl-C stops it with the command. ``kernels``: as
    :func:`run_in_workers` takes them; ``method`` None where the process runs bdl-bench's own code with other kernels
    (its death is then bdl-bench's failure, not a method's)."""

    def __init__(self, method: str | None, threads: int, kernels: dict[str, str] | None = None):
        self.method = method
        self._worker = _Worker(multiprocessing.get_context("spawn"), threads, kernels)
        self._worker.method = method

    def attempt(self, spec: "RunSpec", on_progress: Callable[[float], None] | None = None) -> Outcome:
        """Runs ``spec`` there; its outcome, the process's death included."""
        return self._ask(("run", spec, on_progress is not None), on_progress, self.method)

    def check(self, methods: list[str], cases: list[tuple[str, tuple[tuple[str, str], ...]]],
              spelling: Spelling = COMMAND_LINE) -> Outcome:
        """:func:`check_methods` there."""
        return self._ask(("check", methods, cases, spelling), None, ", ".join(methods), "import and settings")

    def call(self, function: Callable, *args) -> Outcome:
        """``function(*args)`` there (a module-level function, its arguments and value picklable), as
        :func:`called` gives it: what ends the process is the method's failure."""
        return self._ask(("call", function, args), None, self.method)

    def _ask(self, request, on_progress, method: str, part: str | None = None) -> Outcome:
        try:
            self._worker.connection.send(request)
        except OSError:
            return _death(self._worker, method, part)
        outcome = self._worker.receive(on_progress)
        return outcome if outcome is not DIED else _death(self._worker, method, part)

    def alive(self) -> bool:
        return self._worker.process.is_alive()

    def close(self, kill: bool = False, running: bool = False) -> None:
        """Ends the process: at once with ``kill`` (by SIGTERM while ``running`` a run, which then writes its
        checkpoint), else once it has answered what it was asked."""
        self._worker.stop(kill, running)

    def __enter__(self) -> "Isolated":
        return self

    def __exit__(self, *exc) -> None:
        self.close(kill=exc[0] is not None)


class Isolations:
    """A process of its own (:class:`Isolated`) for each method that :func:`isolates`, one at a time: the one of the
    method last asked for serves that method's next calls too; another method's, or a method that ended its
    process, gets a fresh one. ``spare``: one started already. Leaving it by an exception (Ctrl-C) kills the
    process, whatever it runs."""

    def __init__(self, threads: int, spare: "Isolated | None" = None):
        self.threads, self._current = threads, spare

    def of(self, method: str) -> Isolated:
        if self._current is not None and (self._current.method != method or not self._current.alive()):
            self.close()
        if self._current is None:
            self._current = Isolated(method, self.threads)
        return self._current

    def close(self, kill: bool = False) -> None:
        if self._current is not None:
            self._current.close(kill)
            self._current = None

    def __enter__(self) -> "Isolations":
        return self

    def __exit__(self, *exc) -> None:
        self.close(kill=exc[0] is not None)


def run_in_workers(specs: Iterable["RunSpec"], workers: int, threads: int,
                   on_finished: Callable[["RunSpec", Outcome], None], spare: "Isolated | None" = None,
                   kernels: dict[str, str] | None = None) -> None:
    """Runs ``specs`` in ``workers`` spawned processes (not forked: torch's threads do not survive a fork),
    each with ``threads`` torch threads. A worker runs the runs of one method that is not bdl-bench's, or built-in
    ones (:func:`_kind`); ``spare``: one started already (for its method), which becomes the first worker. A worker
    that dies fails only the run it held; a fresh one replaces it. On any exit (Ctrl-C included) the workers are
    killed; a killed run leaves its folder unfinished. ``kernels``: variables every worker sets before torch loads
    (:data:`OTHER_KERNELS`: the runs compute as on another CPU kind)."""
    context = multiprocessing.get_context("spawn")
    pending = deque(specs)
    idle: list[_Worker] = []
    if spare is not None:
        spare._worker.method = _kind(spare.method)
        idle.append(spare._worker)
    busy: dict[_Worker, "RunSpec"] = {}
    try:
        while pending or busy:
            while pending and len(busy) < workers:
                kind = _kind(pending[0].method)
                worker = next((w for w in idle if w.method == kind), None)
                if worker is not None:
                    idle.remove(worker)
                else:
                    if idle:  # one of another method's: it makes room (at most `workers` processes)
                        idle.pop().stop(kill=False)
                    worker = _Worker(context, threads, kernels)
                    worker.method = kind
                try:
                    worker.connection.send(("run", pending[0], False))
                except OSError:  # an idle worker that died between runs: the run goes to another
                    worker.stop(kill=False)
                    continue
                busy[worker] = pending.popleft()
            ready = multiprocessing.connection.wait([w.connection for w in busy] + [w.process.sentinel for w in busy])
            for worker in [w for w in busy if w.ready(ready)]:
                outcome = worker.take()
                if outcome is None:  # it said where it is; the run goes on
                    continue
                spec = busy.pop(worker)
                if outcome is DIED:
                    outcome = _death(worker, spec.method if isolates(spec.method) else None)
                    worker.stop(kill=False)
                else:
                    idle.append(worker)
                on_finished(spec, outcome)
    finally:
        for worker in [*idle, *busy]:
            worker.stop(kill=worker in busy, running=worker in busy)


def _check_answers(address: str) -> None:
    """Ray retries an address where nothing listens for many minutes; a HOST:PORT that refuses a TCP connection
    is one line at once instead."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "://" in address:
        return  # "auto", "local" or a ray:// client address: Ray's to resolve
    try:
        socket.create_connection((host, int(port)), timeout=RAY_CONNECT_SECONDS).close()
    except OSError as error:
        raise BenchError(f"nothing answers at --ray-address {address} ({error.strerror or error}); start the "
                         "cluster's head there with `ray start --head --port PORT`, or correct the address") from None


@contextlib.contextmanager
def _stderr_kept_aside():
    """Ray's C++ core prints its connection retries straight to file descriptor 2; they are set aside, so that
    a failure stays one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as aside:
        os.dup2(aside.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _connect_ray(address: str | None):
    from bench import optional

    ray = optional.load("ray", "--executor ray", missing=RAY_MISSING)
    try:
        initialized = ray.is_initialized()
    except Exception as error:  # a Ray of another version or half installed: its API is not there
        raise optional.failure("ray", "--executor ray", error) from None
    if initialized:  # a caller (a notebook, a test) already chose the cluster
        return ray, False
    if address:
        _check_answers(address)
    try:
        with _stderr_kept_aside():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    except Exception as error:  # Ray raises ConnectionError, RuntimeError or ValueError for a bad address
        where = f"at {address}" if address else "on this machine"
        raise BenchError(f"cannot start or reach a Ray cluster {where} ({' '.join(str(error).split())}); check "
                         "--ray-address; a cluster with token authentication (Ray >= 2.59 starts local ones so) also "
                         "needs RAY_AUTH_MODE=token and its token (~/.ray/auth_token or RAY_AUTH_TOKEN)") from None
    return ray, True


def _check_ray_resources(ray, threads: int, gpus: int) -> None:
    """A task no node can hold would wait forever: refuse it in one line instead."""
    nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    if not any(node.get("CPU", 0) >= threads and node.get("GPU", 0) >= gpus for node in nodes):
        largest = max((int(node.get("CPU", 0)) for node in nodes), default=0)
        need = f"{threads} CPUs" + (f" and {gpus} GPU" if gpus else "")
        raise BenchError(f"no node of the Ray cluster has the {need} one run asks for (largest node: {largest} "
                         f"CPUs{', GPUs: ' + str(max(int(n.get('GPU', 0)) for n in nodes)) if gpus else ''}); "
                         "lower --threads" + (" or add a GPU node" if gpus else ""))


RAY_CLUSTER_FAILURES = ("NodeDiedError", "LocalRayletDiedError", "RaySystemError", "RpcError", "ObjectLostError",
                        "OutOfMemoryError", "ObjectStoreFullError", "OutOfDiskError", "RuntimeEnvSetupError",
                        "TaskUnschedulableError")
"""Ray's errors (``ray.exceptions``, with their subclasses) that say its cluster failed a task, not what the task
ran: a node or its raylet died, memory or disk ran out, the task's environment or a place for it could not be
made. A name this Ray lacks is passed over."""


def ray_failure(ray, error: BaseException, method: object) -> Outcome:
    """What a run whose Ray task ended with ``error`` (a ``ray.exceptions.RayError``: :func:`attempt` catches what
    the run itself raises) failed of: the cluster's (:data:`RAY_CLUSTER_FAILURES`: the machine's, exit 3, retried
    by running again), the method's when its worker process died running someone else's method (exit 4), else
    bdl-bench's (exit 70)."""
    first_line = (str(error).strip().splitlines() or [""])[0]
    # Whose failure it is comes before Ray's own text, which can run to hundreds of characters and be cut short.
    cluster = tuple(getattr(ray.exceptions, name) for name in RAY_CLUSTER_FAILURES if hasattr(ray.exceptions, name))
    if isinstance(error, cluster):
        return Outcome(None, EXIT_ENVIRONMENT, f"its Ray task failed, the Ray cluster's failure, not the run's (run "
                                               f"again to retry it): {type(error).__name__}: {first_line}")
    if isinstance(error, ray.exceptions.WorkerCrashedError) and isolates(method):
        return Outcome(None, EXIT_METHOD, f"method {terminal_text(repr(method))}: its Ray task failed, its worker died "
                                          "(os._exit, a crash or a signal in the method's code, or the machine's "
                                          f"out-of-memory killer): {type(error).__name__}: {first_line}")
    return Outcome(None, EXIT_INTERNAL, f"its Ray task failed: {type(error).__name__}: {first_line}")


def run_on_ray(specs: Iterable["RunSpec"], threads: int, gpus: int, address: str | None,
               on_finished: Callable[["RunSpec", Outcome], None]) -> None:
    """Each run as a Ray task of ``threads`` CPUs and ``gpus`` GPUs, reported as it finishes. Connects to
    ``address`` (default: ``$RAY_ADDRESS``, a cluster started on this machine, else a new local one, which is
    shut down afterwards). Interrupted, the unfinished tasks are cancelled."""
    ray, started_here = _connect_ray(address)
    try:
        _check_ray_resources(ray, threads, gpus)
        # The thread variables go into the task's environment, so Ray starts its workers with them (torch takes
        # its thread count from OMP_NUM_THREADS when it loads); a cluster started with other values would
        # otherwise pass those on. max_retries=0: a failed run is reported, and the next sweep retries it.
        task = ray.remote(attempt).options(num_cpus=threads, num_gpus=gpus, max_retries=0,
                                           runtime_env={"env_vars": thread_environment(threads)})
        waiting = {task.remote(spec): spec for spec in specs}
        try:
            while waiting:
                done, _ = ray.wait(list(waiting), num_returns=1)
                for ref in done:
                    spec = waiting.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except ray.exceptions.RayError as error:  # the worker died, or the task could not start
                        outcome = ray_failure(ray, error, spec.method)
                    on_finished(spec, outcome)
        finally:
            for ref in waiting:
                ray.cancel(ref, force=True)
    finally:
        if started_here:
            ray.shutdown()
