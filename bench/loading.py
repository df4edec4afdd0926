"""Loading PyTorch where the process's memory is limited: a refusal said in one line (exit 3), never an abort.

Importing PyTorch maps some 600 MB of address space. Under a limit below that (``ulimit -v``, ``ulimit -d``) the import
either raises (``ImportError: ... failed to map segment``, ``MemoryError``) or, inside PyTorch's C++ start-up, throws
``std::bad_alloc`` and aborts the process, which no Python code can catch. So, only where such a limit is set, a child
process (which inherits the limits) tries the import first; where it fails for lack of memory, the command ends with
:class:`~bench.errors.MachineRefused` before this process imports anything. Without a limit nothing is probed: the
import costs what it always did.
"""

from __future__ import annotations

import errno
import resource
import signal
import subprocess
import sys

from bench.errors import MachineRefused

PROBE_SECONDS = 300.0
"""How long the probe may take to import PyTorch; one that takes longer is left to the import itself."""

SHORT_OF_MEMORY = ("bad_alloc", "MemoryError", "failed to map segment", "cannot allocate memory", "out of memory",
                   "memory allocation")
"""What a failed import of PyTorch (or of NumPy's OpenBLAS, which ends the process itself: ``Memory allocation still
failed``) says when memory was refused (case ignored)."""

DEATHS = frozenset({signal.SIGABRT, signal.SIGKILL, signal.SIGSEGV, signal.SIGBUS})
"""The signals a process short of memory dies of (``std::bad_alloc``'s abort, the kernel's out-of-memory killer)."""

LIMITS = ((resource.RLIMIT_AS, "ulimit -v"), (resource.RLIMIT_DATA, "ulimit -d"))
"""The limits that bound what an import may map, with the shell's command that sets each."""


def load_torch() -> None:
    """Imports PyTorch into this process, or raises :class:`MachineRefused` (exit 3, one line) where the memory this
    process may use is too little for it."""
    if "torch" in sys.modules:
        return
    limits = memory_limits()
    if limits:
        _probe(limits)
    try:
        import torch  # noqa: F401
    except (ImportError, OSError) as error:
        if short_of_memory(str(error)):
            raise refusal(limits or memory_limits()) from error
        raise


def memory_limits() -> list[tuple[int, str]]:
    """The finite limits on this process's memory, as ``(bytes, the shell command that sets it)``."""
    found = []
    for kind, command in LIMITS:
        soft, _ = resource.getrlimit(kind)
        if soft != resource.RLIM_INFINITY:
            found.append((soft, command))
    return found


def short_of_memory(text: str) -> bool:
    return any(words.lower() in text.lower() for words in SHORT_OF_MEMORY)


def refusal(limits: list[tuple[int, str]]) -> MachineRefused:
    said = " and ".join(f"{size / 2**20:,.0f} MiB ({command})" for size, command in limits)
    return MachineRefused("too little memory to load PyTorch, which this command needs"
                          + (f": this process may use at most {said}" if said else "")
                          + "; raise the limit or use a machine with more memory (PyTorch maps some 600 MB when "
                            "loaded)")


def _probe(limits: list[tuple[int, str]]) -> None:
    """Tries the import in a child process, under the same limits; raises :func:`refusal` when it fails for lack of
    memory (a MemoryError, a segment it could not map, or a death by signal such as the abort of ``std::bad_alloc``).
    Any other failure is left to the import in this process, which names it."""
    try:
        probe = subprocess.run([sys.executable, "-c", "import numpy, torch"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=PROBE_SECONDS)
    except subprocess.TimeoutExpired:
        return
    except MemoryError as error:
        raise refusal(limits) from error
    except OSError as error:  # not even a child could be started
        if short_of_memory(str(error)) or error.errno == errno.ENOMEM:
            raise refusal(limits) from error
        return
    if -probe.returncode in DEATHS or short_of_memory(probe.stderr.decode(errors="replace")):
        raise refusal(limits)
