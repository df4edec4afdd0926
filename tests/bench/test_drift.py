"""bench.drift: the round-off another CPU kind may move a metric by, bracketed on each side."""

import pytest

from bench import drift


@pytest.mark.parametrize("metric, n_points", [("w2", 121), ("nll", 1440), ("total_variation", 360)])
def test_a_continuous_metric_may_move_by_the_relative_round_off_of_the_larger_value(metric, n_points):
    value = 0.3
    allowed = drift.CROSS_CPU_ROUND_OFF * value
    assert drift.within_round_off(metric, value, value - 0.99 * allowed, n_points)
    assert not drift.within_round_off(metric, value, value - 1.01 * allowed, n_points)
    assert not drift.within_round_off(metric, value, value * (1 + 2 * drift.CROSS_CPU_ROUND_OFF), n_points)
    # relative to the value, never to max(1, |value|): a 0.1% edit of a total variation of 0.07 is beyond it
    assert not drift.within_round_off(metric, 0.07, 0.07 * 1.001, n_points)
    assert drift.within_round_off(metric, -3.0, -3.0 * (1 + 0.9 * drift.CROSS_CPU_ROUND_OFF), n_points)


@pytest.mark.parametrize("metric", sorted(drift.COUNTED_METRICS))
def test_a_counted_metric_may_move_by_two_test_points_more(metric):
    n_points, value = 360, 0.9
    points = drift.CROSSED_POINTS / n_points + drift.CROSS_CPU_ROUND_OFF * value
    assert drift.within_round_off(metric, value, value - 0.99 * points, n_points)
    assert not drift.within_round_off(metric, value, value - 1.01 * points, n_points)
    assert not drift.within_round_off("total_variation", value, value - 0.99 * points, n_points), "counted only"
