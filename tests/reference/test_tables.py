"""reference.tables: the docs' tables of the shipped references, written from their files."""

from __future__ import annotations

from reference import settings, tables


def test_the_diagnostics_table_names_each_reference_short_of_the_gold_standard_and_of_what(monkeypatch):
    monkeypatch.setattr(settings, "GOLD_STANDARD", {"max_split_rhat": 2.0, "min_ess_per_chain": 1})
    assert tables.references_table().endswith("\n\nEvery reference meets the gold standard.\n")
    monkeypatch.setattr(settings, "GOLD_STANDARD", {"max_split_rhat": 1.0, "min_ess_per_chain": 1})
    verdict = tables.references_table().splitlines()[-1]
    assert verdict == "Short of the gold standard: " + "; ".join(
        f"`{name}` (worst split R-hat)" for name in settings.REFERENCE_SETTINGS) + "."
    monkeypatch.setattr(settings, "GOLD_STANDARD", {"max_split_rhat": 2.0, "min_ess_per_chain": 10 ** 6})
    assert "`toy-gap` (min bulk ESS, min tail ESS)" in tables.references_table().splitlines()[-1]
