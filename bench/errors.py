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
- 143 (:data:`EXIT_TERMINATED`): terminated by SIGTERM, which stops a command as Ctrl-C does (:mod:`bench.entry`).
- 141 (:data:`EXIT_CLOSED_PIPE`): standard output's reader stopped reading (``... | head``): the command ends
  quietly, nothing on standard error, with the status a shell reports for a Unix tool stopped by ``SIGPIPE``.
"""

import errno
import math
import os
import select
import sqlite3
import sys
from dataclasses import dataclass

EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3
EXIT_METHOD = 4
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE

DEBUG_ENV = "BDL_BENCH_DEBUG"
"""Set to 1 (or pass ``--debug``) to see the traceback of a failure instead of its one line."""


MESSAGE_CHARS = 2000
"""The most characters a :class:`BenchError`'s message keeps, where the Python API hands it to its caller whole (the
command line shows at most :data:`SHOWN_TEXT_CHARS`): a value echoed into it, a task name of a million characters,
is cut."""


class BenchError(Exception):
    """Base class for every error that is the user's to fix (bad input, missing data, budget). A message longer than
    :data:`MESSAGE_CHARS` is cut to that length, saying how much was cut (so a cut message is cut no further when
    the error is raised again, e.g. unpickled from a worker)."""

    def __init__(self, *args):
        if args and isinstance(args[0], str) and len(args[0]) > MESSAGE_CHARS:
            suffix = f"... ({len(args[0]):,} characters, cut)"
            args = (args[0][:MESSAGE_CHARS - len(suffix)] + suffix, *args[1:])
        super().__init__(*args)


class MachineRefused(BenchError):
    """What was asked is sound but the machine refused it (a read-only or full disk, no permission, a path too long):
    exit code 3, as the :class:`OSError` it stands for would be. Made by :func:`cannot_write`."""


class BudgetExhausted(BenchError):
    """A method asked for more training data than its epoch budget allows."""


class OverBudget(BudgetExhausted):
    """The meter refused a read of training data past the budget: a method that did not stop in time (someone
    else's method's own failure; a budget refused before training is a plain :class:`BudgetExhausted`)."""


class DoesNotFit(MachineRefused, BudgetExhausted):
    """The memory plan found that a run with these settings and budget cannot fit in the memory the machine leaves
    it: the machine's refusal (exit 3), as running out would be, found before anything is allocated; a sweep skips
    such a run as it skips a budget too small."""


class MetricInputError(BenchError, ValueError):
    """Predictions or references that cannot be scored (shape, finiteness, not probabilities)."""


class ReferenceMismatch(BenchError):
    """A reference file is missing, corrupted or does not match its task."""


class CheckFailed(BenchError):
    """A check the user asked for found something other than they said (a downloaded file whose sha256 is not the one
    they supplied): exit code 1, as a failed check is."""


class ConfigError(BenchError, ValueError):
    """An unknown method, task or hyper-parameter, or a value of the wrong type."""


class MeterMisuse(BenchError, AttributeError):
    """A method used the budget meter in a way that would miscount its budget (a zero or negative
    charge, no copies, a write to the meter)."""


class TrainingDiverged(BenchError):
    """A method's parameters became non-finite (a step size too large for the task)."""


class SamplerStuck(BenchError):
    """A sampler whose chains never left their start: every proposal rejected, or steps too small to change a single
    parameter; its predictive would be the untrained network's."""


class MethodFailed(Exception):
    """A method that is not bdl-bench's raised, or called ``sys.exit``, in its own code: its failure, reported as
    its own (exit 4), never as a bug in bdl-bench. Raised by :func:`approximators.boundary.users_code`.
    ``exit_code``: 4, or 3 when what it ran into is the machine's refusal (memory, a full disk)."""

    def __init__(self, line: str, exit_code: int = EXIT_METHOD):
        super().__init__(line)
        self.exit_code = exit_code


class FailedElsewhere(Exception):
    """A failure already described, as its exit code and one line, by the process it happened in (a worker that
    ran a method in isolation, :mod:`bench.executors`)."""

    def __init__(self, exit_code: int, line: str):
        super().__init__(line)
        self.exit_code = exit_code


class DamagedFile(BenchError):
    """A file bdl-bench wrote or fetched (a registry, manifest, run record, trust store) that can no longer be
    read as written: truncated, edited, replaced by something that is not a regular file."""


class DamagedInstallation(DamagedFile, MachineRefused):
    """A damaged file of the installation itself (the package's reference evidence, a file a checkout ships): not the
    user's input but what bdl-bench was installed with, so exit 3 as the machine's refusal is; the line names the file
    and how to restore it (reinstall, or restore the checkout)."""


@dataclass(frozen=True)
class Spelling:
    """How a message names what the user gave, in the words of the call that gave it: the command line's options
    (``--method x``, ``--set lr``) or the Python API's arguments (``method='x'``, ``settings['lr']``). An option and
    its argument share a name (``ray_address`` is ``--ray-address``), unless ``renamed`` gives the option another
    name (a benchmark script's ``--methods``)."""

    python: bool
    renamed: tuple[tuple[str, str], ...] = ()
    """``(argument, option)`` pairs: the command line's name of an argument whose option is not named after it."""

    def option(self, name: str) -> str:
        """``"ray_address"`` -> ``--ray-address`` or ``ray_address``."""
        return name if self.python else "--" + dict(self.renamed).get(name, name).replace("_", "-")

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


def number_text(value: float) -> str:
    """A number as a line says it: a whole one with thousands separators (``100,000``), any other in the fewest
    digits that give it back to 12 significant digits (``0.5``, ``1,234.5``; a sum's round-off, 0.30000000000000004,
    is not said), never rounded to a whole number (``--max-epochs 0.5`` was said as ``0``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.12g}"


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


REFUSED_WRITE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT,
                                  errno.ENAMETOOLONG})
"""Why writing a path fails when the machine refuses it (exit 3); otherwise the path itself is wrong (a file where a
folder should be: exit 2)."""


def cannot_write(what: str, error: OSError, advice: str = "") -> BenchError:
    """The error to raise where ``what`` (``cannot write to output folder runs``) failed with ``error``: one line with
    its reason and ``advice``, a :class:`MachineRefused` (exit 3) where the machine refused, else a
    :class:`BenchError` (exit 2)."""
    kind = MachineRefused if error.errno in REFUSED_WRITE_ERRNOS else BenchError
    return kind(f"{what}: {error.strerror or error}{'; ' + advice if advice else ''}")


MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.ENOMEM, errno.EMFILE, errno.ENFILE})
"""What an operating system error says when the machine refused (a full disk, no memory, no file handles left),
whoever's code asked: exit 3 even in a method's own code, where any other operating system error is its own."""

SHOWN_TEXT_CHARS = 500
"""The most characters of text from outside (an exception's message, a path, a method's summary) that one error
line or table cell shows."""


def text_of(value: object) -> str:
    """``str(value)``, whatever ``value``'s ``__str__`` does (raises, returns no string): a method's exception is
    someone else's object."""
    try:
        text = str(value)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # its __str__ raised: say so, and what it is
        return f"<a {type(value).__name__} whose str() raised {type(error).__name__}>"
    return text if type(text) is str else f"<a {type(value).__name__}>"


def terminal_text(value: object, limit: int = SHOWN_TEXT_CHARS) -> str:
    """Text from outside as a terminal may show it: every character that is not printable (a line break, a tab,
    a terminal escape, a bidirectional override, a lone surrogate) as its Python escape (``\\x1b``,
    ``\\u202e``), and at most ``limit`` characters, a longer text cut with ``...`` and its length. The one
    rule for every error line and table cell that carries such text; applied twice, it changes nothing more."""
    text = text_of(value)
    shown, length = [], 0
    for position, ch in enumerate(text):
        piece = ch if ch.isprintable() else repr(ch)[1:-1]
        if length + len(piece) > limit:
            tail = f"... ({len(text):,} characters in all)"
            while shown and length + len(tail) > limit:
                length -= len(shown.pop())
            return "".join(shown) + tail
        shown.append(piece)
        length += len(piece)
    return "".join(shown)


EMBEDDED_TEXT_CHARS = 300
"""The most of an outside text (a message, a path) one of our lines embeds before its own advice, which the line's
:data:`SHOWN_TEXT_CHARS` must not cut."""


def _flat(text: object, limit: int = EMBEDDED_TEXT_CHARS) -> str:
    """``text`` on one line (every run of white space one space), at most ``limit`` characters shown."""
    return terminal_text(" ".join(text_of(text).split()), limit)


TORCH_OUT_OF_MEMORY = ("can't allocate memory", "out of memory", "std::bad_alloc")
"""What PyTorch's allocators say when refused memory, in the ``RuntimeError`` they raise (the CPU's
``DefaultCPUAllocator: can't allocate memory``; CUDA's ``torch.OutOfMemoryError``, a ``RuntimeError`` too; C++'s
``std::bad_alloc``, which PyTorch turns into a ``RuntimeError``)."""

LIBRARY_OUT_OF_MEMORY = ("failed to map segment", "cannot allocate memory")
"""What the dynamic loader says, in the ``ImportError`` of an extension module, when the address space left (``ulimit
-v``) cannot hold the shared library."""

CHAIN_DEPTH = 16
"""How many causes and contexts of an exception are looked through for the memory refusal behind it."""


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is the machine refusing memory, wherever it was met: a ``MemoryError``, an ``OSError`` of
    ``ENOMEM`` or PyTorch's allocation failure, as the error or among its causes and contexts, or a
    ``SystemError`` once this process's address space has come within reach of its limit
    (:func:`bench.memory.address_space_exhausted`: C code refused a small allocation may lose the ``MemoryError``
    and raise ``SystemError: error return without exception set``), or an ``ImportError`` whose shared library could
    not be mapped for want of address space."""
    seen: BaseException | None = error
    for _ in range(CHAIN_DEPTH):
        if seen is None:
            break
        if isinstance(seen, MemoryError) or (isinstance(seen, OSError) and seen.errno == errno.ENOMEM):
            return True
        if isinstance(seen, RuntimeError) and any(words in str(seen) for words in TORCH_OUT_OF_MEMORY):
            return True
        if isinstance(seen, ImportError) and any(words in str(seen) for words in LIBRARY_OUT_OF_MEMORY):
            return True
        if isinstance(seen, SystemError):
            from bench.memory import address_space_exhausted  # imported only here: memory may be short

            if address_space_exhausted():
                return True
        seen = seen.__cause__ or seen.__context__
    return False


def closed_pipe(error: BaseException) -> bool:
    """Whether ``error`` is standard output's reader gone (``python -m bench methods | head -2``): then a command ends
    as a Unix tool does, quietly (:data:`EXIT_CLOSED_PIPE`), its unwritten output dropped. A broken pipe of another
    file (a worker's) is a failure like any other."""
    if not (isinstance(error, OSError) and error.errno == errno.EPIPE):
        return False
    try:
        out = sys.stdout.fileno()
        poller = select.poll()
        poller.register(out, select.POLLOUT)
        gone = any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, ValueError, OSError):  # no file descriptor under it (a test's capture): not ours to say
        return False
    if gone:  # what is still buffered, and whatever else writes there, goes nowhere, without a complaint at exit
        nowhere = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nowhere, out)
        os.close(nowhere)
    return gone


COMMAND_LINE_FOLDERS = " (--out, --db, --cache)"
"""The options of ``python -m bench`` that choose where it writes, which an operating system error's advice names;
a benchmark script's line leaves them out (:func:`describe_failure`), as it takes none or another set."""


def describe_failure(error: BaseException, options: bool = True) -> tuple[int, str]:
    """``(exit code, one line)`` for any failure, the line naming the file or setting and what to do; any text it
    carries from outside is shown as :func:`terminal_text` shows it. ``options`` False: the line names no option of
    ``python -m bench`` (a benchmark script's, or ``bench.docblocks``', boundary)."""
    code, line = _described(error)
    if not options:
        line = line.replace(COMMAND_LINE_FOLDERS, "")
    return code, _flat(line, SHOWN_TEXT_CHARS)


def _described(error: BaseException) -> tuple[int, str]:
    if isinstance(error, (MethodFailed, FailedElsewhere)):
        return error.exit_code, text_of(error)
    if isinstance(error, MachineRefused):
        return EXIT_ENVIRONMENT, text_of(error)
    if isinstance(error, CheckFailed):
        return EXIT_CHECK_FAILED, text_of(error)
    if isinstance(error, BenchError):
        return EXIT_BAD_INPUT, text_of(error)
    if out_of_memory(error):
        return EXIT_ENVIRONMENT, ("out of memory; lower the batch size, the members or chains, or the budget, "
                                  "or use a machine with more memory")
    if isinstance(error, OSError) and error.errno is not None:
        where = f"{_flat(error.filename)}: " if error.filename is not None else ""
        advice = _OS_ADVICE.get(error.errno, _flat(error.strerror or error))
        return EXIT_ENVIRONMENT, f"{where}{advice}"
    if isinstance(error, sqlite3.OperationalError) and "readonly" in str(error):
        return EXIT_ENVIRONMENT, ("the leaderboard database is read-only (it became so while open); make it writable "
                                  "or choose another file with --db (nothing was committed)")
    if isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
        return EXIT_ENVIRONMENT, ("the leaderboard database is locked by another process for longer than the "
                                  "wait allows; run again when it has finished")
    if isinstance(error, sqlite3.OperationalError) and ("disk" in str(error) or "full" in str(error)):
        return EXIT_ENVIRONMENT, (f"the leaderboard database could not be written ({_flat(error)}); free some "
                                  "space and run again (nothing was committed)")
    if isinstance(error, sqlite3.DatabaseError):
        return EXIT_BAD_INPUT, (f"the leaderboard database is damaged or not a bdl-bench database "
                                f"({_flat(error)}); restore it from a copy or choose another with --db")
    return EXIT_INTERNAL, (f"internal error, a bug in bdl-bench: {type(error).__name__}: {_flat(error)}; "
                           "please report it to the maintainers with the traceback that --debug shows")
