"""The command line's entry point, light enough to start inside the error boundary.

``bench.cli`` imports PyTorch and NumPy, which takes seconds; a Ctrl-C during those imports would otherwise end
in a ``KeyboardInterrupt`` traceback. Here nothing but ``sys`` and ``signal`` is imported before the guard.

Ctrl-C in the middle of an import need not arrive as a ``KeyboardInterrupt``: a library that catches every
exception around an import of its own (NumPy, PyTorch do) leaves a half-imported module in ``sys.modules``, and the
command then fails later in that module's way (a ``RecursionError`` in NumPy's ``__getattr__``, an
``AttributeError`` for a submodule never bound). So the guard records that the interrupt arrived
(:func:`interrupt_arrived`), and any failure after it is reported as the interrupt: one line, exit 130.
"""

import sys

EXIT_INTERNAL, EXIT_INTERRUPTED = 70, 130  # bench.errors' codes, repeated so that nothing heavy is imported first

_interrupted = False


def interrupt_arrived() -> bool:
    """Whether Ctrl-C (SIGINT) arrived in this process since :func:`main` started."""
    return _interrupted


def _on_interrupt(_signum, _frame):
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def _quiet_after_interrupt(unraisable, report=sys.unraisablehook) -> None:
    """An exception Python cannot raise (in a finaliser, a callback) is reported as usual, unless the interrupt
    arrived: then it is the interrupt's echo, and the one line says it."""
    if not _interrupted:
        report(unraisable)


def main() -> int:
    import signal

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the shell made us ignore it
        signal.signal(signal.SIGINT, _on_interrupt)
    sys.unraisablehook = _quiet_after_interrupt
    try:
        from bench.cli import main as run_command_line
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt) or _interrupted:
            print("error: interrupted while starting; nothing was done", file=sys.stderr)
            return EXIT_INTERRUPTED
        if "--debug" in sys.argv or isinstance(error, SystemExit):
            raise
        print(f"error: internal error while starting, a bug in bdl-bench or in its installation: "
              f"{type(error).__name__}: {' '.join(str(error).split())[:300]}; please report it with the traceback "
              "that --debug shows", file=sys.stderr)
        return EXIT_INTERNAL
    if _interrupted:  # a library caught the interrupt during the imports: what it left half-imported is unusable
        print("error: interrupted while starting; nothing was done", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        code = run_command_line()
    except KeyboardInterrupt:  # the instants before the command line's own boundary
        print("error: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    return _ending(code)


def _ending(code: int) -> int:
    """``code``, once the command is done; a thread someone else's code started and left running (not a daemon)
    would keep the process from ending: then it ends now, its output flushed."""
    import threading

    if any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()
           if thread is not threading.main_thread()):
        from bench.executors import end_process

        end_process(code)
    return code
