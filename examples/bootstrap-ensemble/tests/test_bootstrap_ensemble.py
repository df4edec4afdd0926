"""The bootstrap ensemble as bdl-bench runs it. Run after installing the package (`pip install .`, then
`python -m pytest` here): the entry point test checks the installed package's registration."""

import importlib.metadata

import pytest
import torch

from bench.api import ENTRY_POINT_GROUP, BenchError, MeteredData, run
from bootstrap_ensemble import BootstrapEnsemble

TOY_ROWS = 80


def test_the_installed_package_registers_the_method_under_its_name():
    entries = {entry.name: entry for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert entries["bootstrap"].load() is BootstrapEnsemble


def test_each_member_reads_one_bootstrap_resample_of_its_own_every_epoch(tmp_path, monkeypatch):
    reads = []
    read_batch = MeteredData.batch

    def recorded_batch(self, indices):
        reads.append(indices.clone())
        return read_batch(self, indices)

    monkeypatch.setattr(MeteredData, "batch", recorded_batch)
    result = run("toy-gap", BootstrapEnsemble, budget=5, settings={"members": 2}, out=tmp_path)
    assert result["epochs_used"] == 4, "floor(5 / 2) = 2 epochs for each of 2 members; the rest is left unspent"
    rows = torch.cat(reads, dim=1)  # (members, 2 epochs x 80 rows), in the order they were read
    first_epoch, second_epoch = rows[:, :TOY_ROWS], rows[:, TOY_ROWS:]
    assert torch.equal(first_epoch.sort(dim=1).values, second_epoch.sort(dim=1).values), "one resample, reshuffled"
    assert not torch.equal(first_epoch, second_epoch)
    distinct = [row.unique().numel() / TOY_ROWS for row in first_epoch]
    assert all(0.5 < share < 0.8 for share in distinct), f"about 1 - 1/e of the rows, not all of them: {distinct}"
    assert not torch.equal(first_epoch[0].sort().values, first_epoch[1].sort().values), "each member its own"
    assert result["method_report"]["distinct_rows_per_member"] == pytest.approx(distinct, abs=1e-4)


def test_a_seed_reproduces_its_run_and_another_seed_differs(tmp_path):
    first, again, other = (run("toy-gap", BootstrapEnsemble, budget=4, seed=seed, settings={"members": 2},
                               out=tmp_path / name) for name, seed in (("a", 1), ("b", 1), ("c", 2)))
    assert first["metrics"] == again["metrics"]
    assert first["metrics"] != other["metrics"]


def test_a_budget_too_small_for_the_members_is_one_bench_error(tmp_path):
    with pytest.raises(BenchError, match="a budget of 4 epochs is too small for 5 members.*"
                                         "the smallest budget that runs with these settings is 5"):
        run("toy-gap", BootstrapEnsemble, budget=4, out=tmp_path)
