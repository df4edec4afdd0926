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

import datetime as dt
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from bench import interrupts
from bench.arguments import OneLineParser
from bench.errors import DEBUG_ENV, EXIT_CLOSED_PIPE, Spelling, closed_pipe, describe_failure

LIST_OPTIONS = Spelling(python=False, renamed=(("method", "methods"), ("task", "tasks"), ("budget", "budgets"),
                                               ("seed", "seeds")))
"""How a script whose options take lists (``--methods``, ``--tasks``) names them in its one-line errors."""


def missing_extra(absent: list[str], purpose: str, extra: str = "crosscheck") -> str:
    """The line for a script whose ``purpose`` needs the optional ``extra``, of which ``absent`` (module names) are
    not installed."""
    return f"{purpose} needs the optional extra, which lacks {' and '.join(absent)} here: pip install -e \".[{extra}]\""


def parser(script: str, description: str, **options) -> OneLineParser:
    """The parser of the script at path ``script`` (its ``__file__``), named as one types it in its one-line errors;
    ``options``: more of ``argparse.ArgumentParser``'s (``formatter_class``, ``epilog``)."""
    return OneLineParser(prog=f"python benchmarks/{Path(script).name}", description=description, **options)


def out_option(parser: OneLineParser) -> None:
    """``--out FILE.json``: the script keeps what it measured (:func:`keep`), for the docs' generated tables."""
    parser.add_argument("--out", type=Path, help="JSON file that keeps the measurement (its tables, the command, "
                                                 "the machine, the versions and the date), for the docs' tables")


def keep(path: Path | None, script: str, started: float, tables: dict[str, list[dict]], **extra) -> None:
    """Writes ``tables`` (name -> rows, each a dict from column head to value) to ``path`` (nothing when None),
    atomically, with what makes the figures checkable: the command that measured them, the CPU, the versions, torch's
    threads, the load average at the end (the machine is shared: only ratios measured side by side mean anything),
    the date and the minutes taken (from ``started``, a ``time.monotonic()``), and ``extra`` fields.
    ``python -m bench.docblocks --write`` renders such a file's tables into docs/."""
    if path is None:
        return
    import torch

    from bench.io import atomic_write_bytes, json_bytes
    from bench.runner import environment

    machine = environment()
    result = {"command": shlex.join(["python", f"benchmarks/{Path(script).name}", *sys.argv[1:]]),
              "cpu": machine["cpu"], "cpu_count": os.cpu_count(), "torch": machine["torch"],
              "threads": torch.get_num_threads(), "load_average": [round(x, 2) for x in os.getloadavg()],
              "date": dt.date.today().isoformat(), "minutes": round((time.monotonic() - started) / 60, 1),
              **extra, "tables": {name: _columns_and_rows(rows) for name, rows in tables.items()}}
    atomic_write_bytes(path, json_bytes(result), "the measurement")
    print(f"wrote {path}")


def _columns_and_rows(rows: list[dict]) -> dict:
    """Rows of dicts as ``{"columns": [...], "rows": [[...], ...]}``: the columns keep their order in the JSON (whose
    keys are sorted), in order of first appearance; a row without a column holds None there."""
    columns = list(dict.fromkeys(column for row in rows for column in row))
    return {"columns": columns, "rows": [[row.get(column) for column in columns] for row in rows]}


def run(main: Callable[[], int | None]) -> NoReturn:
    """Runs a script's ``main`` inside the boundary and exits with its code (0 for None)."""
    debug = "--debug" in sys.argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    sys.argv = [arg for arg in sys.argv if arg != "--debug"]
    with interrupts.command():
        try:
            code = main() or 0
        except KeyboardInterrupt:
            code = _stopped()
        except Exception as error:
            if closed_pipe(error):  # standard output's reader stopped reading: quietly, as a Unix tool
                code = EXIT_CLOSED_PIPE
            elif interrupts.interrupt_arrived():  # a library that caught the interrupt failed later in its own way
                code = _stopped()
            elif debug:
                raise
            else:
                code, line = describe_failure(error, options=False)  # the command line's options are not its
                print(f"error: {line}", file=sys.stderr)
    raise SystemExit(code)


def _stopped() -> int:
    print(f"error: {interrupts.stopped()}", file=sys.stderr)
    return interrupts.stopped_code()
