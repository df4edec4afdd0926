r"""Whether two samplers' chains sample one posterior: a permutation test on the chains, and the posterior-width
error it would see (``benchmarks/nuts_crosscheck.py`` applies it to NUTS against our references).

Each sampler's chains keep, per kept draw, the predictive at the evidence's stated test points
(:mod:`reference.evidence`'s ``point_draws``): the probability of the reference's class (classification), or the
predictive mean m and standard deviation s (regression). A chain is summarised by its averages over its draws at each
point: p (classification), or the first two moments of y, E m and E (m^2 + s^2) (regression). A group of chains
predicts the mean of its chains' summaries (every chain weighs the same), and the statistic is how far two groups'
predictives are apart, averaged over the points:

    classification:  mean_i |p_A(i) - p_B(i)|
    regression:      mean_i sqrt((mu_A(i) - mu_B(i))^2 + (sd_A(i) - sd_B(i))^2)

(the second the Wasserstein-2 distance between the Gaussians of the two predictives' moments). Under the null
hypothesis that both samplers sample one posterior, their chains are exchangeable: the statistic's null distribution
is its value over every reassignment of the pooled chains to groups of the two samplers' sizes (all of them, or
``MAX_PERMUTATIONS`` drawn at random from a fixed seed), and the p-value is the share of those at least as far apart as
the samplers' own split (the samplers' own split is one of them). Exchangeability needs chains of equal law; chains
of the two samplers differ in length and autocorrelation, which changes each chain's noise, not its mean, and the
test stays close to its level where the groups are equally large (``tests/reference/test_crosscheck.py``
measures it).

Power. A posterior narrower by a fraction w in function space, each draw's logit of p (or its m and log s) drawn
towards the mean over all draws by the factor 1 - w, moves the predictive by delta(w) at each point. Added to the
samplers' difference as each reassignment of the chains gives it under the null, it is seen where the statistic
exceeds the null's 1 - ``LEVEL`` quantile; the share of reassignments where it does is the power, and the smallest w
of ``WIDTH_ERRORS`` seen with ``POWER`` is what the check can detect.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

LEVEL = 0.05
"""The level at which the samplers are told apart."""
POWER = 0.8
"""The power at which a width error counts as detectable."""
MAX_PERMUTATIONS = 20_000
"""Above this many reassignments, this many are drawn at random (seed ``PERMUTATION_SEED``)."""
PERMUTATION_SEED = 0
WIDTH_ERRORS = tuple(round(0.01 * k, 2) for k in range(1, 51))
"""The posterior-width errors (fractions too narrow) whose power is computed: 1% to 50%."""
PROBABILITY_CLIP = 1e-7
"""Probabilities are clipped to [clip, 1 - clip] before their logit is taken."""


def chain_summaries(point_draws: np.ndarray, kind: str) -> np.ndarray:
    """``(C, P, q)`` per chain and point, from ``(C, S, P, q)`` draws: the mean p, or E m and E (m^2 + s^2)."""
    draws = point_draws.astype(np.float64)
    if kind == "classification":
        return draws.mean(axis=1)
    m, s = draws[..., 0], draws[..., 1]
    return np.stack([m.mean(axis=1), (m**2 + s**2).mean(axis=1)], axis=-1)


def _predictive(summaries: np.ndarray, kind: str) -> np.ndarray:
    """``(..., P, q)`` group summaries to what the statistic compares: p, or the mean and standard deviation of y."""
    if kind == "classification":
        return summaries
    first, second = summaries[..., 0], summaries[..., 1]
    return np.stack([first, np.sqrt(np.maximum(second - first**2, 0.0))], axis=-1)


def statistic(difference: np.ndarray) -> np.ndarray:
    """The statistic of ``(..., P, q)`` differences of predictives: the mean over points of their Euclidean norm."""
    return np.sqrt((difference**2).sum(axis=-1)).mean(axis=-1)


def assignments(chains_a: int, chains_b: int) -> np.ndarray:
    """``(R, chains_a + chains_b)`` booleans, True for the chains given to sampler B: every reassignment when there
    are at most ``MAX_PERMUTATIONS`` (the samplers' own first, chains ``chains_a`` on being B's), else the own and
    ``MAX_PERMUTATIONS - 1`` drawn at random."""
    total = chains_a + chains_b
    own = np.zeros(total, dtype=bool)
    own[chains_a:] = True
    if math.comb(total, chains_b) <= MAX_PERMUTATIONS:
        rows = [own]
        for chosen in itertools.combinations(range(total), chains_b):
            row = np.zeros(total, dtype=bool)
            row[list(chosen)] = True
            if not np.array_equal(row, own):
                rows.append(row)
        return np.stack(rows)
    rng = np.random.default_rng(PERMUTATION_SEED)
    drawn = np.stack([rng.permutation(own) for _ in range(MAX_PERMUTATIONS - 1)])
    return np.concatenate([own[None], drawn])


def _differences(summaries: np.ndarray, groups: np.ndarray, kind: str) -> np.ndarray:
    """``(R, P, q)``: B's predictive minus A's under each reassignment ``groups`` of the pooled chains."""
    weights_b = groups / groups.sum(axis=1, keepdims=True)
    weights_a = ~groups / (~groups).sum(axis=1, keepdims=True)
    flat = summaries.reshape(len(summaries), -1)
    shape = (len(groups), *summaries.shape[1:])
    return _predictive((weights_b @ flat).reshape(shape), kind) - _predictive((weights_a @ flat).reshape(shape), kind)


def narrowed(point_draws: np.ndarray, kind: str, width_error: float) -> np.ndarray:
    """``point_draws`` ``(C, S, P, q)`` of a posterior narrower by ``width_error`` in function space: each draw's logit
    of p, or its m and log s, drawn towards their mean over every draw at its point by the factor 1 - width_error."""
    draws = point_draws.astype(np.float64)
    factor = 1.0 - width_error
    if kind == "classification":
        p = np.clip(draws, PROBABILITY_CLIP, 1 - PROBABILITY_CLIP)
        logit = np.log(p) - np.log1p(-p)
        centre = logit.mean(axis=(0, 1), keepdims=True)
        return 1 / (1 + np.exp(-(centre + factor * (logit - centre))))
    m, log_s = draws[..., 0], np.log(draws[..., 1])
    m = m.mean(axis=(0, 1), keepdims=True) + factor * (m - m.mean(axis=(0, 1), keepdims=True))
    log_s = log_s.mean(axis=(0, 1), keepdims=True) + factor * (log_s - log_s.mean(axis=(0, 1), keepdims=True))
    return np.stack([m, np.exp(log_s)], axis=-1)


def _pooled_predictive(point_draws: list[np.ndarray], kind: str) -> np.ndarray:
    """The predictive of every chain of both samplers together (each chain weighing the same)."""
    summaries = np.concatenate([chain_summaries(draws, kind) for draws in point_draws])
    return _predictive(summaries.mean(axis=0), kind)


def permutation_test(draws_a: np.ndarray, draws_b: np.ndarray, kind: str,
                     width_errors: tuple[float, ...] = WIDTH_ERRORS) -> dict:
    """The permutation test of two samplers' ``point_draws`` ``(C_a, S_a, P, q)`` and ``(C_b, S_b, P, q)`` (the
    module's docstring): the statistic, the null's 1 - ``LEVEL`` quantile (the threshold), the p-value, the decision,
    the power against each width error of ``width_errors`` and the smallest one detected with ``POWER`` (None: none up
    to the largest)."""
    if draws_a.shape[2:] != draws_b.shape[2:]:
        raise ValueError(f"the samplers' draws are kept at different points: {draws_a.shape} and {draws_b.shape}")
    summaries = np.concatenate([chain_summaries(draws_a, kind), chain_summaries(draws_b, kind)])
    groups = assignments(len(draws_a), len(draws_b))
    null_differences = _differences(summaries, groups, kind)
    null = statistic(null_differences)
    observed = float(null[0])
    threshold = float(np.quantile(null, 1 - LEVEL, method="higher"))
    p_value = float(np.mean(null >= observed))
    pooled = _pooled_predictive([draws_a, draws_b], kind)
    power = {}
    for width_error in width_errors:
        shift = _pooled_predictive([narrowed(draws_a, kind, width_error), narrowed(draws_b, kind, width_error)],
                                   kind) - pooled
        power[f"{width_error:g}"] = float(np.mean(statistic(null_differences + shift) > threshold))
    detectable = next((float(w) for w, found in power.items() if found >= POWER), None)
    return {"statistic": observed, "threshold": threshold, "p_value": p_value, "level": LEVEL,
            "decision": "told apart" if p_value < LEVEL else "not told apart", "reassignments": len(groups),
            "power": power, "detectable_width_error": detectable}
