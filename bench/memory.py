"""How much memory this process may still allocate, and whether it ran out. On the CPU: read from Linux (``/proc``,
the control groups, ``getrlimit``); elsewhere the machine's physical memory, with no other limit known. On a GPU:
from the counts PyTorch reports (:func:`gpu_room`, given them by :func:`approximators.base.device_memory`).

Three things bound what a process may allocate: the machine's physical memory, its address-space limit
(``ulimit -v``, ``RLIMIT_AS``, which counts every mapping, the libraries' too) and its control group's memory limit
(a container's, a Slurm job's). The memory plan (:func:`approximators.base.check_footprint`) compares a run's
needs with the least of what each leaves; on a GPU, what the run holds there with what the device leaves it, and what
it holds on the host with what these three leave.

This module imports neither torch nor numpy.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from dataclasses import dataclass

NO_LIMIT = 2**62
"""A control group's limit at or above this is no limit (cgroup v1 writes 2^63 - 4096 for "none")."""

EXHAUSTED_MARGIN = 256 * 2**20
"""How close to its address-space limit a process's peak must have come for a failure that names no memory to be
taken as memory exhausted: an allocation refused by the limit is then a small one, which C code (Python's own,
PyTorch's) may report as anything, ``SystemError: error return without exception set`` among them."""


@dataclass(frozen=True)
class Room:
    """``bytes`` a process may still allocate, and ``what`` bounds it, as a line says it after "the N GiB"."""

    bytes: int
    what: str


def physical() -> int:
    """Bytes of physical memory of the machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _status_kib(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmSize``, ``VmPeak``) in bytes, None where there is none."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    return None


def address_space_limit() -> int | None:
    """This process's address-space limit in bytes (``ulimit -v``), None when it has none."""
    try:
        import resource
    except ImportError:  # not Unix
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _read_number(path: str) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        with open(path) as file:
            text = file.read().strip()
        return None if text == "max" else int(text)
    return None


def _cgroup_folders(membership: str = "/proc/self/cgroup", mount: str = "/sys/fs/cgroup") -> list[str]:
    """The folders where the memory files of this process's control group and of every group above it may be (v2,
    then v1), each group before its parent: a limit binds every group below it, and a job's is often set on a group
    above the one its process is in (Slurm's ``job_N`` above ``step_0/task_0``). The mount itself comes last: inside a
    container it is the container's group. ``membership`` lists the groups (``/proc/self/cgroup``), ``mount`` is
    where the hierarchies are mounted."""
    folders = []
    with contextlib.suppress(OSError):
        with open(membership) as groups:
            for line in groups:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controllers == "":
                    hierarchy = mount
                elif "memory" in controllers.split(","):
                    hierarchy = mount + "/memory"
                else:
                    continue
                parts = [part for part in path.split("/") if part]
                folders += ["/".join([hierarchy, *parts[:depth]]) for depth in range(len(parts), 0, -1)]
    return folders + [mount, mount + "/memory"]


def cgroup_room() -> int | None:
    """What the memory limits of this process's control group and of the groups above it leave (the least of each
    limit less its group's usage), None when none has a limit."""
    rooms = []
    for folder in _cgroup_folders():
        for limit_file, usage_file in (("memory.max", "memory.current"),
                                       ("memory.limit_in_bytes", "memory.usage_in_bytes")):
            limit, usage = _read_number(f"{folder}/{limit_file}"), _read_number(f"{folder}/{usage_file}")
            if limit is not None and limit < NO_LIMIT and usage is not None:
                rooms.append(max(limit - usage, 0))
    return min(rooms) if rooms else None


def room() -> Room:
    """What this process may still allocate on the CPU: the least of the machine's physical memory, what its
    address-space limit leaves (limit less the address space it maps now) and what its control group's limit
    leaves."""
    rooms = [Room(physical(), "of the machine's physical memory")]
    limit, mapped = address_space_limit(), _status_kib("VmSize")
    if limit is not None and mapped is not None:
        rooms.append(Room(max(limit - mapped, 0), f"that this process's address-space limit (ulimit -v, "
                                                  f"{limit / 2**30:,.1f} GiB) leaves"))
    left = cgroup_room()
    if left is not None:
        rooms.append(Room(left, "that its control group's memory limit (a container's or a job's) leaves"))
    return min(rooms, key=lambda r: r.bytes)


def address_space_exhausted() -> bool:
    """Whether this process's address space came within :data:`EXHAUSTED_MARGIN` of its limit at its peak."""
    limit, peak = address_space_limit(), _status_kib("VmPeak")
    return limit is not None and peak is not None and peak >= limit - EXHAUSTED_MARGIN


def gpu_room(device: str, free: int, total: int, reserved: int, allocated: int, fraction: float) -> Room:
    """What this process may still allocate on the GPU ``device`` (its name, as a line shows it): the least of what
    is free on it (``free``, the driver's count, ``torch.cuda.mem_get_info``) with what PyTorch's caching allocator
    has reserved and not allocated (``reserved - allocated``: the process reuses it) and, when
    ``torch.cuda.set_per_process_memory_fraction`` gave the process a share ``fraction`` < 1 of the device's
    ``total``, that share less what it has allocated."""
    rooms = [Room(free + max(reserved - allocated, 0), f"free on {device}")]
    if fraction < 1:
        rooms.append(Room(max(int(fraction * total) - allocated, 0),
                          f"that this process's share of {device} leaves (torch.cuda.set_per_process_memory_fraction("
                          f"{fraction:g}) of its {total / 2**30:,.1f} GiB)"))
    return min(rooms, key=lambda r: r.bytes)


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS, Windows)."""
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(None).malloc_trim
    return None


def release_freed_memory() -> None:
    """Gives back to the system the memory the C allocator keeps of blocks already freed (glibc's ``malloc_trim(0)``,
    a few milliseconds; nothing where there is none), before a run evaluates its predictive. A training step's
    tensors are smaller than the size above which glibc maps a block apart (and unmaps it when it is freed), so they
    are freed into its heap, which keeps their pages; the predictive's larger chunks are then mapped beside them, and
    a run's resident peak was its training's and its predictive's together, where the memory plan
    (:func:`approximators.base.memory_needs`) counts the larger of the two: ``sgd`` on ``cifar10`` (ResNet-20, its
    official sizes) held 950 MiB of freed training memory when its predictive began, and its peak fell from 2,572 to
    2,167 MiB with it given back (``benchmarks/memory_plan.py --competition``)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
