"""The permutation test of two samplers' chains (reference.crosscheck): its false alarms on simulated samplers of one
posterior, its p-value's definition, and its decision flipping on a committed NUTS check whose draws are narrowed or
shifted."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from bench.tasks import get_task
from reference import crosscheck, evidence
from reference.store import PACKAGE_DATA, evidence_path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def _ar_chains(rng: np.random.Generator, chains: int, draws: int, points: int, rho: float) -> np.ndarray:
    """``(chains, draws, points, 1)`` probabilities from AR(1) logits started in their law N(0, 1) at every point: an
    exact sampler of one posterior, as autocorrelated as ``rho`` says."""
    noise = rng.standard_normal((chains, draws, points))
    out = np.empty_like(noise)
    out[:, 0] = noise[:, 0]
    for t in range(1, draws):
        out[:, t] = rho * out[:, t - 1] + math.sqrt(1 - rho**2) * noise[:, t]
    return (1 / (1 + np.exp(-out)))[..., None]


def test_two_exact_samplers_that_mix_at_different_speeds_are_told_apart_at_the_tests_level():
    """6 chains of each sampler, one mixing fast (rho 0.3) and one slowly (rho 0.9): over 300 simulated checks the
    test tells them apart 5% of the time, within 3 binomial standard errors."""
    rng = np.random.default_rng(0)
    replicates = 300
    apart = [crosscheck.permutation_test(_ar_chains(rng, 6, 60, 8, 0.3), _ar_chains(rng, 6, 60, 8, 0.9),
                                         "classification", width_errors=())["decision"] == "told apart"
             for _ in range(replicates)]
    assert abs(np.mean(apart) - crosscheck.LEVEL) < 3 * math.sqrt(crosscheck.LEVEL * (1 - crosscheck.LEVEL) / replicates)


def test_the_p_value_counts_the_samplers_own_split_and_every_reassignment_as_far_apart():
    """Two chains a side, the first sampler's at 0.2 and the second's at 0.8 at one point: of the 6 reassignments
    only the own split and its mirror are that far apart, so p = 2/6; the threshold is the null's 95% quantile."""
    a = np.full((2, 3, 1, 1), 0.2)
    b = np.full((2, 3, 1, 1), 0.8)
    found = crosscheck.permutation_test(a, b, "classification")
    assert found["reassignments"] == math.comb(4, 2) == 6
    assert found["statistic"] == pytest.approx(0.6)
    assert found["p_value"] == pytest.approx(2 / 6)
    assert found["threshold"] == pytest.approx(0.6)
    assert found["decision"] == "not told apart"


def test_every_reassignment_once_with_the_own_split_first_and_a_seeded_draw_beyond_the_limit(monkeypatch):
    groups = crosscheck.assignments(3, 2)
    assert groups.shape == (10, 5) and len({row.tobytes() for row in groups}) == 10
    assert groups[0].tolist() == [False, False, False, True, True]
    assert (groups.sum(axis=1) == 2).all()
    monkeypatch.setattr(crosscheck, "MAX_PERMUTATIONS", 7)
    drawn = crosscheck.assignments(3, 2)
    assert drawn.shape == (7, 5) and drawn[0].tolist() == groups[0].tolist()
    assert np.array_equal(drawn, crosscheck.assignments(3, 2)), "the draw is seeded"


def test_a_narrowed_posterior_moves_the_predictive_towards_the_plug_in():
    """Narrowing by w draws each logit towards the mean logit by 1 - w: w = 1 leaves every draw at the mean, w = 0
    changes nothing; regression draws its means and log standard deviations in the same way."""
    rng = np.random.default_rng(1)
    p = _ar_chains(rng, 2, 5, 3, 0.5)
    assert np.allclose(crosscheck.narrowed(p, "classification", 0.0), p)
    logit_mean = np.log(p / (1 - p)).mean(axis=(0, 1))
    assert np.allclose(crosscheck.narrowed(p, "classification", 1.0), 1 / (1 + np.exp(-logit_mean)))
    regression = np.stack([rng.normal(size=(2, 5, 3)), np.exp(rng.normal(size=(2, 5, 3)))], axis=-1)
    half = crosscheck.narrowed(regression, "regression", 0.5)
    m = regression[..., 0]
    assert np.allclose(half[..., 0], m.mean(axis=(0, 1)) + 0.5 * (m - m.mean(axis=(0, 1))))
    log_s = np.log(regression[..., 1])
    assert np.allclose(np.log(half[..., 1]), log_s.mean(axis=(0, 1)) + 0.5 * (log_s - log_s.mean(axis=(0, 1))))


def _committed(task_name: str) -> tuple[np.ndarray, np.ndarray]:
    folder = RESULTS / f"nuts-{task_name}"
    nuts = np.stack([np.load(path)["point_draws"] for path in sorted(folder.glob("chain-*.npz"))])
    ours = evidence.load(evidence_path(PACKAGE_DATA, task_name), "").point_draws
    return ours, nuts


@pytest.mark.parametrize("task_name", ["toy-gap", "digits"])
def test_the_decision_flips_when_a_committed_checks_nuts_draws_are_narrowed_or_shifted(task_name):
    """The committed check is not told apart; NUTS's draws narrowed by 30%, or shifted (regression: every mean by a
    tenth of the predictive's standard deviation; classification: every logit by 0.3), are."""
    kind = get_task(task_name).kind
    ours, nuts = _committed(task_name)
    assert crosscheck.permutation_test(ours, nuts, kind, width_errors=())["decision"] == "not told apart"
    narrower = crosscheck.narrowed(nuts, kind, 0.3).astype(np.float32)
    assert crosscheck.permutation_test(ours, narrower, kind, width_errors=())["decision"] == "told apart"
    if kind == "regression":
        shifted = nuts.copy()
        shifted[..., 0] += 0.1 * nuts[..., 1].mean()
    else:
        logit = np.log(nuts) - np.log1p(-nuts)
        shifted = (1 / (1 + np.exp(-(logit + 0.3)))).astype(np.float32)
    assert crosscheck.permutation_test(ours, shifted, kind, width_errors=())["decision"] == "told apart"


def test_the_power_grows_with_the_width_error_and_names_the_least_it_detects():
    ours, nuts = _committed("toy-gap")
    found = crosscheck.permutation_test(ours, nuts, "regression")
    power = [found["power"][f"{w:g}"] for w in crosscheck.WIDTH_ERRORS]
    assert power[-1] == 1.0 and power[0] < crosscheck.POWER
    detectable = found["detectable_width_error"]
    assert found["power"][f"{detectable:g}"] >= crosscheck.POWER
    assert all(found["power"][f"{w:g}"] < crosscheck.POWER for w in crosscheck.WIDTH_ERRORS if w < detectable)


def test_draws_kept_at_different_points_are_refused():
    with pytest.raises(ValueError, match="different points"):
        crosscheck.permutation_test(np.zeros((2, 3, 4, 1)), np.zeros((2, 3, 5, 1)), "classification")
