"""Task registry. Tasks are built on demand: listing names costs nothing, building one loads its data.

Embedded tasks are built from data shipped with the package or scikit-learn. Competition tasks are
read from the cache folder that ``python -m bench fetch`` fills; building one that is not fetched
raises an error naming the fetch command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from bench.errors import ConfigError
from bench.tasks.base import PREDICTIVE_SAMPLES, Task, TestBlock
from bench.tasks.embedded import diabetes_gap, digits, digits_cnn, digits_lstm, toy_gap

EMBEDDED: dict[str, Callable[[], Task]] = {
    "toy-gap": toy_gap,
    "diabetes-gap": diabetes_gap,
    "digits": digits,
    "digits-cnn": digits_cnn,
    "digits-lstm": digits_lstm,
}
"""The embedded suite, in the order runs go through it."""

DEFAULT_TASKS = ("toy-gap", "diabetes-gap", "digits")
"""What ``run`` and ``sweep`` train on without ``--task``: the MLP tasks (the README's quick start, about 20 s for
``sae`` at 1000 epochs on 2 CPU cores). The convnet and CNN-LSTM tasks cost a few times more per epoch and run
with ``--task digits-cnn`` and ``--task digits-lstm``."""

COMPETITION = ("cifar10", "cifar10c", "imdb", "dermamnist", "uci-gap")
"""The NeurIPS 2021 competition tasks (:mod:`bench.tasks.competition`), which need ``fetch`` first."""

_CACHE: dict[tuple[str, str], Task] = {}


def task_names() -> list[str]:
    """The embedded tasks."""
    return list(EMBEDDED)


def default_task_names() -> list[str]:
    """The tasks of a run or sweep given no ``--task`` (:data:`DEFAULT_TASKS`)."""
    return list(DEFAULT_TASKS)


def all_task_names() -> list[str]:
    return [*EMBEDDED, *COMPETITION]


def get_task(name: str, cache: Path | str | None = None) -> Task:
    """The task ``name``; competition tasks come from ``cache`` (default: the user cache folder)."""
    if name not in EMBEDDED and name not in COMPETITION:
        raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(all_task_names())}")
    if name in EMBEDDED:
        key = (name, "")
        if key not in _CACHE:
            _CACHE[key] = EMBEDDED[name]()
        return _CACHE[key]
    from bench.tasks.competition import load_task

    return load_task(name, cache)


__all__ = ["COMPETITION", "DEFAULT_TASKS", "EMBEDDED", "PREDICTIVE_SAMPLES", "Task", "TestBlock", "all_task_names",
           "default_task_names", "get_task", "task_names"]
