"""reference.tables: the docs' tables of the shipped references, written from their files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

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
    # digits-lstm, recomputed over every point from its evidence, short of both R-hat limits there too
    lstm_row = next(line for line in table.splitlines() if line.startswith("| `digits-lstm` |"))
    assert lstm_row.endswith("| **1.0166** ✗, 665 ✓, 1592 ✓ |") and "| **1.0125** ✗ |" in lstm_row
    # recomputed over every point where the evidence keeps them: toy-gap's every figure, each marked
    toy_gap = next(line for line in table.splitlines() if line.startswith("| `toy-gap` |"))
    assert toy_gap.endswith("| 1.0056 ✓, 1367 ✓, 1397 ✓ |")
    monkeypatch.setattr(settings, "GOLD_STANDARD", {"max_split_rhat": 2.0, "min_ess_per_chain": 10 ** 6})
    verdict = tables.references_table().splitlines()[-1]
    assert "`toy-gap` (min bulk ESS, min tail ESS, min bulk ESS over every test point, min tail ESS over every test " \
           "point)" in verdict


def test_a_reference_whose_evidence_predates_every_points_draws_shows_generations_r_hat_as_not_recomputable(
        monkeypatch):
    """A reference generated before the evidence kept every point's draws (0.2.0 or earlier; none shipped now): its
    only figure over every test point is the R-hat generation recorded, held to the limit and marked."""
    real = tables.load_reference

    def without_every_point(task):
        found = real(task)
        if task.name != "digits-lstm":
            return found
        return dataclasses.replace(found, metadata={key: value for key, value in found.metadata.items()
                                                    if key != "diagnostics_every_point"})

    monkeypatch.setattr(tables, "load_reference", without_every_point)
    table = tables.references_table()
    lstm_row = next(line for line in table.splitlines() if line.startswith("| `digits-lstm` |"))
    assert lstm_row.endswith("| **1.0237** ✗ (R-hat at generation, not recomputable) |")
    assert "`digits-lstm` (worst split R-hat, worst split R-hat over every test point)." in table.splitlines()[-1]


def test_the_docs_state_the_sizes_of_the_evidence_files_as_they_are():
    """docs/references.md's "The files take A to B MB each": the smallest and the largest shipped evidence file,
    in MB to two significant figures."""
    root = Path(__file__).resolve().parents[2]
    sizes = [path.stat().st_size / 1e6 for path in (root / "reference" / "evidence").glob("*.npz")]
    assert len(sizes) == len(settings.REFERENCE_SETTINGS)
    text = " ".join((root / "docs" / "references.md").read_text().split())
    assert f"The files take {min(sizes):.2g} to {max(sizes):.2g} MB each" in text
