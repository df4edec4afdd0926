"""Memory: what a run may allocate (the machine, ``ulimit -v``, a control group), a plan that counts every member a
run creates, and running out reported as the machine's refusal (exit 3) wherever it happens (issue 49, kind 11)."""

from __future__ import annotations

import gc
import resource
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch
from torch import nn

from approximators import METHODS, resolve_config
from approximators import base as approximators_base
from approximators.base import Footprint, activations_per_row
from bench import memory
from bench.errors import EXIT_ENVIRONMENT, EXIT_INTERNAL, describe_failure, out_of_memory
from bench.functional import StackedModel, seeded_module
from bench.runner import metered
from bench.tasks import get_task
from tests.reliability.test_error_boundary import assert_one_line

ROOT = Path(__file__).resolve().parents[2]


def _allocation_failure() -> RuntimeError:
    """What PyTorch's CPU allocator raises when refused (40 TB: refused on any machine)."""
    try:
        torch.empty(10**13)
    except RuntimeError as error:
        return error
    pytest.fail("40 TB were allocated")


def _raised_from(cause: BaseException, error: BaseException) -> BaseException:
    try:
        raise error from cause
    except BaseException as raised:  # noqa: BLE001 - built to be inspected
        return raised


@pytest.mark.parametrize("make", [
    lambda: MemoryError(),
    _allocation_failure,
    lambda: OSError(12, "Cannot allocate memory"),
    lambda: _raised_from(MemoryError(), SystemError("<built-in method> returned a result with an exception set")),
    lambda: _raised_from(_allocation_failure(), ValueError("a library's own words")),
], ids=["MemoryError", "torch-allocator", "ENOMEM", "SystemError-from-MemoryError", "wrapped-allocator"])
def test_running_out_of_memory_is_the_machine_s_refusal_wherever_it_is_met(make):
    code, line = describe_failure(make())
    assert code == EXIT_ENVIRONMENT and line.startswith("out of memory"), (code, line)


def test_a_system_error_is_out_of_memory_only_once_the_address_space_was_nearly_exhausted(monkeypatch):
    """The case of the issue: a million members under an 8 GB address-space limit ended in `SystemError: error
    return without exception set`, reported as a bug in bdl-bench (exit 70)."""
    lost = SystemError("error return without exception set")
    monkeypatch.setattr(memory, "address_space_exhausted", lambda: True)
    assert out_of_memory(lost) and describe_failure(lost)[0] == EXIT_ENVIRONMENT
    assert not out_of_memory(ValueError("a bug")), "only a SystemError's cause is guessed from the peak"
    monkeypatch.setattr(memory, "address_space_exhausted", lambda: False)
    assert describe_failure(lost)[0] == EXIT_INTERNAL


def test_the_address_space_counts_as_exhausted_only_near_its_limit(monkeypatch):
    monkeypatch.setattr(memory, "address_space_limit", lambda: 8 * 2**30)
    monkeypatch.setattr(memory, "_status_kib", lambda field: 8 * 2**30 - 10 * 2**20)
    assert memory.address_space_exhausted()
    monkeypatch.setattr(memory, "_status_kib", lambda field: 4 * 2**30)
    assert not memory.address_space_exhausted()
    monkeypatch.setattr(memory, "address_space_limit", lambda: None)
    assert not memory.address_space_exhausted()


def test_the_room_is_the_least_that_the_machine_the_address_space_and_the_control_group_leave(tmp_path,
                                                                                                monkeypatch):
    monkeypatch.setattr(memory, "physical", lambda: 64 * 2**30)
    monkeypatch.setattr(memory, "cgroup_room", lambda: None)
    monkeypatch.setattr(memory, "address_space_limit", lambda: None)
    assert memory.room() == memory.Room(64 * 2**30, "of the machine's physical memory")
    monkeypatch.setattr(memory, "address_space_limit", lambda: 8 * 2**30)
    monkeypatch.setattr(memory, "_status_kib", lambda field: 3 * 2**30)
    assert memory.room().bytes == 5 * 2**30 and "ulimit -v, 8.0 GiB" in memory.room().what
    monkeypatch.setattr(memory, "cgroup_room", lambda: 2**30)
    assert memory.room().bytes == 2**30 and "control group" in memory.room().what


@pytest.mark.parametrize("files, expected", [
    ({"memory.max": "4294967296\n", "memory.current": "1073741824\n"}, 3 * 2**30),  # cgroup v2
    ({"memory.max": "max\n", "memory.current": "1073741824\n"}, None),
    ({"memory.limit_in_bytes": "2147483648\n", "memory.usage_in_bytes": "536870912\n"}, 3 * 2**29),  # v1
    ({"memory.limit_in_bytes": "9223372036854771712\n", "memory.usage_in_bytes": "1"}, None),  # v1: no limit
])
def test_a_control_group_s_limit_is_read_from_either_version(tmp_path, monkeypatch, files, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(memory, "_cgroup_folders", lambda: [str(tmp_path)])
    assert memory.cgroup_room() == expected


def test_members_are_built_into_their_stack_one_module_at_a_time():
    """Issue 49, kind 11: a million members were a million modules alive at once before they were stacked, memory
    the plan did not count. The stack is what stacking every module gives, bit for bit."""
    alive: list[weakref.ref] = []

    def factory() -> nn.Module:
        gc.collect()
        alive[:] = [ref for ref in alive if ref() is not None]
        assert len(alive) <= 1, "a second module was built while another was alive"
        module = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        alive.append(weakref.ref(module))
        return module

    stacked = StackedModel.seeded(factory, [5, 6, 7])
    expected = StackedModel.stack([seeded_module(lambda: nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)),
                                                 s) for s in (5, 6, 7)])
    assert list(stacked) == list(expected)
    assert all(torch.equal(stacked[name], expected[name]) for name in expected)


def test_the_plan_counts_every_member_a_run_creates_trained_together_or_not():
    plain = Footprint(1, 0)
    many = Footprint(1, 0, members=1000)
    assert many.bytes(100) - plain.bytes(100) == 1000 * (approximators_base.MEMBER_COPIES * 100 * 4
                                                         + approximators_base.MEMBER_OVERHEAD_BYTES)
    cls = METHODS["ae"]
    one_by_one = cls(resolve_config(cls, "toy-gap", {"epochs": "10", "vectorise": "false"})).footprint(1000, 400)
    assert (one_by_one.networks, one_by_one.members) == (1, 100)


@pytest.mark.parametrize("task", ["toy-gap", "digits-cnn", "digits-lstm"])
def test_what_a_forward_pass_saves_for_its_backward_pass_is_measured_per_row(task):
    """Against a count by hand for the MLP, and in proportion to the rows for every network."""
    problem, _ = metered(get_task(task), 10)
    per_row, outputs = activations_per_row(problem.model_factory, problem.x_test[:8])
    assert (per_row, outputs) == activations_per_row(problem.model_factory, problem.x_test[:4])
    assert outputs == (problem.n_classes or 2)
    if task == "toy-gap":
        widths = [m.out_features for m in problem.model_factory().modules() if isinstance(m, nn.Linear)]
        assert per_row >= 4 * sum(widths[:-1]), "every hidden layer's output is saved"


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="the address space is read from Linux's /proc")
def test_a_run_planned_beyond_the_address_space_limit_is_refused_at_once(tmp_path):
    """The issue's case: `de` with a million members on toy-gap under an 8 GB address-space limit ran for 136 s and
    ended as "internal error, a bug in bdl-bench: SystemError" (exit 70); the plan compared with physical memory."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))

    done = subprocess.run([sys.executable, "-m", "bench", "--method", "de", "--budget", "1000000", "--task",
                           "toy-gap", "--set", "members=1000000", "--out", str(tmp_path / "runs"), "--quiet",
                           "--threads", "1"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          preexec_fn=limit)
    assert_one_line(done.returncode, done.stderr, EXIT_ENVIRONMENT, "1,000,000 member(s)", "ulimit -v, 8.0 GiB")
    assert not (tmp_path / "runs").exists()
