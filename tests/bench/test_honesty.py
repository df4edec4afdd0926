"""The honesty probe: every method the harness knows passes it, with its defaults and away from them, on the code
paths real runs take, and it catches the dishonest ones."""

import dataclasses

import pytest
import torch

from approximators import METHODS, Approximator
from approximators.base import PredictiveAccumulator
from approximators.training import AdamConfig, initial_members
from bench.errors import ConfigError
from bench.functional import StackedModel
from bench.honesty import COMPANIONS, probe, probe_at_a_budget_it_fits, setting_grid

PROBE_TASKS = [("toy-gap", None), ("digits", 256), ("digits-cnn", 128), ("digits-lstm", 64)]
"""A regression MLP whole, and the classification MLP, convnet and CNN-LSTM on their first rows (fast)."""


@pytest.mark.parametrize("task, rows", PROBE_TASKS)
@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_computes_on_exactly_the_rows_it_is_charged_for(method, task, rows):
    result = probe(method, task, train_rows=rows)
    assert result.mixed_rows == 0
    assert result.train_rows == result.examples_charged == round(result.epochs_used * result.n_train), result
    assert result.test_rows == round(result.test_passes * result.n_test), result
    assert result.honest


@pytest.mark.parametrize("method, setting", sorted(COMPANIONS))
def test_a_setting_that_acts_only_with_another_is_refused_alone(method, setting):
    value = setting_grid(method, "toy-gap")[-1][setting]  # a real-valued setting: in the grid's last entry
    companion = next(iter(COMPANIONS[method, setting]))
    with pytest.raises(ConfigError, match=companion):
        probe(method, "toy-gap", overrides={setting: value})


@pytest.mark.parametrize("task, rows", [("toy-gap", None), ("digits-cnn", 32)])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_setting_of_every_method_is_charged_for_the_rows_it_computes_on(method, task, rows):
    """The MLP takes the fast paths (batched members, the recorded per-example forward, local
    reparameterisation), the convnet the generic ones; the grid moves every setting of the method."""
    grid = setting_grid(method, task)
    assert {name for overrides in grid for name in overrides} == {f.name for f in dataclasses.fields(METHODS[method].Config)}
    dishonest = [r for r in (probe_at_a_budget_it_fits(method, task, o, rows) for o in grid) if not r.honest]
    assert not dishonest, dishonest


@pytest.mark.parametrize("method", sorted(METHODS))
def test_the_grid_moves_every_setting_to_a_value_it_accepts_and_every_flag_to_its_other_state(method):
    """Issue 48: the grid was checked for the settings it names, never for their values, so a grid that set a flag
    to its default (``compiled``, ``vectorise``, ``cyclic``) or a number to itself would probe nothing new. Each
    entry's value differs from the task's default, a flag takes its other state, a choice every other choice, and
    a number lies within the setting's interval."""
    import typing

    from approximators import resolve_config
    from approximators.base import settings_bounds, settings_choices

    cls = METHODS[method]
    config = resolve_config(cls, "toy-gap")
    hints, bounds, choices = typing.get_type_hints(cls.Config), settings_bounds(cls.Config), settings_choices(cls.Config)
    moved: dict[str, set[str]] = {}
    for overrides in setting_grid(method, "toy-gap"):
        # A companion takes whatever the setting that needs it needs there, its default included.
        companions = {companion for name in overrides for companion in COMPANIONS.get((method, name), {})}
        for name, value in overrides.items():
            if name not in companions:
                moved.setdefault(name, set()).add(value)
    for field in dataclasses.fields(config):
        default, kind, values = getattr(config, field.name), hints[field.name], moved[field.name]
        if kind is bool:
            assert values == {str(not default).lower()}, (field.name, values)
        elif field.name in choices:
            assert values == {str(c) for c in choices[field.name]} - {str(default)}, (field.name, values)
        else:
            assert str(default) not in values, (field.name, default, values)
        if field.name in bounds:
            assert all(kind(v) in bounds[field.name] for v in values), (field.name, values, bounds[field.name])


@pytest.mark.parametrize("task, rows", PROBE_TASKS)
def test_the_grid_names_only_dropout_sites_the_network_calls_as_modules(task, rows):
    """The CNN-LSTM's recurrent cell holds a linear layer whose weights it uses functionally: as a dropout site it is
    refused in one line, so a grid that named it stopped the honesty table on that task."""
    (sites,) = [overrides for overrides in setting_grid("mc-dropout", task) if "sites" in overrides]
    assert probe_at_a_budget_it_fits("mc-dropout", task, sites, rows).honest


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
