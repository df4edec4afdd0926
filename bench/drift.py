"""What another CPU kind may change of a run's metrics: the round-off predicate ``verify`` and the gate share.

A seeded run is deterministic on one machine; on another CPU kind torch and numpy pick other vector kernels, which
move a sum's last bits. Most runs carry that round-off through training unchanged (their metrics then agree to about
1e-5 relative); some amplify it until the run is another draw of its configuration (long sampler chains, a best epoch
chosen among near-ties, an LSTM's max-pool). Between the two, a metric counted over test points (agreement, accuracy,
ECE's bins) moves by whole points: one whose two largest probabilities nearly tie takes the other class when its
probabilities move by round-off. :func:`within_round_off` says whether two values of one metric differ by no more
than round-off carried through training.
"""

from __future__ import annotations

CROSS_CPU_ROUND_OFF = 1e-4
"""Two values of a metric are one run's across CPU kinds when they differ by at most this, relative to the larger.
Measured by ``benchmarks/cross_cpu_round_off.py`` between an Intel Xeon's (AVX-512) and an AMD EPYC's (AVX2) gate
baselines of one code: the 39 of 66 configurations whose round-off stayed round-off moved their metrics by at most
5.2e-5 relative, the others by 1.4e-3 to 0.39 (docs/notebook/verification.md)."""

OTHER_KERNELS_FACTOR = 10.0
"""Another CPU kind moves a run's metric by at most this many times what other kernels move it here
(:data:`bench.executors.OTHER_KERNELS`), the most over a configuration's seeds. Measured between an Intel Xeon
(AVX-512) and an AMD EPYC (AVX2), 10 seeds of every gate configuration: on every metric of every block the Intel run
moved at most 9.8 times as far as the other kernels moved the AMD one, but in one run whose best epoch flipped on one
CPU only (``ae`` on ``toy-gap``, seed 7: 86 times, 0.04 of its seeds' standard deviation) (docs/notebook/
verification.md)."""

COUNTED_METRICS = frozenset({"agreement", "accuracy", "ece"})
"""Metrics over test points that move by whole points: a point that crosses a decision boundary (a class's arg-max,
ECE's confidence bin) changes them by at most 1/n on a block of n points."""

CROSSED_POINTS = 2
"""Test points that round-off may carry across a decision boundary in a run whose round-off stays round-off: one was
seen (``hmc`` on ``digits`` and ``digits-cnn``, across CPU kinds and against other kernels), never two."""


def allowed_drift(metric: str, value: float, n_points: int) -> float:
    """How far round-off alone may move ``metric`` near ``value`` on a block of ``n_points`` test points."""
    crossed = CROSSED_POINTS / n_points if metric in COUNTED_METRICS else 0.0
    return CROSS_CPU_ROUND_OFF * abs(value) + crossed


def within_round_off(metric: str, first: float, second: float, n_points: int) -> bool:
    """Whether two values of ``metric`` on a block of ``n_points`` points are one run's under other round-off."""
    return abs(first - second) <= allowed_drift(metric, max(abs(first), abs(second)), n_points)
