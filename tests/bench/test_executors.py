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
