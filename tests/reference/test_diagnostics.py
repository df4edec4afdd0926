"""Tests for reference.diagnostics: rank-normalised split R-hat, bulk ESS and tail ESS."""

import warnings

import numpy as np
import pytest
import scipy.signal
import scipy.special
import scipy.stats

from reference.diagnostics import bulk_ess, split_rhat, summarize, tail_ess


def ar1(rho, chains, draws, rng, n_quantities=1):
    """Stationary AR(1) chains with unit marginal variance, shape (chains, draws, n_quantities)."""
    noise = rng.standard_normal((chains, draws, n_quantities))
    noise[:, 1:] *= np.sqrt(1.0 - rho**2)
    return scipy.signal.lfilter([1.0], [1.0, -rho], noise, axis=1)


def unsplit_classic_rhat(x):
    """Gelman-Rubin R-hat on whole chains, no ranks, for a (chains, draws) array."""
    n = x.shape[1]
    within = x.var(axis=1, ddof=1).mean()
    return np.sqrt(((n - 1) / n * within + x.mean(axis=1).var(ddof=1)) / within)


def reference_bulk_ess(x):
    """Scalar port of Stan's ESS loops (split, rank-normalise, Geyer), for a (chains, draws) array."""
    split = split_chains(x)
    m, n = split.shape
    ranks = scipy.stats.rankdata(split.ravel()).reshape(m, n)
    return reference_ess(scipy.special.ndtri((ranks - 0.375) / (m * n + 0.25)))


def split_chains(x):
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half :]])


def reference_tail_ess(x):
    """Tail ESS spelt out: the smaller ESS of the split chains' indicators below the 5% and 95% quantiles."""
    split = split_chains(x)
    return min(reference_ess((split <= np.quantile(split, q)).astype(float)) for q in (0.05, 0.95))


def reference_ess(z):
    """Stan's ESS loops for already split (and, for bulk ESS, rank-normalised) chains ``(m, n)``."""
    m, n = z.shape
    acov = np.empty((m, n))
    for c in range(m):
        d = z[c] - z[c].mean()
        acov[c] = [np.dot(d[: n - t], d[t:]) / n for t in range(n)]
    chain_var = z.var(axis=1, ddof=1)
    mean_var = chain_var.mean()
    var_plus = mean_var * (n - 1) / n + z.mean(axis=1).var(ddof=1)
    rho = np.zeros(n)
    rho[0] = 1.0
    rho_even, rho_odd = 1.0, 1.0 - (mean_var - acov[:, 1].mean()) / var_plus
    rho[1] = rho_odd
    t = 0
    while t < n - 5 and rho_even + rho_odd > 0:
        t += 2
        rho_even = 1.0 - (mean_var - acov[:, t].mean()) / var_plus
        rho_odd = 1.0 - (mean_var - acov[:, t + 1].mean()) / var_plus
        if rho_even + rho_odd >= 0:
            rho[t], rho[t + 1] = rho_even, rho_odd
    max_t = t
    if rho_even > 0:
        rho[max_t] = rho_even
    t = 0
    while t <= max_t - 4:
        t += 2
        if rho[t] + rho[t + 1] > rho[t - 2] + rho[t - 1]:
            rho[t] = rho[t + 1] = (rho[t - 2] + rho[t - 1]) / 2
    tau = max(-1.0 + 2.0 * rho[:max_t].sum() + rho[max_t], 1.0 / np.log10(m * n))
    return m * n / tau


def test_iid_draws_look_converged():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 1000, 3))
    # For iid draws R-hat^2 is about 1 + (chi2_7 / 7 - 1) / 500 over 8 split chains of 500,
    # so even a 1-in-10^4 chi2 value keeps R-hat below 1.004; 1.01 is the usual threshold.
    assert np.all(split_rhat(x) < 1.01)
    # ESS of 4000 iid draws is about 4000. Its relative error comes from summing a few
    # autocorrelations, each with sd 1/sqrt(4000) ~ 0.016, i.e. ~5% (sd 175 over 2000 seeds
    # when this was written), so [3000, 5500] is more than 5 sd wide on either side.
    ess = bulk_ess(x)
    assert np.all((ess > 3000) & (ess < 5500))


def test_chains_with_shifted_means_fail_rhat():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 1000)) + np.arange(4.0)[:, None]
    assert split_rhat(x) > 1.1


def test_folded_rhat_catches_a_chain_with_a_different_scale():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 1000)) * np.array([1.0, 1.0, 1.0, 3.0])[:, None]
    # All chains have median 0, so only the folded (|x - median|) statistic sees the difference.
    assert split_rhat(x) > 1.05


def test_ar1_ess_matches_theory():
    rho = 0.9
    rng = np.random.default_rng(3)
    x = ar1(rho, chains=4, draws=10_000, rng=rng)[..., 0]
    theory = x.size * (1 - rho) / (1 + rho)
    # Sokal's approximation var(tau_hat) / tau^2 ~ 2 (2W + 1) / N with a window W ~ 3 tau = 57
    # and N = 40000 gives a relative sd of ~8% (6% measured over 400 seeds), so 30% is ~4 sd.
    # With 1000 draws per chain the sd is ~19%, too large for a meaningful 30% band.
    assert abs(bulk_ess(x) / theory - 1) < 0.3


def test_split_rhat_catches_a_trend_that_unsplit_rhat_misses():
    rng = np.random.default_rng(4)
    trending = rng.standard_normal(1000)
    trending[500:] += 2.0
    # The second chain is a well-mixed copy: the same draws in random order, so both chains
    # have exactly the same mean and the classic between-chain comparison sees nothing.
    x = np.stack([trending, rng.permutation(trending)])
    assert unsplit_classic_rhat(x) < 1.01
    assert split_rhat(x) > 1.05


def test_split_rhat_catches_a_trend_shared_by_all_chains():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 1000))
    x[:, 500:] += 1.0
    assert unsplit_classic_rhat(x) < 1.01
    assert split_rhat(x) > 1.05


def test_constant_quantity_gives_rhat_one_and_full_ess_without_warnings():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 100, 3))
    x[..., 1] = 2.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            rhat = split_rhat(x)
            ess = bulk_ess(x)
    assert rhat[1] == 1.0
    assert ess[1] == 400.0
    assert np.all(np.isfinite(rhat)) and np.all(np.isfinite(ess))


def test_chains_stuck_at_different_values_give_infinite_rhat():
    x = np.repeat(np.array([0.0, 0.0, 1.0, 1.0])[:, None], 50, axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert split_rhat(x) == np.inf
        assert np.isfinite(bulk_ess(x))


@pytest.mark.parametrize("draws", [4, 7, 12, 101])
def test_bulk_ess_matches_scalar_port_of_stan(draws):
    rng = np.random.default_rng(draws)
    series = [
        rng.standard_normal((3, draws)),
        ar1(0.8, 3, draws, rng)[..., 0],
        ar1(-0.7, 3, draws, rng)[..., 0],  # antithetic: exercises the log10 floor on tau
        rng.integers(0, 3, (3, draws)).astype(float),  # ties: average ranks
    ]
    for x in series:
        assert bulk_ess(x) == pytest.approx(reference_bulk_ess(x), rel=1e-10)


@pytest.mark.parametrize("draws", [8, 13, 101])
def test_tail_ess_matches_its_definition_spelt_out(draws):
    rng = np.random.default_rng(draws + 1)
    for x in (rng.standard_normal((3, draws)), ar1(0.8, 3, draws, rng)[..., 0], rng.standard_cauchy((3, draws))):
        assert tail_ess(x) == pytest.approx(reference_tail_ess(x), rel=1e-10)


def test_tail_ess_sees_tails_that_bulk_ess_does_not():
    """Chains that agree in the bulk but of which one never reaches the lower tail: bulk ESS stays high, tail ESS
    falls, because the indicator of the 5% quantile differs between chains."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 2000))
    x[0] = np.abs(x[0]) * 0.3  # chain 0 lives in the middle and upper half only
    assert tail_ess(x) < 0.5 * bulk_ess(x)
    iid = rng.standard_normal((4, 2000))
    # 8000 iid draws: the indicator's ESS has a relative sd of about 5% (as the bulk ESS above), so 30% is ~6 sd.
    assert abs(tail_ess(iid) / 8000 - 1) < 0.3


def test_vectorised_equals_quantity_by_quantity():
    rng = np.random.default_rng(7)
    x = np.empty((4, 101, 2, 3))  # odd draw count: the middle draw is dropped
    x[..., 0, 0] = rng.standard_normal((4, 101))
    x[..., 0, 1] = ar1(0.95, 4, 101, rng)[..., 0]
    x[..., 0, 2] = 3.0
    x[..., 1, 0] = rng.integers(0, 2, (4, 101))
    x[..., 1, 1] = rng.standard_cauchy((4, 101))
    x[..., 1, 2] = rng.standard_normal((4, 101)) + np.arange(4)[:, None]
    rhat, ess, tail = split_rhat(x), bulk_ess(x), tail_ess(x)
    assert rhat.shape == ess.shape == tail.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            assert rhat[i, j] == pytest.approx(split_rhat(x[..., i, j]), rel=1e-12)
            assert ess[i, j] == pytest.approx(bulk_ess(x[..., i, j]), rel=1e-12)
            assert tail[i, j] == pytest.approx(tail_ess(x[..., i, j]), rel=1e-12)


def test_summarize_reports_worst_quantity_and_its_index():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 500, 2, 3))
    x[..., 1, 2] += np.arange(4)[:, None]  # poorly mixed: worst R-hat and ESS
    s = summarize(x)
    assert s["max_rhat_index"] == (1, 2)
    assert s["min_bulk_ess_index"] == (1, 2)
    assert s["max_rhat"] == pytest.approx(float(split_rhat(x).max()))
    assert s["min_bulk_ess"] == pytest.approx(float(bulk_ess(x).min()))
    assert isinstance(s["max_rhat"], float) and isinstance(s["min_bulk_ess"], float)
    assert summarize(x[..., 0, 0])["max_rhat_index"] == ()


def _with_value_at_end(shape, value):
    x = np.random.default_rng(9).standard_normal(shape)
    x.flat[-1] = value
    return x


@pytest.mark.parametrize(
    "x",
    [
        _with_value_at_end((1, 100), 0.0),  # one chain
        _with_value_at_end((4, 3), 0.0),  # three draws per chain
        _with_value_at_end((100,), 0.0),  # no chain axis
        _with_value_at_end((4, 100), np.nan),
        _with_value_at_end((4, 100), np.inf),
    ],
    ids=["one-chain", "three-draws", "1-d", "nan", "inf"],
)
def test_bad_input_raises(x):
    with pytest.raises(ValueError):
        split_rhat(x)
    with pytest.raises(ValueError):
        bulk_ess(x)
