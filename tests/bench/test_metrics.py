"""Tests for bench.metrics."""

import math

import numpy as np
import pytest
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from bench import metrics
from bench.errors import MetricInputError


def brute_force_wp(a, b, p):
    """Exact per-row Wasserstein-p by expanding both rows to the LCM count, averaged over rows."""
    n = math.lcm(a.shape[1], b.shape[1])
    ea = np.repeat(np.sort(a, axis=1), n // a.shape[1], axis=1)
    eb = np.repeat(np.sort(b, axis=1), n // b.shape[1], axis=1)
    return float(np.mean(np.mean(np.abs(ea - eb) ** p, axis=1) ** (1 / p)))


# --- classification against the reference -------------------------------------------------


def test_agreement_hand_example():
    pred = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.2, 0.3, 0.5], [0.5, 0.3, 0.2]])
    ref = np.array([[0.6, 0.3, 0.1], [0.1, 0.3, 0.6], [0.1, 0.1, 0.8], [0.3, 0.6, 0.1]])
    # arg-maxes: pred 0, 1, 2, 0; ref 0, 2, 2, 1 -> points 0 and 2 agree.
    assert metrics.agreement(pred, ref) == 0.5


def test_total_variation_hand_example():
    pred = np.array([[1.0, 0.0], [0.5, 0.5]])
    ref = np.array([[0.0, 1.0], [0.25, 0.75]])
    # rows: 0.5 * (1 + 1) = 1 and 0.5 * (0.25 + 0.25) = 0.25
    assert metrics.total_variation(pred, ref) == pytest.approx(0.625, abs=1e-15)


def test_identical_inputs_score_perfectly():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4), size=20)
    s = rng.standard_normal((20, 30))
    assert metrics.agreement(p, p) == 1.0
    assert metrics.total_variation(p, p) == 0.0
    assert metrics.w1_distance(s, s) == 0.0
    assert metrics.w2_distance(s, s) == 0.0
    # A row and the same row with every sample repeated are the same empirical distribution.
    assert metrics.w1_distance(s, np.repeat(s, 3, axis=1)) == 0.0
    assert metrics.w2_distance(s, np.repeat(s, 3, axis=1)) == 0.0


# --- probability validation ---------------------------------------------------------------


def test_small_drift_is_renormalised():
    p = np.array([[0.2, 0.8], [0.5, 0.5 + 1e-6]])
    out = metrics.validate_probabilities(p)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    assert out[1, 1] < p[1, 1]


def test_row_summing_to_point_nine_is_rejected_by_index():
    p = np.full((5, 2), 0.5)
    p[3] = [0.4, 0.5]
    with pytest.raises(MetricInputError, match=r"\b3 \(0\.9\)"):
        metrics.validate_probabilities(p)


def test_many_bad_rows_are_listed_up_to_five():
    p = np.full((8, 2), 0.3)
    with pytest.raises(MetricInputError) as err:
        metrics.validate_probabilities(p, name="probs")
    message = str(err.value)
    assert message.startswith("probs:")
    assert "4 (0.6)" in message and "5 (0.6)" not in message and "3 more" in message


def test_nan_is_rejected():
    p = np.full((3, 2), 0.5)
    p[2, 0] = np.nan
    with pytest.raises(MetricInputError, match="rows 2"):
        metrics.validate_probabilities(p)


def test_negative_round_off_is_clipped_but_real_negatives_are_rejected():
    out = metrics.validate_probabilities(np.array([[-1e-13, 1.0]]))
    assert out[0, 0] == 0.0
    with pytest.raises(MetricInputError, match="negative"):
        metrics.validate_probabilities(np.array([[-1e-6, 1.0 + 1e-6]]))


@pytest.mark.parametrize("bad", [np.array([0.5, 0.5]), np.zeros((0, 3)), np.ones((2, 2, 1))])
def test_non_matrix_probabilities_are_rejected(bad):
    with pytest.raises(MetricInputError, match="2-D"):
        metrics.validate_probabilities(bad)


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(MetricInputError, match=r"\(2, 3\).*\(2, 4\)"):
        metrics.agreement(np.full((2, 3), 1 / 3), np.full((2, 4), 0.25))


def test_metric_input_error_is_a_value_error():
    with pytest.raises(ValueError):
        metrics.total_variation(np.full((2, 2), 0.4), np.full((2, 2), 0.5))


def test_validate_samples_names_non_finite_rows():
    s = np.zeros((4, 3))
    s[1, 2] = np.inf
    s[3, 0] = np.nan
    with pytest.raises(MetricInputError, match=r"^ref: .*rows 1, 3$"):
        metrics.validate_samples(s, "ref")
    with pytest.raises(MetricInputError, match="2-D"):
        metrics.validate_samples(np.zeros(3), "ref")


# --- Wasserstein distances ----------------------------------------------------------------


@pytest.mark.parametrize("counts", [(7, 3), (50, 33), (1, 9)])
def test_w1_matches_scipy_with_unequal_counts(counts):
    rng = np.random.default_rng(sum(counts))
    a = rng.standard_normal((6, counts[0]))
    b = 2.0 * rng.standard_normal((6, counts[1])) + 0.5
    expected = np.mean([scipy.stats.wasserstein_distance(u, v) for u, v in zip(a, b)])
    assert metrics.w1_distance(a, b) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("counts", [(5, 5), (4, 6), (7, 3), (12, 18)])
def test_w2_matches_brute_force_lcm_expansion(counts):
    rng = np.random.default_rng(10 + sum(counts))
    a = rng.standard_normal((6, counts[0]))
    b = rng.exponential(size=(6, counts[1]))
    assert metrics.w2_distance(a, b) == pytest.approx(brute_force_wp(a, b, 2), rel=1e-12)
    assert metrics.w1_distance(a, b) == pytest.approx(brute_force_wp(a, b, 1), rel=1e-12)


@pytest.mark.parametrize("counts", [(1000, 1000), (1000, 700), (333, 1000), (1, 9), (12, 18)])
def test_exact_grid_matches_pot_batched_over_points(counts):
    """POT's ``wasserstein_1d`` (numpy and torch backends, all points in one call) agrees with ours to 1e-9."""
    ot = pytest.importorskip("ot")
    rng = np.random.default_rng(20 + sum(counts))
    a = rng.standard_normal((256, counts[0]))
    b = 1.7 * rng.standard_normal((256, counts[1])) + 0.3
    for p, ours in ((1, metrics.w1_distance), (2, metrics.w2_distance)):
        per_point = ot.wasserstein_1d(a.T, b.T, p=p) ** (1 / p)
        per_point_torch = ot.wasserstein_1d(torch.from_numpy(a.T.copy()), torch.from_numpy(b.T.copy()), p=p) ** (1 / p)
        np.testing.assert_allclose(per_point_torch.numpy(), per_point, rtol=1e-9)
        assert ours(a, b) == pytest.approx(float(np.mean(per_point)), rel=1e-9)


def test_w2_of_a_shift_is_the_shift():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 10))
    assert metrics.w2_distance(a, a + 1.5) == pytest.approx(1.5, rel=1e-12)


def test_row_count_mismatch_is_rejected():
    with pytest.raises(MetricInputError, match="3 points.*4"):
        metrics.w1_distance(np.zeros((3, 5)), np.zeros((4, 5)))


def test_competition_w_is_minus_w1_at_1000_samples():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 1000))
    b = rng.standard_normal((3, 1000)) * 1.3
    score = metrics.competition_w(a, b)
    assert score < 0
    assert score == pytest.approx(-metrics.w1_distance(a, b), rel=1e-12)


@pytest.mark.parametrize("counts", [(999, 999), (1000, 500), (2000, 1000)])
def test_competition_w_refuses_other_sample_counts(counts):
    with pytest.raises(MetricInputError, match="1000"):
        metrics.competition_w(np.zeros((2, counts[0])), np.zeros((2, counts[1])))


# --- against labels and targets -----------------------------------------------------------


def test_accuracy_and_nll_hand_example():
    probs = np.array([[0.5, 0.5], [0.2, 0.8], [1.0, 0.0]])
    labels = np.array([0, 1, 1])
    # Point 2 gives probability 0 to its label: clipped to 1e-12.
    expected = -(math.log(0.5) + math.log(0.8) + math.log(1e-12)) / 3
    assert metrics.nll(probs, labels) == pytest.approx(expected, rel=1e-12)
    # arg-maxes 0 (tie, lowest index), 1, 0 -> points 0 and 1 correct.
    assert metrics.accuracy(probs, labels) == pytest.approx(2 / 3)


def test_ece_hand_example():
    probs = np.array([[0.9, 0.1], [0.9, 0.1], [0.65, 0.35], [0.25, 0.75]])
    labels = np.array([0, 1, 0, 1])
    # Bins of width 1/15: the two 0.9s share (13/15, 14/15] with accuracy 1/2 -> 2/4 * 0.4;
    # 0.65 and 0.75 are alone in their bins and correct -> 1/4 * 0.35 + 1/4 * 0.25.
    assert metrics.ece(probs, labels) == pytest.approx(0.2 + 0.0875 + 0.0625, rel=1e-12)


def test_ece_confidence_on_a_bin_edge_belongs_to_the_bin_below():
    # 2/3 is the upper edge of bin (9/15, 10/15], which also holds 0.65.
    probs = np.array([[2 / 3, 1 / 3], [0.65, 0.35]])
    labels = np.array([0, 1])
    pooled = abs(0.5 - (2 / 3 + 0.65) / 2)  # one bin: accuracy 1/2
    assert metrics.ece(probs, labels) == pytest.approx(pooled, rel=1e-12)


def test_ece_of_calibrated_predictor_is_small():
    rng = np.random.default_rng(6)
    n = 20_000
    confidence = rng.uniform(0.5, 1.0, n)
    correct = rng.uniform(size=n) < confidence
    labels = np.where(correct, 0, 1)
    probs = np.stack([confidence, 1 - confidence], axis=1)
    # Calibrated by construction, so ECE is pure sampling noise: per bin |sum(correct - conf)|
    # has mean <= sqrt(2/pi) * sqrt(n_b / 4), and by Cauchy-Schwarz over 15 bins
    # E[ECE] <= sqrt(2/pi) * sqrt(15 * n / 4) / n ~ 0.011 for n = 20000.
    assert metrics.ece(probs, labels) < 0.03


def test_ece_of_overconfident_predictor_is_large():
    rng = np.random.default_rng(7)
    n = 5_000
    labels = np.where(rng.uniform(size=n) < 0.7, 0, 1)  # class 0 is right 70% of the time
    probs = np.tile([0.99, 0.01], (n, 1))
    assert metrics.ece(probs, labels) == pytest.approx(0.29, abs=0.03)


@pytest.mark.parametrize(
    "labels, match",
    [([0, 1], "shape"), ([0, 1, 2], r"\[0, 2\)"), ([0, 0.5, 1], "integers"), ([0, -1, 1], "integers")],
)
def test_bad_labels_are_rejected(labels, match):
    with pytest.raises(MetricInputError, match=match):
        metrics.accuracy(np.full((3, 2), 0.5), np.array(labels))


def test_regression_rmse_and_log_likelihood():
    samples = np.array([[1.0, 3.0], [0.0, 0.0 + 2.0], [-1.0, 1.0]])
    targets = np.array([2.0, 2.0, 1.0])
    # row means 2, 1, 0 -> errors 0, 1, 1
    assert metrics.regression_rmse(samples, targets) == pytest.approx(math.sqrt(2 / 3))
    expected = np.mean(scipy.stats.norm.logpdf(targets, samples.mean(axis=1), samples.std(axis=1)))
    assert metrics.regression_log_likelihood(samples, targets) == pytest.approx(expected, rel=1e-12)


def test_regression_log_likelihood_rejects_zero_spread():
    with pytest.raises(MetricInputError, match="rows 1 .*zero variance"):
        metrics.regression_log_likelihood(np.array([[0.0, 1.0], [2.0, 2.0]]), np.zeros(2))


# --- torch input and the dictionaries -----------------------------------------------------


def test_torch_input_gives_same_result_as_numpy():
    rng = np.random.default_rng(8)
    p = rng.dirichlet(np.ones(3), size=10).astype(np.float32)
    q = rng.dirichlet(np.ones(3), size=10).astype(np.float32)
    labels = rng.integers(0, 3, 10)
    a = rng.standard_normal((10, 7)).astype(np.float32)
    b = rng.standard_normal((10, 5)).astype(np.float32)
    tp = torch.from_numpy(p).requires_grad_()  # detached inside
    assert metrics.classification_metrics(tp, torch.from_numpy(q), torch.from_numpy(labels)) == (
        metrics.classification_metrics(p, q, labels)
    )
    assert metrics.regression_metrics(torch.from_numpy(a), torch.from_numpy(b), torch.zeros(10)) == (
        metrics.regression_metrics(a, b, np.zeros(10))
    )


def test_every_metric_returns_a_python_float():
    p = np.full((2, 2), 0.5)
    s = np.array([[0.0, 1.0], [1.0, 3.0]])
    values = [*metrics.classification_metrics(p, p, [0, 1]).values()]
    values += [*metrics.regression_metrics(s, s, [0.0, 1.0]).values()]
    assert all(type(v) is float for v in values)


def test_metric_dictionaries_have_the_documented_keys():
    p = np.full((2, 2), 0.5)
    assert set(metrics.classification_metrics(p, p)) == {"agreement", "total_variation"}
    assert set(metrics.classification_metrics(p, p, [0, 1])) == {
        "agreement", "total_variation", "accuracy", "nll", "ece"
    }
    rng = np.random.default_rng(9)
    s1000 = rng.standard_normal((2, 1000))
    assert set(metrics.regression_metrics(s1000, s1000 + 1)) == {"w1", "w2", "competition_w"}
    assert set(metrics.regression_metrics(s1000, s1000[:, :500])) == {"w1", "w2"}
    assert set(metrics.regression_metrics(s1000[:, :500], s1000)) == {"w1", "w2"}
    assert set(metrics.regression_metrics(s1000[:, :10], s1000[:, :20], np.zeros(2))) == {
        "w1", "w2", "rmse", "log_likelihood"
    }


# --- properties ---------------------------------------------------------------------------


@st.composite
def probability_pairs(draw):
    n = draw(st.integers(1, 6))
    c = draw(st.integers(1, 5))
    weights = arrays(np.float64, (n, c), elements=st.floats(0.0, 10.0))
    p, q = draw(weights) + 1e-3, draw(weights) + 1e-3
    return p / p.sum(axis=1, keepdims=True), q / q.sum(axis=1, keepdims=True)


@st.composite
def sample_triples(draw):
    n = draw(st.integers(1, 4))
    rows = [arrays(np.float64, (n, draw(st.integers(1, 8))), elements=st.floats(-100, 100)) for _ in range(3)]
    return tuple(draw(r) for r in rows)


@settings(max_examples=50, deadline=None)
@given(probability_pairs())
def test_total_variation_is_a_symmetric_value_in_unit_interval(pair):
    p, q = pair
    tv = metrics.total_variation(p, q)
    assert 0.0 <= tv <= 1.0 + 1e-12
    assert tv == pytest.approx(metrics.total_variation(q, p), abs=1e-12)


@settings(max_examples=50, deadline=None)
@given(sample_triples())
def test_w1_is_symmetric_satisfies_triangle_inequality_and_is_below_w2(triple):
    a, b, c = triple
    w_ab, w_bc, w_ac = metrics.w1_distance(a, b), metrics.w1_distance(b, c), metrics.w1_distance(a, c)
    tol = 1e-9 * (1.0 + np.abs(np.concatenate([a, b, c], axis=1)).max())
    assert w_ab == pytest.approx(metrics.w1_distance(b, a), abs=tol)
    assert w_ac <= w_ab + w_bc + tol
    # Jensen per point: the L1 norm of |F^-1 - G^-1| on [0, 1] is at most its L2 norm.
    assert w_ab <= metrics.w2_distance(a, b) + tol
