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
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from bench.errors import EXIT_ENVIRONMENT, EXIT_INTERNAL, BenchError, ConfigError, describe_failure

if TYPE_CHECKING:  # the real import would load torch before a worker has set its thread variables
    from bench.runner import RunSpec

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

PARENT_CHECK_SECONDS = 0.5
"""How often a local worker checks that the sweep that started it is alive (it stops when it is not)."""

RAY_MISSING = "install the ray extra: pip install -e '.[ray]'"

RAY_CONNECT_SECONDS = 10.0
"""How long a Ray head may take to accept a TCP connection before its address is refused."""


@dataclass(frozen=True)
class Outcome:
    """What became of one run: its result record, or the exit code and one line of its failure."""

    result: dict | None
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


def attempt(spec: "RunSpec", on_progress: Callable[[float], None] | None = None) -> Outcome:
    """Runs ``spec``; any failure becomes an :class:`Outcome`, so one bad run does not end a sweep."""
    from bench.runner import run

    try:
        return Outcome(run(spec, on_progress=on_progress))
    except Exception as error:
        code, line = describe_failure(error)
        return Outcome(None, code, line)


def run_in_process(specs: Iterable["RunSpec"], threads: int, on_finished: Callable[["RunSpec", Outcome], None],
                   epoch_progress: Callable[["RunSpec"], object]) -> None:
    """One run after another in this process with ``threads`` torch threads (restored afterwards).
    ``epoch_progress(spec)`` is a context manager yielding the meter's progress callback for that run."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for spec in specs:
            with epoch_progress(spec) as on_progress:
                outcome = attempt(spec, on_progress)
            on_finished(spec, outcome)
    finally:
        torch.set_num_threads(previous)


def _exit_with_parent(parent_pid: int) -> None:
    """A worker whose sweep is gone (killed, even with SIGKILL) stops at once instead of finishing its run
    and keeping the run folder locked."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(1)


def _serve(connection, threads: int, parent_pid: int) -> None:
    """A local worker process: runs each spec it receives and sends back its :class:`Outcome`."""
    os.environ.update(thread_environment(threads))  # before torch loads OpenMP and MKL, which read them once
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the sweep stops us
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    import torch

    torch.set_num_threads(threads)
    while True:
        try:
            spec = connection.recv()
        except EOFError:  # the sweep closed its end: nothing more to run
            return
        outcome = attempt(spec)
        try:
            connection.send(outcome)
        except OSError:  # the sweep is gone
            return


class _Worker:
    def __init__(self, context, threads: int):
        self.connection, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs, threads, os.getpid()), daemon=True)
        self.process.start()
        theirs.close()  # only the worker holds its end, so it sees end-of-file when the sweep closes ours

    def stop(self, kill: bool) -> None:
        self.connection.close()
        if kill:
            self.process.kill()
        self.process.join()


def _death(process) -> Outcome:
    """The failure of a run whose worker process died under it."""
    process.join()
    code = process.exitcode
    if code == -signal.SIGKILL:  # what the kernel's out-of-memory killer sends
        return Outcome(None, EXIT_ENVIRONMENT, "its worker process was killed by SIGKILL (out of memory, or killed "
                                               "by hand); run the sweep again to retry it")
    if code is not None and code < 0:
        return Outcome(None, EXIT_INTERNAL, f"its worker process was killed by {signal.Signals(-code).name}")
    return Outcome(None, EXIT_INTERNAL, f"its worker process ended with exit code {code}")


def run_in_workers(specs: Iterable["RunSpec"], workers: int, threads: int,
                   on_finished: Callable[["RunSpec", Outcome], None]) -> None:
    """Runs ``specs`` in ``workers`` spawned processes (not forked: torch's threads do not survive a fork),
    each with ``threads`` torch threads. A worker that dies fails only the run it held; a fresh one replaces
    it. On any exit (Ctrl-C included) the workers are killed; a killed run leaves its folder unfinished."""
    context = multiprocessing.get_context("spawn")
    pending = deque(specs)
    idle: list[_Worker] = []
    busy: dict[_Worker, "RunSpec"] = {}
    try:
        while pending or busy:
            while pending and len(busy) < workers:
                worker = idle.pop() if idle else _Worker(context, threads)
                try:
                    worker.connection.send(pending[0])
                except OSError:  # an idle worker that died between runs: the run goes to another
                    worker.stop(kill=False)
                    continue
                busy[worker] = pending.popleft()
            ready = multiprocessing.connection.wait([w.connection for w in busy] + [w.process.sentinel for w in busy])
            for worker in [w for w in busy if w.connection in ready or w.process.sentinel in ready]:
                spec = busy.pop(worker)
                try:
                    outcome = worker.connection.recv()
                except (EOFError, OSError):
                    outcome = _death(worker.process)
                    worker.stop(kill=False)
                else:
                    idle.append(worker)
                on_finished(spec, outcome)
    finally:
        for worker in [*idle, *busy]:
            worker.stop(kill=worker in busy)


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
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    if ray.is_initialized():  # a caller (a notebook, a test) already chose the cluster
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
                        first_line = (str(error).strip().splitlines() or [""])[0]
                        outcome = Outcome(None, EXIT_INTERNAL, f"its Ray task failed: {type(error).__name__}: "
                                                               f"{first_line}")
                    on_finished(spec, outcome)
        finally:
            for ref in waiting:
                ray.cancel(ref, force=True)
    finally:
        if started_here:
            ray.shutdown()
