"""Figures the docs show as a command's output, held to what the command gives now (a run's numbers reproduce
bit for bit on one CPU kind; only its seconds are the machine's)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "bootstrap-ensemble"


def test_the_example_method_s_run_shown_in_writing_a_method_is_what_it_gives(tmp_path, monkeypatch):
    """docs/writing-a-method.md showed floors from before the floor's definition changed, under "every other number
    reproduces"."""
    from bench import api

    text = (ROOT / "docs" / "writing-a-method.md").read_text()
    row = re.search(r"^toy-gap  bootstrap +20 +20 +0 +(.*)$", text, re.MULTILINE)
    assert row is not None, "the example's run output is no longer in the doc"
    w1, w2, floor_w1, floor_w2, rmse, _seconds = (float(cell) for cell in row[1].split())
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delitem(sys.modules, "bootstrap_ensemble", raising=False)
    result = api.run("toy-gap", "bootstrap_ensemble:BootstrapEnsemble", 20, out=tmp_path)
    metrics, floor = result["metrics"], result["noise_floor"]["all"]
    shown = [w1, w2, floor_w1, floor_w2, rmse]
    assert shown == pytest.approx([round(metrics["w1"], 4), round(metrics["w2"], 4), round(floor["w1"], 4),
                                   round(floor["w2"], 4), round(metrics["rmse"], 4)], abs=1e-4 + 1e-9), shown
