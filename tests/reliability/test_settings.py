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


def _float_settings(unbounded_above: bool = False) -> list[tuple[str, str]]:
    return [(method, name) for method, cls in METHODS.items()
            for name, interval in settings_bounds(cls.Config).items()
            if isinstance(getattr(cls.Config(), name), float) and (not unbounded_above or interval.text.endswith("inf)"))]


@pytest.mark.parametrize("method, name", _float_settings())
@pytest.mark.parametrize("value", ["1e300", "3.5e38", "-1e39"])
def test_a_float_setting_beyond_float32_is_refused_naming_it(method, name, value):
    """A float setting must convert to the networks' float32: ``--set init_std=1e300`` was an overflow, exit 70."""
    with pytest.raises(ConfigError, match=f"{method}: {name} (is .*, beyond what a run computes with|must lie in)"):
        resolve_config(METHODS[method], "toy-gap", {name: value})


def test_the_command_line_refuses_a_float_setting_beyond_float32(tmp_path, run_cli):
    code, _, err = run_cli("--method", "mfvi", "--budget", "2", "--task", "toy-gap", "--out", tmp_path, "--quiet",
                           "--set", "init_std=1e300")
    assert_one_line(code, err, EXIT_BAD_INPUT, "init_std is 1e+300, beyond what a run computes with", "float32")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("method, name", _float_settings(unbounded_above=True))
def test_every_float_setting_at_its_largest_value_trains_or_is_one_line(tmp_path, method, name):
    """At the largest value a float setting takes (and a setting it must not exceed raised with it), a run at the
    method's check budget finishes or ends in a user's error (training diverged, a plan refused): the step sizes it
    derives (lr / (1 - beta1^t), eps N_train) overflowed float32 as exit 70 before."""
    from approximators.base import LARGEST_FLOAT_SETTING, settings_order
    from bench.errors import BenchError
    from bench.runner import RunSpec, run

    cls = METHODS[method]
    largest = repr(LARGEST_FLOAT_SETTING)
    overrides = {name: largest, **{high: largest for low, high, _ in settings_order(cls.Config) if low == name}}
    try:
        run(RunSpec(task="toy-gap", method=method, budget=cls.check_budget, out=tmp_path,
                    overrides=tuple(overrides.items())))
    except BenchError as error:
        assert "\n" not in str(error)
