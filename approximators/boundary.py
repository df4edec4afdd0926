"""The boundary around other people's code: every call into a method that is not bdl-bench's.

A plugin or a class of one's own is someone else's code. Whatever it raises (any exception, ``sys.exit``,
``GeneratorExit`` or a ``BaseException`` of its own; only Ctrl-C's ``KeyboardInterrupt`` is left to be the
interrupt it is), at import or in its settings, footprint, ``fit``, ``predictive`` or report, becomes one
:class:`~bench.errors.MethodFailed` naming the method and the part that failed (exit 4; exit 3 when what it ran
into is the machine's refusal: memory, a full disk), so that it is never reported as a bug in bdl-bench and never
ends other work silently: a sweep records the run as failed and goes on. A :class:`~bench.errors.BenchError` (a
refusal the method makes on purpose, such as a budget too small) passes unchanged. A working directory the call
changed is changed back, so that no path given relative to it moves.

Which code is bdl-bench's is decided by registration, never by what a class says of itself (``__module__`` is
any class's to set): the built-in methods are the classes :data:`approximators.METHODS` holds under their names;
a class loaded by ``package.module:ClassName``, an entry point or from Python is someone else's, a subclass of a
built-in one included.

What cannot be caught in a process (``os._exit``, a crash, a thread that never ends) is caught by running a
plugin's runs in a process of their own (:mod:`bench.executors`): :data:`on_call` tells that process's parent which
method and part runs, so that a death is reported as theirs.
"""

from __future__ import annotations

import os
from contextlib import contextmanager, suppress
from typing import Callable, Iterator, NoReturn

from approximators.registry import METHODS
from bench.errors import (EXIT_ENVIRONMENT, MACHINE_ERRNOS, BenchError, MethodFailed, OverBudget, out_of_memory,
                          text_of)

on_call: Callable[[str | None, str | None], None] | None = None
"""Hears ``(method name, part)`` as a call into someone else's code starts and ``(None, None)`` as it ends (a worker
process sets it, :mod:`bench.executors`)."""


def is_built_in(method: type) -> bool:
    """One of bdl-bench's own methods: the class registered under its name in :data:`approximators.METHODS`."""
    return METHODS.get(getattr(method, "name", None)) is method


def method_name(method: type) -> str:
    """The name a line gives ``method``: its ``name`` when it is a string, else its class's name."""
    name = getattr(method, "name", None)
    return name if isinstance(name, str) else getattr(method, "__qualname__", "a method")


def exit_call(error: SystemExit) -> str:
    """``sys.exit(code)`` as the method called it (its code, an object of its own, shown by :func:`text_of`)."""
    code = error.code
    return f"sys.exit({code!r})" if code is None or type(code) is int else f"sys.exit({text_of(code)!r})"


def failure_line(name: str, what: str, error: BaseException) -> str:
    """One line for ``error`` raised in ``what`` of the method ``name`` (the line is neutralised and cut where it is
    shown, :func:`bench.errors.describe_failure`)."""
    if isinstance(error, SystemExit):
        return f"method {name!r} exited in its {what} ({exit_call(error)}); it is the method's failure, not bdl-bench's"
    if out_of_memory(error):
        return (f"method {name!r} ran out of memory in its {what}; lower its settings or the budget, or use a "
                "machine with more memory")
    return f"method {name!r} failed in its {what}: {type(error).__name__}: {text_of(error)}"


def _exit_code(error: BaseException) -> int | None:
    """Exit 3 for the machine's refusal (no memory, a full disk), whoever's code met it; None: the method's (4)."""
    if out_of_memory(error) or (isinstance(error, OSError) and error.errno in MACHINE_ERRNOS):
        return EXIT_ENVIRONMENT
    return None


def method_fault(method: type, line: str) -> NoReturn:
    """A method that broke its contract (what it returned or declared, found by our checks): its own failure (exit
    4), or, for a built-in one, bdl-bench's bug."""
    if is_built_in(method):
        raise RuntimeError(line)
    raise MethodFailed(line)


def _working_directory() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # it was removed under us: nothing to restore
        return None


@contextmanager
def guarded(name: str, what: str, line: Callable[[BaseException], str]) -> Iterator[None]:
    """Runs someone else's code (``what`` of the method ``name``): anything it raises but Ctrl-C, a
    :class:`BenchError` or a :class:`MethodFailed` becomes :class:`MethodFailed` with ``line(error)``, chained to
    the original (whose traceback ``--debug`` shows); the working directory it changed is changed back."""
    cwd = _working_directory()
    if on_call is not None:
        on_call(name, what)
    try:
        yield
    except OverBudget as error:  # the meter refused a read past the budget: the method did not stop in time
        raise MethodFailed(line(error)) from error
    except (BenchError, MethodFailed, KeyboardInterrupt):
        raise
    except BaseException as error:  # SystemExit, GeneratorExit, its own BaseException: all the method's
        code = _exit_code(error)
        raise (MethodFailed(line(error)) if code is None else MethodFailed(line(error), code)) from error
    finally:
        if cwd is not None and _working_directory() != cwd:
            with suppress(OSError):  # removed meanwhile: nowhere to return to
                os.chdir(cwd)
        if on_call is not None:
            on_call(None, None)


@contextmanager
def users_code(method: type, what: str) -> Iterator[None]:
    """Runs a call into ``method``'s own ``what`` (``"settings"``, ``"fit"``, ...), :func:`guarded` for a method
    that is not built in; a built-in method's failure stays bdl-bench's."""
    if is_built_in(method):
        yield
        return
    name = method_name(method)
    with guarded(name, what, lambda error: failure_line(name, what, error)):
        yield
