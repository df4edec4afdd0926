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
from bench.errors import EXIT_ENVIRONMENT, EXIT_INTERNAL, DoesNotFit, describe_failure, out_of_memory
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
    monkeypatch.setattr(memory, "cgroup_room", lambda: 32 * 2**30)  # the binding bound neither first nor last
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


GiB = 2**30


@pytest.mark.parametrize("version", ["v2", "v1"])
@pytest.mark.parametrize("parent_usage, expected", [(2 * GiB, 3 * GiB), (63 * GiB, GiB)],
                         ids=["the-job-binds", "the-parent-binds"])
def test_the_control_group_room_is_the_least_over_the_group_and_every_group_above_it(tmp_path, monkeypatch, version,
                                                                                    parent_usage, expected):
    """Issue 66, blind spot 2: a process in ``task_0`` (no limit) under ``step_0`` (8 GiB, 7 left), a 4 GiB job (3
    left) and a 64 GiB parent: the room is the least of the three, which is neither the first nor the largest; the
    largest would plan a 4 GiB job with 62 GiB of room."""
    mount = tmp_path / "cgroup"
    hierarchy, limit, usage = (mount, "memory.max", "memory.current") if version == "v2" else \
        (mount / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes")
    groups = {"parent": (64 * GiB, parent_usage), "parent/job_7": (4 * GiB, GiB),
              "parent/job_7/step_0": (8 * GiB, GiB), "parent/job_7/step_0/task_0": (None, GiB)}
    for group, (most, used) in groups.items():
        (hierarchy / group).mkdir(parents=True)
        (hierarchy / group / limit).write_text("max\n" if most is None else f"{most}\n")
        (hierarchy / group / usage).write_text(f"{used}\n")
    membership = tmp_path / "cgroup-membership"
    membership.write_text("0::/parent/job_7/step_0/task_0\n" if version == "v2" else
                          "7:cpu,cpuacct:/elsewhere\n4:memory:/parent/job_7/step_0/task_0\n")
    folders = memory._cgroup_folders(str(membership), str(mount))
    assert folders[:4] == [str(hierarchy / group) for group in reversed(groups)], "each group before its parent"
    monkeypatch.setattr(memory, "_cgroup_folders", lambda: folders)
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
def test_what_a_network_holds_is_measured_per_row(task):
    """Against a count by hand for the MLP, and in proportion to the rows for every network."""
    problem, _ = metered(get_task(task), 10)
    costs = activations_per_row(problem.model_factory, problem.x_test[:8])
    assert costs == activations_per_row(problem.model_factory, problem.x_test[:4])
    assert costs.outputs == (problem.n_classes or 2)
    assert costs.training > costs.evaluation > 0, "a training step holds what its backward pass needs besides"
    if task == "toy-gap":
        widths = [m.out_features for m in problem.model_factory().modules() if isinstance(m, nn.Linear)]
        assert costs.training >= 4 * sum(widths[:-1]), "every hidden layer's output is saved"
        assert costs.evaluation >= 4 * 2 * max(widths[:-1]), "a layer's input and output are held at once"


def test_the_probe_sees_what_a_network_holds_at_once_not_what_it_computes_in_all():
    """Ten layers of 100 units: a training step saves every ReLU's output (the next layer's input; the layers' own
    outputs are not saved) and its backward pass adds a gradient or two of a layer's size; a forward pass without
    gradients holds two or three layers' outputs at once (the stacked MLP's input, its product and the product plus
    the bias)."""
    def factory() -> nn.Module:
        return nn.Sequential(*[module for _ in range(10) for module in (nn.Linear(100, 100), nn.ReLU())])

    costs = activations_per_row(factory, torch.zeros(8, 100))
    assert 2 * 100 * 4 <= costs.evaluation <= 3 * 100 * 4
    assert 10 * 100 * 4 < costs.training <= 13 * 100 * 4


def test_the_probe_leaves_the_global_generator_as_it_was():
    state = torch.random.get_rng_state()
    activations_per_row(lambda: nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.Linear(4, 2)), torch.zeros(8, 3))
    assert torch.equal(torch.random.get_rng_state(), state)


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


# The plan on a GPU, tested on a CPU: PyTorch's CUDA counts are faked, and the run's problem says it lives on cuda:0
# while its tensors stay on the CPU (nothing is allocated on a device).
GPU = "Fake GPU"


def fake_gpu(monkeypatch, free: int, total: int = 80 * 2**30, fraction: float = 1.0, reserved: int = 0,
             allocated: int = 0) -> None:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, total))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: GPU)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated)
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda device=None: fraction)


def roomy_host(monkeypatch, physical: int = 64 * 2**30, cgroup: int | None = None) -> None:
    monkeypatch.setattr(memory, "physical", lambda: physical)
    monkeypatch.setattr(memory, "cgroup_room", lambda: cgroup)
    monkeypatch.setattr(memory, "address_space_limit", lambda: None)


def on_gpu(task: str, method: str, budget: float, settings: dict | None = None):
    """A planned-to-be run of ``method`` whose problem says it is on cuda:0; (approximator, problem)."""
    from dataclasses import replace

    problem, _ = metered(get_task(task), budget)
    cls = METHODS[method]
    return cls(resolve_config(cls, task, settings or {})), replace(problem, device=torch.device("cuda:0"))


def test_a_gpu_s_room_is_the_least_of_its_free_memory_and_this_process_s_share():
    free = memory.gpu_room("cuda:0 (X)", free=10 * 2**30, total=80 * 2**30, reserved=3 * 2**30, allocated=2**30,
                           fraction=1.0)
    assert free == memory.Room(12 * 2**30, "free on cuda:0 (X)"), "what the caching allocator holds unused is room"
    share = memory.gpu_room("cuda:0 (X)", free=10 * 2**30, total=80 * 2**30, reserved=3 * 2**30, allocated=2**30,
                            fraction=0.05)
    assert share.bytes == 4 * 2**30 - 2**30 and "set_per_process_memory_fraction(0.05) of its 80.0 GiB" in share.what
    free_binds = memory.gpu_room("cuda:0 (X)", free=10 * 2**30, total=80 * 2**30, reserved=3 * 2**30, allocated=2**30,
                                 fraction=0.5)
    assert free_binds == free, "a share larger than the free memory does not bind"


def test_on_a_gpu_the_plan_splits_what_lives_on_the_device_from_what_lives_on_the_host():
    costs = approximators_base.RowCosts(training=1000, evaluation=500, outputs=10)
    footprint = Footprint(2, 100, kept=3, members=4, rows=64)
    cpu = footprint.needs(10_000, costs, 20_000, 10)
    gpu = footprint.needs(10_000, costs, 20_000, 10, "cuda")
    parameters = 10_000 * 4
    outputs = 2 * 20_000 * 10 * approximators_base.BYTES_PER_OUTPUT
    training = (2 * approximators_base.STATE_COPIES + 3) * parameters + 2 * 64 * 1000
    evaluation = (2 + 3) * parameters + max(2 * approximators_base.EVAL_CHUNK * 500, outputs)
    assert gpu.device == max(training, evaluation)
    members = 4 * (approximators_base.MEMBER_COPIES * parameters + approximators_base.MEMBER_OVERHEAD_BYTES)
    assert gpu.host == max(members + 100 * approximators_base.BYTES_PER_SCHEDULE_STEP, 20_000 * 10 * 8 + outputs)
    assert (cpu.host, cpu.device) == (0, footprint.bytes(10_000, costs, 20_000, 10))
    assert max(gpu.device, gpu.host) < cpu.device < gpu.device + gpu.host, "on the CPU the phases share one memory"


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
@pytest.mark.parametrize("rows, outputs_per_row, binding", [(1, 10, "evaluation"), (1, 1, "evaluation"),
                                                            (10_000, 10, "training")],
                         ids=["evaluation-outputs-bind", "evaluation-chunk-binds", "training-binds"])
def test_the_plan_is_the_larger_of_training_and_the_predictive_s_evaluation_whichever_binds(device_type, rows,
                                                                                            outputs_per_row, binding):
    """Issue 66, blind spot 2: on every embedded task the predictive's evaluation is the larger phase (a plan without
    it counted 4 to 9 times too little), and within it the members' outputs or a chunk's activations, whichever is
    larger; on a minibatch of 10,000 rows training is. Each phase is computed by hand."""
    costs = approximators_base.RowCosts(training=1000, evaluation=500, outputs=outputs_per_row)
    footprint = Footprint(2, 0, kept=3, rows=rows)
    parameters = 10_000 * 4
    training = (2 * approximators_base.STATE_COPIES + 3) * parameters + 2 * rows * 1000
    evaluation = (2 + 3) * parameters + max(2 * approximators_base.EVAL_CHUNK * 500,
                                            2 * 20_000 * outputs_per_row * approximators_base.BYTES_PER_OUTPUT)
    assert (evaluation > training) == (binding == "evaluation")
    assert footprint.needs(10_000, costs, 20_000, 0, device_type).device == max(training, evaluation)


def test_a_regression_predictive_of_several_members_counts_a_member_s_draws():
    """Each member's share of the samples is drawn into an array of its own, but one member's draw into the average."""
    costs = approximators_base.RowCosts(training=100, evaluation=100, outputs=2)
    alone, shared = Footprint(1, 0, averaged=1), Footprint(1, 0, averaged=30)
    assert alone.bytes(100, costs, 1000, 1000) == Footprint(1, 0).bytes(100, costs, 1000, 1000)
    chunk, outputs, draws = 1000 * 100, 1000 * 2 * approximators_base.BYTES_PER_OUTPUT, 1000 * 34 * 8  # 34 = ⌈1000/30⌉
    assert shared.needs(100, costs, 1000, 1000, samples=1000).device - alone.needs(
        100, costs, 1000, 1000, samples=1000).device == outputs + draws - chunk


def test_a_run_that_does_not_fit_on_the_gpu_is_refused_naming_the_device(monkeypatch):
    fake_gpu(monkeypatch, free=200 * 2**20)
    roomy_host(monkeypatch)
    approximator, problem = on_gpu("digits-cnn", "de", 1000, {"members": "1000"})
    with pytest.raises(DoesNotFit) as refusal:
        approximators_base.check_footprint(approximator, 1000, problem)
    code, line = describe_failure(refusal.value)
    assert code == EXIT_ENVIRONMENT and "\n" not in line
    assert "GiB on cuda:0, more than the 0.2 GiB free on cuda:0 (Fake GPU)" in line, line
    assert "1,000 member(s)" in line and "--device cpu" in line


def test_the_gpu_s_binding_bound_is_named_when_it_is_not_the_first(monkeypatch):
    """40 GiB free on the device, but this process may use 0.2% of its 80 GiB: the share binds."""
    fake_gpu(monkeypatch, free=40 * 2**30, fraction=0.002)
    roomy_host(monkeypatch)
    approximator, problem = on_gpu("digits-cnn", "de", 1000, {"members": "1000"})
    with pytest.raises(DoesNotFit, match=r"0\.2 GiB that this process's share of cuda:0 \(Fake GPU\) "
                                                             r"leaves \(torch\.cuda\.set_per_process_memory_fraction"):
        approximators_base.check_footprint(approximator, 1000, problem)
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda device=None: 1.0)
    approximators_base.check_footprint(approximator, 1000, problem)  # with the whole device it fits


def test_what_a_gpu_run_keeps_on_the_host_is_checked_against_the_host_s_binding_bound(monkeypatch):
    """The device has room; the members' initial parameters and anchors (on the host) do not fit in what the control
    group leaves, the third of the host's bounds, with 64 GiB of physical memory."""
    fake_gpu(monkeypatch, free=80 * 2**30)
    roomy_host(monkeypatch, cgroup=64 * 2**20)
    approximator, problem = on_gpu("toy-gap", "ae", 20_000, {"epochs": "1", "vectorise": "false"})
    with pytest.raises(DoesNotFit, match="of the host's memory beside cuda:0, more than the 0.1 GiB "
                                                            "that its control group's memory limit"):
        approximators_base.check_footprint(approximator, 20_000, problem)


def test_a_run_that_fits_on_the_gpu_and_its_host_is_not_refused(monkeypatch):
    fake_gpu(monkeypatch, free=2 * 2**30)
    roomy_host(monkeypatch, physical=2 * 2**30)
    for method in ("sgd", "sae", "swag", "laplace"):
        approximator, problem = on_gpu("digits-cnn", method, 200)
        approximators_base.check_footprint(approximator, 200, problem)


def test_the_command_line_refuses_a_run_that_does_not_fit_on_the_gpu_before_training(tmp_path, run_cli, monkeypatch):
    from dataclasses import replace

    from bench import runner

    fake_gpu(monkeypatch, free=100 * 2**20)
    roomy_host(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cpu_metered = runner.metered

    def metered_on_fake_gpu(task, budget, device=torch.device("cpu"), on_progress=None):
        problem, data = cpu_metered(task, budget, torch.device("cpu"), on_progress)
        return replace(problem, device=device), data

    monkeypatch.setattr(runner, "metered", metered_on_fake_gpu)
    monkeypatch.setattr(METHODS["de"], "fit", lambda *_: pytest.fail("fit ran before the plan was checked"))
    code, _, err = run_cli("--method", "de", "--budget", "300", "--task", "digits-cnn", "--set", "members=300",
                           "--device", "cuda", "--out", tmp_path, "--quiet")
    assert_one_line(code, err, EXIT_ENVIRONMENT, "de: a budget of 300 epochs", "GiB on cuda", "free on cuda")
    assert not any(tmp_path.iterdir())


def test_the_data_a_run_already_put_on_its_device_are_named_not_counted_again():
    """On a GPU the task's data are on the device before the plan (its free memory no longer has them); on the CPU
    they are the task's own arrays. A tensor on the meta device stands for one on a GPU."""
    from dataclasses import replace

    problem, _ = metered(get_task("digits"), 10)
    assert approximators_base.data_on(torch.device("cpu"), problem) == 0
    on_meta = replace(problem, x_test=torch.empty(360, 64, device="meta"), device=torch.device("meta"))
    assert approximators_base.data_on(torch.device("meta"), on_meta) == (360 + problem.n_train) * 64 * 4 + \
        problem.n_train * 8
    assert approximators_base.data_on(torch.device("cuda"), on_meta) == 0, "not on that device"

