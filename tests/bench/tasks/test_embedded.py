"""The embedded suite's registry: what a run or sweep trains on without ``--task``."""

from bench.tasks import DEFAULT_TASKS, EMBEDDED, default_task_names


def test_the_default_tasks_are_the_mlp_tasks_of_the_suite():
    assert default_task_names() == list(DEFAULT_TASKS) == ["toy-gap", "diabetes-gap", "digits"]
    assert set(DEFAULT_TASKS) <= set(EMBEDDED)
