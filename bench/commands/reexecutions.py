"""What ``verify`` and ``submit --verify`` say of each re-execution, which takes as long as the run it re-executes:
on a terminal, a bar of its epochs and then its predictive and scoring (under the bar of the runs verified), and a
line above the bars when it ends; whatever standard error is, the same line in a log file, :data:`LOG_NAME` in the
leaderboard database's folder unless ``--log`` names another, so that a re-execution piped to a file or run in CI
(whose standard error holds error lines only) can be followed with ``tail -f``."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from pathlib import Path
from typing import Iterator

from bench.commands.common import LINE_CHARS
from bench.errors import BenchError, cannot_write, terminal_text
from bench.progress import Progress

LOG_NAME = "verify.log"
"""The log's name in the leaderboard database's folder (``--db``, else ``$BDL_BENCH_DB``, else the user's data
folder)."""


def log_path(option: Path | None, db: Path | None = None) -> Path:
    """The log ``--log`` names, else :data:`LOG_NAME` beside the database (``db``, else the default one)."""
    if option is not None:
        return option
    from leaderboard.store import default_db_path

    return (db or default_db_path()).parent / LOG_NAME


class Reexecutions:
    """The log of one command's re-executions, appended to (a line when it starts, one per re-execution, one per
    verdict), and the ``on_reexecution`` of :func:`bench.verify.verify_many`: each re-execution drawn as a bar of
    ``progress`` and written, when it ends, to the log and above the bars."""

    def __init__(self, path: Path, command: str, progress: Progress):
        self.path, self.command, self.progress = path, command, progress
        if path.exists() and not path.is_file():  # a folder, or a FIFO that would wait for a reader
            raise BenchError(f"{terminal_text(path)}: the re-executions' log is not a regular file; name another with "
                             "--log")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")
        except OSError as error:
            raise cannot_write(f"cannot write the re-executions' log {terminal_text(path)}", error,
                               "name another file with --log") from None

    def write(self, line: str) -> None:
        """``line`` in the log, after the time and the command (pid), written through at once."""
        stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self._file.write(f"{stamp} [{self.command}, pid {os.getpid()}] {terminal_text(line, LINE_CHARS)}\n")
        self._file.flush()

    @contextlib.contextmanager
    def __call__(self, reexecution) -> Iterator[None]:
        """Around one :class:`bench.verify.Reexecution`."""
        started, failure = time.monotonic(), None
        try:
            with self.progress.epochs(reexecution.title, reexecution.budget):
                yield
        except KeyboardInterrupt:
            failure = "interrupted"
            raise
        except BaseException:
            failure = "ended with an error"
            raise
        finally:
            line = reexecution.line(time.monotonic() - started, failure)
            self.write(line)
            self.progress.note(terminal_text(line, LINE_CHARS))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "Reexecutions":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
