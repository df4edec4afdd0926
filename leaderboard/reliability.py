"""Reliability-diagram statistics, kept as sums so that seeds pool exactly.

Classification: the top-class confidence in ``CONFIDENCE_BINS`` equal-width bins (the bins of
:func:`bench.metrics.ece`); per bin the number of test points, the sum of their confidences and the
number predicted correctly. A calibrated predictive has accuracy = mean confidence in every bin.

Regression: for each level q in ``QUANTILE_LEVELS``, how many targets fall at or below the
predictive's empirical q-quantile. A calibrated predictive covers a fraction q.
"""

from __future__ import annotations

import numpy as np

CONFIDENCE_BINS = 15
QUANTILE_LEVELS = tuple(round(0.05 * k, 2) for k in range(1, 20))


def confidence_bins(probs: np.ndarray, labels: np.ndarray) -> dict:
    """``probs`` ``(N, C)`` validated probabilities, ``labels`` ``(N,)`` ints -> per-bin sums."""
    confidence = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    edges = np.linspace(0.0, 1.0, CONFIDENCE_BINS + 1)
    bins = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, CONFIDENCE_BINS - 1)
    return {"kind": "confidence",
            "count": np.bincount(bins, minlength=CONFIDENCE_BINS).tolist(),
            "confidence_sum": np.bincount(bins, weights=confidence, minlength=CONFIDENCE_BINS).tolist(),
            "correct_sum": np.bincount(bins, weights=correct, minlength=CONFIDENCE_BINS).tolist()}


def quantile_coverage(samples: np.ndarray, targets: np.ndarray) -> dict:
    """``samples`` ``(N, S)``, ``targets`` ``(N,)`` -> targets at or below each predictive quantile."""
    quantiles = np.quantile(samples, QUANTILE_LEVELS, axis=1)  # (levels, N)
    return {"kind": "quantile", "levels": list(QUANTILE_LEVELS), "count": len(targets),
            "covered": (targets[None, :] <= quantiles).sum(axis=1).tolist()}


def pooled_curve(stats: list[dict]) -> list[tuple[float, float]]:
    """(x, y) points of the diagram pooled over runs: (mean confidence, accuracy) per non-empty bin,
    or (level, observed coverage)."""
    if stats[0]["kind"] == "confidence":
        count = np.sum([s["count"] for s in stats], axis=0)
        confidence = np.sum([s["confidence_sum"] for s in stats], axis=0)
        correct = np.sum([s["correct_sum"] for s in stats], axis=0)
        return [(confidence[b] / count[b], correct[b] / count[b]) for b in np.flatnonzero(count)]
    covered = np.sum([s["covered"] for s in stats], axis=0) / sum(s["count"] for s in stats)
    return list(zip(stats[0]["levels"], covered.tolist()))
