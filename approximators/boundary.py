"""The boundary around other people's code: every call into a method that is not bdl-bench's.

A plugin or a class of one's own is someone else's code. What it raises, or a ``sys.exit`` it calls, at import or
in its settings, footprint, ``fit``, ``predictive`` or report, becomes one :class:`~bench.errors.MethodFailed`
naming the method and the part that failed (exit 4), so that it is never reported as a bug in bdl-bench and never
ends other work silently: a sweep records the run as failed and goes on. Passed through unchanged: a
:class:`~bench.errors.BenchError` (a refusal the method makes on purpose, such as a budget too small), Ctrl-C, and
the machine's refusals (out of memory, a full disk).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from bench.errors import BenchError, MethodFailed

BUILT_IN_PACKAGE = "approximators"


def is_built_in(method: type) -> bool:
    """A class of bdl-bench's own methods (defined in this package), whose failures are bdl-bench's."""
    return method.__module__.split(".")[0] == BUILT_IN_PACKAGE


def failure_line(name: str, what: str, error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return (f"method {name!r} exited in its {what} (sys.exit({error.code!r})); it is the method's failure, "
                f"not bdl-bench's")
    return f"method {name!r} failed in its {what}: {type(error).__name__}: {error}"


@contextmanager
def users_code(method: type, what: str) -> Iterator[None]:
    """Runs a call into ``method``'s own ``what`` (``"settings"``, ``"fit"``, ...): for a method that is not
    built in, any exception or ``SystemExit`` becomes :class:`MethodFailed` with one line, chained to the original
    (whose traceback ``--debug`` shows)."""
    if is_built_in(method):
        yield
        return
    try:
        yield
    except (BenchError, KeyboardInterrupt, MemoryError, OSError):
        raise
    except (Exception, SystemExit) as error:
        raise MethodFailed(failure_line(getattr(method, "name", method.__qualname__), what, error)) from error
