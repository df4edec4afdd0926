"""The competition tasks' official sizes and the one way generated data of their shapes are made (rehearsals, and the
benchmarks that time the real models)."""

from __future__ import annotations

import pytest
import torch

from bench.tasks.competition import (CIFAR10C_BLOCKS, INPUT_SHAPES, OFFICIAL_ROWS, PUBLIC_ROWS, SPECS, generated_task,
                                     generated_test_rows)
from reference.official import OFFICIAL_SIZES

VALUE_BYTES = 25
"""One value of a reference CSV as the organisers wrote it (``numpy.savetxt``'s ``%.18e``, 24 characters, then a space
or the line's end): a file of R rows of C values is exactly 25 R C bytes."""


def test_the_official_test_rows_are_the_official_references_rows():
    """The three references whose size the project knows (the starter kit's git tree): their bytes are the rows
    OFFICIAL_ROWS states times their columns, in the organisers' format."""
    checked = set()
    for name, spec in SPECS.items():
        size = OFFICIAL_SIZES.get(spec.reference.official_url)
        if size is not None:
            assert size == OFFICIAL_ROWS[name].test * spec.n_classes * VALUE_BYTES, name
            checked.add(name)
    assert checked == {"cifar10", "imdb", "dermamnist"}


def test_every_official_size_states_its_source_and_the_unpublished_ones_say_so():
    assert set(OFFICIAL_ROWS) == set(SPECS)
    assert {name for name, rows in OFFICIAL_ROWS.items() if not rows.train_published} == {"dermamnist", "uci-gap"}
    for rows in OFFICIAL_ROWS.values():
        assert rows.train_source and rows.test_source
        assert ("not published" in rows.train_source) == (not rows.train_published)
        assert ("not published" in rows.train_said) == (not rows.train_published)
    assert OFFICIAL_ROWS["cifar10c"].test % len(CIFAR10C_BLOCKS) == 0
    assert all(OFFICIAL_ROWS[name].test > public for name, public in PUBLIC_ROWS.items())


def test_a_full_size_generated_task_has_the_official_rows_shapes_and_blocks():
    task = generated_task("uci-gap")
    assert (task.n_train, task.n_test) == (OFFICIAL_ROWS["uci-gap"].train, OFFICIAL_ROWS["uci-gap"].test) == (512, 256)
    assert tuple(task.x_train.shape[1:]) == INPUT_SHAPES["uci-gap"] and task.y_test is None
    assert [(b.name, b.start, b.stop) for b in task.test_blocks] == [("public", 0, 100)]
    assert [(b.name, b.start, b.stop) for b in SPECS["cifar10c"].test_blocks(OFFICIAL_ROWS["cifar10c"].test)] == [
        *((name, 10_000 * i, 10_000 * (i + 1)) for i, name in enumerate(CIFAR10C_BLOCKS)), ("public", 0, 10_000)]


@pytest.mark.parametrize("name", list(SPECS))
def test_fewer_rows_keep_the_official_proportions_and_the_task_s_form(name):
    official = OFFICIAL_ROWS[name]
    task = generated_task(name, 40)
    assert task.n_train == 40 and task.n_test == generated_test_rows(name, 40)
    assert task.n_test == pytest.approx(40 * official.test / official.train, abs=len(CIFAR10C_BLOCKS))
    assert tuple(task.x_test.shape[1:]) == INPUT_SHAPES[name] and task.n_classes == SPECS[name].n_classes
    assert (task.y_test is not None) == ("y_test" in SPECS[name].arrays)  # labels only where the files publish them
    blocks = {b.name: (b.start, b.stop) for b in task.test_blocks}
    if name == "cifar10c":
        size = task.n_test // len(CIFAR10C_BLOCKS)
        assert task.n_test % len(CIFAR10C_BLOCKS) == 0 and blocks["gaussian_noise-2"] == (size, 2 * size)
        assert blocks["public"] == (0, size)
    elif name in PUBLIC_ROWS:  # the public block is the official share of the test rows
        assert blocks["public"] == (0, round(task.n_test * PUBLIC_ROWS[name] / official.test))
    else:
        assert blocks == {}
    if name == "imdb":
        assert task.x_train.dtype == torch.int64 and int(task.x_train.max()) < 20_000


def test_test_rows_are_at_least_one_per_block_and_at_most_the_official_count():
    assert generated_test_rows("cifar10c", 1) == len(CIFAR10C_BLOCKS)
    assert generated_test_rows("cifar10", 1) == 1
    assert generated_test_rows("uci-gap", OFFICIAL_ROWS["uci-gap"].train) == OFFICIAL_ROWS["uci-gap"].test


def test_the_training_rows_of_a_size_and_seed_do_not_depend_on_the_test_rows():
    """The benchmarks timed the models on these rows before test rows were generated apart: they are the same bits."""
    short, longer = generated_task("cifar10", 8, test_rows=3, seed=2), generated_task("cifar10", 8, test_rows=50, seed=2)
    assert torch.equal(short.x_train, longer.x_train) and torch.equal(short.y_train, longer.y_train)
    assert not torch.equal(generated_task("cifar10", 8, seed=3).x_train, short.x_train)
    assert short.fingerprint() != longer.fingerprint()  # the fingerprint names what the data were made of
