"""The leaderboard's statistics: intervals over seeds, ranks in the order of the means with what the seeds can tell
against the first (Holm-corrected Welch tests, the seeds a difference would need) in every format, the noise floor,
the summary across tasks, the log axis, and each note once.

The statistics are checked against SciPy's own implementations (``scipy.stats.sem``, ``t.interval``, Welch's
``ttest_ind(equal_var=False)``), not against a second copy of ours."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
import warnings

import numpy as np
import pytest
import scipy.stats
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from leaderboard import ranking, svg
from leaderboard.render import render
from leaderboard.store import RunRow

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FLOOR, SPREAD = 0.01, 0.001
"""The noise floor of W2 the rows below publish (unless told otherwise), and how far an exact run may score from it."""


def rows_of(method: str, w2: list[float], task: str = "toy-gap", budget: float = 10.0, notes: str = "",
            floor: float | None = FLOOR, label: str | None = None) -> list[RunRow]:
    """One regression run per value of ``w2`` (seeds 0, 1, ...), as a database would hold them, its W1 half of it; the
    reference's floor and spread of W1 are half of W2's."""
    return [RunRow(
        task=task, task_version=1, task_fingerprint="f", task_kind="regression", method=method, budget=budget,
        seed=seed, reference_sha256="r", config_hash="c0ffee00", config={}, source="run", predictions_sha256=f"p{seed}",
        epochs_used=budget, test_passes=1.0, wall_seconds=0.5, device="cpu", versions={},
        noise_floor=None if floor is None else {"all": {"w2": floor, "w1": floor / 2}}, reliability=None,
        submitter="alice", noise_floor_spread=None if floor is None else {"all": {"w2": SPREAD, "w1": SPREAD / 2}},
        notes=notes, finished_at=None, submitted_at="2025-01-01T00:00:00+00:00",
        metrics={"all": {"w2": value, "w1": value / 2}}, label=label) for seed, value in enumerate(w2)]


def around(mean: float, std: float) -> list[float]:
    """Three seeds with exactly this mean and sample standard deviation (ddof 1)."""
    return [mean - std, mean, mean + std]


# --- the interval of a mean -----------------------------------------------------------------------------------

seed_values = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=12)


@PROPERTY
@given(seed_values)
def test_the_interval_is_scipys_student_t_interval_of_the_mean(values):
    value = ranking.estimate(values)
    assert value.n == len(values) and value.mean == pytest.approx(np.mean(values), abs=1e-9)
    assert value.se == pytest.approx(scipy.stats.sem(values), rel=1e-9, abs=1e-12)  # ddof = 1
    if value.se > 0:
        low, high = scipy.stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=scipy.stats.sem(values))
        assert value.interval == pytest.approx((low, high), rel=1e-9, abs=1e-9)


def test_one_seed_has_no_interval_and_says_n_1():
    value = ranking.estimate([0.25])
    assert (value.mean, value.n, value.std, value.se, value.half_width, value.interval) == (0.25, 1, None, None, None,
                                                                                            None)
    table = "".join(line for line in render(rows_of("a", [0.25]), "md").splitlines() if line.startswith("|"))
    assert "0.2500 (n=1)" in table and " ± " not in table


# --- Welch's test and the ranks -------------------------------------------------------------------------------

@PROPERTY
@given(seed_values, seed_values)
def test_two_entries_differ_exactly_when_welchs_test_rejects_at_5_percent(a, b):
    assume(np.std(a) > 1e-6 and np.std(b) > 1e-6)
    p = scipy.stats.ttest_ind(a, b, equal_var=False).pvalue
    assume(abs(p - 0.05) > 1e-6)  # not on the boundary, where round-off may decide
    assert ranking.significantly_different(ranking.estimate(a), ranking.estimate(b)) == (p < 0.05)


def test_the_same_value_in_every_seed_is_one_mean_whatever_the_seed_count():
    """Seven seeds of W2 0.1 average to 0.09999999999999999 with a spread of 1.5e-17: without the round-off rule,
    Welch's test told them apart from two seeds of exactly 0.1."""
    assert not ranking.significantly_different(ranking.estimate([0.1] * 2), ranking.estimate([0.1] * 7))
    assert ranking.significantly_different(ranking.estimate([0.1] * 2), ranking.estimate([0.1 + 1e-9] * 7))


def test_the_issues_example_orders_by_the_means_and_says_the_seeds_cannot_tell_in_every_format():
    """0.1032 ± 0.0022 and 0.1036 ± 0.0019 (sample standard deviations, 3 seeds): Welch's p is 0.82, so the second is
    ranked 2 but not told apart from the first, and its difference would need hundreds of seeds; 0.2 is told apart."""
    rows = rows_of("best", around(0.1032, 0.0022)) + rows_of("close", around(0.1036, 0.0019)) + rows_of(
        "far", around(0.2, 0.002))
    entries = ranking.tracks(rows)[0].entries
    assert [(e.method, e.rank, e.tied, e.apart_from_first) for e in entries] == [
        ("best", 1, False, None), ("close", 2, False, False), ("far", 3, False, True)]
    needed = entries[1].seeds_needed
    assert needed > 100 and entries[2].seeds_needed is None
    table = [line.split("|") for line in render(rows, "md").splitlines() if re.match(r"\| [123] ", line)]
    assert [(c[1].strip(), c[2].strip()) for c in table] == [("1", "best"), ("2", "close"), ("3", "far")]
    header = next(line for line in render(rows, "md").splitlines() if line.startswith("| rank"))
    columns = [cell.strip() for cell in header.split("|")]
    assert [(c[columns.index("told from #1")].strip(), c[columns.index("seeds needed")].strip()) for c in table] == [
        ("first", ""), ("no", f"{needed:.0f}"), ("yes", "")]
    entries = json.loads(render(rows, "json"))["tracks"][0]["entries"]
    assert [(e["method"], e["rank"], e["tied"], e["apart_from_first"], e["seeds_needed"]) for e in entries] == [
        ("best", 1, False, None, None), ("close", 2, False, False, needed), ("far", 3, False, True, None)]
    low, high = entries[0]["metrics"]["w2"]["ci"]
    assert (low + high) / 2 == pytest.approx(0.1032) and (high - low) / 2 == pytest.approx(
        scipy.stats.t.ppf(0.975, 2) * 0.0022 / math.sqrt(3))
    records = [r for r in csv.DictReader(io.StringIO(render(rows, "csv"))) if r["rank"]]
    assert [(r["method"], r["rank"], r["tied"], r["apart_from_first"], r["seeds_needed"]) for r in records] == [
        ("best", "1", "0", "", ""), ("close", "2", "0", "0", f"{needed:g}"), ("far", "3", "0", "1", "")]
    assert float(records[0]["w2_se"]) == pytest.approx(0.0022 / math.sqrt(3))
    cells = [re.findall(r"<td>([^<]*)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", render(rows, "html"))]
    assert [(c[0].strip(), c[1].strip()) for c in cells if len(c) > 2 and c[0].strip()] == [
        ("1", "best"), ("2", "close"), ("3", "far")]


def test_equal_means_share_a_rank_marked_in_every_format():
    rows = rows_of("a", around(0.10, 0.001)) + rows_of("b", around(0.10, 0.004)) + rows_of("c", around(0.14, 0.001))
    entries = ranking.tracks(rows)[0].entries
    assert [(e.method, e.rank, e.tied) for e in entries] == [("a", 1, True), ("b", 1, True), ("c", 3, False)]
    assert [e.apart_from_first for e in entries] == [None, None, True]
    assert [line.split("|")[1].strip() for line in render(rows, "md").splitlines() if re.match(r"\| =?\d", line)] == [
        "=1", "=1", "3"]


def test_entries_the_seeds_tell_apart_are_said_to_be():
    rows = rows_of("a", around(0.10, 0.001)) + rows_of("b", around(0.12, 0.001)) + rows_of("c", around(0.14, 0.001))
    entries = ranking.tracks(rows)[0].entries
    assert [(e.method, e.rank, e.apart_from_first, e.in_top_group) for e in entries] == [
        ("a", 1, None, True), ("b", 2, True, False), ("c", 3, True, False)]


def test_a_single_seed_is_ranked_by_its_value_and_told_from_no_one():
    rows = rows_of("a", around(0.10, 0.001)) + rows_of("one", [0.11]) + rows_of("b", around(0.30, 0.001))
    entries = ranking.tracks(rows)[0].entries
    assert [(e.method, e.rank, e.apart_from_first, e.seeds_needed) for e in entries] == [
        ("a", 1, None, None), ("one", 2, None, None), ("b", 3, True, None)]
    assert "| n/a " in render(rows, "md")


def welch_p(a: list[float], b: list[float]) -> float | None:
    """SciPy's two-sided Welch p-value of seeds ``a`` against ``b`` (None for one seed; means equal up to round-off:
    ``ranking.ROUND_OFF``, are equal)."""
    if len(a) < 2 or len(b) < 2:
        return None
    if abs(np.mean(a) - np.mean(b)) <= 1e-12:
        return 1.0
    if np.var(a) == 0 and np.var(b) == 0:
        return 0.0
    with warnings.catch_warnings():  # SciPy warns of seeds equal up to round-off, whose spread it then computes
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(scipy.stats.ttest_ind(a, b, equal_var=False).pvalue)


def holm(p_values: dict, level: float = 0.05) -> set:
    """Holm's procedure as its definition states it: reject H_(1..j) for the largest j with p_(i) <= level / (m - i + 1)
    for every i <= j (1-based, p sorted increasingly)."""
    ordered = sorted(p_values, key=p_values.get)
    m, rejected = len(ordered), set()
    for i, key in enumerate(ordered, start=1):
        if not all(p_values[ordered[k - 1]] <= level / (m - k + 1) for k in range(1, i + 1)):
            break
        rejected.add(key)
    return rejected


entry_values = st.lists(st.sampled_from([0.10, 0.11, 0.12, 0.13, 0.15, 0.2, 0.3]), min_size=1, max_size=4)
"""W2 over 1-4 seeds from a small set of values, so that equal means, zero spread and single seeds all occur."""


@PROPERTY
@given(st.lists(entry_values, min_size=1, max_size=6))
def test_each_rank_is_one_plus_the_entries_with_better_means_and_holm_tells_them_from_the_first(board):
    """No noise floor: rank = 1 + the entries whose mean is lower; the table is in rank order; told from #1 is Holm's
    procedure over SciPy's Welch p-values against the first."""
    rows = [row for index, values in enumerate(board) for row in rows_of(f"m{index}", values, floor=None)]
    entries = ranking.tracks(rows)[0].entries
    values = {f"m{index}": v for index, v in enumerate(board)}
    means = {name: float(np.mean(v)) for name, v in values.items()}
    for entry in entries:
        better = [o for o in entries if means[o.method] < means[entry.method] - 1e-12 * max(1, means[entry.method])]
        assert entry.rank == 1 + len(better), (entry.method, [e.method for e in better])
        assert entry.tied == (sum(other.rank == entry.rank for other in entries) > 1)
        assert entry.within_floor is None
    assert [e.rank for e in entries] == sorted(e.rank for e in entries)
    first = values[entries[0].method]
    tested = {e.method: welch_p(first, values[e.method]) for e in entries if e.rank > 1}
    rejected = holm({name: p for name, p in tested.items() if p is not None})
    assert {e.method: e.apart_from_first for e in entries if e.rank > 1} == {
        name: None if p is None else name in rejected for name, p in tested.items()}
    assert all(e.apart_from_first is None for e in entries if e.rank == 1)


@PROPERTY
@given(st.lists(entry_values, min_size=2, max_size=5), entry_values)
def test_a_new_entry_never_reorders_the_others(board, newcomer):
    def order(boards):
        rows = [row for index, values in boards for row in rows_of(f"m{index}", values, floor=None)]
        return [e.method for e in ranking.tracks(rows)[0].entries]

    before = order(list(enumerate(board)))
    after = [name for name in order([*enumerate(board), (len(board), newcomer)]) if name != f"m{len(board)}"]
    ranks = {}
    for name in before:  # entries of equal means may come in either order; their ranks are equal
        ranks[name] = sum(np.mean(board[int(other[1:])]) < np.mean(board[int(name[1:])]) - 1e-12 for other in before)
    assert sorted(after, key=lambda name: ranks[name]) == sorted(before, key=lambda name: ranks[name])


@PROPERTY
@given(st.floats(0.01, 0.5), st.floats(0.0001, 0.01), st.floats(0.001, 0.05), st.floats(0.05, 1.0))
def test_a_noisier_entry_never_outranks_one_with_a_better_mean(mean, tight, gap, wide):
    """However wide its seeds scatter, an entry whose mean is worse is ranked below one whose mean is better."""
    rows = rows_of("steady", around(mean, tight)) + rows_of("noisy", around(mean + gap, wide))
    assert [(e.method, e.rank) for e in ranking.tracks(rows)[0].entries] == [("steady", 1), ("noisy", 2)]


def test_holm_rejects_as_its_definition_says():
    p_values = {"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}
    assert ranking.holm_rejected(p_values, 0.05) == holm(p_values) == {"d", "a"}  # 0.005 <= 0.0125, 0.01 <= 0.0167
    assert ranking.holm_rejected({"a": 0.01, "b": 0.02}, 0.05) == {"a", "b"}  # 0.01 <= 0.025, then 0.02 <= 0.05
    assert ranking.holm_rejected({"a": 0.03, "b": 0.026}, 0.05) == set()  # 0.026 > 0.025 stops it
    assert ranking.holm_rejected({"a": 0.01, "b": 0.04}, 0.05) == {"a", "b"}  # Bonferroni (0.025 each) keeps b
    assert ranking.holm_rejected({}, 0.05) == set()


SIMULATIONS = 20000
"""Pairs of entries simulated per count: a simulated power p has the Monte Carlo standard error sqrt(p (1 - p) / 20000),
0.0028 at p = 0.8; the checks allow 4 of them (a false alarm about once in 16000 checks)."""


def simulated_power(rng, s_a: float, s_b: float, d: float, n: int, alpha: float) -> tuple[float, float]:
    """How often Welch's two-sided test at ``alpha`` tells apart ``n`` seeds of N(0, s_a^2) from ``n`` of
    N(d, s_b^2), over :data:`SIMULATIONS` pairs (vectorised; each p-value is SciPy's t survival function at the
    Welch-Satterthwaite degrees of freedom), and its Monte Carlo standard error."""
    a, b = rng.normal(0.0, s_a, (SIMULATIONS, n)), rng.normal(d, s_b, (SIMULATIONS, n))
    share_a, share_b = a.var(axis=1, ddof=1) / n, b.var(axis=1, ddof=1) / n
    t = (b.mean(axis=1) - a.mean(axis=1)) / np.sqrt(share_a + share_b)
    degrees = (share_a + share_b) ** 2 / (share_a ** 2 / (n - 1) + share_b ** 2 / (n - 1))
    rate = float(np.mean(2 * scipy.stats.t.sf(np.abs(t), degrees) < alpha))
    return rate, math.sqrt(rate * (1 - rate) / SIMULATIONS)


@pytest.mark.parametrize(("s_a", "s_b", "d", "comparisons"), [
    (0.01, 0.01, 0.028, 3),  # few seeds, where the normal approximation asked for too few
    (0.02, 0.02, 0.011, 1), (0.02, 0.02, 0.011, 4), (0.005, 0.02, 0.012, 14)])  # many seeds; unequal spreads
def test_the_seeds_needed_are_the_fewest_that_tell_such_a_difference_apart_80_percent_of_the_time(s_a, s_b, d,
                                                                                                   comparisons):
    """Simulation with a known answer: entries of the planned count n, means d apart with standard deviations s_a and
    s_b, are told apart by Welch's test at the Bonferroni level 0.05 / comparisons with the power the rule computed
    (:func:`ranking.welch_power`) and at least 80% of the time, and at n - 1 seeds less than 80% of the time; within 4
    Monte Carlo standard errors (:data:`SIMULATIONS`)."""
    rng = np.random.default_rng(1)
    alpha = 0.05 / comparisons
    n = int(ranking.seeds_to_tell_apart(ranking.Estimate(0.1, 3, s_a, None, None),
                                        ranking.Estimate(0.1 + d, 3, s_b, None, None), comparisons))
    power, error = simulated_power(rng, s_a, s_b, d, n, alpha)
    assert abs(power - ranking.welch_power(d, s_a ** 2, s_b ** 2, n, alpha)) < 4 * error, (n, power)
    assert power >= 0.8 - 4 * error, (n, power)
    fewer, error = simulated_power(rng, s_a, s_b, d, n - 1, alpha)
    assert n == 2 or fewer < 0.8 + 4 * error, (n - 1, fewer)


def test_the_seeds_needed_are_infinite_for_equal_means_and_unknown_for_one_seed():
    assert ranking.seeds_to_tell_apart(ranking.estimate([0.1, 0.2]), ranking.estimate([0.2, 0.1]), 3) == math.inf
    assert ranking.seeds_to_tell_apart(ranking.estimate([0.1]), ranking.estimate([0.2, 0.1]), 3) is None


def test_classification_orders_by_agreement_then_total_variation():
    def rows(method, agreement, tv):
        return [RunRow(task="digits", task_version=1, task_fingerprint="f", task_kind="classification",
                       method=method, budget=10.0, seed=seed, reference_sha256="r", config_hash="c", config={},
                       source="run", predictions_sha256=f"p{seed}", epochs_used=10.0, test_passes=1.0,
                       wall_seconds=1.0, device="cpu", versions={}, noise_floor=None, reliability=None,
                       submitter="a", notes="", finished_at=None, submitted_at="now",
                       metrics={"all": {"agreement": a, "total_variation": t}})
                for seed, (a, t) in enumerate(zip(agreement, tv))]

    ahead, behind = [0.96, 0.97, 0.98], [0.95, 0.96, 0.97]  # Welch's p = 0.29: not told apart
    entries = ranking.tracks(rows("blurred", ahead, around(0.20, 0.001)) + rows("sharper", behind, around(0.05, 0.001))
                             )[0].entries
    assert [(e.method, e.rank, e.apart_from_first) for e in entries] == [("blurred", 1, None), ("sharper", 2, False)]
    entries = ranking.tracks(rows("blurred", ahead, around(0.20, 0.001)) + rows("sharper", ahead, around(0.05, 0.001))
                             )[0].entries
    assert [(e.method, e.rank) for e in entries] == [("sharper", 1), ("blurred", 2)], "equal agreement: TV decides"


# --- the noise floor ------------------------------------------------------------------------------------------

def test_an_entry_within_the_noise_floor_is_said_so_and_keeps_its_place():
    """At W1 0.0055 with a standard error of 0.00029 and the floor at 0.005 with a spread of 0.0005 (W2 twice each),
    an entry is as good as the reference can tell (0.0005 above the floor, within 1.4 x sqrt(0.0005^2 + 0.00029^2) =
    0.0008); it keeps its place behind an entry at 0.0025; an entry at 0.025 is not within the floor."""
    rows = (rows_of("closest", around(0.005, 0.0002)) + rows_of("at-floor", around(0.011, 0.001))
            + rows_of("beyond", around(0.05, 0.001)))
    entries = ranking.tracks(rows)[0].entries
    assert [(e.method, e.rank, e.within_floor) for e in entries] == [
        ("closest", 1, True), ("at-floor", 2, True), ("beyond", 3, False)]
    table = [line for line in render(rows, "md").splitlines() if re.match(r"\| [123] ", line)]
    assert [line.split("|")[-7].strip() for line in table] == ["yes", "yes", "no"]  # the within-floor column
    records = [r for r in csv.DictReader(io.StringIO(render(rows, "csv"))) if r["rank"]]
    assert [r["within_noise_floor"] for r in records] == ["1", "1", "0"]
    assert [e["within_noise_floor"] for e in json.loads(render(rows, "json"))["tracks"][0]["entries"]] == [
        True, True, False]
    # without a published floor, or without its spread, the ranks are the same, and nothing is said of a floor
    for strip in ({"noise_floor": None}, {"noise_floor_spread": None}):
        entries = ranking.tracks([dataclasses.replace(r, **strip) for r in rows])[0].entries
        assert [(e.method, e.rank, e.within_floor) for e in entries] == [("closest", 1, None), ("at-floor", 2, None),
                                                                        ("beyond", 3, None)]
    assert "| n/a " in render([dataclasses.replace(r, noise_floor=None) for r in rows], "md")


def _digits_track(spread: float = 0.002) -> ranking.Track:
    return ranking.Track("digits", 1, "classification", "r", 10.0,
                         {"all": {"agreement": 0.99, "total_variation": 0.01}},
                         noise_floor_spread={"all": {"agreement": spread, "total_variation": spread}})


def _at_excess(floor: float, excess: float, spread: float, higher_is_better: bool, std: float = 0.001) -> list[float]:
    """Three seeds whose mean is worse than ``floor`` by ``excess`` x sqrt(spread^2 + se^2)."""
    se = std / math.sqrt(3)
    worse_by = excess * math.hypot(spread, se)
    return around(floor - worse_by if higher_is_better else floor + worse_by, std)


@pytest.mark.parametrize("excess, within", [(0.99, True), (1.01, False)])
def test_total_variation_is_held_to_the_critical_value_on_each_side_and_agreement_is_not_judged(excess, within):
    """A total variation worse than the floor by 0.99 x the critical value's reach is within floor, by 1.01 x it is
    not, whatever the agreement: its floor does not hold on the references' own chains (FLOOR_METRICS), so an
    agreement far below its floor neither refuses an entry nor, at its floor, admits one."""
    track = _digits_track()
    total_variation = _at_excess(track.floor("total_variation"), excess * ranking.FLOOR_CRITICAL, 0.002, False)
    for agreement in (around(0.995, 0.001), _at_excess(track.floor("agreement"), 10 * ranking.FLOOR_CRITICAL, 0.002,
                                                       True)):
        entry = ranking.Entry("e", "c", {}, "run", metrics={"agreement": agreement, "total_variation": total_variation})
        assert ranking.within_noise_floor(track, entry) is within


@pytest.mark.parametrize("excess, within", [(0.99, True), (1.01, False)])
def test_w1_is_held_to_the_critical_value_on_each_side_and_w2_is_not_judged(excess, within):
    """As for total variation: regression is judged on W1, whose floor holds on the references' own chains, and a W2
    far above its floor changes nothing."""
    track = ranking.Track("toy-gap", 1, "regression", "r", 10.0, {"all": {"w2": 0.02, "w1": 0.01}},
                          noise_floor_spread={"all": {"w2": 0.002, "w1": 0.001}})
    w1 = _at_excess(0.01, excess * ranking.FLOOR_CRITICAL, 0.001, False)
    for w2 in (around(0.02, 0.002), _at_excess(0.02, 10 * ranking.FLOOR_CRITICAL, 0.002, False)):
        entry = ranking.Entry("e", "c", {}, "run", metrics={"w2": w2, "w1": w1})
        assert ranking.within_noise_floor(track, entry) is within
    assert ranking.within_noise_floor(track, ranking.Entry("e", "c", {}, "run", metrics={"w2": around(0.02, 0.002)})) \
        is None, "no W1 among the entry's metrics: nothing to judge"


@pytest.mark.parametrize("spread, within", [(0.002, True), (0.0005, False)])
def test_the_floors_spread_widens_what_is_within_floor(spread, within):
    """The reference's own error counts: total variation 0.0025 worse than the floor with a standard error of 0.00058
    is within a floor whose spread is 0.002 (1.20 x sqrt(0.002^2 + 0.00058^2)), not one whose spread is 0.0005
    (3.3 x the same); the seeds' spread alone would refuse both."""
    track = _digits_track(spread)
    metrics = {"agreement": around(0.995, 0.001), "total_variation": around(0.01 + 0.0025, 0.001)}
    excess = ranking.floor_excess(0.0025, 0.001 / math.sqrt(3), spread)
    assert (excess <= ranking.FLOOR_CRITICAL) is within
    assert ranking.within_noise_floor(track, ranking.Entry("e", "c", {}, "run", metrics=metrics)) is within


def test_one_seed_is_not_tested_and_a_mean_at_the_floor_is_within():
    track = _digits_track(spread=0.0)
    one_seed = ranking.Entry("d", "c", {}, "run", metrics={"agreement": [0.995], "total_variation": [0.005]})
    assert ranking.within_noise_floor(track, one_seed) is None, "one seed has no spread to test with"
    exact = ranking.Entry("e", "c", {}, "run", metrics={"agreement": [0.99] * 3, "total_variation": [0.01] * 3})
    assert ranking.within_noise_floor(track, exact) is True, "no spread at all: at the floor is within it"
    assert ranking.floor_excess(1e-9, 0.0, 0.0) == math.inf


# --- the summary across tasks ---------------------------------------------------------------------------------

@pytest.fixture
def two_tasks() -> list[RunRow]:
    """At budget 10: a first on both tasks; b second on toy-gap, not told apart from a there, and third on
    diabetes-gap; c only on diabetes-gap, second; at budget 100 one task only (no summary there)."""
    return (rows_of("a", around(0.10, 0.001)) + rows_of("b", around(0.1005, 0.002)) + rows_of("d", around(0.5, 0.01))
            + rows_of("a", around(0.10, 0.001), task="diabetes-gap", floor=None)
            + rows_of("c", around(0.20, 0.001), task="diabetes-gap", floor=None)
            + rows_of("b", around(0.30, 0.001), task="diabetes-gap", floor=None)
            + rows_of("a", around(0.10, 0.001), budget=100.0))


def test_the_summary_gives_each_method_its_mean_rank_over_the_tasks_in_every_format(two_tasks):
    found = ranking.standings(ranking.tracks(two_tasks))
    assert [(s.budget, ranking.entry_name(s.entry), s.ranks, s.mean_rank, s.firsts, s.within_floor, s.floors)
            for s in found] == [(10.0, "a", [1, 1], 1.0, 2, 0, 1), (10.0, "c", [2], 2.0, 0, 0, 0),
                                (10.0, "b", [3, 2], 2.5, 1, 0, 1), (10.0, "d", [3], 3.0, 0, 0, 1)]
    md = render(two_tasks, "md")
    assert md.startswith("## How to read the board\n") and md.count("## Summary across tasks\n") == 1
    assert [[cell.strip() for cell in line.split("|")[1:-1]] for line in md.split("## toy-gap")[0].splitlines()
            if line.startswith("| 10")] == [["10", "a", "2", "1.00", "1–1", "2/2", "0/1"],
                                            ["10", "c", "1", "2.00", "2–2", "0/1", "n/a"],
                                            ["10", "b", "2", "2.50", "2–3", "1/2", "0/1"],
                                            ["10", "d", "1", "3.00", "3–3", "0/1", "0/1"]]
    summary = json.loads(render(two_tasks, "json"))["summary"]
    assert [(s["method"], s["mean_rank"], s["best_rank"], s["worst_rank"], s["in_top_group"]) for s in summary] == [
        ("a", 1.0, 1, 1, 2), ("c", 2.0, 2, 2, 0), ("b", 2.5, 2, 3, 1), ("d", 3.0, 3, 3, 0)]
    assert summary[2]["ranks"] == [{"task": "diabetes-gap", "task_version": 1, "rank": 3, "tied": False},
                                   {"task": "toy-gap", "task_version": 1, "rank": 2, "tied": False}]
    records = [r for r in csv.DictReader(io.StringIO(render(two_tasks, "csv"))) if r["section"] == "summary"]
    assert [(r["method"], r["budget"], r["tasks"], r["mean_rank"], r["worst_rank"], r["in_top_group"])
            for r in records] == [("a", "10", "2", "1.0", "1", "2"), ("c", "10", "1", "2.0", "2", "0"),
                                  ("b", "10", "2", "2.5", "3", "1"), ("d", "10", "1", "3.0", "3", "0")]
    page = render(two_tasks, "html")
    summary_table = page.split('<section id="summary">')[1].split("</section>")[0]
    assert "Summary across tasks" in summary_table and re.search(r"<td>b\s*</td><td>2\s*</td><td>2.50\s*</td>",
                                                                 summary_table)


def test_the_page_styles_each_noise_floor_row_and_no_other(two_tasks):
    """The summary's first row was styled as a noise floor: the style now goes to the floor rows alone, found by
    their place, so an entry whose method is named like the floor row is not one."""
    page = render(two_tasks + rows_of("HMC noise floor", around(0.3, 0.01)), "html")
    summary = page.split('<section id="summary">')[1].split("</section>")[0]
    assert 'class="floor"' not in summary
    floors = re.findall(r'<tr class="floor">(.*?)</tr>', page)
    assert len(floors) == 3 and all(re.match(r"<td>\s*</td><td>HMC noise floor", row) for row in floors), floors
    assert "tbody tr.floor td" in page and "first-child" not in page


def test_a_board_of_one_task_has_no_summary():
    rows = rows_of("a", around(0.1, 0.01)) + rows_of("b", around(0.2, 0.01))
    assert "Summary" not in render(rows, "md") and "summary" not in render(rows, "html")
    assert json.loads(render(rows, "json"))["summary"] == []


# --- the plots' y axis ----------------------------------------------------------------------------------------

def y_ticks(chart: str) -> list[tuple[float, str]]:
    """(pixel y, label) of each y tick (their labels end at the axis)."""
    return [(float(y) - 4, text) for y, text in
            re.findall(r'<text x="[\d.]+" y="([\d.]+)" class="tick" text-anchor="end">([^<]*)</text>', chart)]


def _bar(mean: float, error: float | None) -> tuple[float | None, float | None]:
    return (None, None) if error is None else (mean - error, mean + error)


def chart_of(means: list[float], floor: float | None = None, error: float | None = 0.01) -> str:
    series = [svg.Series(f"m{i}", ((10.0, mean, *_bar(mean, error)), (100.0, mean * 0.9, *_bar(mean * 0.9, error))),
                         svg.series_style(i, 0))
              for i, mean in enumerate(means)]
    if floor is not None:
        series.append(svg.horizontal("floor", floor))
    return svg.line_chart("t", series, "budget", "w2", log_x=True)


def test_values_spanning_more_than_a_decade_get_a_log_axis_with_round_ticks():
    chart = chart_of([1.07, 0.08, 0.06], floor=0.034)
    ticks = y_ticks(chart)
    assert ">w2 (log scale)<" in chart
    assert [text for _, text in ticks] == ["0.05", "0.1", "0.2", "0.5", "1"]
    # log-proportional: 0.1 -> 1 is as far as 0.05 -> 0.5, and twice as far as 0.1 -> 0.2 -> ... by log10(2) / 1
    position = dict((text, y) for y, text in ticks)
    assert position["0.1"] - position["1"] == pytest.approx(position["0.05"] - position["0.5"], abs=0.11)
    decade = position["0.1"] - position["1"]
    assert position["0.1"] - position["0.2"] == pytest.approx(decade * math.log10(2), abs=0.11)


def test_values_within_a_decade_keep_a_linear_axis():
    chart = chart_of([0.5, 0.2, 0.1])
    assert "log scale)<" not in chart
    steps = np.diff([float(text) for _, text in y_ticks(chart)])
    assert np.allclose(steps, steps[0])


def test_the_choice_of_axis_follows_the_span_of_the_means():
    assert svg.log_scale_wanted([0.034, 1.07]) and svg.log_scale_wanted([0.099, 1.0])
    assert not svg.log_scale_wanted([0.1, 1.0]) and not svg.log_scale_wanted([0.2, 1.07])
    assert not svg.log_scale_wanted([-0.5, 10.0]) and not svg.log_scale_wanted([0.0, 10.0]), "log needs positives"


def test_on_a_log_axis_an_error_bar_below_zero_runs_to_the_bottom():
    chart = chart_of([1.0, 0.02], error=0.05)  # 0.02 - 0.05 < 0
    bottom = svg.MARGIN_TOP + svg.HEIGHT - svg.MARGIN_TOP - svg.MARGIN_BOTTOM
    bars = [tuple(map(float, bar)) for bar in re.findall(
        r'<line x1="[\d.]+" y1="([\d.]+)" x2="[\d.]+" y2="([\d.]+)" stroke="#[0-9a-f]+"/>', chart)]
    assert any(y1 == bottom for y1, _ in bars) and all(svg.MARGIN_TOP <= y <= bottom for bar in bars for y in bar)


def agreement_chart(means: list[float], error: float = 0.005) -> str:
    series = [svg.Series(f"m{i}", ((10.0, mean, mean - error, mean + error),), svg.series_style(i, 0))
              for i, mean in enumerate(means)]
    return svg.line_chart("t", [*series, svg.horizontal("floor", 0.997)], "budget", "agreement", log_x=True)


def test_one_method_far_off_is_an_arrow_at_the_edge_and_the_others_keep_the_axis():
    """Agreement 0.60 beside 0.97-0.99 pulled the linear axis down to 0.6 and squashed the others into a sliver: it is
    now drawn as an arrow at the bottom edge naming its value, and the axis spans the others and the floor."""
    chart = agreement_chart([0.975, 0.98, 0.985, 0.99, 0.60])
    values = [float(text) for _, text in y_ticks(chart)]
    assert min(values) >= 0.96 and max(values) <= 1.0, values
    arrows = re.findall(r'<polygon points="[^"]*" fill="#[0-9a-f]+" class="off-scale"><title>([^<]*)</title>', chart)
    assert arrows == ["m4: 0.6 at 10, off the scale"]
    assert svg.off_scale(svg_series := [svg.Series(f"m{i}", ((10.0, m, None, None),), svg.series_style(i, 0))
                                       for i, m in enumerate([0.975, 0.98, 0.985])]) == set(), svg_series
    # two points at an x are never called off the scale of each other; the others' spread decides, per x
    assert svg.off_scale([svg.Series("a", ((10.0, 0.6, None, None), (100.0, 0.98, None, None)), svg.series_style(0, 0)),
                          svg.Series("b", ((10.0, 0.62, None, None), (100.0, 0.985, None, None)), svg.series_style(1, 0)),
                          svg.Series("c", ((10.0, 0.61, None, None), (100.0, 0.99, None, None)), svg.series_style(2, 0))
                          ]) == set(), "a low budget where every method is low is no outlier"
    assert "off-scale" not in agreement_chart([0.975, 0.98, 0.985, 0.99])


def test_bounded_metrics_intervals_stay_in_their_range_in_every_format():
    """Agreement 0.995 ± 0.0124 (3 seeds) would reach 1.007: its interval is cut at 1 in JSON, CSV and the plot."""
    rows = [RunRow(task="digits", task_version=1, task_fingerprint="f", task_kind="classification", method="m",
                   budget=10.0, seed=seed, reference_sha256="r", config_hash="c", config={}, source="run",
                   predictions_sha256=f"p{seed}", epochs_used=10.0, test_passes=1.0, wall_seconds=1.0, device="cpu",
                   versions={}, noise_floor=None, reliability=None, submitter="a", notes="", finished_at=None,
                   submitted_at="now", metrics={"all": {"agreement": a, "total_variation": t}})
            for seed, (a, t) in enumerate(zip([0.99, 0.995, 1.0], [0.001, 0.004, 0.007]))]
    statistics = json.loads(render(rows, "json"))["tracks"][0]["entries"][0]["metrics"]
    assert statistics["agreement"]["ci"][1] == 1.0 and statistics["agreement"]["ci"][0] < 0.99
    assert statistics["total_variation"]["ci"][0] == 0.0 and statistics["total_variation"]["ci"][1] > 0.007
    record = next(r for r in csv.DictReader(io.StringIO(render(rows, "csv"))) if r["rank"])
    assert float(record["agreement_ci_high"]) == 1.0 and float(record["total_variation_ci_low"]) == 0.0
    assert ranking.bounded_interval("log_likelihood", ranking.estimate([-1.0, 0.0, 1.0]))[0] < -1.0, "unbounded"


def test_the_pages_fidelity_chart_turns_logarithmic_when_one_method_is_far_off():
    far = rows_of("near", around(0.05, 0.002)) + rows_of("far", around(1.07, 0.01))
    near = rows_of("near", around(0.05, 0.002)) + rows_of("close", around(0.08, 0.002))
    assert "w2 (log scale)" in render(far, "html") and "w2 (log scale)" not in render(near, "html")


# --- notes ----------------------------------------------------------------------------------------------------

def test_each_distinct_note_is_shown_once_with_the_entries_it_came_with():
    rows = (rows_of("a", [0.1, 0.11], notes="sweep of 2025") + rows_of("b", [0.2, 0.21], notes="sweep of 2025")
            + rows_of("c", [0.3, 0.31], notes="tuned by hand") + rows_of("a", [0.1], task="diabetes-gap",
                                                                         notes="sweep of 2025"))
    md, page = render(rows, "md"), render(rows, "html")
    assert md.count("sweep of 2025") == 1 and page.count("sweep of 2025") == 1
    assert ("- **diabetes-gap v1, budget 10 epochs: every entry; toy-gap v1, budget 10 epochs: a, b**: sweep of 2025\n"
            in md)
    assert "- **toy-gap v1, budget 10 epochs: c**: tuned by hand\n" in md
    everywhere = rows_of("a", [0.1, 0.11], notes="one note") + rows_of("b", [0.2, 0.21], notes="one note")
    assert render(everywhere, "md").count("one note") == 1 and "- **every entry**: one note\n" in render(everywhere,
                                                                                                          "md")
    assert "<li>every entry: one note</li>" in render(everywhere, "html")


def test_what_a_method_warned_of_a_seeds_run_is_shown_with_the_entry_in_every_format():
    """Laplace's MAP that did not converge, say: its warning reaches the board as a note of the entry and seed, in
    Markdown, HTML, CSV and JSON; an entry without warnings has none."""
    warned = "the MAP has not converged (gradient ratio 60, above 1); raise the budget"
    rows = rows_of("laplace", around(0.02, 0.001)) + rows_of("sgd", around(0.03, 0.001))
    rows[1] = dataclasses.replace(rows[1], warnings=(warned,))
    entries = {e.method: e for e in ranking.tracks(rows)[0].entries}
    note = f"{ranking.METHOD_WARNED} (seed 1): {warned}"
    assert entries["laplace"].notes == {note} and entries["sgd"].notes == set()
    assert note in render(rows, "md") and note in render(rows, "html")
    records = [r for r in csv.DictReader(io.StringIO(render(rows, "csv"))) if r["rank"]]
    assert {r["method"]: r["notes"] for r in records} == {"laplace": note, "sgd": ""}
    by_method = {e["method"]: e["notes"] for e in json.loads(render(rows, "json"))["tracks"][0]["entries"]}
    assert by_method == {"laplace": [note], "sgd": []}


def test_the_seeds_needed_are_students_t_and_never_fewer_than_the_entry_holds_plus_one():
    """Three seeds each, 0.028 apart with a spread of 0.01, three comparisons and none told apart: the normal
    approximation asked for 3 seeds per entry, which they hold; Welch's t-test needs 5 (the rule's power is pinned by
    simulation: benchmarks/seeds_needed_check.py). An entry of 20 tight seeds not told from a first of 2 scattered
    ones: the plan for equal counts (4) is fewer than it holds, so it asks for 21."""
    rows = rows_of("best", around(0.10, 0.01)) + [row for i in range(3)
                                                  for row in rows_of(f"m{i}", around(0.128 + 0.0005 * i, 0.01))]
    entries = ranking.tracks(rows)[0].entries
    assert [(e.apart_from_first, e.seeds_needed) for e in entries[1:]] == [(False, 5.0)] * 3
    d, alpha = 0.028, 0.05 / 3
    z = scipy.stats.norm.ppf(1 - alpha / 2) + scipy.stats.norm.ppf(0.8)
    assert math.ceil(2 * z ** 2 * 0.01 ** 2 / d ** 2) == 3, "the normal approximation's count"
    rows = rows_of("first", [0.10, 0.12]) + rows_of("tight", [0.15 + 1e-4 * (seed % 2) for seed in range(20)])
    tight = ranking.tracks(rows)[0].entries[1]
    first, second = (ranking.estimate([0.10, 0.12]), tight.estimate("w2"))
    assert tight.apart_from_first is False and ranking.seeds_to_tell_apart(first, second, 1) == 4.0
    assert tight.seeds_needed == 21.0

