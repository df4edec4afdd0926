"""The processes a method's process starts, found and ended with its run (Linux; elsewhere nothing is found).

A method run in a process of its own (:class:`bench.executors.Isolated`) may start processes of its own: a
child holding the command's standard output keeps ``python -m bench ... | tee log`` open after bdl-bench has
finished, and a child in a session of its own outlives the run. Three nets catch them:

- the method's process is the *child subreaper* of what it starts (``prctl(PR_SET_CHILD_SUBREAPER)``): a
  descendant whose parent ended becomes its child, not init's, so while it lives its whole tree is found by
  parent links (:func:`descendants`), a new session or process group included;
- it leads a process group of its own, which it and what it starts belong to unless they move;
- it marks its environment with a token (:data:`TREE_VARIABLE`) that what it starts inherits, found in
  ``/proc/PID/environ`` (:func:`marked`) after the method's process itself has died.

Only a descendant that both left the group and cleared its environment, after the method's process died, escapes
all three.

This module imports neither torch nor numpy (a worker process imports it before setting its thread variables).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time

TREE_VARIABLE = "BDL_BENCH_METHOD_TREE"
"""The environment variable whose value marks every process a method's process starts."""

PR_SET_CHILD_SUBREAPER = 36
"""Linux's ``prctl`` option (``<linux/prctl.h>``)."""

REAP_SECONDS = 2.0
"""How long a method's process waits for what it killed to end, so that nothing is left as a zombie."""


def adopt_orphans() -> None:
    """Makes this process the child subreaper of what it starts (Linux; elsewhere nothing changes)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or no C library to call
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def lead_group() -> None:
    """Makes this process the leader of a process group of its own (what it starts joins the group)."""
    with contextlib.suppress(OSError):  # already a group or session leader
        os.setpgid(0, 0)


def _processes() -> dict[int, tuple[int, int]]:
    """Every visible process's parent and process group, ``{pid: (parent pid, group id)}``, from ``/proc`` (empty
    where there is none)."""
    processes = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return processes
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # The command name (field 2) may hold spaces and parentheses: fields after its last ")" are plain.
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):  # ended while we looked
            continue
        processes[int(entry)] = (int(fields[1]), int(fields[2]))
    return processes


def descendants(root: int) -> list[int]:
    """The processes below ``root`` (children, their children, ...), by parent links."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in _processes().items():
        children.setdefault(parent, []).append(pid)
    found, frontier = [], [root]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.extend(below)
        frontier.extend(below)
    return found


def marked(token: str) -> list[int]:
    """The processes whose environment holds ``TREE_VARIABLE=token`` (this process excluded)."""
    needle = f"{TREE_VARIABLE}={token}".encode()
    found = []
    for pid in _processes():
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if needle in environ.read().split(b"\0"):
                    found.append(pid)
        except OSError:  # ended, or another user's
            continue
    return found


def kill(pids: list[int]) -> list[int]:
    """Sends SIGKILL to each of ``pids``; those that were there to receive it."""
    killed = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def end_own_tree() -> list[int]:
    """Kills every process below this one (a subreaper: :func:`adopt_orphans`) and reaps them; the pids killed."""
    killed = kill(descendants(os.getpid()))
    deadline = time.monotonic() + REAP_SECONDS
    while killed and time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # none left
            break
        if pid == 0:
            time.sleep(0.01)
    return killed


def end_tree_of(leader: int, token: str) -> list[int]:
    """Kills what a method's process ``leader`` (which led its own group, its environment marked with ``token``)
    left behind once it has ended: the members of its group and every process marked with ``token``; the pids
    killed."""
    group = [pid for pid, (_, group) in _processes().items() if group == leader and pid != leader]
    return kill(sorted(set(group) | set(marked(token))))


def left_behind_line(count: int, where: str) -> str:
    """What is said of ``count`` processes a method left running ``where`` (e.g. "after its run")."""
    return f"{count} process(es) it started were still running {where} and were killed"
