"""The command line's entry point, light enough to start inside the error boundary.

``bench.cli`` imports PyTorch and NumPy, which takes seconds; a Ctrl-C during those imports would otherwise end
in a ``KeyboardInterrupt`` traceback. Here nothing but ``sys`` is imported before the guard."""

import sys

EXIT_INTERRUPTED = 130  # bench.errors.EXIT_INTERRUPTED, repeated so that nothing heavy is imported first


def main() -> int:
    try:
        from bench.cli import main as run_command_line
    except KeyboardInterrupt:
        print("error: interrupted while starting; nothing was done", file=sys.stderr)
        return EXIT_INTERRUPTED
    return run_command_line()
