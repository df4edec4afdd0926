"""Every numeric setting of every method has a declared interval, checked before any work."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approximators import METHODS, resolve_config
from approximators.base import Interval, settings_bounds
from bench.errors import EXIT_BAD_INPUT, ConfigError
from bench.tasks import task_names
from tests.reliability.test_error_boundary import assert_one_line


def _numeric_fields(config_class):
    defaults = config_class()
    return [f.name for f in dataclasses.fields(config_class)
            if isinstance(getattr(defaults, f.name), (int, float)) and not isinstance(getattr(defaults, f.name), bool)]


def _outside(interval: Interval, integer: bool) -> list[float]:
    """Values just outside each finite end, and the non-finite ones."""
    low, high = (float(end) for end in interval.text[1:-1].split(","))
    values = [] if integer else [math.nan, math.inf, -math.inf]
    if math.isfinite(low):
        values.append(low - 1 if integer else (low if interval.text[0] == "(" else low - 1e-9))
    if math.isfinite(high):
        values.append(high + 1 if integer else (high if interval.text[-1] == ")" else high + 1e-9))
    return values


@pytest.mark.parametrize("method", list(METHODS))
def test_every_numeric_setting_has_an_interval_holding_its_defaults(method):
    cls = METHODS[method]
    bounds = settings_bounds(cls.Config)
    assert set(bounds) == set(_numeric_fields(cls.Config))
    for task in task_names():
        config = resolve_config(cls, task)
        for name in bounds:
            assert getattr(config, name) in bounds[name], (task, name)


CASES = [(method, name, value) for method, cls in METHODS.items()
         for name, interval in settings_bounds(cls.Config).items()
         for value in _outside(interval, isinstance(getattr(cls.Config(), name), int))]


@pytest.mark.parametrize("method, name, value", CASES)
def test_a_value_outside_its_interval_is_refused_naming_the_setting(method, name, value):
    cls = METHODS[method]
    text = str(int(value)) if isinstance(getattr(cls.Config(), name), int) else repr(value)
    with pytest.raises(ConfigError, match=f"{method}: {name} must lie in"):
        cls(resolve_config(cls, "toy-gap", {name: text}))


@pytest.mark.parametrize("setting", ["lr=nan", "lr=-0.01", "beta1=2", "batch_size=0", "batch_size=-5", "epochs=0",
                                     "validation_fraction=1", "validation_fraction=-0.5", "lr=inf", "lr=1e400"])
def test_the_command_line_refuses_bad_settings_before_writing_anything(tmp_path, run_cli, setting):
    code, _, err = run_cli("--method", "ae", "--budget", "2", "--task", "toy-gap", "--out", tmp_path, "--quiet",
                           "--set", setting)
    assert_one_line(code, err, EXIT_BAD_INPUT, setting.split("=")[0])
    assert not any(tmp_path.iterdir())


@settings(max_examples=300, deadline=None)
@given(method=st.sampled_from(sorted(METHODS)), data=st.data())
def test_any_text_for_any_setting_is_refused_or_lies_in_its_interval(method, data):
    cls = METHODS[method]
    bounds = settings_bounds(cls.Config)
    name = data.draw(st.sampled_from(sorted(bounds)))
    text = data.draw(st.one_of(st.text(max_size=12), st.floats().map(repr), st.integers().map(str)))
    try:
        approximator = cls(resolve_config(cls, "toy-gap", {name: text}))
    except ConfigError as error:
        assert "\n" not in str(error)
        return
    assert getattr(approximator.config, name) in bounds[name]


def test_a_user_setting_without_declared_bounds_must_still_be_finite():
    from approximators.base import check_settings

    @dataclasses.dataclass
    class Undeclared:
        strength: float = 1.0

    check_settings("mine", Undeclared())
    with pytest.raises(ConfigError, match=r"mine: strength must lie in \(-inf, inf\), got nan"):
        check_settings("mine", Undeclared(math.nan))
