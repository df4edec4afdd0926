"""The predictive: the classification model average is the mean of the members' probabilities, and
regression draws include each member's observation noise, for every number of members."""

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch

from approximators import METHODS, resolve_config
from approximators.base import PredictiveAccumulator
from bench.errors import ConfigError
from approximators.training import initial_members
from bench.budget import BudgetMeter
from bench.functional import StackedModel
from bench.tasks import PREDICTIVE_SAMPLES, get_task

KS_SIGNIFICANCE = 1e-3


def _outputs(task, params) -> np.ndarray:
    return StackedModel(task.model_factory())(params, task.x_test, shared_input=True).double().numpy()


def test_classification_average_is_the_mean_of_member_probabilities(problem_for):
    task = get_task("digits")
    params = initial_members(task.model_factory, [0, 1, 2])
    for name in params:  # sharpen the members so that averaging logits and averaging probabilities differ
        params[name] = params[name] * 4
    expected = scipy.special.softmax(_outputs(task, params), axis=-1).mean(0)
    softmax_of_mean_logits = scipy.special.softmax(_outputs(task, params).mean(0), axis=-1)
    assert np.abs(expected - softmax_of_mean_logits).max() > 0.1, "the members must disagree for this test to bite"

    accumulator = PredictiveAccumulator(problem_for(task, BudgetMeter(1, task.n_train)), 3, torch.Generator())
    accumulator.add({n: p[:1] for n, p in params.items()})
    accumulator.add({n: p[1:] for n, p in params.items()})
    np.testing.assert_allclose(accumulator.result(), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("members", [1, 2, 3, 7])
def test_regression_draws_carry_each_members_observation_noise(members, problem_for):
    """Standardised by their own member's mean and softplus standard deviation, a member's draws are N(0, 1)."""
    task = get_task("toy-gap")
    params = initial_members(task.model_factory, list(range(members)))
    params["2.bias"][:, 1] = torch.linspace(-1.0, 1.0, members)  # members with visibly different noise levels
    outputs = _outputs(task, params)
    means, stds = outputs[..., 0], np.logaddexp(0.0, outputs[..., 1])

    accumulator = PredictiveAccumulator(problem_for(task, BudgetMeter(1, task.n_train)), members,
                                        torch.Generator().manual_seed(0))
    accumulator.add(params)
    samples = accumulator.result()
    assert samples.shape == (task.n_test, PREDICTIVE_SAMPLES)
    start = 0
    for k in range(members):
        count = PREDICTIVE_SAMPLES // members + (k < PREDICTIVE_SAMPLES % members)
        z = (samples[:, start:start + count] - means[k][:, None]) / stds[k][:, None]
        assert scipy.stats.kstest(z.ravel(), "norm").pvalue > KS_SIGNIFICANCE, f"member {k} of {members}"
        start += count
    assert start == PREDICTIVE_SAMPLES


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_declared_order_of_settings_is_checked_before_any_work(method):
    """A schedule's end above its start (min_lr > lr: a rate that rises) is one line naming both settings."""
    from approximators.base import settings_order

    pairs = settings_order(METHODS[method].Config)
    for low, high, why in pairs:
        assert why == "a schedule that ends above where it starts would rise"
        default = getattr(resolve_config(METHODS[method], "toy-gap"), high)
        with pytest.raises(ConfigError, match=f"{low} .* must not exceed {high} .*: {why}$"):
            resolve_config(METHODS[method], "toy-gap", {low: str(2 * default), high: str(default)})
        resolve_config(METHODS[method], "toy-gap", {low: str(default), high: str(default)})  # equal is a constant rate
    expected = {"sgd", "de", "ae", "sae", "laplace", "mc-dropout", "mfvi", "swag", "swag-diag", "multiswag"}
    assert bool(pairs) == (method in expected)


def test_a_method_s_own_order_of_settings_is_refused_in_its_own_terms():
    """A user's pair is not a learning-rate schedule: its line names the pair, and says why only where told."""
    from dataclasses import dataclass
    from typing import ClassVar

    from approximators.base import check_settings

    @dataclass(frozen=True)
    class Own:
        low_fraction: float = 0.5
        high_fraction: float = 0.25
        hot: float = 3.0
        cool: float = 2.0
        AT_MOST: ClassVar[dict] = {"low_fraction": "high_fraction", "cool": ("hot", "cooling must not heat")}

    with pytest.raises(ConfigError) as refused:
        check_settings("mine", Own())
    assert str(refused.value) == "mine: low_fraction (0.5) must not exceed high_fraction (0.25)"
    with pytest.raises(ConfigError) as refused:
        check_settings("mine", Own(low_fraction=0.25, cool=4.0))
    assert str(refused.value) == "mine: cool (4.0) must not exceed hot (3.0): cooling must not heat"
    check_settings("mine", Own(low_fraction=0.25))


def test_a_value_error_from_post_init_refuses_set_values_and_is_the_method_s_failure_for_its_defaults():
    """A user's constraint written as Python writes it, in ``__post_init__``: for ``--set`` values it refused them
    as "failed in its settings" (the method's failure, exit 4, naming neither the values nor ending only their
    variant); it is bad input naming the values, and still the method's failure for its own defaults."""
    from dataclasses import dataclass

    from approximators.map import MAP, MAPConfig
    from bench.errors import MethodFailed

    @dataclass(frozen=True)
    class Ordered(MAPConfig):
        first: int = 1
        second: int = 2

        def __post_init__(self):
            if not self.first < self.second:
                raise ValueError(f"first ({self.first}) must come before second ({self.second})")

    class Mine(MAP):
        name = "mine"
        Config = Ordered

    with pytest.raises(ConfigError) as refused:
        resolve_config(Mine, "toy-gap", {"first": "3"})
    assert str(refused.value) == "method 'mine' refuses --set first=3: first (3) must come before second (2)"
    assert resolve_config(Mine, "toy-gap", {"first": "0"}).first == 0

    class MineBadDefaults(Mine):
        name = "mine-bad-defaults"
        TASK_DEFAULTS = {"toy-gap": {"first": 5}}

    with pytest.raises(MethodFailed, match="'mine-bad-defaults' failed in its settings: ValueError: first"):
        resolve_config(MineBadDefaults, "toy-gap", {"first": "0"})


def test_task_defaults_for_a_task_that_does_not_exist_are_the_method_s_failure():
    """A misspelt task in TASK_DEFAULTS was accepted without a word, its defaults never applied."""
    from approximators.map import MAP
    from bench.errors import MethodFailed

    class Misspelt(MAP):
        name = "misspelt"
        TASK_DEFAULTS = {"toy-gapp": {"lr": 0.1}}

    with pytest.raises(MethodFailed, match="TASK_DEFAULTS names 'toy-gapp', which is no task"):
        resolve_config(Misspelt, "toy-gap")


@pytest.mark.parametrize("method", ["laplace", "mc-dropout", "mfvi", "swag", "swag-diag", "multiswag", "vogn"])
def test_predictive_draws_are_bounded_before_any_work(method):
    """Each draw is a pass over the test set that no budget charges: the count itself is bounded."""
    from approximators.base import MAX_DRAWS

    assert resolve_config(METHODS[method], "toy-gap", {"samples": str(MAX_DRAWS)}).samples == MAX_DRAWS
    with pytest.raises(ConfigError, match=f"samples must lie in \\[1, {MAX_DRAWS}\\]"):
        resolve_config(METHODS[method], "toy-gap", {"samples": str(10**9)})
    with pytest.raises(ConfigError, match="samples must lie in"):
        resolve_config(METHODS[method], "toy-gap", {"samples": str(MAX_DRAWS + 1)})


def test_the_draws_cap_is_where_a_regression_predictive_stops_gaining_samples():
    """A regression predictive keeps PREDICTIVE_SAMPLES samples per point, spread over the draws: beyond that many
    draws a draw adds no sample, only a pass over the test set (the cap was 10^5: minutes to most of an hour)."""
    from approximators.base import MAX_DRAWS

    assert MAX_DRAWS == PREDICTIVE_SAMPLES


SMALL_BUDGETS = {"sgd": 1, "de": 5, "ae": 100, "sae": 102, "swag": 5, "swag-diag": 5, "multiswag": 15, "sgld": 4,
                 "csgmcmc": 30, "vogn": 2, "mfvi": 2, "mc-dropout": 1, "laplace": 2, "hmc": 48}
"""A budget at which each built-in method runs on toy-gap with its defaults, small enough for the suite (hmc: 48, the
least its budget rule admits)."""
STRUCTURE = {"sgd": "members", "de": "members", "ae": "members", "sae": "members_per_chain", "swag": "runs",
             "swag-diag": "runs", "multiswag": "runs", "sgld": "chains", "csgmcmc": "cycles", "vogn": "epochs",
             "mfvi": "vi_epochs", "mc-dropout": "masks_averaged", "laplace": "map_epochs", "hmc": "samples_kept"}
"""What each method's report must say about how its budget was spent (besides the epochs it left unspent)."""


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_reports_its_structure_and_what_it_left_unspent(method):
    """sgd, de and mc-dropout reported nothing; every record now says what ran."""
    from bench.api import fit

    fitted = fit("toy-gap", method, SMALL_BUDGETS[method])
    assert STRUCTURE[method] in fitted.report and fitted.report[STRUCTURE[method]] >= 1
    assert fitted.report.get("epochs_unspent", fitted.report.get("epochs_unspent_per_chain")) == \
        pytest.approx(SMALL_BUDGETS[method] - fitted.epochs_used, abs=1e-6)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_only_automatic_settings_are_resolved(method):
    """resolved() replaces settings whose 0 means "the method's rule decides" and nothing else."""
    from bench.runner import metered, planned, resolved_config

    cls = METHODS[method]
    config = resolve_config(cls, "toy-gap")
    problem, data = metered(get_task("toy-gap"), SMALL_BUDGETS[method])
    resolved = resolved_config(planned(cls, config, problem, data), problem)
    changed = {name for name, value in resolved.items() if value != getattr(config, name)}
    assert all(getattr(config, name) == 0 and resolved[name] > 0 for name in changed)
    assert type(cls(cls.Config(**resolved)).config) is cls.Config, "the resolved settings are valid settings"


@pytest.mark.parametrize("method, budget, settings, automatic", [
    ("sae", 240, {}, {"chains": 2, "members_per_chain": 5}),  # the allocation rule at 240 epochs
    ("sae", 120, {"chains": 1}, {"members_per_chain": 5}),  # 100 epochs, then 4 members of 5 epochs
    ("csgmcmc", 100, {}, {"cycles": 2}),  # one cycle per 50 epochs
    ("swag", 20, {}, {"collect_every": 5}),  # one epoch of toy-gap's 80 rows in batches of 16
    ("multiswag", 30, {"batch_size": 32}, {"collect_every": 3}),
    # tau = (pi / 2) sqrt(v) for toy-gap's prior variance 0.2
    ("hmc", 300, {"leapfrog_steps": 0, "burn_in": 0.2}, {"trajectory_length": np.pi / 2 * 0.2**0.5}),
])
def test_a_run_with_its_resolved_settings_is_the_same_run(method, budget, settings, automatic):
    """The record keeps the configuration asked for (0: the rule's choice; what identifies a configuration across
    budgets) and, beside it, what the rule chose; running with the chosen values gives the same bytes."""
    from bench.api import fit

    asked = fit("toy-gap", method, budget, seed=4, settings=settings)
    assert {name: getattr(asked.config, name) for name in automatic} == dict.fromkeys(automatic, 0)
    assert {name: asked.resolved[name] for name in automatic} == pytest.approx(automatic, rel=1e-12)
    chosen = fit("toy-gap", method, budget, seed=4, settings=asked.resolved)
    assert chosen.resolved == asked.resolved
    assert (chosen.predictive == asked.predictive).all() and chosen.report == asked.report


def test_settings_bounds_read_a_changed_bounds_after_an_earlier_read(monkeypatch):
    """Only the texts' parsing is cached: a BOUNDS changed after a first read (a test, a plugin) is what counts."""
    from approximators.base import settings_bounds
    from approximators.sae import SAEConfig

    assert settings_bounds(SAEConfig)["seq_lr"].text == "(0, inf)"
    monkeypatch.setitem(SAEConfig.BOUNDS, "seq_lr", "[0, inf)")
    assert settings_bounds(SAEConfig)["seq_lr"].text == "[0, inf)"
