"""`python -m bench leaderboard`: ranking, the mean and its interval over seeds, the noise-floor row, every format."""

import csv
import dataclasses
import io
import itertools
import json
import math
import re
from html import escape as html_escape

import numpy as np
import pytest
import scipy.stats

from approximators import METHODS, resolve_config
from approximators.base import recorded_config
from bench.tasks import get_task
from leaderboard import configs, ranking, submission, svg
from leaderboard.render import (
    BLOCKS_EXPLANATION,
    GUIDE_HEADING,
    NO_FLOOR_NOTE,
    estimate_text,
    html_page,
    render,
    significant_text,
)
from leaderboard.store import RunRow, Store
from reference.store import load_reference
from tests.leaderboard.conftest import method_fields


def shown(values: list[float]) -> str:
    """A ``mean ± half-width`` cell re-derived from the seeds with SciPy: both rounded to the decimal place of the
    standard error's first significant digit (to round-off, the mean's own digits: 4 decimals)."""
    mean, se = float(np.mean(values)), float(scipy.stats.sem(values))
    half_width = scipy.stats.t.ppf(0.975, len(values) - 1) * se
    decimals = 4 if se <= 1e-12 * max(1.0, abs(mean)) else -math.floor(math.log10(se))
    places = max(decimals, 0)
    return f"{round(mean, decimals):.{places}f} ± {round(half_width, decimals):.{places}f}"


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


def test_markdown_ranks_by_agreement_with_mean_interval_and_floor_row(board, run_cli):
    code, out, _ = run_cli("leaderboard", "--task", "digits", "--budget", "10")
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("|")]
    floor = load_reference(get_task("digits")).noise_floor["all"]["agreement"]
    assert "HMC noise floor" in lines[2] and f"{floor:.4f}" in lines[2]
    assert "| 1 " in lines[3] and "good" in lines[3] and "| 3 " in lines[3]
    assert "| 2 " in lines[4] and "poor" in lines[4]
    assert "95% Student-t interval" in out and "agreement (higher is better), then total_variation" in out
    with Store(board) as db:
        good = [r.metrics["all"]["total_variation"] for r in db.runs("digits", 10.0) if r.method == "good"]
    assert shown(good) in lines[3]
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
    assert "n/a" in table[2] and " ± " not in "".join(table) and "(n=1)" in table[3]


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

    chart = svg.line_chart("t", [svg.Series("m", ((20.0, 0.9, 0.89, 0.91),), svg.Style("#000000")), svg.horizontal("floor", 0.99)],
                           "budget", "agreement", log_x=True)
    left, right = svg.MARGIN_LEFT, svg.WIDTH - svg.MARGIN_RIGHT
    floor_line = [part for part in chart.split("<polyline") if "<title>floor</title>" in part][0]
    xs = [float(point.split(",")[0]) for point in floor_line.split('points="')[1].split('"')[0].split()]
    assert xs == [left, right]
    assert ">20<" in chart and ">0<" not in chart, "the floor adds no budget tick"


def test_an_entry_that_changed_the_network_is_marked_in_every_format(tmp_path, db_path, make_run, run_cli):
    runs = tmp_path / "runs"
    config = {**method_fields("mc-dropout", "digits", None)["config"], "rate": 0.1}
    change = METHODS["mc-dropout"].architecture_change(recorded_config(METHODS["mc-dropout"], config))
    make_run(runs, "digits", method="mc-dropout", config=config, architecture_change=change)
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
    make_run(tmp_path / "runs", "digits", method="mc-dropout", architecture_change=None)
    code, _, err = run_cli("submit", str(tmp_path / "runs"), "--name", "a")
    assert code != 0 and "architecture_change" in err and len(err.strip().splitlines()) == 1


DE_DIGITS = dataclasses.asdict(resolve_config(METHODS["de"], "digits"))
"""de's defaults for digits, as a run record stores its configuration."""


def html_cells(page: str) -> list[str]:
    """The text of every table cell of the page (tabulate pads it with spaces)."""
    return [cell.strip() for cell in re.findall(r"<td>([^<]*)</td>", page)]


def markdown_cells(page: str) -> list[str]:
    return [cell.strip() for line in page.splitlines() if line.startswith("|") for cell in line.split("|")]


@pytest.fixture
def configurations(tmp_path, db_path, make_run, run_cli):
    """On digits: de with its defaults, with fewer members, with another lr (labelled), and as a release that named
    members otherwise stored it; sgd labelled; a plugin that is not installed here, in two configurations. Returns
    the config hashes by name."""
    runs, notes = tmp_path / "runs", "first | try <b>\nsecond line"
    configs = {"defaults": DE_DIGITS, "members": {**DE_DIGITS, "members": 3}, "lr": {**DE_DIGITS, "lr": 0.01},
               "renamed": {**{k: v for k, v in DE_DIGITS.items() if k != "members"}, "ensemble_size": 3}}
    for index, (name, config) in enumerate(configs.items()):
        for seed in range(2):
            make_run(tmp_path / name if name == "renamed" else runs / name, "digits", method="de", seed=seed,
                     config=DE_DIGITS if name == "renamed" else config, amount=0.1 + 0.05 * index,
                     **({"label": "fast lr"} if name == "lr" else {}))
    make_run(runs / "sgd", "digits", method="sgd", config={"lr": 0.1}, label="tuned", amount=0.4)
    for depth in (3, 4):
        make_run(runs / f"plugin{depth}", "digits", method="my-plugin", config={"depth": depth}, amount=0.5)
    assert run_cli("submit", str(runs), "--notes", notes)[0] == 0
    # submit refuses a setting de does not have: the renamed configuration is a row an older release stored
    older = [dataclasses.replace(row, config=configs["renamed"], config_hash=submission.config_hash(configs["renamed"]))
             for row in map(lambda folder: submission.score_run(folder, "older", notes),
                            submission.run_folders([tmp_path / "renamed"]))]
    with Store(db_path) as db:
        db.insert(older)
    return {name: submission.config_hash(config)[:8] for name, config in
            {**configs, "depth3": {"depth": 3}, "depth4": {"depth": 4}}.items()}


def test_a_label_replaces_the_config_hash_in_every_format(configurations, run_cli):
    hashes = configurations
    markdown_page, html = run_cli("leaderboard")[1], run_cli("leaderboard", "--format", "html")[1]
    for shown in (f"de ({hashes['defaults']})", f"de ({hashes['members']})", "de (fast lr)", "sgd (tuned)"):
        assert shown in markdown_cells(markdown_page) and shown in html_cells(html), shown
    assert hashes["lr"] not in markdown_page and hashes["lr"] not in html, "a labelled entry is named by its label"
    entries = json.loads(run_cli("leaderboard", "--format", "json")[1])["tracks"][0]["entries"]
    assert {(e["method"], e["config_hash"][:8]): e["label"] for e in entries if e["method"] != "my-plugin"} == {
        ("de", hashes["defaults"]): None, ("de", hashes["members"]): None, ("de", hashes["renamed"]): None,
        ("de", hashes["lr"]): "fast lr", ("sgd", submission.config_hash(submission.complete_config("sgd", {"lr": 0.1}))[:8]): "tuned"}
    rows = list(csv.DictReader(io.StringIO(run_cli("leaderboard", "--format", "csv")[1])))
    labels = {(r["method"], r["config_hash"][:8]): r["label"] for r in rows if r["rank"] and r["block"] == "all"}
    assert labels[("de", hashes["lr"])] == "fast lr" and labels[("de", hashes["defaults"])] == ""


def test_the_legend_says_what_each_shown_hash_changes_from_the_defaults(configurations, run_cli):
    hashes = configurations
    markdown_page, html = run_cli("leaderboard")[1], run_cli("leaderboard", "--format", "html")[1]
    expected = {
        f"de ({hashes['defaults']})": "de's defaults for digits",
        f"de ({hashes['members']})": "members = 3 (default 5)",
        f"de ({hashes['renamed']})": "ensemble_size = 3 (not a setting of de here); members not recorded (default 5)",
        f"my-plugin ({hashes['depth3']})": 'my-plugin cannot be loaded in this installation, so its defaults are '
                                           'unknown; its whole stored configuration: {"depth": 3}',
    }
    assert "what each configuration changes from its method's defaults for digits in this installation" in html
    for name, change in expected.items():
        assert f"- **{name}**: {change}\n" in markdown_page
        assert f"<li>{name}: {html_escape(change)}</li>" in html
    legend = markdown_page.split("in this installation:")[1].split("Notes,")[0]
    assert legend.count("- **") == 5 and "fast lr" not in legend and "sgd" not in legend, "labelled entries need none"


def test_a_legend_runs_no_module_a_stored_name_names_and_never_fails(monkeypatch):
    import approximators

    imported = []
    monkeypatch.setattr(approximators, "load_method", lambda spec: imported.append(spec))
    assert configs.method_defaults("some.module:Thing", "digits") is None and imported == []

    def broken(name):
        raise RuntimeError("a plugin's own bug")

    monkeypatch.setattr(approximators, "get_method", broken)
    assert configs.differences("de", "digits", {"lr": 1}, "run").endswith('its whole stored configuration: {"lr": 1}')
    assert configs.differences("de", "digits", {}, "competition-zip") == ("a competition zip, whose configuration "
                                                                          "is not recorded")
    assert configs.differences("de", "digits", [1, 2], "run").endswith("not a mapping of settings: [1, 2]")


def test_notes_are_shown_escaped_and_exported(configurations, run_cli):
    markdown_page, html = run_cli("leaderboard")[1], run_cli("leaderboard", "--format", "html")[1]
    assert "- **every entry**: first \\| try &lt;b&gt; second line\n" in markdown_page
    assert markdown_page.count("first \\| try") == 1, "a note every entry came with is shown once"
    assert "<li>every entry: first | try &lt;b&gt;\nsecond line</li>" in html and "<b>" not in html
    entries = json.loads(run_cli("leaderboard", "--format", "json")[1])["tracks"][0]["entries"]
    assert all(e["notes"] == ["first | try <b>\nsecond line"] for e in entries)
    rows = list(csv.DictReader(io.StringIO(run_cli("leaderboard", "--format", "csv")[1])))
    assert {r["notes"] for r in rows if r["rank"]} == {"first | try <b>\nsecond line"}


def test_every_format_shows_each_test_block(board, run_cli):
    blocks = ["clean", "gaussian-noise", "brightness", "blur"]
    with Store(board) as db:
        good = [r for r in db.runs("digits", 10.0) if r.method == "good"]
    floor = good[0].noise_floor
    seeds = {block: [r.metrics[block]["total_variation"] for r in good] for block in blocks}
    tv = {block: ranking.estimate(values) for block, values in seeds.items()}
    markdown_page = run_cli("leaderboard", "--task", "digits", "--budget", "10")[1]
    for block in blocks:
        assert f"| {block} " in markdown_page and shown(seeds[block]) in markdown_page
    html = run_cli("leaderboard", "--format", "html", "--task", "digits", "--budget", "10")[1]
    assert set(blocks) <= set(html_cells(html)) and shown(seeds["blur"]) in html
    rows = list(csv.DictReader(io.StringIO(run_cli("leaderboard", "--format", "csv")[1])))
    digits10 = [r for r in rows if r["task"] == "digits" and r["budget"] == "10"]
    assert [r["block"] for r in digits10 if r["method"] == "HMC noise floor"] == ["all", *blocks]
    for block in blocks:
        line = next(r for r in digits10 if r["block"] == block and r["method"] == "good")
        assert float(line["total_variation_mean"]) == pytest.approx(tv[block].mean)
        floor_line = next(r for r in digits10 if r["block"] == block and r["method"] == "HMC noise floor")
        assert float(floor_line["agreement_mean"]) == pytest.approx(floor[block]["agreement"])
    track = next(t for t in json.loads(run_cli("leaderboard", "--format", "json")[1])["tracks"]
                 if t["task"] == "digits" and t["budget"] == 10)
    assert track["blocks"] == blocks
    by_block = track["entries"][0]["metrics_by_block"]
    assert list(by_block) == blocks and by_block["blur"]["total_variation"]["mean"] == pytest.approx(tv["blur"].mean)


LEGEND_ENTRY = re.compile(r'<line x1="[^"]*" y1="[^"]*" x2="[^"]*" y2="[^"]*" stroke="([^"]+)" stroke-width="([^"]+)"'
                          r'[^>]*/>(<circle [^>]*/>|<polygon points="([^"]*)"[^>]*/>)?'
                          r'<text [^>]*class="(legend[^"]*)">[^<]*<title>([^<]*)</title></text>')


def legend_entries(page: str) -> list[list[tuple[str, str, str, tuple, bool]]]:
    """Per plot of the page, each legend entry's (name, colour, line width, marker shape, emphasised): the shape as
    its polygon's corners relative to its first (translation aside, two markers of one shape are equal), "circle",
    or "none"."""
    found = []
    for chart in re.findall(r"<svg .*?</svg>", page):
        entries = []
        for colour, width, marker, corners, css, name in LEGEND_ENTRY.findall(chart):
            points = [tuple(map(float, point.split(","))) for point in corners.split()]
            shape = tuple((round(x - points[0][0], 1), round(y - points[0][1], 1)) for x, y in points[1:])
            entries.append((name, colour, width, shape if points else ("circle" if marker else "none"),
                            css == "legend own"))
        found.append(entries)
    return found


def test_each_series_has_a_colour_and_marker_of_its_own_and_keeps_them_on_every_plot(tmp_path, db_path, make_run,
                                                                                      run_cli):
    """Three methods, one in two configurations, on two tasks: every series of a plot differs from every other in
    colour or marker (neighbours in both), and an entry name looks the same on every plot of the page."""
    runs = tmp_path / "runs"
    for budget in (10, 100):
        make_run(runs, "digits", method="alpha", budget=budget, amount=0.2)
        make_run(runs, "digits", method="beta", budget=budget, amount=0.3)
        make_run(runs, "toy-gap", method="beta", budget=budget, amount=0.3)  # first and only method here
        make_run(runs / "a", "toy-gap", method="gamma", budget=budget, amount=0.4, config={"members": 3})
        make_run(runs / "b", "toy-gap", method="gamma", budget=budget, amount=0.5, config={"members": 4})
    assert run_cli("submit", str(runs))[0] == 0
    page = run_cli("leaderboard", "--format", "html")[1]
    looks: dict[str, set[tuple]] = {}
    for chart in legend_entries(page):
        series = [(colour, shape) for name, colour, _, shape, _ in chart if name != "HMC noise floor"
                  and name != "calibrated"]
        assert len(set(series)) == len(series), chart
        for name, colour, _, shape, _ in chart:
            looks.setdefault(name, set()).add((colour, shape))
    assert len(looks) == 6 and all(len(found) == 1 for found in looks.values()), looks
    gammas = [next(iter(found)) for name, found in looks.items() if name.startswith("gamma")]
    assert len(gammas) == 2 and gammas[0][0] != gammas[1][0] and gammas[0][1] != gammas[1][1]


def test_the_first_45_places_each_get_a_colour_and_marker_pair_of_their_own():
    from leaderboard import svg

    styles = [svg.series_style(place) for place in range(svg.DISTINCT_STYLES)]
    assert len({(s.color, s.marker) for s in styles}) == 45 and {s.dash for s in styles} == {None}
    assert all(a.color != b.color and a.marker != b.marker for a, b in zip(styles, styles[1:]))
    assert set(svg.PALETTE) == {s.color for s in styles[:9]} and svg.series_style(45).dash is not None


def x_tick_labels(chart: str) -> list[tuple[float, float, str]]:
    """(x, y, text) of each label under the x axis (ticks are centred on their position, y ticks end at it)."""
    return [(float(x), float(y), text) for x, y, text in
            re.findall(r'<text x="([\d.]+)" y="([\d.]+)" class="tick" text-anchor="middle">([^<]*)</text>', chart)]


@pytest.mark.parametrize("budgets", [(3, 10, 30, 100, 1000), (10, 11, 12, 13, 15, 20, 100, 1000, 1100),
                                     (0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)])
def test_every_budget_has_a_tick_label_and_no_two_labels_overlap(budgets):
    from leaderboard import svg

    series = svg.Series("m", tuple((b, 1 / b, 1 / b - 0.01, 1 / b + 0.01) for b in budgets), svg.series_style(0))
    chart = svg.line_chart("t", [series, svg.horizontal("floor", 0.0)], "budget", "w2", log_x=True)
    labels = x_tick_labels(chart)
    assert [text for _, _, text in labels] == [f"{b:g}" for b in budgets]
    for (x1, y1, a), (x2, y2, b) in itertools.combinations(labels, 2):
        if y1 == y2:  # on one row: apart by at least half of each label's width
            assert abs(x2 - x1) >= (len(a) + len(b)) / 2 * svg.TICK_CHAR_WIDTH, (a, b)
    height = int(re.search(r'<svg [^>]*height="(\d+)"', chart).group(1))
    assert max(y for _, y, _ in labels) < height - 20, "the axis title stays below every row of labels"


@pytest.mark.parametrize("notes", ["\x1b[31mred\x1b[0m", "evil\u202etxt.exe", "a\rb", "\x07", "\u2066isolate\u2069"])
def test_notes_that_would_reach_a_terminal_or_page_raw_are_refused(tmp_path, make_run, db_path, run_cli, notes):
    make_run(tmp_path / "runs", "toy-gap")
    code, _, err = run_cli("submit", str(tmp_path / "runs"), "--notes", notes)
    assert code == 2 and "notes must be printable text and line breaks" in err and err.count("\n") == 1
    assert not db_path.exists() or run_cli("leaderboard", "--format", "json")[1].count('"notes"') == 0


def test_several_tasks_and_budgets_after_one_flag_select_their_tracks(board, run_cli):
    code, out, err = run_cli("leaderboard", "--task", "digits", "toy-gap", "--budget", "10", "--format", "json")
    assert code == 0, err
    tracks = {(t["task"], t["budget"]) for t in json.loads(out)["tracks"]}
    assert tracks == {("digits", 10), ("toy-gap", 10)}
    code, out, _ = run_cli("leaderboard", "--task", "digits", "--budget", "10", "--budget", "100", "--format", "json")
    assert {(t["task"], t["budget"]) for t in json.loads(out)["tracks"]} == {("digits", 10), ("digits", 100)}
    code, _, err = run_cli("leaderboard", "--task", "diabetes-gap", "uci-gap", "--budget", "10", "20")
    assert code == 2 and "no runs on the leaderboard for task diabetes-gap, uci-gap budget 10, 20" in err


def test_the_verified_column_says_how_each_seed_was_verified_and_that_shipped_entries_are_records_alone(tmp_path):
    from leaderboard.render import verified_text
    from leaderboard.store import RunRow

    def run(seed, verification=None, source="run"):
        return RunRow(task="toy-gap", task_version=1, task_fingerprint="f", task_kind="regression", method="de",
                      budget=10.0, seed=seed, reference_sha256="r", config_hash="c", config={}, source=source,
                      predictions_sha256=f"p{seed}", epochs_used=10.0, test_passes=1.0, wall_seconds=1.0,
                      device="cpu", versions={}, noise_floor=None, reliability=None, submitter="alice", notes="",
                      finished_at=None, submitted_at="now", metrics={"all": {"w1": 0.1 * seed + 0.1, "w2": 0.2}},
                      verified=verification is not None, verification=verification)

    def entry(rows):
        found = ranking.Entry("de", "c", {}, rows[0].source)
        for row in rows:
            found.add(row)
        return found

    assert verified_text(entry([run(0, "bitwise"), run(1, "bitwise")])) == "2/2 bitwise"
    assert verified_text(entry([run(0, "bitwise"), run(1, "cross-environment"), run(2, "bitwise"), run(3)])) \
        == "3/4; 2 bitwise; 1 cross-environment"
    assert verified_text(entry([run(0), run(1)])) == "0/2"
    assert verified_text(entry([run(s, source="shipped") for s in range(3)])) == "0/3, records alone"
    with Store(tmp_path / "db.sqlite") as db:
        db.insert([run(0, "bitwise"), run(1, "cross-environment, round-off"), run(2)])
        rows = db.runs()
    document = json.loads(render(rows, "json"))
    (shown,) = document["tracks"][0]["entries"]
    assert shown["verified_seeds"] == 2
    assert shown["verified_how"] == {"bitwise": 1, "cross-environment, round-off": 1}
    assert "verified: how many seeds" in document["verified_rule"]
    line = next(r for r in csv.DictReader(io.StringIO(render(rows, "csv"))) if r["method"] == "de")
    assert line["verified_how"] == "bitwise: 1;cross-environment, round-off: 1"
    assert "2/3; 1 bitwise; 1 cross-environment, round-off" in render(rows, "md")


def classification_rows(method: str, agreement: list[float], source: str = "run", budget: float = 10.0,
                        task: str = "digits", epochs: float = 10.0, floor: bool = True) -> list[RunRow]:
    """One classification run per value of ``agreement`` (seeds 0, 1, ...), with a test block, as a database or the
    shipped store (``source="shipped"``) gives them."""
    return [RunRow(task=task, task_version=1, task_fingerprint="f", task_kind="classification", method=method,
                   budget=budget, seed=seed, reference_sha256="r", config_hash="c", config={}, source=source,
                   predictions_sha256=f"p{seed}", epochs_used=epochs, test_passes=1.0, wall_seconds=1.0, device="cpu",
                   versions={}, reliability=None, submitter="a", notes="", finished_at=None, submitted_at="now",
                   noise_floor={"all": {"agreement": 0.997, "total_variation": 0.007}} if floor else None,
                   label="shipped" if source == "shipped" else None,
                   metrics={"all": {"agreement": value, "total_variation": 1 - value},
                            "blur": {"agreement": value - 0.01, "total_variation": 1.01 - value}})
            for seed, value in enumerate(agreement)]


@pytest.fixture
def mixed_board() -> list[RunRow]:
    """Two tasks at two budgets: shipped sgd and de, and the user's own my-sgd; toy-task's reference publishes no
    floor."""
    rows = []
    for task in ("digits", "toy-task"):
        for budget in (10.0, 100.0):
            rows += classification_rows("sgd", [0.90, 0.91, 0.93], "shipped", budget, task, floor=task == "digits")
            rows += classification_rows("de", [0.95, 0.96, 0.96], "shipped", budget, task, floor=task == "digits")
            rows += classification_rows("my-sgd", [0.94, 0.95, 0.97], "run", budget, task, floor=task == "digits")
    return rows


def test_the_reading_guide_is_said_once_and_each_table_only_where_it_differs(mixed_board):
    """Four tracks with test blocks: the guide (every rule, the blocks' explanation) once at the top of the Markdown
    and once on the page; the track whose reference publishes no floor says so above its table, and no other."""
    md, page = render(mixed_board, "md"), render(mixed_board, "html")
    for rule in (ranking.RANK_RULE, ranking.FLOOR_RULE, ranking.VERIFIED_RULE, ranking.INTERVAL_RULE,
                 BLOCKS_EXPLANATION):  # each opening a sentence of the guide, in capitals
        assert md.count(rule[1:]) == 1 and page.count(html_escape(rule[1:])) == 1, rule[:40]
    assert md.startswith(f"## {GUIDE_HEADING}\n") and md.count(GUIDE_HEADING) == 1
    assert page.count(f"<h2>{GUIDE_HEADING}</h2>") == 1 and page.index(GUIDE_HEADING) < page.index("<table>")
    assert md.count(NO_FLOOR_NOTE) == 2 and page.count(html_escape(NO_FLOOR_NOTE)) == 2, "per toy-task track"
    after_heading = md.split("## toy-task v1, budget 10 epochs\n")[1].lstrip("\n")
    assert after_heading.startswith(NO_FLOOR_NOTE) and "## digits v1, budget 10 epochs\n\n|" in md


def test_the_users_own_entries_are_highlighted_beside_the_shipped_ones_in_table_and_plot(mixed_board):
    md, page = render(mixed_board, "md"), render(mixed_board, "html")
    names = [line.split("|")[2].strip() for line in md.splitlines() if re.match(r"\| =?\d", line)]
    assert set(names) == {"sgd (shipped)", "de (shipped)", "**my-sgd**"} and "set in bold" in md
    own_rows = re.findall(r'<tr class="own">(.*?)</tr>', page, re.S)
    # per track the whole test set's row and its block's row, and the summary's row at each budget
    assert len(own_rows) == 4 * 2 + 2 and all("my-sgd" in row and "shipped" not in row for row in own_rows)
    plots = legend_entries(page)
    assert plots and all({name for name, *_, own in chart if own} == {"my-sgd"} for chart in plots)
    assert all(width == f"{svg.EMPHASIS_WIDTH:g}" for chart in plots for name, _, width, _, own in chart if own)
    alone = [row for row in mixed_board if row.source == "run"]
    assert "**" not in render(alone, "md") and 'class="own"' not in render(alone, "html"), "nothing to tell apart"


@pytest.mark.parametrize(("value", "text"), [(9.10847, "9.108"), (10.0, "10"), (12345.6, "12350"), (1000.4, "1000"),
                                             (0.000123456, "0.0001235"), (0.5, "0.5")])
def test_epochs_are_shown_to_at_most_four_significant_figures(value, text):
    assert significant_text(value) == text
    rows = classification_rows("de", [0.95, 0.96], epochs=value)
    assert text in markdown_cells(render(rows, "md")) and text in html_cells(render(rows, "html"))


@pytest.mark.parametrize("values", [[0.951, 0.9623, 0.9587], [0.5, 0.7, 0.9, 0.95], [0.95, 0.95, 0.95],
                                    [0.9712345, 0.9712349, 0.9712351], [1234.5, 2345.6, 1800.2]])
def test_a_mean_and_its_half_width_are_rounded_to_their_standard_errors_first_digit(values):
    """Re-derived with SciPy (:func:`shown`) in the Markdown and the page; CSV and JSON keep the mean at full
    precision."""
    rows = classification_rows("de", values)
    assert estimate_text(values) == shown(values) and shown(values) in markdown_cells(render(rows, "md"))
    assert shown(values) in html_cells(render(rows, "html"))
    record = next(r for r in csv.DictReader(io.StringIO(render(rows, "csv"))) if r["method"] == "de")
    assert float(record["agreement_mean"]) == float(np.mean(values))
    assert json.loads(render(rows, "json"))["tracks"][0]["entries"][0]["metrics"]["agreement"]["mean"] == float(
        np.mean(values))
