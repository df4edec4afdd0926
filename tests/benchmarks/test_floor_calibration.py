"""The kept simulation of "within floor" (benchmarks/floor_calibration.py): the board's critical value calls an exact
sampler's 10 seeds within floor 93 to 97% of the time in every setting, and the docs' table is what the kept
statistics give at that value."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from leaderboard.ranking import FLOOR_CRITICAL

ROOT = Path(__file__).resolve().parents[2]
KEPT = ROOT / "benchmarks" / "results" / "floor-calibration.json"


@pytest.fixture(scope="module")
def script(benchmark_script):
    return benchmark_script("floor_calibration")


@pytest.fixture(scope="module")
def kept() -> dict:
    return json.loads(KEPT.read_text())


def test_an_exact_samplers_ten_seeds_are_within_floor_93_to_97_percent_of_the_time_in_every_setting(kept, script):
    rates = script.within_rates(kept["statistics"], FLOOR_CRITICAL)
    assert kept["seeds"] == 10 and kept["replicates"] >= 400
    assert set(rates) == set(script.SETTINGS)
    for setting, row in rates.items():
        assert 0.93 <= row["1"] <= 0.97, f"{setting}: an exact sampler is within floor {row['1']:.3f} of the time"


def test_the_critical_value_is_bracketed_by_the_kept_statistics(kept):
    """Between the critical values that put the pooled exact rate at 93% and at 97% (so a constant moved out of that
    range by mistake fails here too)."""
    import numpy as np

    pooled = np.concatenate([widths["1"] for widths in kept["statistics"].values()])
    assert np.quantile(pooled, 0.93) <= FLOOR_CRITICAL <= np.quantile(pooled, 0.97)


def test_the_docs_table_is_what_the_kept_statistics_give_at_the_critical_value(kept, script):
    assert kept["critical"] == FLOOR_CRITICAL
    rows = script.rate_rows(kept["statistics"], FLOOR_CRITICAL)
    table = kept["tables"]["within-floor"]
    by_setting = {row["setting"]: row for row in rows}  # the kept JSON holds the settings in sorted order
    assert [dict(zip(table["columns"], row)) for row in table["rows"]] == [by_setting[s] for s in script.SETTINGS]


def test_a_posterior_20_percent_too_wide_is_called_within_floor_less_often_than_an_exact_one(kept, script):
    """The test can say no: in every setting a posterior 20% too wide is called within floor less often than the exact
    sampler, by more than the two rates' binomial standard errors allow by chance (20% too narrow is, for regression,
    within the noise of the likelihood: docs/leaderboard.md states the power)."""
    rates = script.within_rates(kept["statistics"], FLOOR_CRITICAL)
    n = kept["replicates"]
    for setting, row in rates.items():
        exact, wide = row["1"], row["1.2"]
        se = math.sqrt((exact * (1 - exact) + wide * (1 - wide)) / n)
        assert exact - wide > 3 * se, f"{setting}: exact {exact:.3f}, 20% wider {wide:.3f}"


@pytest.mark.parametrize("setting", ["classification, heterogeneous", "regression, homogeneous"])
def test_the_kept_statistics_are_the_scripts(kept, setting, script):
    """The first two replicates of a setting, recomputed: each replicate draws from the setting's seeded generator in
    turn, so a run of two gives the kept run's first two (to round-off: another CPU's sums)."""
    index = script.SETTINGS.index(setting)
    again = script.replicate(setting, 2, kept["seeds"], seed=index)
    for width, values in again.items():
        assert values == pytest.approx(kept["statistics"][setting][width][:2], rel=1e-9, abs=1e-12)


SPLITS = ROOT / "benchmarks" / "results" / "floor-reference-splits.json"
SHIPPED = ("toy-gap", "diabetes-gap", "digits", "digits-cnn", "digits-lstm")


@pytest.fixture(scope="module")
def splits() -> list[dict]:
    table = json.loads(SPLITS.read_text())["tables"]["reference-splits"]
    return [dict(zip(table["columns"], row)) for row in table["rows"]]


def test_the_verdict_is_judged_on_the_metrics_whose_floor_holds_on_every_shipped_references_own_chains(splits, script):
    """FLOOR_METRICS is what the kept split check says: a metric is judged on where, on every shipped reference, an
    exact run (half its chains) scores beyond its floor by at most SPLIT_BIAS_LIMIT spreads on average; every other
    primary metric exceeds that on some reference; the synthetic references, whose floor holds by construction, stay
    within it on every metric (the bar never refuses a metric whose floor holds)."""
    from leaderboard.ranking import FLOOR_METRICS, PRIMARY

    shipped = [row for row in splits if row["reference"] in SHIPPED]
    assert {row["reference"] for row in shipped} == set(SHIPPED)
    for row in shipped:
        kind = "classification" if row["metric"] in PRIMARY["classification"] else "regression"
        assert (row["judged on"] == "yes") is (row["metric"] in FLOOR_METRICS[kind])
        if row["judged on"] == "yes":
            assert row["beyond the floor, in spreads"] <= script.SPLIT_BIAS_LIMIT, row
    for kind in PRIMARY:
        for metric in set(PRIMARY[kind]) - set(FLOOR_METRICS[kind]):
            assert max(row["beyond the floor, in spreads"] for row in shipped if row["metric"] == metric) \
                > script.SPLIT_BIAS_LIMIT, metric
    synthetic = [row for row in splits if row["reference"] in script.SETTINGS]
    assert {row["reference"] for row in synthetic} == set(script.SETTINGS)
    assert all(abs(row["beyond the floor, in spreads"]) <= script.SPLIT_BIAS_LIMIT for row in synthetic)


def test_the_kept_split_check_of_a_shipped_reference_is_the_scripts(splits, script):
    """toy-gap's rows, recomputed from its shipped chains: every choice of half of 8 chains (to round-off)."""
    from leaderboard.ranking import FLOOR_CRITICAL

    again = script.reference_splits("toy-gap", FLOOR_CRITICAL)
    assert [row["choices"] for row in again] == [math.comb(8, 4)] * 2
    kept = [row for row in splits if row["reference"] == "toy-gap"]
    assert [row["metric"] for row in again] == [row["metric"] for row in kept]
    for found, row in zip(again, kept):
        numbers = {name for name, value in row.items() if isinstance(value, float)}
        assert {name: found[name] for name in numbers} == pytest.approx({name: row[name] for name in numbers},
                                                                         rel=1e-9, abs=1e-12)
        assert {name: found[name] for name in set(row) - numbers} == {name: row[name] for name in set(row) - numbers}


def test_the_docs_state_the_critical_value_and_the_metrics_judged():
    from leaderboard.ranking import FLOOR_CRITICAL, FLOOR_RULE

    for page in ("leaderboard.md", "references.md"):
        text = " ".join((ROOT / "docs" / page).read_text().split())
        assert f"{FLOOR_CRITICAL:g} x sqrt(spread^2 + se^2)" in text, page
        assert "total variation (classification) or W1 (regression)" in text.replace("**", ""), page
    assert f"The critical value {FLOOR_CRITICAL:g} is calibrated" in (ROOT / "docs" / "leaderboard.md").read_text()
    assert "on total variation (classification) or W1 (regression)" in FLOOR_RULE


def _percents(rates, joined: str = "-") -> str:
    """The least and the most of ``rates`` in whole percent, as the docs write a range: 76-79%."""
    return f"{round(100 * min(rates))}{joined}{round(100 * max(rates))}%"


def test_the_figures_the_docs_prose_states_are_the_kept_files(kept, splits, script):
    """Every figure docs/leaderboard.md's prose gives of the floor's checks, derived here from the two kept files:
    the split check's bounds, the metrics that fail it, and the power at a width 20% off."""
    from leaderboard.ranking import FLOOR_CRITICAL

    text = " ".join((ROOT / "docs" / "leaderboard.md").read_text().split())
    row = {(r["reference"], r["metric"]): r for r in splits}
    judged = [r for r in splits if r["judged on"] == "yes"]
    shipped, synthetic = ([r for r in judged if (r["reference"] in SHIPPED) is side] for side in (True, False))
    assert (f"at most {max(r['beyond the floor, in spreads'] for r in shipped):+.2f} spreads; one run at half the "
            f"chains is within floor {_percents([r['within floor'] for r in shipped], ' to ')} of the time, "
            f"{_percents([r['within floor'] for r in synthetic], ' to ')} on the synthetic references") in text
    cnn, digits = row["digits-cnn", "agreement"], row["digits", "agreement"]
    assert (f"scores {cnn['beyond the floor, share of it']:.0%} beyond its floor on `digits-cnn` and "
            f"{-digits['beyond the floor, share of it']:.0%} short of it on `digits` "
            f"({cnn['beyond the floor, in spreads']:+.2f} and {digits['beyond the floor, in spreads']:+.2f} spreads)"
            ) in text
    assert (f"({row['toy-gap', 'w2']['beyond the floor, in spreads']:+.2f} and "
            f"{row['diabetes-gap', 'w2']['beyond the floor, in spreads']:+.2f} spreads on `toy-gap` and "
            "`diabetes-gap`)") in text
    assert cnn["within floor"] < 0.5 and "outside its floor more than half the time" in text
    largest = max(abs(r["beyond the floor, in spreads"]) for r in splits if r["reference"] in script.SETTINGS)
    assert 1.5 <= script.SPLIT_BIAS_LIMIT / largest <= 2.5 and "about twice the largest synthetic mean" in text
    rates = script.within_rates(kept["statistics"], FLOOR_CRITICAL)
    power = {(kind, width): _percents([r[width] for setting, r in rates.items() if setting.startswith(kind)])
             for kind in ("classification", "regression") for width in ("0.8", "1.2")}
    assert (f"a posterior 20% too narrow is within floor {power['classification', '0.8']} of the time for "
            f"classification and {power['regression', '0.8']} for regression") in text
    assert f"and one 20% too wide {power['classification', '1.2']} and {power['regression', '1.2']} of the time" in text


@pytest.mark.parametrize("task", ["cifar10", "nope"])
def test_a_task_without_a_shipped_reference_is_refused_before_any_work(task, script, capsys):
    """A competition task (no chains shipped) or an unknown one: one line and exit 2 at once, not after minutes of
    the synthetic references' split check."""
    with pytest.raises(SystemExit) as stopped:
        script.main(["--reference-splits", "toy-gap", task])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"invalid choice: '{task}'" in err
