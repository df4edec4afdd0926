"""MCMC convergence diagnostics for the reference posteriors.

Rank-normalised split R-hat and bulk effective sample size (ESS) following
Vehtari, Gelman, Simpson, Carpenter and Bürkner (2021), "Rank-normalization,
folding, and localization: an improved R-hat for assessing convergence of
MCMC", Bayesian Analysis 16(2), with the autocorrelation estimator and Geyer
truncation used by Stan.

All functions take draws of shape ``(chains, draws, *quantity_shape)`` and treat
every entry of ``quantity_shape`` as a separate scalar quantity, vectorised.

Steps shared by both diagnostics:

* Split: each chain is cut into a first and a second half (the middle draw is
  dropped when the number of draws is odd), giving ``2 * chains`` chains of
  ``draws // 2``. A chain that drifts then disagrees with itself.
* Rank-normalise: all split draws of a quantity are ranked jointly (average
  ranks for ties) and mapped to normal scores with Blom's offset,
  ``z = Phi^-1((r - 3/8) / (S + 1/4))`` for ``S`` draws, which is
  ``(r - c) / (S - 2c + 1)`` with ``c = 3/8`` as in the paper's reference code.
  This makes both diagnostics well defined for heavy tails and invariant to
  monotone transformations.

Tail ESS (:func:`tail_ess`) is the smaller of the ESS of the indicators ``x <= q`` at the 5% and 95% quantiles
``q`` of all split draws, as the paper defines it: how well the chains estimate the tails' probabilities.

R-hat returned is ``max(bulk R-hat, folded R-hat)``, where the folded version
is computed from ``|x - median(x)|`` (median over all split draws of the
quantity) and detects chains that agree in location but differ in scale, as
the paper recommends.

Degenerate quantities: one that is constant over all chains and draws carries
no information about mixing; it gets R-hat 1.0 and an ESS equal to the total
number of draws ``chains * draws``, so that it never fails a convergence check
and produces no NaN or warning. One that is constant within each chain but
differs between chains has zero within-chain variance and gets R-hat ``inf``.
"""

from __future__ import annotations

import numpy as np
import scipy.fft
import scipy.special
import scipy.stats

_BLOM_OFFSET = 3.0 / 8.0


def _check_draws(x) -> np.ndarray:
    """Return ``x`` as float64 after checking shape (chains >= 2, draws >= 4) and finiteness."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim < 2:
        raise ValueError(f"draws must have shape (chains, draws, *quantity_shape), got {a.shape}")
    if a.shape[0] < 2 or a.shape[1] < 4:
        raise ValueError(f"need at least 2 chains and 4 draws per chain, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("draws contain NaN or inf")
    return a


def _split_chains(a: np.ndarray) -> np.ndarray:
    """``(chains, draws, Q)`` -> ``(2 * chains, draws // 2, Q)``, dropping the middle draw if odd."""
    half = a.shape[1] // 2
    return np.concatenate([a[:, :half], a[:, a.shape[1] - half :]], axis=0)


def _rank_normalise(a: np.ndarray) -> np.ndarray:
    """Normal scores of the joint ranks over all chains and draws, per quantity; shape unchanged."""
    chains, draws, n_q = a.shape
    flat = a.reshape(chains * draws, n_q)
    ranks = scipy.stats.rankdata(flat, method="average", axis=0)
    size = flat.shape[0]
    z = scipy.special.ndtri((ranks - _BLOM_OFFSET) / (size - 2.0 * _BLOM_OFFSET + 1.0))
    return z.reshape(chains, draws, n_q)


def _within_between(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean within-chain variance ``W`` and the pooled variance estimate ``var_plus``, each ``(Q,)``."""
    draws = a.shape[1]
    # Shifting by each chain's first draw leaves the variance unchanged but makes it exactly 0
    # for a constant chain, where round-off in the mean could otherwise leave a tiny residue.
    within = (a - a[:, :1]).var(axis=1, ddof=1).mean(axis=0)
    # B / n in Gelman et al.'s notation: the variance of the chain means.
    between_over_n = a.mean(axis=1).var(axis=0, ddof=1)
    return within, within * (draws - 1) / draws + between_over_n


def _classic_rhat(a: np.ndarray) -> np.ndarray:
    """Potential scale reduction ``sqrt(var_plus / W)`` of ``(chains, draws, Q)``, per quantity.

    ``W == 0`` means every chain is constant: 1.0 if they all share the value
    (``var_plus == 0`` too), ``inf`` if they do not.
    """
    within, var_plus = _within_between(a)
    out = np.where(var_plus > 0.0, np.inf, 1.0)
    ok = within > 0.0
    out[ok] = np.sqrt(var_plus[ok] / within[ok])
    return out


def _constant(a: np.ndarray) -> np.ndarray:
    """``(Q,)`` mask of quantities whose draws are all equal."""
    return (a == a[:1, :1]).all(axis=(0, 1))


def _flatten(x) -> tuple[np.ndarray, tuple[int, ...]]:
    a = _check_draws(x)
    return a.reshape(a.shape[0], a.shape[1], -1), a.shape[2:]


def split_rhat(x) -> np.ndarray:
    """Rank-normalised split R-hat, the larger of the bulk and the folded version.

    Args:
        x: draws, ``(chains, draws, *quantity_shape)``.

    Returns:
        ``quantity_shape`` array of R-hat values (>= about 1; values above 1.01
        suggest the chains have not mixed).
    """
    a, quantity_shape = _flatten(x)
    split = _split_chains(a)
    folded = np.abs(split - np.median(split, axis=(0, 1)))
    bulk = _classic_rhat(_rank_normalise(split))
    tail = _classic_rhat(_rank_normalise(folded))
    return np.maximum(bulk, tail).reshape(quantity_shape)


def _autocovariance(a: np.ndarray) -> np.ndarray:
    """Biased (divide by n) autocovariance at lags ``0 .. n-1`` of each chain, ``(chains, n, Q)``."""
    n = a.shape[1]
    centred = a - a.mean(axis=1, keepdims=True)
    # Zero-padding to >= 2n turns the FFT's circular correlation into the linear one.
    n_fft = scipy.fft.next_fast_len(2 * n, real=True)
    spectrum = scipy.fft.rfft(centred, n=n_fft, axis=1)
    return scipy.fft.irfft(spectrum * spectrum.conj(), n=n_fft, axis=1)[:, :n] / n


def _ess(a: np.ndarray) -> np.ndarray:
    """Multi-chain ESS of ``(chains, n, Q)`` draws with Geyer's initial monotone sequence, ``(Q,)``.

    Assumes ``var_plus > 0`` for every quantity.
    """
    chains, n, _ = a.shape
    total = chains * n
    within, var_plus = _within_between(a)
    mean_acov = _autocovariance(a).mean(axis=0)
    rho = 1.0 - (within - mean_acov) / var_plus
    rho[0] = 1.0

    # Stan sums the autocorrelations in pairs (rho_t + rho_{t+1}, t even) and
    # stops at the first even t where the pair sum is <= 0, or once t >= n - 5.
    last_t = max(n - 5, 0)
    last_t += last_t % 2
    evens = np.arange(0, last_t + 1, 2)
    pair = rho[evens] + rho[evens + 1]
    stop = (pair <= 0.0) | (evens >= n - 5)[:, None]
    k_stop = stop.argmax(axis=0)  # the last row of `stop` is all True, so this is the first stop

    # Initial monotone sequence: each pair sum is capped by the ones before it.
    monotone = np.minimum.accumulate(pair, axis=0)
    before_stop = np.arange(len(evens))[:, None] < k_stop
    cols = np.arange(pair.shape[1])
    rho_stop = rho[evens[k_stop], cols]
    # Stan keeps rho at the stopping lag if its pair sum is >= 0 or if it is positive on its own.
    tail = np.where((pair[k_stop, cols] >= 0.0) | (rho_stop > 0.0), rho_stop, 0.0)
    tau = -1.0 + 2.0 * np.where(before_stop, monotone, 0.0).sum(axis=0) + tail
    # Floor from Stan: limits the ESS of antithetic chains to total * log10(total).
    tau = np.maximum(tau, 1.0 / np.log10(total))
    return total / tau


def bulk_ess(x) -> np.ndarray:
    """Bulk effective sample size of rank-normalised split chains.

    Args:
        x: draws, ``(chains, draws, *quantity_shape)``.

    Returns:
        ``quantity_shape`` array of ESS values. About ``chains * draws`` for
        independent draws; may exceed it for antithetic chains.
    """
    a, quantity_shape = _flatten(x)
    out = np.full(a.shape[2], float(a.shape[0] * a.shape[1]))
    varying = ~_constant(a)
    if varying.any():
        out[varying] = _ess(_rank_normalise(_split_chains(a[:, :, varying])))
    return out.reshape(quantity_shape)


TAIL_QUANTILES = (0.05, 0.95)


def tail_ess(x) -> np.ndarray:
    """Tail effective sample size: the smaller ESS of the split chains' indicators ``x <= q`` at the
    :data:`TAIL_QUANTILES` ``q`` of all draws of the quantity (not rank-normalised: an indicator is its own rank).

    Args:
        x: draws, ``(chains, draws, *quantity_shape)``.

    Returns:
        ``quantity_shape`` array of ESS values; a quantity whose indicator is constant (a constant quantity, or one
        whose draws sit on one side of the quantile) gets ``chains * draws``, as :func:`bulk_ess` gives a constant one.
    """
    a, quantity_shape = _flatten(x)
    split = _split_chains(a)
    out = np.full(a.shape[2], np.inf)
    for level in TAIL_QUANTILES:
        indicator = (split <= np.quantile(split, level, axis=(0, 1))).astype(np.float64)
        ess = np.full(a.shape[2], float(a.shape[0] * a.shape[1]))
        varying = ~_constant(indicator)
        if varying.any():
            ess[varying] = _ess(indicator[:, :, varying])
        out = np.minimum(out, ess)
    return out.reshape(quantity_shape)


def summarize(x) -> dict:
    """Worst-case diagnostics over all quantities.

    Args:
        x: draws, ``(chains, draws, *quantity_shape)``.

    Returns:
        ``max_rhat`` and ``min_bulk_ess`` (floats) and ``max_rhat_index`` /
        ``min_bulk_ess_index``, the position in ``quantity_shape`` (tuple of
        ints, ``()`` for a scalar quantity) where each is attained.
    """
    rhat = split_rhat(x)
    ess = bulk_ess(x)
    i_rhat = np.unravel_index(np.argmax(rhat), rhat.shape)
    i_ess = np.unravel_index(np.argmin(ess), ess.shape)
    return {
        "max_rhat": float(rhat[i_rhat]),
        "max_rhat_index": tuple(int(i) for i in i_rhat),
        "min_bulk_ess": float(ess[i_ess]),
        "min_bulk_ess_index": tuple(int(i) for i in i_ess),
    }
