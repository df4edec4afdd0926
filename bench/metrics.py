"""Scores comparing an approximate predictive distribution with the reference one.

Every function accepts numpy arrays or torch tensors, computes in float64 and
returns a Python float (or a dict of floats). Input that cannot be scored
raises :class:`bench.errors.MetricInputError` with a one-line message.

Shapes: ``N`` test points, ``C`` classes, ``S`` / ``R`` predictive samples per
point for the method / the reference.

Classification, predictions are ``(N, C)`` class probabilities:

* ``agreement``: fraction of points where the arg-max class of the method equals
  the arg-max class of the reference (ties resolve to the lowest class index).
* ``total_variation``: mean over points of ``0.5 * sum_c |p_c - q_c|``, in [0, 1].

Regression, predictions are ``(N, S)`` samples of the predictive per point:

* ``w1_distance`` / ``w2_distance``: per point, the exact 1-D Wasserstein-p
  distance between the empirical distributions of the two rows, i.e.
  ``(int_0^1 |F^-1(q) - G^-1(q)|^p dq)^(1/p)`` with ``F^-1``, ``G^-1`` the
  empirical quantile functions (piecewise constant, so the integral is an exact
  finite sum over the merged grid of quantile levels ``i/S`` and ``j/R``);
  averaged over points. ``S`` and ``R`` may differ.
* ``competition_w``: the score of the NeurIPS 2021 "Approximate inference in
  Bayesian deep learning" competition: minus the mean over points of
  ``scipy.stats.wasserstein_distance`` between rows, with exactly 1000 samples
  per point on both sides. It equals ``-w1_distance``.

Against observed labels / targets:

* ``accuracy``: fraction of points whose arg-max class is the label.
* ``nll``: mean of ``-log p[label]`` in nats; probabilities are clipped below
  at 1e-12 so a confidently wrong prediction costs at most ``-log(1e-12)``
  (about 27.6 nats) instead of infinity.
* ``ece``: expected calibration error of the confidence ``max_c p_c``: 15
  equal-width bins ``(k/15, (k+1)/15]`` over [0, 1] (the first bin also holds
  0), ``sum_bins (n_bin / N) * |accuracy_bin - mean confidence_bin|``.
* ``regression_rmse``: root mean squared error of the per-point sample mean.
* ``regression_log_likelihood``: mean over points of the log density of the
  target under a Gaussian moment-matched to that point's samples (mean and
  population standard deviation of the row). This approximates the predictive
  density; it is exact only when the predictive is Gaussian.
"""

from __future__ import annotations

import math

import numpy as np

from bench.errors import MetricInputError

COMPETITION_SAMPLES = 1000
NLL_PROBABILITY_FLOOR = 1e-12
# Round-off from softmax or averaging can leave probabilities a hair below 0.
_NEGATIVE_ROUNDOFF = -1e-12
_MAX_LISTED = 5


def _as_float64(x, name: str) -> np.ndarray:
    """Convert a numpy array, torch tensor or array-like to a float64 ndarray."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        # numpy has no bfloat16; casting in torch first covers every float dtype.
        if x.is_floating_point():
            x = x.double()
        x = x.numpy()
    try:
        return np.array(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise MetricInputError(f"{name}: cannot be read as float64 numbers ({exc})") from None


def _list_rows(rows: np.ndarray, values: np.ndarray | None = None) -> str:
    """Name up to five row indices (with a value each, if given) and how many more there are."""
    shown = []
    for i in rows[:_MAX_LISTED]:
        shown.append(f"{int(i)} ({values[i]:.6g})" if values is not None else str(int(i)))
    more = len(rows) - _MAX_LISTED
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _check_2d(a: np.ndarray, name: str, what: str) -> None:
    if a.ndim != 2:
        raise MetricInputError(f"{name}: expected a 2-D array of {what}, got shape {a.shape}")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise MetricInputError(f"{name}: expected a non-empty 2-D array of {what}, got shape {a.shape}")


def _check_finite_rows(a: np.ndarray, name: str) -> None:
    bad = np.flatnonzero(~np.isfinite(a).all(axis=1))
    if bad.size:
        raise MetricInputError(f"{name}: non-finite values (NaN or inf) in rows {_list_rows(bad)}")


def validate_probabilities(p, name: str = "predictions", atol: float = 1e-3) -> np.ndarray:
    """Check and tidy class probabilities.

    Args:
        p: ``(N, C)`` probabilities, numpy or torch.
        name: what to call the array in error messages.
        atol: how far a row sum may be from 1 and still be accepted.

    Returns:
        ``(N, C)`` float64 copy with tiny negative round-off clipped to 0 and
        every row renormalised to sum to 1.

    Raises:
        MetricInputError: not 2-D or empty, non-finite values, entries below
            -1e-12, or a row sum off by more than ``atol``.
    """
    a = _as_float64(p, name)
    _check_2d(a, name, "probabilities (points x classes)")
    _check_finite_rows(a, name)
    bad = np.flatnonzero((a < _NEGATIVE_ROUNDOFF).any(axis=1))
    if bad.size:
        raise MetricInputError(f"{name}: negative probabilities in rows {_list_rows(bad, a.min(axis=1))}")
    a = np.clip(a, 0.0, None)
    sums = a.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > atol)
    if bad.size:
        raise MetricInputError(
            f"{name}: rows must sum to 1 (tolerance {atol:g}); row (sum): {_list_rows(bad, sums)}"
        )
    return a / sums[:, None]


def validate_samples(s, name: str = "samples") -> np.ndarray:
    """Check predictive samples.

    Args:
        s: ``(N, S)`` samples, one row per test point, numpy or torch.
        name: what to call the array in error messages.

    Returns:
        ``(N, S)`` float64 array.

    Raises:
        MetricInputError: not 2-D, empty, or rows with NaN / inf.
    """
    a = _as_float64(s, name)
    _check_2d(a, name, "samples (points x samples)")
    _check_finite_rows(a, name)
    return a


def validate_predictive(a, key: str, shape: tuple[int, int], name: str, task: str) -> np.ndarray:
    """Check a method's whole predictive for ``task``: ``probs`` or ``samples`` of exactly ``shape``.

    Returns the array as :func:`validate_probabilities` or :func:`validate_samples` does.

    Raises:
        MetricInputError: not real numbers, another shape, or what those two refuse.
    """
    array = np.asarray(a)
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise MetricInputError(f"{name}: expected real numbers, got dtype {array.dtype}")
    if array.shape != tuple(shape):
        what = "classes" if key == "probs" else "samples"
        raise MetricInputError(f"{name}: {task} needs {key} of shape {tuple(shape)} (test points x {what}), "
                               f"got {array.shape}")
    return validate_probabilities(array, name) if key == "probs" else validate_samples(array, name)


def _validate_labels(labels, n_points: int, n_classes: int) -> np.ndarray:
    """Return ``(N,)`` int64 labels, checked to be whole numbers in ``[0, n_classes)``."""
    a = _as_float64(labels, "labels")
    if a.shape != (n_points,):
        raise MetricInputError(f"labels: expected shape ({n_points},) to match the predictions, got {a.shape}")
    bad = np.flatnonzero(~np.isfinite(a) | (a != np.round(a)) | (a < 0) | (a >= n_classes))
    if bad.size:
        raise MetricInputError(
            f"labels: must be integers in [0, {n_classes}); index (value): {_list_rows(bad, a)}"
        )
    return a.astype(np.int64)


def _validate_targets(targets, n_points: int) -> np.ndarray:
    """Return ``(N,)`` float64 regression targets, checked to be finite."""
    a = _as_float64(targets, "targets")
    if a.shape != (n_points,):
        raise MetricInputError(f"targets: expected shape ({n_points},) to match the samples, got {a.shape}")
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise MetricInputError(f"targets: non-finite values at indices {_list_rows(bad)}")
    return a


def _probability_pair(pred, ref) -> tuple[np.ndarray, np.ndarray]:
    p = validate_probabilities(pred, "predictions")
    q = validate_probabilities(ref, "reference")
    if p.shape != q.shape:
        raise MetricInputError(f"predictions have shape {p.shape} but the reference has shape {q.shape}")
    return p, q


def _sample_pair(samples, ref_samples) -> tuple[np.ndarray, np.ndarray]:
    a = validate_samples(samples, "samples")
    b = validate_samples(ref_samples, "reference samples")
    if a.shape[0] != b.shape[0]:
        raise MetricInputError(
            f"samples have {a.shape[0]} points (shape {a.shape}) but the reference has "
            f"{b.shape[0]} (shape {b.shape})"
        )
    return a, b


def agreement(pred, ref) -> float:
    """Fraction of points whose arg-max class agrees between ``pred`` and ``ref``, both ``(N, C)``."""
    p, q = _probability_pair(pred, ref)
    return float(np.mean(p.argmax(axis=1) == q.argmax(axis=1)))


def total_variation(pred, ref) -> float:
    """Mean over points of the total variation distance between ``(N, C)`` rows."""
    p, q = _probability_pair(pred, ref)
    return float(np.mean(0.5 * np.abs(p - q).sum(axis=1)))


def _wasserstein_p_power(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """Per row, ``int_0^1 |F_a^-1(q) - F_b^-1(q)|^p dq`` for empirical rows ``a`` (N, S), ``b`` (N, R).

    Returns ``(N,)``. The quantile functions are constant between the levels
    ``i/S`` and ``j/R``; scaling every level by ``S*R`` makes them the integers
    ``i*R`` and ``j*S``, so the merged grid and which sorted sample each piece
    uses are found in integer arithmetic, with no level lost or duplicated to
    round-off.
    """
    n_a, n_b = a.shape[1], b.shape[1]
    grid = np.union1d(np.arange(n_a + 1, dtype=np.int64) * n_b, np.arange(n_b + 1, dtype=np.int64) * n_a)
    starts = grid[:-1]
    widths = np.diff(grid) / (n_a * n_b)
    qa = np.sort(a, axis=1)[:, starts // n_b]
    qb = np.sort(b, axis=1)[:, starts // n_a]
    return (np.abs(qa - qb) ** p) @ widths


def w1_distance(samples, ref_samples) -> float:
    """Mean over points of the exact 1-D Wasserstein-1 distance between sample rows.

    Args:
        samples: ``(N, S)`` samples of the method's predictive per point.
        ref_samples: ``(N, R)`` reference samples per point; ``R`` may differ from ``S``.
    """
    a, b = _sample_pair(samples, ref_samples)
    return float(np.mean(_wasserstein_p_power(a, b, 1)))


def w2_distance(samples, ref_samples) -> float:
    """Mean over points of the exact 1-D Wasserstein-2 distance between sample rows.

    The square root is taken per point, before averaging. Shapes as in :func:`w1_distance`.
    """
    a, b = _sample_pair(samples, ref_samples)
    return float(np.mean(np.sqrt(_wasserstein_p_power(a, b, 2))))


def competition_w(samples, ref_samples) -> float:
    """NeurIPS 2021 BDL competition regression score (higher is better, 0 is perfect).

    Args:
        samples: ``(N, 1000)`` samples of the method's predictive per point.
        ref_samples: ``(N, 1000)`` reference samples per point.

    Returns:
        ``-mean_n scipy.stats.wasserstein_distance(samples[n], ref_samples[n])``.
    """
    a, b = _sample_pair(samples, ref_samples)
    if a.shape[1] != COMPETITION_SAMPLES or b.shape[1] != COMPETITION_SAMPLES:
        raise MetricInputError(
            f"competition_w needs exactly {COMPETITION_SAMPLES} samples per point on both sides, "
            f"got {a.shape[1]} (samples) and {b.shape[1]} (reference)"
        )
    # Kept as the competition computed it (scipy, row by row) so the score is its definition; imported here, as
    # scipy.stats takes a second to import that every command would pay.
    import scipy.stats

    return -float(np.mean([scipy.stats.wasserstein_distance(u, v) for u, v in zip(a, b)]))


def accuracy(probs, labels) -> float:
    """Fraction of points whose arg-max class in ``probs`` (N, C) equals ``labels`` (N,)."""
    p = validate_probabilities(probs)
    y = _validate_labels(labels, *p.shape)
    return float(np.mean(p.argmax(axis=1) == y))


def nll(probs, labels) -> float:
    """Mean negative log probability (nats) of ``labels`` (N,) under ``probs`` (N, C), floored at 1e-12."""
    p = validate_probabilities(probs)
    y = _validate_labels(labels, *p.shape)
    true_class = p[np.arange(len(y)), y]
    return float(-np.mean(np.log(np.maximum(true_class, NLL_PROBABILITY_FLOOR))))


def ece(probs, labels, n_bins: int = 15) -> float:
    """Expected calibration error of the max-probability confidence.

    Args:
        probs: ``(N, C)`` probabilities.
        labels: ``(N,)`` integer labels.
        n_bins: number of equal-width confidence bins ``(k/n_bins, (k+1)/n_bins]``.
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise MetricInputError(f"ece: n_bins must be a positive integer, got {n_bins!r}")
    p = validate_probabilities(probs)
    y = _validate_labels(labels, *p.shape)
    confidence = p.max(axis=1)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # side="left" puts a confidence equal to an edge into the bin below it; 0 goes to bin 0.
    bins = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, n_bins - 1)
    # Per bin, |sum(correct - confidence)| / N equals (n_bin / N) * |accuracy_bin - confidence_bin|.
    gap = np.abs(np.bincount(bins, weights=correct - confidence, minlength=n_bins))
    return float(gap.sum() / len(y))


def regression_rmse(samples, targets) -> float:
    """Root mean squared error of the per-point sample mean of ``samples`` (N, S) against ``targets`` (N,)."""
    a = validate_samples(samples)
    t = _validate_targets(targets, a.shape[0])
    return float(np.sqrt(np.mean((a.mean(axis=1) - t) ** 2)))


def regression_log_likelihood(samples, targets) -> float:
    """Mean log density of ``targets`` (N,) under Gaussians moment-matched to the rows of ``samples`` (N, S).

    Raises:
        MetricInputError: a row has zero spread, so its Gaussian has no density.
    """
    a = validate_samples(samples)
    t = _validate_targets(targets, a.shape[0])
    mean = a.mean(axis=1)
    var = a.var(axis=1)
    bad = np.flatnonzero(var <= 0.0)
    if bad.size:
        raise MetricInputError(
            f"samples: rows {_list_rows(bad)} have zero variance; the moment-matched Gaussian has no density"
        )
    log_density = -0.5 * (math.log(2.0 * math.pi) + np.log(var) + (t - mean) ** 2 / var)
    return float(np.mean(log_density))


def classification_metrics(pred, ref, labels=None) -> dict[str, float]:
    """``agreement`` and ``total_variation`` against the reference; ``accuracy``, ``nll``, ``ece`` if ``labels``."""
    out = {"agreement": agreement(pred, ref), "total_variation": total_variation(pred, ref)}
    if labels is not None:
        out.update(accuracy=accuracy(pred, labels), nll=nll(pred, labels), ece=ece(pred, labels))
    return out


def regression_metrics(samples, ref_samples, targets=None) -> dict[str, float]:
    """``w1``, ``w2`` and, at 1000 samples per point on both sides, ``competition_w``; ``rmse`` and
    ``log_likelihood`` if ``targets``."""
    a, b = _sample_pair(samples, ref_samples)
    out = {"w1": w1_distance(a, b), "w2": w2_distance(a, b)}
    if a.shape[1] == COMPETITION_SAMPLES and b.shape[1] == COMPETITION_SAMPLES:
        out["competition_w"] = competition_w(a, b)
    if targets is not None:
        out.update(rmse=regression_rmse(a, targets), log_likelihood=regression_log_likelihood(a, targets))
    return out
