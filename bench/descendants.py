"""The processes a method's process starts, found and ended with its run (Linux; elsewhere nothing is found).

A method run in a process of its own (:class:`bench.executors.Isolated`) may start processes of its own: a
child holding the command's standard output keeps ``python -m bench ... | tee log`` open after bdl-bench has
finished, and a child in a session of its own outlives the run. The method's process is the *child subreaper* of
what it starts (``prctl(PR_SET_CHILD_SUBREAPER)``): a descendant whose parent ended becomes its child, not init's,
so while it lives its whole tree is found by parent links (:func:`descendants`), a new session or process group
included, and killed after each run (:func:`end_own_tree`). Should the method's process itself die (``os._exit``,
a crash), the command's process, a child subreaper while it has such processes (:func:`adopt_orphans`), adopts
what it left; :func:`end_tree_of` then kills only what that tree owns, found by two nets:

- its process group: the method's process leads one of its own, which it and what it starts belong to unless they
  move (Linux lets no process outside its session join it);
- its mark: the method's process marks its environment with a token (:data:`TREE_VARIABLE`) that what it starts
  inherits, found in ``/proc/PID/environ``. A mark alone proves nothing (any process of the same user can read it
  and copy it), so it counts only in a child the command's process adopted (its parent is the command's process,
  which starts no process of its own with that mark) that started after the method's process (``/proc/PID/stat``'s
  start time).

What is below a process either net caught is the tree's too. Only a descendant that both left the group and cleared
its environment, after the method's process died, escapes.

What a user's module starts as it is imported (:func:`importing`: a server its methods talk to, a pool) is the
module's, not one run's: it lives as long as the process that imported it and is ended, and named in one line, at
the end of that process's part (:func:`end_started_by_imports`): at the end of the command in the command's
process, when the worker ends in a method's process (after all of its runs), at the interpreter's exit elsewhere
(``bench.api``).

This module imports neither torch nor numpy (a worker process imports it before setting its thread variables).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Iterator

from bench.errors import terminal_text

TREE_VARIABLE = "BDL_BENCH_METHOD_TREE"
"""The environment variable whose value marks every process a method's process starts."""

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
"""Linux's ``prctl`` options (``<linux/prctl.h>``)."""

REAP_SECONDS = 2.0
"""How long a process waits for what it killed to end, so that nothing is left as a zombie."""

BELOW = "below its process"
GROUP = "in its process group"
MARK = "adopted with its mark"
BELOW_CAUGHT = "below one of those"
IMPORTED = "started by the import"
"""Why a process was killed (which net caught it), as its note says."""


@dataclass(frozen=True)
class Process:
    """A line of ``/proc/PID/stat``: what finding a tree needs."""

    state: str
    """R, S, ..., Z for a zombie (ended, not yet reaped by its parent)."""
    parent: int
    group: int
    started: int
    """Its start time, in clock ticks since boot (field 22): with the pid, it names one process, never a later one
    that took its pid."""
    name: str


@dataclass(frozen=True)
class Killed:
    """A process killed, and why."""

    pid: int
    name: str
    net: str


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def adopt_orphans(adopt: bool = True) -> None:
    """Makes this process the child subreaper of what it starts, or (``adopt`` false) no longer (Linux; elsewhere
    nothing changes)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or no C library to call
        _libc().prctl(PR_SET_CHILD_SUBREAPER, int(adopt), 0, 0, 0)


def adopts_orphans() -> bool:
    """Whether this process is a child subreaper."""
    flag = ctypes.c_int(0)
    with contextlib.suppress(OSError, AttributeError):
        _libc().prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    return bool(flag.value)


def lead_group() -> None:
    """Makes this process the leader of a process group of its own (what it starts joins the group)."""
    with contextlib.suppress(OSError):  # already a group or session leader
        os.setpgid(0, 0)


def _stat(pid: int) -> Process | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:  # ended while we looked
        return None
    # The command name (field 2) may hold spaces and parentheses: fields after its last ")" are plain.
    head, _, tail = text.rpartition(b")")
    fields = tail.split()
    if len(fields) < 20:
        return None
    return Process(fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19]),
                   head.partition(b"(")[2].decode(errors="replace"))


def _processes() -> dict[int, Process]:
    """Every visible process, from ``/proc`` (empty where there is none)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    table = {int(entry): _stat(int(entry)) for entry in entries if entry.isdigit()}
    return {pid: process for pid, process in table.items() if process is not None}


def started(pid: int) -> int | None:
    """``pid``'s start time (clock ticks since boot), None when it is not running."""
    process = _stat(pid)
    return None if process is None else process.started


def descendants(root: int, table: dict[int, Process] | None = None) -> list[int]:
    """The processes below ``root`` (children, their children, ...), by parent links."""
    children: dict[int, list[int]] = {}
    for pid, process in (_processes() if table is None else table).items():
        children.setdefault(process.parent, []).append(pid)
    found, frontier = [], [root]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.extend(below)
        frontier.extend(below)
    return found


def _marked(pid: int, token: str) -> bool:
    """Whether ``pid``'s environment holds ``TREE_VARIABLE=token``."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return f"{TREE_VARIABLE}={token}".encode() in environ.read().split(b"\0")
    except OSError:  # ended, or another user's
        return False


def kill(found: dict[int, str], table: dict[int, Process]) -> list[Killed]:
    """Sends SIGKILL to each process of ``found`` (pid: the net that caught it); those that were there to receive
    it."""
    killed = []
    for pid, net in sorted(found.items()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(Killed(pid, table[pid].name if pid in table else "?", net))
    return killed


def _reap(killed: list[Killed]) -> None:
    """Waits (at most :data:`REAP_SECONDS`) for ``killed`` to end, reaping those that are, or become (their parent
    killed too), this process's children, so that none is left as a zombie of ours."""
    waiting = {entry.pid for entry in killed}
    pids = set(waiting)
    deadline = time.monotonic() + REAP_SECONDS
    while waiting and time.monotonic() < deadline:
        for pid in list(waiting):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    waiting.discard(pid)
            except ChildProcessError:  # not ours (yet): done once it is gone or a zombie another process reaps
                process = _stat(pid)
                if process is None or (process.state == "Z" and process.parent not in pids):
                    waiting.discard(pid)
        if waiting:
            time.sleep(0.01)


def _with_trees(caught: dict[int, str], table: dict[int, Process]) -> dict[int, str]:
    """``caught`` and every process below one of them."""
    below = {pid: BELOW_CAUGHT for root in caught for pid in descendants(root, table)}
    return {**below, **caught}


def end_own_tree(spared: set[int] = frozenset()) -> list[Killed]:
    """Kills every process below this one (a subreaper: :func:`adopt_orphans`) but ``spared`` and what is below them,
    and reaps them; those killed."""
    table = _processes()
    spared = set(spared) | {pid for root in spared for pid in descendants(root, table)}
    killed = kill({pid: BELOW for pid in descendants(os.getpid(), table) if pid not in spared}, table)
    _reap(killed)
    return killed


def end_tree_of(leader: int, leader_started: int | None, token: str) -> list[Killed]:
    """Kills what a method's process ``leader`` (started at ``leader_started``; it led its own group, its environment
    marked with ``token``) left behind once it has ended: the members of its group, the children this process
    adopted that carry its mark and started after it, and what is below them (the module's docstring); those
    killed. "After" is a later clock tick (10 ms): one of the same tick may have started before it, and its own
    start up (Python's) takes longer than a tick."""
    table = _processes()
    caught = {pid: GROUP for pid, process in table.items() if process.group == leader and pid != leader}
    if leader_started is not None:
        caught.update({pid: MARK for pid, process in table.items()
                       if process.parent == os.getpid() and process.started > leader_started and pid not in caught
                       and _marked(pid, token)})
    killed = kill(_with_trees(caught, table), table)
    _reap(killed)
    return killed


def named(killed: list[Killed]) -> str:
    """``killed`` in words: each one's pid, command name and the net that caught it."""
    return "; ".join(f"pid {entry.pid} {terminal_text(repr(entry.name))} {entry.net}" for entry in killed)


def left_behind_line(killed: list[Killed], where: str) -> str:
    """What is said of the processes a method left running ``where`` (e.g. "after its run"), killed."""
    return (f"{len(killed)} process(es) it started were still running {where} and were killed "
            f"({named(killed)})")


_started_by_imports: dict[int, tuple[int, str]] = {}
"""What the imports of users' modules started in this process: ``{pid: (start time, module)}``."""


@contextlib.contextmanager
def importing(module: str) -> Iterator[None]:
    """Notes what the import of a user's ``module`` done inside starts, a process that detaches itself during the
    import included (this process adopts orphans meanwhile), so that :func:`end_started_by_imports` ends it."""
    before = set(descendants(os.getpid()))
    adopting = adopts_orphans()
    adopt_orphans()
    try:
        yield
    finally:
        if not adopting:
            adopt_orphans(False)
        table = _processes()
        new = {pid: (table[pid].started, module) for pid in descendants(os.getpid(), table) if pid not in before}
        if new and not _started_by_imports:
            atexit.register(end_started_by_imports, "at the interpreter's exit")
        _started_by_imports.update(new)


def started_by_imports() -> set[int]:
    """The processes the imports of users' modules started in this process, still running."""
    return {pid for pid, (start, _) in _started_by_imports.items() if started(pid) == start}


def end_started_by_imports(where: str) -> list[Killed]:
    """Kills what the imports of users' modules started in this process (:func:`importing`) and what is below it,
    with a note naming each module and process (``where``: e.g. "at the end of the command"); those killed."""
    running = started_by_imports()
    modules = sorted({module for pid, (_, module) in _started_by_imports.items() if pid in running})
    _started_by_imports.clear()
    table = _processes()
    killed = kill(_with_trees({pid: IMPORTED for pid in running}, table), table)
    _reap(killed)
    if killed:
        print(f"note: importing {terminal_text(', '.join(modules))} started {len(killed)} process(es) that were "
              f"still running {where} and were killed ({named(killed)})", file=sys.stderr, flush=True)
    return killed
