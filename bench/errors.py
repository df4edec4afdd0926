"""Errors a user can cause, and how the command line reports every failure: one line, one exit code.

Exit codes (documented in the README):

- 0: done; 1: a check or verification ran and failed (the gate's regression, a run that does not reproduce).
- 2 (:data:`EXIT_BAD_INPUT`): bad input or a damaged file: a :class:`BenchError`, an unknown option, a
  damaged leaderboard database.
- 3 (:data:`EXIT_ENVIRONMENT`): the machine refused: a full disk, a read-only or unwritable folder, a path
  too long, a database locked by another process, memory exhausted.
- 4 (:data:`EXIT_METHOD`): a method that is not bdl-bench's (a plugin, a class of one's own) failed in its own
  code, at import or in its settings, footprint, fit, predictive or report: :class:`MethodFailed`, the line naming
  the method and what it raised (``--debug`` shows its traceback).
- 70 (:data:`EXIT_INTERNAL`): a bug in bdl-bench; the line asks for a report with ``--debug``'s traceback.
- 130 (:data:`EXIT_INTERRUPTED`): interrupted (Ctrl-C); finished runs are complete, the interrupted one unwritten.
"""

import errno
import math
import sqlite3
from dataclasses import dataclass

EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_METHOD = 4
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

DEBUG_ENV = "BDL_BENCH_DEBUG"
"""Set to 1 (or pass ``--debug``) to see the traceback of a failure instead of its one line."""


class BenchError(Exception):
    """Base class for every error that is the user's to fix (bad input, missing data, budget)."""


class BudgetExhausted(BenchError):
    """A method asked for more training data than its epoch budget allows."""


class MetricInputError(BenchError, ValueError):
    """Predictions or references that cannot be scored (shape, finiteness, not probabilities)."""


class ReferenceMismatch(BenchError):
    """A reference file is missing, corrupted or does not match its task."""


class ConfigError(BenchError, ValueError):
    """An unknown method, task or hyper-parameter, or a value of the wrong type."""


class MeterMisuse(BenchError, AttributeError):
    """A method used the budget meter in a way that would miscount its budget (a zero or negative
    charge, no copies, a write to the meter)."""


class TrainingDiverged(BenchError):
    """A method's parameters became non-finite (a step size too large for the task)."""


class MethodFailed(Exception):
    """A method that is not bdl-bench's raised, or called ``sys.exit``, in its own code: its failure, reported as
    its own (exit 4), never as a bug in bdl-bench. Raised by :func:`approximators.boundary.users_code`."""


class DamagedFile(BenchError):
    """A file bdl-bench wrote or fetched (a registry, manifest, run record, trust store) that can no longer be
    read as written: truncated, edited, replaced by something that is not a regular file."""


@dataclass(frozen=True)
class Spelling:
    """How a message names what the user gave, in the words of the call that gave it: the command line's options
    (``--method x``, ``--set lr``) or the Python API's arguments (``method='x'``, ``settings['lr']``). An option and
    its argument share a name (``ray_address`` is ``--ray-address``)."""

    python: bool

    def option(self, name: str) -> str:
        """``"ray_address"`` -> ``--ray-address`` or ``ray_address``."""
        return name if self.python else "--" + name.replace("_", "-")

    def given(self, name: str, value: object) -> str:
        """The option with its value: ``--method x`` or ``method='x'``."""
        return f"{name}={value!r}" if self.python else f"{self.option(name)} {value}"

    def setting(self, key: str) -> str:
        """One of a method's settings: ``--set lr`` or ``settings['lr']``."""
        return f"settings[{key!r}]" if self.python else f"--set {key}"


COMMAND_LINE = Spelling(python=False)
PYTHON = Spelling(python=True)

SHOWN_CHARS = 40
"""The most of a wrong value an error line shows."""


def shown(value: object) -> str:
    """A wrong value as an error line shows it: its repr, cut at :data:`SHOWN_CHARS` characters (a whole number too
    long for Python to print, by its length)."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond sys.get_int_max_str_digits()
        return f"a whole number of about {int(value.bit_length() * math.log10(2))} digits"
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


_OS_ADVICE = {
    errno.ENOSPC: "no space left on the device; free some space and run again (finished runs are kept)",
    errno.EDQUOT: "disk quota exceeded; free some space and run again (finished runs are kept)",
    errno.EACCES: "permission denied; choose a folder you can write (--out, --db, --cache)",
    errno.EPERM: "operation not permitted; choose a folder you can write (--out, --db, --cache)",
    errno.EROFS: "read-only file system; choose a writable folder (--out, --db, --cache)",
    errno.ENAMETOOLONG: "the path is too long; choose a shorter one",
    errno.EISDIR: "a folder is where a file should be; choose another path",
    errno.ENOTDIR: "a file is where a folder should be; choose another path",
    errno.EEXIST: "something is already there; choose another path",
    errno.ENOENT: "no such file or folder",
    errno.ELOOP: "too many levels of symbolic links",
}


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def describe_failure(error: BaseException) -> tuple[int, str]:
    """``(exit code, one line)`` for any failure, the line naming the file or setting and what to do."""
    if isinstance(error, MethodFailed):
        return EXIT_METHOD, _one_line(error)
    if isinstance(error, BenchError):
        return EXIT_BAD_INPUT, _one_line(error)
    if isinstance(error, MemoryError):
        return EXIT_ENVIRONMENT, ("out of memory; lower the batch size, the members or chains, or the budget, "
                                  "or use a machine with more memory")
    if isinstance(error, OSError) and error.errno is not None:
        where = f"{error.filename}: " if error.filename is not None else ""
        advice = _OS_ADVICE.get(error.errno, _one_line(error.strerror or error))
        return EXIT_ENVIRONMENT, f"{where}{advice}"
    if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
        return EXIT_ENVIRONMENT, ("the leaderboard database is locked by another process for longer than the "
                                  "wait allows; run again when it has finished")
    if isinstance(error, sqlite3.OperationalError) and ("disk" in str(error) or "full" in str(error)):
        return EXIT_ENVIRONMENT, (f"the leaderboard database could not be written ({_one_line(error)}); free some "
                                  "space and run again (nothing was committed)")
    if isinstance(error, sqlite3.DatabaseError):
        return EXIT_BAD_INPUT, (f"the leaderboard database is damaged or not a bdl-bench database "
                                f"({_one_line(error)}); restore it from a copy or choose another with --db")
    return EXIT_INTERNAL, (f"internal error, a bug in bdl-bench: {type(error).__name__}: {_one_line(error)}; "
                           "please report it to the maintainers with the traceback that --debug shows")
