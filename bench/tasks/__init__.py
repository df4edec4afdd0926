"""Task registry. Tasks are built on demand: listing names costs nothing, building one loads its data."""

from __future__ import annotations

from typing import Callable

from bench.errors import ConfigError
from bench.tasks.base import PREDICTIVE_SAMPLES, Task, TestBlock
from bench.tasks.embedded import diabetes_gap, digits, toy_gap

EMBEDDED: dict[str, Callable[[], Task]] = {
    "toy-gap": toy_gap,
    "diabetes-gap": diabetes_gap,
    "digits": digits,
}
"""The embedded suite, in the order runs go through it. ``python -m bench`` with no ``--task`` runs all of these."""

_CACHE: dict[str, Task] = {}


def task_names() -> list[str]:
    return list(EMBEDDED)


def get_task(name: str) -> Task:
    if name not in EMBEDDED:
        raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(EMBEDDED)}")
    if name not in _CACHE:
        _CACHE[name] = EMBEDDED[name]()
    return _CACHE[name]


__all__ = ["PREDICTIVE_SAMPLES", "Task", "TestBlock", "get_task", "task_names", "EMBEDDED"]
