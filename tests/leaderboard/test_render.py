"""`python -m bench leaderboard`: ranking, mean ± std over seeds, the noise-floor row, every format."""

import csv
import dataclasses
import io
import json

import pytest

from leaderboard import ranking
from leaderboard.render import html_page, render
from leaderboard.store import Store


@pytest.fixture
def board(tmp_path, db_path, make_run, run_cli):
    """Two methods on digits (3 and 2 seeds) and one on toy-gap, all at budget 10; one at budget 100."""
    runs = tmp_path / "runs"
    for seed in range(3):
        make_run(runs, "digits", method="good", seed=seed, amount=0.05 + 0.01 * seed)
    for seed in range(2):
        make_run(runs, "digits", method="poor", seed=seed, amount=0.6 + 0.01 * seed)
    make_run(runs, "toy-gap", method="good")
    make_run(runs, "digits", method="good", budget=100, amount=0.02)
    assert run_cli("submit", str(runs), "--name", "<script>alert(1)</script>")[0] == 0
    return db_path


def test_markdown_ranks_by_agreement_with_mean_std_and_floor_row(board, run_cli):
    code, out, _ = run_cli("leaderboard", "--task", "digits", "--budget", "10")
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("|")]
    assert "HMC noise floor" in lines[2] and "0.9965" in lines[2]
    assert "| 1 " in lines[3] and "good" in lines[3] and "| 3 " in lines[3]
    assert "| 2 " in lines[4] and "poor" in lines[4]
    assert "ddof = 1" in out and "agreement (higher is better), then total_variation" in out
    with Store(board) as db:
        good = [r.metrics["all"]["agreement"] for r in db.runs("digits", 10.0) if r.method == "good"]
    mean, std = ranking.mean_std(good)
    assert f"{mean:.4f} ± {std:.4f}" in lines[3]
    assert "budget 100" not in out and "toy-gap" not in out


def test_json_and_csv_carry_the_same_numbers(board, run_cli):
    code, out, _ = run_cli("leaderboard", "--format", "json")
    document = json.loads(out)
    assert code == 0 and document["std_ddof"] == 1
    digits10 = next(t for t in document["tracks"] if t["task"] == "digits" and t["budget"] == 10)
    assert [e["method"] for e in digits10["entries"]] == ["good", "poor"]
    poor = digits10["entries"][1]["metrics"]["total_variation"]
    assert len(poor["values"]) == 2 and poor["std"] == pytest.approx(ranking.mean_std(poor["values"])[1])
    code, out, _ = run_cli("leaderboard", "--format", "csv")
    lines = list(csv.DictReader(io.StringIO(out)))
    row = next(r for r in lines if r["task"] == "digits" and r["budget"] == "10" and r["method"] == "poor")
    assert float(row["total_variation_mean"]) == pytest.approx(ranking.mean_std(poor["values"])[0])
    assert row["rank"] == "2" and row["seeds"] == "2"


def test_regression_tracks_rank_by_w2_lower_first():
    entries = [ranking.Entry("a", "c", {}, "run", metrics={"w2": [0.3, 0.5]}),
               ranking.Entry("b", "c", {}, "run", metrics={"w2": [0.2, 0.2]})]
    assert [e.method for e in sorted(entries, key=lambda e: ranking.rank_key("regression", e))] == ["b", "a"]


def test_single_seed_has_no_std_and_missing_floor_is_stated(board):
    with Store(board) as db:
        rows = db.runs("toy-gap")
    rows = [dataclasses.replace(r, noise_floor=None) for r in rows]
    table = [line for line in render(rows, "md").splitlines() if line.startswith("|")]
    assert "n/a" in table[2] and " ± " not in "".join(table)


def test_html_escapes_submitter_text(board):
    with Store(board) as db:
        page = html_page(ranking.tracks(db.runs()))
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_empty_selection_and_missing_database_are_clear_errors(board, tmp_path, run_cli):
    code, _, err = run_cli("leaderboard", "--task", "diabetes-gap")
    assert code == 2 and "no runs on the leaderboard for task diabetes-gap" in err
    code, _, err = run_cli("leaderboard", "--db", str(tmp_path / "nothing.sqlite"))
    assert code == 2 and "no leaderboard database" in err and not (tmp_path / "nothing.sqlite").exists()


def test_noise_floor_spans_the_plot_even_with_a_single_budget():
    from leaderboard import svg

    chart = svg.line_chart("t", [svg.Series("m", ((20.0, 0.9, 0.01),), "#000000"), svg.horizontal("floor", 0.99)],
                           "budget", "agreement", log_x=True)
    left, right = svg.MARGIN_LEFT, svg.WIDTH - svg.MARGIN_RIGHT
    floor_line = [part for part in chart.split("<polyline") if "<title>floor</title>" in part][0]
    xs = [float(point.split(",")[0]) for point in floor_line.split('points="')[1].split('"')[0].split()]
    assert xs == [left, right]
    assert ">20<" in chart and ">0<" not in chart, "the floor adds no budget tick"


def test_an_entry_that_changed_the_network_is_marked_in_every_format(tmp_path, db_path, make_run, run_cli):
    runs = tmp_path / "runs"
    change = "dropout (rate 0.1) on the inputs of layers 2"
    make_run(runs, "digits", method="mc-dropout", config={"rate": 0.1}, architecture_change=change)
    make_run(runs, "digits", method="de")
    assert run_cli("submit", str(runs), "--name", "a")[0] == 0
    code, out, _ = run_cli("leaderboard")
    assert code == 0
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert any("mc-dropout \u2020" in line for line in table)
    assert not any("de \u2020" in line for line in table)
    assert f"\u2020 mc-dropout: {change}; a changed network approximates another posterior" in out
    entries = json.loads(run_cli("leaderboard", "--format", "json")[1])["tracks"][0]["entries"]
    assert {e["method"]: e["architecture_change"] for e in entries} == {"mc-dropout": change, "de": None}
    rows = list(csv.DictReader(io.StringIO(run_cli("leaderboard", "--format", "csv")[1])))
    assert {r["method"]: r["architecture_change"] for r in rows if r["rank"]} == {"mc-dropout": change, "de": ""}
    page = run_cli("leaderboard", "--format", "html")[1]
    assert "mc-dropout \u2020" in page and change in page


def test_a_built_in_method_that_changes_the_network_must_say_how(tmp_path, db_path, make_run, run_cli):
    make_run(tmp_path / "runs", "digits", method="mc-dropout")
    code, _, err = run_cli("submit", str(tmp_path / "runs"), "--name", "a")
    assert code != 0 and "architecture_change" in err and len(err.strip().splitlines()) == 1
