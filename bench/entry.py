"""The command line's entry point, light enough to start inside the error boundary.

``bench.cli`` and the commands import PyTorch and NumPy, which takes seconds; a Ctrl-C during those imports would
otherwise end in a ``KeyboardInterrupt`` traceback. Here nothing but the standard library's ``sys``, ``signal``,
``threading`` and ``contextlib`` (through :mod:`bench.interrupts`) is imported before the guard. The parser itself
needs neither (``--version`` and ``--help`` answer where PyTorch cannot even be loaded); :mod:`bench.cli` loads
PyTorch once a command is chosen (:mod:`bench.loading`).
"""

import signal
import sys

from bench import interrupts
from bench.interrupts import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED

EXIT_ENVIRONMENT = 3  # bench.errors.EXIT_ENVIRONMENT, which this module does not import before its guard


def main() -> int:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the shell made us ignore it
        signal.signal(signal.SIGINT, interrupts.on_interrupt)
    interrupts.stop_on_sigterm()
    sys.unraisablehook = interrupts.quiet_after_interrupt
    try:
        from bench.cli import main as run_command_line
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt) or interrupts.interrupt_arrived():
            print(f"error: {interrupts.stopped()} while starting; nothing was done", file=sys.stderr)
            return interrupts.stopped_code()
        if "--debug" in sys.argv or isinstance(error, SystemExit):
            raise
        if isinstance(error, MemoryError):  # a limit (ulimit -v) too low even for the command line itself
            print("error: out of memory while starting; nothing was done: raise the memory limit (ulimit -v) or use "
                  "a machine with more memory", file=sys.stderr)
            return EXIT_ENVIRONMENT
        print(f"error: internal error while starting, a bug in bdl-bench or in its installation: "
              f"{type(error).__name__}: {' '.join(str(error).split())[:300]}; please report it with the traceback "
              "that --debug shows", file=sys.stderr)
        return EXIT_INTERNAL
    if interrupts.interrupt_arrived():  # a library caught the interrupt during the imports: what it left
        # half-imported is unusable
        print(f"error: {interrupts.stopped()} while starting; nothing was done", file=sys.stderr)
        return interrupts.stopped_code()
    try:
        code = run_command_line()
    except KeyboardInterrupt:  # the instants before the command line's own boundary
        print(f"error: {interrupts.stopped()}", file=sys.stderr)
        code = EXIT_INTERRUPTED
    return _ending(EXIT_TERMINATED if interrupts.termination_arrived() and code == EXIT_INTERRUPTED else code)


def _ending(code: int) -> int:
    """``code``, once the command is done; a thread someone else's code started and left running (not a daemon)
    would keep the process from ending: then it ends now, its output flushed."""
    import threading

    if any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()
           if thread is not threading.main_thread()):
        from bench.executors import end_process

        end_process(code)
    return code
