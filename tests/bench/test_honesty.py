"""The honesty probe: every method the harness knows passes it, and it catches the dishonest ones."""

import pytest
import torch

from approximators import METHODS, Approximator
from approximators.base import PredictiveAccumulator
from approximators.training import AdamConfig, initial_members
from bench.functional import StackedModel
from bench.honesty import probe

PROBE_TASKS = [("toy-gap", None), ("digits", 256)]
"""A regression task whole, and the classification task on its first 256 training rows (fast)."""


@pytest.mark.parametrize("task, rows", PROBE_TASKS)
@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_computes_on_exactly_the_rows_it_is_charged_for(method, task, rows):
    result = probe(method, task, train_rows=rows)
    assert result.unmarked_rows == 0
    assert result.train_rows == result.examples_charged == round(result.epochs_used * result.n_train), result
    assert result.test_rows == round(result.test_passes * result.n_test), result
    assert result.honest


class _OneMember(Approximator):
    """A one-network method that reads one epoch and then computes on the rows ``passes`` times over
    ``members`` stacked networks, reading validation rows once for all of them."""

    name = "probe-target"
    Config = AdamConfig
    check_budget = 4.0
    passes, members, validation_copies = 1, 1, 1

    def fit(self, problem, data, generator):
        model = StackedModel(problem.model_factory())
        params = initial_members(problem.model_factory, list(range(self.members)))
        x, y = data.batch(torch.arange(data.n_train).expand(self.members, -1))
        for _ in range(self.passes):
            model(params, x, shared_input=False)
        xv, _ = data.shared_batch(torch.arange(10), copies=self.validation_copies)
        model(params, xv, shared_input=True)
        accumulator = PredictiveAccumulator(problem, self.members, generator)
        accumulator.add(params)
        self._predictive = accumulator.result()


class TwoPassesPerRead(_OneMember):
    passes = 2


class ValidationReadOnceForThreeMembers(_OneMember):
    members = 3


class HonestThreeMembers(_OneMember):
    members, validation_copies = 3, 3


class UnderReportedTestPass(_OneMember):
    def fit(self, problem, data, generator):
        super().fit(problem, data, generator)
        StackedModel(problem.model_factory())(initial_members(problem.model_factory, [0]), problem.x_test,
                                              shared_input=True)


@pytest.mark.parametrize("method, honest", [(_OneMember, True), (HonestThreeMembers, True), (TwoPassesPerRead, False),
                                            (ValidationReadOnceForThreeMembers, False),
                                            (UnderReportedTestPass, False)])
def test_probe_tells_honest_from_dishonest_methods(method, honest, monkeypatch):
    monkeypatch.setitem(METHODS, method.name, method)
    assert probe(method.name, "toy-gap").honest == honest
