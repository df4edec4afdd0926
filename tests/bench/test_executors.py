"""bench.executors: a process started with another CPU kind's kernels computes with them (what verify and the gate
measure round-off's growth by)."""

import pytest
import torch

from bench.executors import OTHER_KERNELS, Isolated, other_kernels_differ
from bench.runner import environment


def _matmul_bits() -> bytes:
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(257, 129, generator=generator), torch.randn(129, 65, generator=generator)
    return (a @ b).numpy().tobytes()


def test_a_process_started_with_other_kernels_runs_them_and_computes_otherwise():
    if not other_kernels_differ():
        pytest.skip("torch runs its default kernels here already")
    with Isolated("", torch.get_num_threads(), OTHER_KERNELS) as other:
        there = other.call(environment)
        bits = other.call(_matmul_bits)
    assert there.exit_code == 0 and there.result["cpu_capability"] == "DEFAULT", there
    assert environment()["cpu_capability"] != "DEFAULT"
    assert bits.result != _matmul_bits(), "the same float32 product, other last bits"
    with Isolated("", torch.get_num_threads()) as same:
        assert same.call(_matmul_bits).result == _matmul_bits(), "a process without them computes as this one"


def _compiled_trajectory() -> list:
    """A compiled HMC trajectory (float32 vector code), as ``hmc --set compiled=true`` runs one."""
    from bench import hmc

    target = hmc.Target(lambda theta: -theta.square().sum(-1), 1.0)
    generator = torch.Generator().manual_seed(5)
    position, momentum = torch.randn(3, 4, generator=generator), torch.randn(3, 4, generator=generator)
    _, _, grad = target.evaluate(position)
    ends = hmc.Integrator(target, vectorise=True, compiled=True)(position, momentum, grad,
                                                                 torch.tensor([0.02, 0.03, 0.025]),
                                                                 torch.tensor([30, 11, 21]))
    return [end.tolist() for end in ends]


def test_code_compiled_here_never_reaches_a_process_with_other_kernels():
    """torch.compile's cache keys code without the kernels ATen was told to use: a process with other kernels keeps a
    cache of its own, else code compiled here for the vector kernels fails to build there (`at::vec` undeclared)."""
    if not other_kernels_differ():
        pytest.skip("torch runs its default kernels here already")
    here = _compiled_trajectory()
    with Isolated("", torch.get_num_threads(), OTHER_KERNELS) as other:
        outcome = other.call(_compiled_trajectory)
    assert outcome.exit_code == 0, outcome.failure
    assert len(outcome.result) == len(here)


def test_a_process_of_bdl_bench_s_own_code_that_dies_is_bdl_bench_s_failure_not_a_method_s():
    """verify re-executes a built-in method with other kernels in a process named after no method: if it dies, that
    is a bug of bdl-bench's (exit 70), never blamed on a method (exit 4)."""
    import os

    from bench.errors import EXIT_INTERNAL, EXIT_METHOD

    with Isolated(None, 1, OTHER_KERNELS) as ours:
        outcome = ours.call(os._exit, 3)
    assert outcome.exit_code == EXIT_INTERNAL and "method" not in outcome.failure, outcome
    with Isolated("pkg.mod:Theirs", 1) as theirs:
        assert theirs.call(os._exit, 3).exit_code == EXIT_METHOD


class _Ray:
    """What ``ray.nodes()`` lists: a small node, a larger one, a dead one larger still (it holds nothing)."""

    @staticmethod
    def nodes():
        return [{"Alive": True, "Resources": {"CPU": 2.0}}, {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0}},
                {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 4.0}}]


def test_a_ray_run_fits_if_any_living_node_holds_it_and_a_refusal_names_the_largest():
    """Issue 66, blind spot 2: the node that fits, and the largest, is not the first; the dead node counts for
    nothing."""
    from bench.errors import BenchError
    from bench.executors import _check_ray_resources

    _check_ray_resources(_Ray, threads=8, gpus=1)
    with pytest.raises(BenchError, match=r"largest node: 8 CPUs, GPUs: 1\)"):
        _check_ray_resources(_Ray, threads=16, gpus=1)
