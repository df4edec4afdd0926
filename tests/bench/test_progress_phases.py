"""Progress on every phase that can take more than a few seconds (issue 64): a run's predictive and scoring after its
epochs, `verify`'s and `submit --verify`'s re-executions (on a terminal, and one line each in a log whatever standard
error is), reading and rendering the board, and fetch's checking and converting. Each is drawn on a terminal only:
with standard error piped, or `--quiet`, nothing is (error lines only)."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
import textwrap

import pytest
import torch

from bench import records
from bench.progress import PREDICTIVE, SCORING, Phase, observed


def _lines(drawn: str) -> list[str]:
    """What a terminal showed, line by line (tqdm redraws a line after a carriage return)."""
    return [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line) for line in re.split(r"[\r\n]", drawn) if line.strip()]


def _main(monkeypatch, stderr, *argv) -> tuple[int, str]:
    """``python -m bench ARGV`` in this process with ``stderr`` as standard error; (exit code, standard output)."""
    from bench.cli import main

    printed = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(sys, "stdout", printed)
    code = main([str(a) for a in argv])
    monkeypatch.setattr(sys, "stdout", sys.__stdout__)
    monkeypatch.setattr(sys, "stderr", sys.__stderr__)
    return code, printed.getvalue()


# --- a run: its predictive and its scoring ------------------------------------------------------------------------

def test_the_predictive_reports_its_members_as_each_chunk_of_test_rows_is_evaluated(monkeypatch):
    """CIFAR-10-C's 50,000 test rows took minutes with no word after the epochs' bar reached 100%: the accumulator
    reports the members evaluated after every chunk of test rows (a fraction of a member part way)."""
    import approximators.base as base
    from bench.runner import metered
    from bench.tasks import get_task

    monkeypatch.setattr(base, "EVAL_CHUNK", 50)  # toy-gap's 121 test rows: chunks of 50, 50 and 21
    problem, _ = metered(get_task("toy-gap"), 1)
    accumulator = base.PredictiveAccumulator(problem, 3, torch.Generator().manual_seed(0))
    network = problem.model_factory()
    two = {name: torch.stack([p.detach()] * 2) for name, p in network.named_parameters()}
    heard: list[Phase] = []
    accumulator.add({name: p[:1] for name, p in two.items()})  # no observer: nothing to hear, nothing fails
    with observed(heard.append):
        accumulator.add(two)
    assert {(p.name, p.total, p.unit) for p in heard} == {(PREDICTIVE, 3, "members")}
    assert [round(p.done, 6) for p in heard] == [round(1 + 2 * rows / 121, 6) for rows in (50, 100, 121)] + [3]


def test_scoring_reports_each_test_block_and_the_whole_test_set():
    from bench.runner import score
    from bench.tasks import get_task
    from reference.store import load_reference

    task = get_task("digits")
    reference = load_reference(task)
    heard: list[Phase] = []
    with observed(heard.append):
        score(task, reference.array, reference)
    assert [(p.name, p.done, p.total, p.unit) for p in heard] == [(SCORING, done, 5, "blocks") for done in range(6)]


def test_a_run_shows_its_predictive_and_its_scoring_on_a_terminal_and_nothing_when_piped_or_quiet(
        tmp_path, monkeypatch, every_progress_update):
    Terminal = every_progress_update
    argv = ("run", "--method", "swag", "--task", "toy-gap", "--budget", "20")
    terminal = Terminal()
    assert _main(monkeypatch, terminal, *argv, "--out", tmp_path / "a")[0] == 0
    drawn = _lines(terminal.getvalue())
    title = "toy-gap swag budget 20 seed 0"
    assert any(line.startswith(f"{title}: predictive:") and "| 30.0/30 members [" in line for line in drawn), drawn
    assert any(line.startswith(f"{title}: predictive:") and "| 1.0/30 members [" in line for line in drawn)
    assert any(line.startswith(f"{title}: scoring:") and "| 1.0/1 blocks [" in line for line in drawn), drawn
    assert any("20.0/20 epochs" in line for line in drawn)
    for out, extra in (("b", ()), ("c", ("--quiet",))):
        piped = io.StringIO()
        assert _main(monkeypatch, piped if not extra else Terminal(), *argv, "--out", tmp_path / out, *extra)[0] == 0
        assert piped.getvalue() == ""


OWN_METHOD = textwrap.dedent('''
    from approximators.swag import SWAG

    class OwnSWAG(SWAG):
        name = "own-swag"
        summary = "SWAG, as a method of one's own: run in a process of its own"
''')


def test_a_run_in_a_process_of_its_own_shows_its_phases_on_the_parent_s_terminal(tmp_path, monkeypatch,
                                                                                 every_progress_update):
    """A method that is not bdl-bench's runs in a worker process (bench.executors.Isolated): its phases come through
    the pipe its epochs come through."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "own_swag.py").write_text(OWN_METHOD)
    monkeypatch.syspath_prepend(str(site))
    terminal = every_progress_update()
    assert _main(monkeypatch, terminal, "run", "--method", "own_swag:OwnSWAG", "--task", "toy-gap", "--budget", "20",
                 "--out", tmp_path / "runs")[0] == 0
    drawn = _lines(terminal.getvalue())
    title = "toy-gap own-swag budget 20 seed 0"
    assert any(line.startswith(f"{title}: predictive:") and "| 30.0/30 members [" in line for line in drawn), drawn
    assert any(line.startswith(f"{title}: scoring:") and "| 1.0/1 blocks [" in line for line in drawn), drawn


# --- verify and submit --verify: each re-execution, on a terminal and in the log ----------------------------------

@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    from bench.runner import RunSpec, run

    out = tmp_path_factory.mktemp("phases-runs")
    for seed in (0, 1):
        run(RunSpec(task="toy-gap", method="sgd", budget=5, seed=seed, out=out))
    return out / "toy-gap" / "sgd" / "budget-5"


def _log(path) -> list[str]:
    return [line.split("] ", 1)[1] for line in path.read_text().splitlines()]


def test_verify_draws_each_re_execution_and_logs_one_line_per_re_execution_whatever_standard_error_is(
        two_runs, tmp_path, monkeypatch, every_progress_update):
    Terminal = every_progress_update
    folders = [two_runs / "seed-0", two_runs / "seed-1"]
    log = tmp_path / "logs" / "verify.log"
    terminal = Terminal()
    code, out = _main(monkeypatch, terminal, "verify", *folders, "--log", log)
    assert code == 0 and "2 of 2 runs verified" in out
    drawn = _lines(terminal.getvalue())
    for seed in (0, 1):
        line = f"{folders[seed]}: toy-gap sgd budget 5 seed {seed} (its own seed): re-executed in "
        assert any(shown.startswith(line) for shown in drawn), drawn
        assert any(shown.startswith(f"toy-gap sgd budget 5 seed {seed}:") and "5.0/5 epochs" in shown
                   for shown in drawn), "a bar of the re-execution's epochs"
        assert any(shown.startswith(f"toy-gap sgd budget 5 seed {seed}: predictive:") for shown in drawn)
    logged = _log(log)
    assert logged[0] == "verifying 2 run folder(s), 1 torch thread(s)" and logged[-1] == "2 of 2 runs verified"
    assert [line.split(" (")[1].split(")")[0] for line in logged if "re-executed in" in line] == ["its own seed"] * 2
    assert sum("verified (bitwise" in line for line in logged) == 2

    piped = io.StringIO()
    code, out = _main(monkeypatch, piped, "verify", *folders, "--log", log)
    assert code == 0 and piped.getvalue() == "", "a piped standard error holds error lines only"
    assert sum("re-executed in" in line for line in _log(log)) == 4, "appended, one line per re-execution"


def test_verify_logs_every_seed_it_re_executes_to_judge_a_record_made_elsewhere(tmp_path, monkeypatch):
    """A record made elsewhere that is not its re-execution to round-off has its configuration's seeds re-executed
    here (natively, and with another CPU kind's kernels where this machine has them): each is a line."""
    import bench.verify
    from bench.executors import other_kernels_differ
    from bench.runner import RunSpec, run

    monkeypatch.setattr(bench.verify, "CROSS_CPU_SEEDS", 3)
    run(RunSpec(task="toy-gap", method="sgd", budget=5, out=tmp_path, keep_predictions=False))  # its record alone
    folder = tmp_path / "toy-gap" / "sgd" / "budget-5" / "seed-0"
    result = json.loads((folder / records.RESULT).read_text())
    result["environment"] = {**result["environment"], "cpu": "another CPU kind", "cpu_capability": "AVX512"}
    result["metrics"] = {**result["metrics"], "w2": result["metrics"]["w2"] + 0.01}
    (folder / records.RESULT).write_text(json.dumps(result))
    log = tmp_path / "verify.log"
    _main(monkeypatch, io.StringIO(), "verify", folder, "--log", log)
    hows = [line.split(" (", 1)[1].split(")")[0] for line in _log(log) if "re-executed in" in line]
    other = 3 if other_kernels_differ() else 0
    assert hows == (["its own seed"] + ["a seed of its configuration, natively"] * 2
                    + ["a seed of its configuration, with another CPU kind's kernels"] * other), hows
    assert [line for line in _log(log) if "seed-0: toy-gap sgd budget 5 seed 2 (a seed of its configuration, "
            "natively): re-executed in" in line]


def test_submit_verify_logs_beside_the_database_and_says_each_verdict_on_a_terminal(two_runs, tmp_path, monkeypatch,
                                                                                   every_progress_update):
    """`submit --verify` re-executed 3 runs for 506 s and printed only "added"."""
    Terminal = every_progress_update
    db = tmp_path / "board" / "leaderboard.sqlite"
    terminal = Terminal()
    code, out = _main(monkeypatch, terminal, "submit", two_runs, "--verify", "--db", db, "--name", "a")
    assert code == 0 and out.count("added:") == 2
    drawn = _lines(terminal.getvalue())
    assert sum("(its own seed): re-executed in" in line for line in drawn) == 2, drawn
    assert sum(": verified (bitwise" in line for line in drawn) == 2, drawn
    logged = _log(db.parent / "verify.log")
    assert logged[0].startswith("verifying 2 run folder(s) to submit")
    assert sum("re-executed in" in line for line in logged) == 2 and sum("verified (bitwise" in line
                                                                         for line in logged) == 2
    piped = io.StringIO()
    code, _ = _main(monkeypatch, piped, "submit", two_runs, "--verify", "--db", tmp_path / "other.sqlite", "--name",
                    "a")
    assert code == 0 and piped.getvalue() == "" and sum("re-executed in" in line
                                                        for line in _log(tmp_path / "verify.log")) == 2


def test_a_log_that_is_a_folder_is_refused_before_anything_is_re_executed(two_runs, tmp_path, run_cli):
    code, out, err = run_cli("verify", two_runs / "seed-0", "--log", tmp_path)
    assert code == 2 and "the re-executions' log is not a regular file" in err and out == ""
    code, _, err = run_cli("submit", two_runs, "--log", tmp_path / "x.log", "--db", tmp_path / "db.sqlite")
    assert code == 2 and "add --verify" in err


# --- the board ---------------------------------------------------------------------------------------------------

@pytest.fixture
def small_store(tmp_path, monkeypatch):
    """A shipped store of a few of the committed records: two tasks, three methods."""
    from leaderboard import shipped

    committed = shipped.Path(shipped.__file__).resolve().parent / "shipped"
    root = tmp_path / "shipped"
    for task, method in (("toy-gap", "sgd"), ("toy-gap", "swag"), ("digits", "sgd"), ("digits", "mc-dropout")):
        shutil.copytree(committed / task / method / "budget-100", root / task / method / "budget-100")
    shipped.write_manifest(root)
    monkeypatch.setattr(shipped, "FOLDER", root)
    return root


def test_the_board_shows_reading_its_records_and_rendering_on_a_terminal_only(small_store, tmp_path, monkeypatch,
                                                                             every_progress_update):
    Terminal = every_progress_update
    records_count = len(list(small_store.rglob(records.RESULT)))
    terminal = Terminal()
    monkeypatch.setenv("BDL_BENCH_DB", str(tmp_path / "none.sqlite"))
    assert _main(monkeypatch, terminal, "leaderboard", "--format", "html", "--output", tmp_path / "board.html")[0] == 0
    drawn = _lines(terminal.getvalue())
    assert any(line.startswith("reading the shipped results:") and f"| {records_count}/{records_count} records ["
               in line for line in drawn), drawn
    assert any(line.startswith("rendering the board (html):") and "| 2/2 tracks [" in line for line in drawn), drawn
    for stderr, extra in ((io.StringIO(), ()), (Terminal(), ("--quiet",))):
        assert _main(monkeypatch, stderr, "leaderboard", "--format", "md", *extra)[0] == 0
        assert "reading the shipped" not in stderr.getvalue() and "rendering the board" not in stderr.getvalue()
        assert stderr.getvalue().startswith("no leaderboard database at") and stderr.getvalue().count("\n") == 1


# --- fetch ---------------------------------------------------------------------------------------------------------

def test_fetch_shows_converting_and_checking_the_cached_arrays_on_a_terminal(file_server, official_files,
                                                                             fixture_checksums, tmp_path, monkeypatch,
                                                                             every_progress_update):
    from bench import download
    from bench.tasks.competition import SPECS

    files = len(SPECS["uci-gap"].arrays) + 1  # its arrays and its reference
    monkeypatch.setattr(download, "RETRY_PAUSE_SECONDS", 0.0)
    file_server.files.update(official_files)
    urls = ("--data-url", file_server.url + "data/", "--reference-url", file_server.url + "reference/")
    for attempt in ("fetched", "checked"):
        terminal = every_progress_update()
        code, out = _main(monkeypatch, terminal, "fetch", "--task", "uci-gap", "--cache", tmp_path, *urls)
        assert code == 0
        drawn = _lines(terminal.getvalue())
        if attempt == "fetched":
            assert any(line.startswith("uci-gap: converting the arrays and the reference:") and f"| {files}/{files} [" in line
                       for line in drawn), drawn
        else:
            assert "already fetched" in out
            assert any(line.startswith("uci-gap: checking the cached arrays' sha256") for line in drawn), drawn
    piped = io.StringIO()
    assert _main(monkeypatch, piped, "fetch", "--task", "uci-gap", "--cache", tmp_path, *urls, "--force")[0] == 0
    assert piped.getvalue() == ""
