"""Ctrl-C and SIGTERM: what arrived, and how a command stops on it. Only the standard library, so that the command
line's entry point (:mod:`bench.entry`) can set it up before anything heavy is imported.

Ctrl-C in the middle of an import need not arrive as a ``KeyboardInterrupt``: a library that catches every
exception around an import of its own (NumPy, PyTorch do) leaves a half-imported module in ``sys.modules``, and the
command then fails later in that module's way (a ``RecursionError`` in NumPy's ``__getattr__``, an
``AttributeError`` for a submodule never bound). So the handlers record that the interrupt arrived
(:func:`interrupt_arrived`), and any failure after it is reported as the interrupt: one line, exit 130. SIGTERM, which
schedulers and CI runners send before they kill, stops a command the same way, with exit code 143.
"""

import contextlib
import signal
import sys
import threading
from typing import Callable

EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED = 70, 130, 143  # bench.errors' codes, repeated so that nothing
# heavy is imported first

_interrupted = False
_terminated = False
_defer_while = None  # a predicate: while it holds, a first stop waits (see deferred)
_stop_pending = False


def interrupt_arrived() -> bool:
    """Whether Ctrl-C (SIGINT) or SIGTERM arrived in this process since the command started."""
    return _interrupted


def termination_arrived() -> bool:
    """Whether SIGTERM (what Slurm, Kubernetes and CI runners send before they kill) arrived: the command stops as on
    Ctrl-C, and says so in its one line, with exit code 143."""
    return _terminated


def on_interrupt(_signum, _frame):
    """The SIGINT handler: records the interrupt and raises ``KeyboardInterrupt``, unless a run asked a first stop to
    wait for a point where its state is whole (:func:`deferred`): then the stop is pending (:func:`stop_requested`)
    and a second one raises at once."""
    global _interrupted, _stop_pending
    _interrupted = True
    if _defer_while is not None and not _stop_pending and _defer_while():
        _stop_pending = True
        return
    raise KeyboardInterrupt


def stop_requested() -> bool:
    """Whether a stop is pending: it arrived while :func:`deferred` let it wait, and the run should stop at its next
    whole state."""
    return _stop_pending


def request_stop() -> None:
    """Makes a stop pending, as a first Ctrl-C within :func:`deferred` does (tests stop a run at a chosen step)."""
    global _stop_pending
    _stop_pending = True


@contextlib.contextmanager
def deferred(while_: Callable[[], bool]):
    """Within the block, a first Ctrl-C or SIGTERM that arrives while ``while_()`` holds (a run inside a training
    step) does not raise: it is pending (:func:`stop_requested`) until the run writes its checkpoint and stops; a
    second one raises at once. Outside ``while_`` it raises as always."""
    global _defer_while, _stop_pending
    earlier = _defer_while
    _defer_while, _stop_pending = while_, False
    try:
        yield
    finally:
        _defer_while, _stop_pending = earlier, False


def on_sigterm(_signum, _frame):
    """The SIGTERM handler: records the termination and raises ``KeyboardInterrupt``, as Ctrl-C does."""
    global _terminated
    _terminated = True
    on_interrupt(_signum, _frame)


def stop_on_sigterm() -> bool:
    """SIGTERM stops this process as Ctrl-C does (:func:`termination_arrived`), where nothing else handles it and this
    is the main thread (the only one Python lets set a handler); whether it installed the handler."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, on_sigterm)
        return True
    return False


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Within the block, SIGTERM stops the process as Ctrl-C does, where it would otherwise end it at once (its
    default); a handler the host program set, or an ignored SIGTERM, is left as it is. The default is restored after.
    The one installer of the handler: a command (:func:`command`) and a sweep from the Python API use it."""
    installed = stop_on_sigterm()
    try:
        yield
    finally:
        if installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def command():
    """One command (of the command line, which a program may call several times, or a benchmark script): an interrupt
    or termination of an earlier command is not this one's (one during its own lazy imports is), and SIGTERM stops
    it as Ctrl-C does (:func:`sigterm_as_interrupt`; :func:`bench.entry.main` installs the handler before the
    imports already, and then keeps it)."""
    global _interrupted, _terminated
    if threading.current_thread() is threading.main_thread():
        _interrupted = _terminated = False
    with sigterm_as_interrupt():
        yield


def quiet_after_interrupt(unraisable, report=sys.unraisablehook) -> None:
    """An exception Python cannot raise (in a finaliser, a callback) is reported as usual, unless the interrupt
    arrived: then it is the interrupt's echo, and the one line says it."""
    if not _interrupted:
        report(unraisable)


def stopped() -> str:
    """How the one line names what stopped the command."""
    return "terminated (SIGTERM)" if _terminated else "interrupted"


def stopped_code() -> int:
    """The exit code of the interrupt or termination that stopped the command."""
    return EXIT_TERMINATED if _terminated else EXIT_INTERRUPTED
