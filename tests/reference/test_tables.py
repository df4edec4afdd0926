"""reference.tables: the docs' tables of the shipped references, written from their files."""

from __future__ import annotations

from reference import settings, tables


def test_the_diagnostics_table_names_each_reference_short_of_the_gold_standard_and_of_what(monkeypatch):
    monkeypatch.setattr(settings, "GOLD_STANDARD", {"max_split_rhat": 2.0, "min_ess_per_chain": 1})
    assert tables.references_table().endswith("\n\nEvery reference meets the gold standard.\n")
    monkeypatch.setattr(settings, "GOLD_STANDARD", {"max_split_rhat": 1.0, "min_ess_per_chain": 1})
    verdict = tables.references_table().splitlines()[-1]
    assert verdict == "Short of the gold standard: " + "; ".join(
        f"`{name}` (worst split R-hat, worst split R-hat over every test point)"
        for name in settings.REFERENCE_SETTINGS) + "."
    # between digits' worst R-hat on its stated points (1.0096) and over every test point (1.0109): short there alone
    monkeypatch.setattr(settings, "GOLD_STANDARD", {"max_split_rhat": 1.0105, "min_ess_per_chain": 1})
    table = tables.references_table()
    assert "`digits` (worst split R-hat over every test point)" in table.splitlines()[-1]
    digits_row = next(line for line in table.splitlines() if line.startswith("| `digits` |"))
    assert digits_row.endswith("| **1.0109** ✗, 734 ✓, 964 ✓ |") and "| 1.0096 ✓ |" in digits_row
    # where the evidence predates every point's draws: generation's R-hat, marked as not recomputable
    lstm_row = next(line for line in table.splitlines() if line.startswith("| `digits-lstm` |"))
    assert lstm_row.endswith("| **1.0237** ✗ (R-hat at generation, not recomputable) |")
    # recomputed over every point where the evidence keeps them: toy-gap's every figure, each marked
    toy_gap = next(line for line in table.splitlines() if line.startswith("| `toy-gap` |"))
    assert toy_gap.endswith("| 1.0056 ✓, 1367 ✓, 1397 ✓ |")
    monkeypatch.setattr(settings, "GOLD_STANDARD", {"max_split_rhat": 2.0, "min_ess_per_chain": 10 ** 6})
    verdict = tables.references_table().splitlines()[-1]
    assert "`toy-gap` (min bulk ESS, min tail ESS, min bulk ESS over every test point, min tail ESS over every test " \
           "point)" in verdict and "`digits-lstm` (min bulk ESS, min tail ESS)" in verdict
