"""The benchmark scripts' command line (``benchmarks/*.py``): the CLI's grammar (:mod:`bench.arguments`) and the
CLI's error boundary, so that a script's bad argument, failure or interrupt is one line on stderr and an exit code
(:mod:`bench.errors`: 2 bad input, 3 the machine refused, 70 a bug, 130 interrupted, 143 terminated by SIGTERM),
never a traceback. ``--debug`` anywhere on a script's command line (or ``BDL_BENCH_DEBUG=1``) lets the failure raise.

A script builds its parser with :func:`parser` and ends with ``run(main)``::

    def main() -> None:
        args = scripts.parser(__file__, "What it measures.").parse_args()
        ...

    if __name__ == "__main__":
        scripts.run(main)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from bench import entry
from bench.arguments import OneLineParser
from bench.errors import DEBUG_ENV, describe_failure


def parser(script: str, description: str, **options) -> OneLineParser:
    """The parser of the script at path ``script`` (its ``__file__``), named as one types it in its one-line errors;
    ``options``: more of ``argparse.ArgumentParser``'s (``formatter_class``, ``epilog``)."""
    return OneLineParser(prog=f"python benchmarks/{Path(script).name}", description=description, **options)


def run(main: Callable[[], int | None]) -> NoReturn:
    """Runs a script's ``main`` inside the boundary and exits with its code (0 for None)."""
    debug = "--debug" in sys.argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    sys.argv = [arg for arg in sys.argv if arg != "--debug"]
    with entry.command():
        try:
            code = main() or 0
        except KeyboardInterrupt:
            code = _stopped()
        except Exception as error:
            if entry.interrupt_arrived():  # a library that caught the interrupt failed later in its own way
                code = _stopped()
            elif debug:
                raise
            else:
                code, line = describe_failure(error)
                print(f"error: {line}", file=sys.stderr)
    raise SystemExit(code)


def _stopped() -> int:
    print(f"error: {entry.stopped()}", file=sys.stderr)
    return entry.stopped_code()
