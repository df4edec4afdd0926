"""The command line's entry point, light enough to start inside the error boundary.

``bench.cli`` imports PyTorch and NumPy, which takes seconds; a Ctrl-C during those imports would otherwise end
in a ``KeyboardInterrupt`` traceback. Here nothing but ``sys``, ``signal`` and ``contextlib`` is imported before the
guard.

Ctrl-C in the middle of an import need not arrive as a ``KeyboardInterrupt``: a library that catches every
exception around an import of its own (NumPy, PyTorch do) leaves a half-imported module in ``sys.modules``, and the
command then fails later in that module's way (a ``RecursionError`` in NumPy's ``__getattr__``, an
``AttributeError`` for a submodule never bound). So the guard records that the interrupt arrived
(:func:`interrupt_arrived`), and any failure after it is reported as the interrupt: one line, exit 130. SIGTERM, which
schedulers and CI runners send before they kill, stops a command the same way, with exit code 143.
"""

import contextlib
import sys

EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED = 70, 130, 143  # bench.errors' codes, repeated so that nothing
# heavy is imported first

_interrupted = False
_terminated = False


def interrupt_arrived() -> bool:
    """Whether Ctrl-C (SIGINT) or SIGTERM arrived in this process since :func:`main` started."""
    return _interrupted


def termination_arrived() -> bool:
    """Whether SIGTERM (what Slurm, Kubernetes and CI runners send before they kill) arrived: the command stops as on
    Ctrl-C, and says so in its one line, with exit code 143."""
    return _terminated


def _on_interrupt(_signum, _frame):
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """SIGTERM stops this process as Ctrl-C does (:func:`termination_arrived`), where nothing else handles it and this
    is the main thread (the only one Python lets set a handler)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, on_sigterm)


@contextlib.contextmanager
def command():
    """One command of the command line (:func:`bench.cli.main`, which a program may call several times): an interrupt
    or termination of an earlier command is not this one's (one during its own lazy imports is), and SIGTERM stops
    it as Ctrl-C does, the handler it found restored after (:func:`bench.entry.main` installs it before the imports
    already, and then keeps it)."""
    import signal
    import threading

    global _interrupted, _terminated
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        _interrupted = _terminated = False
    previous = signal.getsignal(signal.SIGTERM) if main_thread else None
    stop_on_sigterm()
    try:
        yield
    finally:
        if main_thread and previous is not None:
            signal.signal(signal.SIGTERM, previous)


def on_sigterm(_signum, _frame):
    """The SIGTERM handler: records the termination and raises ``KeyboardInterrupt``, as Ctrl-C does."""
    global _terminated
    _terminated = True
    _on_interrupt(_signum, _frame)


def _quiet_after_interrupt(unraisable, report=sys.unraisablehook) -> None:
    """An exception Python cannot raise (in a finaliser, a callback) is reported as usual, unless the interrupt
    arrived: then it is the interrupt's echo, and the one line says it."""
    if not _interrupted:
        report(unraisable)


def main() -> int:
    import signal

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the shell made us ignore it
        signal.signal(signal.SIGINT, _on_interrupt)
    stop_on_sigterm()
    sys.unraisablehook = _quiet_after_interrupt
    try:
        from bench.cli import main as run_command_line
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt) or _interrupted:
            print(f"error: {stopped()} while starting; nothing was done", file=sys.stderr)
            return stopped_code()
        if "--debug" in sys.argv or isinstance(error, SystemExit):
            raise
        print(f"error: internal error while starting, a bug in bdl-bench or in its installation: "
              f"{type(error).__name__}: {' '.join(str(error).split())[:300]}; please report it with the traceback "
              "that --debug shows", file=sys.stderr)
        return EXIT_INTERNAL
    if _interrupted:  # a library caught the interrupt during the imports: what it left half-imported is unusable
        print(f"error: {stopped()} while starting; nothing was done", file=sys.stderr)
        return stopped_code()
    try:
        code = run_command_line()
    except KeyboardInterrupt:  # the instants before the command line's own boundary
        print(f"error: {stopped()}", file=sys.stderr)
        code = EXIT_INTERRUPTED
    return _ending(EXIT_TERMINATED if _terminated and code == EXIT_INTERRUPTED else code)


def stopped() -> str:
    """How the one line names what stopped the command."""
    return "terminated (SIGTERM)" if _terminated else "interrupted"


def stopped_code() -> int:
    """The exit code of the interrupt or termination that stopped the command."""
    return EXIT_TERMINATED if _terminated else EXIT_INTERRUPTED


def _ending(code: int) -> int:
    """``code``, once the command is done; a thread someone else's code started and left running (not a daemon)
    would keep the process from ending: then it ends now, its output flushed."""
    import threading

    if any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()
           if thread is not threading.main_thread()):
        from bench.executors import end_process

        end_process(code)
    return code
