"""The kept resume check (benchmarks/resume_check.py): each method stopped half way and run again gave the same
predictions, said it resumed, and spent about the share of its budget that was left; a checkpoint's write costs well
under 2% of the default interval on every competition model. The script's one run is tested on a small budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEPT = ROOT / "benchmarks" / "results" / "resume-check.json"

START_SHARE = 0.35
"""The most the resumed run's CPU time may exceed the share of the budget left to train, as a share of the
uninterrupted run's: its process's start (imports, the task's data, some 4 CPU seconds of runs of 30 to 140) and the
replay toward the resume point, which trains nothing."""


@pytest.fixture(scope="module")
def script(benchmark_script):
    return benchmark_script("resume_check")


@pytest.fixture(scope="module")
def kept() -> dict:
    return json.loads(KEPT.read_text())


def _rows(kept: dict, table: str) -> list[dict]:
    columns = kept["tables"][table]["columns"]
    return [dict(zip(columns, row)) for row in kept["tables"][table]["rows"]]


def test_every_method_of_the_issue_resumed_with_the_same_predictions_for_the_budget_left(kept, script):
    rows = _rows(kept, "resume")
    assert {row["method"] for row in rows} == set(script.BUDGETS)
    for row in rows:
        assert row["same predictions"] == "yes" and row["said so"] == "yes", row
        assert 0.1 <= row["budget left to train"] <= 0.9, row  # stopped part-way, not at an end
        assert row["budget left to train"] - 0.05 <= row["resumed / uninterrupted"] \
            <= row["budget left to train"] + START_SHARE, row


def test_a_checkpoint_costs_under_two_percent_of_the_default_interval_on_every_competition_model(kept):
    rows = _rows(kept, "write-cost")
    assert {row["task"] for row in rows} == {"cifar10", "cifar10c", "imdb", "dermamnist", "uci-gap"}
    assert all(row["share of the default interval"] < 0.02 for row in rows)


def test_the_script_measures_a_resume(tmp_path, monkeypatch, script):
    monkeypatch.setattr(script, "WAIT_SECONDS", 300)  # each of its three commands' bound
    row = script.resume_row("sgd", 200, tmp_path)
    assert row["same predictions"] == "yes" and row["said so"] == "yes"
    assert 0 < row["budget left to train"] < 1
