"""Every statistic the board prints, pinned to SciPy's value to round-off (not only its decision at 5%), and every
threshold of the ranking bracketed: a case just on each side of it.

``tests/leaderboard/test_ranking.py`` checks the decisions (told apart or not, the ranks, the floor); here the numbers
themselves: a mutant that moves a p-value, an interval or a seed count without flipping a decision goes red too."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import scipy.stats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leaderboard import ranking
from leaderboard.render import render
from tests.leaderboard.test_ranking import around, rows_of

PINNED = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RTOL = 1e-12
"""Ours and SciPy's compute the same formula in another order: they agree to a few ulps, far inside this."""

seed_values = st.lists(st.floats(-10.0, 10.0, allow_nan=False).map(lambda v: round(v, 3)), min_size=2, max_size=10)
"""Seeds of a metric: values on a grid of 0.001 so that distinct lists differ by far more than round-off."""


@PINNED
@given(seed_values)
def test_the_estimate_is_scipys_to_round_off(values):
    value = ranking.estimate(values)
    assert value.mean == pytest.approx(np.mean(values), rel=RTOL, abs=1e-14)
    assert value.std == pytest.approx(np.std(values, ddof=1), rel=RTOL, abs=1e-300)
    assert value.se == pytest.approx(scipy.stats.sem(values), rel=RTOL, abs=1e-300)
    if value.se > 0:
        low, high = scipy.stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=scipy.stats.sem(values))
        assert value.half_width == pytest.approx((high - low) / 2, rel=RTOL)


@PINNED
@given(seed_values, seed_values)
def test_welchs_p_is_scipys_to_round_off(a, b):
    """Not only its side of 5%: a p-value off by a wrong degrees of freedom (n instead of n - 1, pooled variances)
    moves it without flipping most decisions."""
    if np.std(a) == 0 or np.std(b) == 0 or abs(np.mean(a) - np.mean(b)) < 1e-9:
        return  # the round-off and no-spread cases: test_the_round_off_rule_is_bracketed
    expected = scipy.stats.ttest_ind(a, b, equal_var=False).pvalue
    assert ranking.welch_p(ranking.estimate(a), ranking.estimate(b)) == pytest.approx(expected, rel=RTOL, abs=1e-300)


@pytest.mark.parametrize("a, b", [(around(0.1032, 0.0022), around(0.1036, 0.0019)),  # the p = 0.82
                                  ([0.1, 0.12, 0.13, 0.16], [0.2, 0.21]),  # unequal counts and spreads
                                  ([1.0, 1.1], [1.5, 1.52, 1.49, 1.55, 1.6, 1.51, 1.53])])
def test_welchs_p_on_fixed_boards_is_scipys_to_round_off(a, b):
    expected = scipy.stats.ttest_ind(a, b, equal_var=False).pvalue
    assert ranking.welch_p(ranking.estimate(a), ranking.estimate(b)) == pytest.approx(expected, rel=RTOL)


@pytest.mark.parametrize("difference, equal", [(0.9e-12, True), (1.1e-12, False)])
def test_the_round_off_rule_is_bracketed(difference, equal):
    """Means closer than ``ROUND_OFF`` (1e-12) x max(1, |mean|) are one number summed in two ways (p = 1 exactly, and
    tied ranks); just beyond it they are two numbers, however little the seeds can tell them apart."""
    a = [0.0, 1.0, 2.0]
    b = [value + difference for value in a]
    p = ranking.welch_p(ranking.estimate(a), ranking.estimate(b))
    assert (p == 1.0) is equal and p > 1 - 1e-11, p
    entries = ranking.tracks(rows_of("a", a, floor=None) + rows_of("b", b, floor=None))[0].entries
    assert [entry.rank for entry in entries] == ([1, 1] if equal else [1, 2])


def test_the_boards_printed_statistics_are_scipys_to_round_off():
    """The JSON's std, standard error and interval for the issue's example (the seeds needed: test_ranking.py)."""
    best, close = around(0.1032, 0.0022), [0.1011, 0.1036, 0.1061, 0.104]
    rows = rows_of("best", best) + rows_of("close", close)
    entries = json.loads(render(rows, "json"))["tracks"][0]["entries"]
    for entry, values in zip(entries, (best, close)):
        statistics = entry["metrics"]["w2"]
        low, high = scipy.stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=scipy.stats.sem(values))
        assert statistics["std"] == pytest.approx(np.std(values, ddof=1), rel=RTOL)
        assert statistics["se"] == pytest.approx(scipy.stats.sem(values), rel=RTOL)
        assert statistics["ci"] == pytest.approx([low, high], rel=RTOL)


# --- thresholds, each with a case on each side -------------------------------------------------------------------

def _p_near(target: float) -> list[float]:
    """Three seeds whose Welch p against ``around(0, 1)`` is ``target`` (to 1e-9): the mean found by bisection."""
    low, high = 0.0, 20.0
    for _ in range(60):
        middle = (low + high) / 2
        p = scipy.stats.ttest_ind(around(0.0, 1.0), around(middle, 1.0), equal_var=False).pvalue
        low, high = (middle, high) if p > target else (low, middle)
    return around(low, 1.0)


@pytest.mark.parametrize("p, apart", [(0.0499, True), (0.0501, False)])
def test_one_comparison_is_told_apart_just_below_five_percent_and_not_just_above(p, apart):
    rows = rows_of("first", around(0.0, 1.0), floor=None) + rows_of("second", _p_near(p), floor=None)
    second = ranking.tracks(rows)[0].entries[1]
    assert second.apart_from_first is apart and second.in_top_group is not apart


@pytest.mark.parametrize("factor, rejected", [(1.0, {"a", "b"}), (1 + 1e-9, set())])
def test_holms_first_step_is_bracketed(factor, rejected):
    """Holm's j-th smallest p is rejected at p <= level / (m - j): at the bound itself, and not just above it (which
    stops every later step too)."""
    assert ranking.holm_rejected({"a": 0.025 * factor, "b": 0.04}, 0.05) == rejected


@pytest.mark.parametrize("factor, rejected", [(1.0, {"a", "b"}), (1 + 1e-9, {"a"})])
def test_holms_last_step_is_bracketed(factor, rejected):
    assert ranking.holm_rejected({"a": 0.001, "b": 0.05 * factor}, 0.05) == rejected


def test_a_one_seed_entry_is_never_in_the_top_group():
    """A single seed is told from no one (no spread to test with): ranked 2 it is not in the top group, and the
    summary counts no first for it; two seeds of the same values, not told apart, are."""
    one = rows_of("first", around(0.10, 0.01), floor=None) + rows_of("single", [0.1001], floor=None)
    two = rows_of("first", around(0.10, 0.01), floor=None) + rows_of("pair", [0.1001, 0.1002], floor=None)
    single = ranking.tracks(one)[0].entries[1]
    pair = ranking.tracks(two)[0].entries[1]
    assert (single.rank, single.apart_from_first, single.in_top_group) == (2, None, False)
    assert (pair.rank, pair.apart_from_first, pair.in_top_group) == (2, False, True)
    other_task = [r for r in rows_of("first", around(0.10, 0.01), task="diabetes-gap", floor=None)] + rows_of(
        "single", around(0.5, 0.01), task="diabetes-gap", floor=None)
    standing = next(s for s in ranking.standings(ranking.tracks(one + other_task)) if s.entry.method == "single")
    assert (standing.tasks, standing.firsts) == (2, 0)


# --- what makes a track and an entry: each condition alone ---------------------------------------------------------

@pytest.mark.parametrize("field, other", [("task", "diabetes-gap"), ("task_version", 2), ("reference_sha256", "r2"),
                                          ("budget", 20.0)])
def test_each_field_of_a_track_alone_makes_another_track(field, other):
    """Runs scored against another reference (or of another task, version or budget) are never ranked together."""
    rows = rows_of("a", around(0.10, 0.01)) + [
        dataclasses.replace(r, **{field: other}) for r in rows_of("b", around(0.20, 0.01))]
    found = ranking.tracks(rows)
    assert len(found) == 2 and all(len(track.entries) == 1 and track.entries[0].rank == 1 for track in found)


@pytest.mark.parametrize("field, other", [("method", "b"), ("config_hash", "another"), ("label", "tuned")])
def test_each_field_of_an_entry_alone_makes_another_entry(field, other):
    rows = rows_of("a", around(0.10, 0.01)) + [
        dataclasses.replace(r, **{field: other}) for r in rows_of("a", around(0.20, 0.01))]
    entries = ranking.tracks(rows)[0].entries
    assert [(len(e.seeds), e.rank) for e in entries] == [(3, 1), (3, 2)]
