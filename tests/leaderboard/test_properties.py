"""Property-based tests of the submission validator: whatever the input, it is accepted exactly when valid,
and refused with a SubmissionError (never another exception)."""

import io
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from leaderboard.submission import (
    Expected,
    SubmissionError,
    check_claimed_metrics,
    read_predictions,
    score_competition_zip,
    validate_predictions,
)

CLASSES = Expected("t", "classification", "probs", n_test=6, width=4)
SAMPLES = Expected("t", "regression", "samples", n_test=5, width=7)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def probability_rows(draw, n=CLASSES.n_test, c=CLASSES.width):
    weights = draw(hnp.arrays(np.float64, (n, c), elements=st.floats(0, 1e6)))
    weights[weights.sum(axis=1) == 0, 0] = 1.0
    return weights / weights.sum(axis=1, keepdims=True)


@FAST
@given(probability_rows())
def test_valid_probabilities_are_accepted_unchanged(probs):
    np.testing.assert_array_equal(validate_predictions(probs, CLASSES, "p"), probs)


@FAST
@given(probability_rows(), st.integers(0, CLASSES.n_test - 1), st.integers(0, CLASSES.width - 1),
       st.sampled_from([np.nan, np.inf, -np.inf]))
def test_a_single_non_finite_entry_is_refused_naming_its_row(probs, row, column, bad):
    probs[row, column] = bad
    with pytest.raises(SubmissionError, match=rf"rows {row}\b"):
        validate_predictions(probs, CLASSES, "p")


@FAST
@given(probability_rows(), st.integers(0, CLASSES.n_test - 1), st.floats(0.01, 10))
def test_a_row_not_summing_to_one_is_refused(probs, row, excess):
    probs[row] *= 1 + excess
    with pytest.raises(SubmissionError, match="rows must sum to 1"):
        validate_predictions(probs, CLASSES, "p")


@FAST
@given(hnp.array_shapes(min_dims=0, max_dims=3, max_side=8))
def test_any_other_shape_is_refused(shape):
    array = np.zeros(shape)
    if shape == (SAMPLES.n_test, SAMPLES.width):
        validate_predictions(array, SAMPLES, "s")
    else:
        with pytest.raises(SubmissionError, match=r"needs samples of shape \(5, 7\)"):
            validate_predictions(array, SAMPLES, "s")


@FAST
@given(hnp.arrays(hnp.scalar_dtypes(), (SAMPLES.n_test, SAMPLES.width)))
def test_any_dtype_is_accepted_only_as_finite_real_numbers(array):
    real = np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    if real and np.isfinite(array.astype(np.float64)).all():
        assert validate_predictions(array, SAMPLES, "s").dtype == np.float64
    else:
        with pytest.raises(SubmissionError):
            validate_predictions(array, SAMPLES, "s")


@FAST
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_as_predictions_file_are_refused_cleanly(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("npz") / "predictions.npz"
    path.write_bytes(data)
    with pytest.raises(SubmissionError):
        read_predictions(path, SAMPLES)


@FAST
@given(st.dictionaries(st.sampled_from(["w1", "w2", "rmse"]), st.floats(-10, 10), min_size=3),
       st.sampled_from(["w1", "w2", "rmse"]), st.floats(-1, 1))
def test_claimed_metrics_are_accepted_exactly_within_tolerance(recomputed, metric, change):
    claimed = {**recomputed, metric: recomputed[metric] + change}
    if abs(change) <= 1e-9 * (1 + abs(recomputed[metric])):
        check_claimed_metrics(claimed, recomputed, "r")
    else:
        with pytest.raises(SubmissionError, match=rf"claims {metric} = "):
            check_claimed_metrics(claimed, recomputed, "r")


@FAST
@given(st.lists(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=30), min_size=1, max_size=4,
                unique=True))
def test_zip_member_names_other_than_official_ones_are_refused(tmp_path_factory, names):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in names:
            archive.writestr(name, b"1 2 3\n")
    path = tmp_path_factory.mktemp("zip") / "submission.zip"
    path.write_bytes(buffer.getvalue())
    with pytest.raises(SubmissionError):
        score_competition_zip(path, "m", 10, 0, "bob", file_tasks={"only_this.csv": "no-such-task"})
