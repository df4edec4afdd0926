"""`leaderboard` output cannot carry injected content, and reading the board never writes, locks or waits long.

Stored text (method, task, label, submitter, device, notes, architecture change, config hash, test block name) is
the submitter's: in CSV it never starts a formula (OWASP's CSV-injection guidance), in Markdown it never adds a
column, a row, a line, HTML, a code span or a link, nor starts a line, in HTML it never adds an element or an
attribute. Rows are inserted straight into the store
here, without the submission checks, as a database edited by hand or written by another tool would hold them.

Reading: a writer holding the lock does not make `leaderboard` wait (the board, or one line within seconds),
a read-only file or folder can be read, and a read changes nothing: not the file's bytes, not its mtime, and
(for a rollback-journal database or a read-only folder) no -journal, -wal or -shm file appears. As root,
chmod stops no write, so the read-only tests also set the immutable attribute (`chattr +i`) and are skipped
where that is not possible.
"""

from __future__ import annotations

import csv
import html
import io
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import threading
import time
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from bench.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT
from leaderboard import store
from leaderboard.render import render
from leaderboard.store import RunRow, Store
from tests.leaderboard.conftest import write_run
from tests.reliability.test_error_boundary import assert_one_line

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PAYLOADS = ("=1+1", "+1", "-1", "@A1", "\t=1", "\r=1", '"', "'", ",", ";", "|", "\\", "\\|", "`", "```", "[x](y)",
            "![x](http://e.x/p.png)", "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", '" onmouseover="x',
            "&lt;b&gt;", "&amp;", "</title><script>", "]]>", "<!--", "\n", "\r\n", "\u2028", "\x1b[31m", "$x$", "<",
            "\u202e", "\u2066", "\x1b]0;title\x07")
texts = st.one_of(st.text(), st.sampled_from(PAYLOADS),
                  st.builds(lambda *parts: "".join(parts), st.text(max_size=5), st.sampled_from(PAYLOADS),
                            st.text(max_size=5), st.sampled_from(PAYLOADS)))
"""Any text, and text built around the payloads each format must neutralise (random text rarely holds them)."""
labels = st.none() | texts
block_names = st.none() | texts.filter(lambda name: name != store.OVERALL_BLOCK)
"""A test block's name as a database edited by hand may hold it (None: the run has no test blocks)."""


def run_row(seed: int = 0, method: str = "de", task: str = "toy-gap", submitter: str = "alice",
            device: str | None = "cpu", architecture_change: str | None = None, config_hash: str = "c0ffee00",
            notes: str = "", label: str | None = None, block: str | None = None) -> RunRow:
    overall = {"w2": 0.5 + seed / 10, "w1": 0.4, "log_likelihood": -1.25}
    return RunRow(
        task=task, task_version=1, task_fingerprint="f", task_kind="regression", method=method, budget=10.0,
        seed=seed, reference_sha256="r", config_hash=config_hash, config={"members": 5}, source="run",
        predictions_sha256=f"p{seed}", epochs_used=10.0, test_passes=1.0, wall_seconds=0.5, device=device,
        versions={"torch": "x"}, noise_floor={"all": {"w2": 0.01}}, reliability=None, submitter=submitter,
        notes=notes, finished_at=None, submitted_at="2025-01-01T00:00:00+00:00",
        metrics={"all": overall, **({} if block is None else {block: {"w2": 0.75, "w1": 0.5}})},
        architecture_change=architecture_change, label=label)


def printable(text: str) -> str:
    """Stored text as the page shows it: what is not printable becomes a space."""
    return "".join(ch if ch.isprintable() else " " for ch in text)


def neutralised(text: str) -> str:
    """What a CSV cell holds for stored ``text``: every character that is neither printable nor a line break
    (terminal escapes, bidirectional overrides, carriage returns) a space, then a formula's start quoted."""
    text = "".join(ch if ch.isprintable() or ch == "\n" else " " for ch in text)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def make_board(path: Path, rows: list[RunRow] | None = None, journal: str = "wal") -> Path:
    with Store(path) as db:
        db.insert(rows or [run_row(0), run_row(1), run_row(0, method="=1+1"), run_row(1, method="=1+1")])
    if journal != "wal":
        with sqlite3.connect(path) as raw:
            assert raw.execute(f"PRAGMA journal_mode = {journal}").fetchone()[0] == journal
        raw.close()
    return path


def snapshot(path: Path) -> tuple:
    """What a read must not change: the file's bytes and mtime, and which files lie next to it."""
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())


# --- CSV ---------------------------------------------------------------------------------------------------------

def read_csv(text: str) -> tuple[list[str], list[list]]:
    """The header and the rows; rows are read with QUOTE_NONNUMERIC, so a number is a float, text a str."""
    header, body = text.split("\n", 1)
    return next(csv.reader([header])), list(csv.reader(io.StringIO(body, newline=""), quoting=csv.QUOTE_NONNUMERIC))


@PROPERTY
@given(method=texts, task=texts, submitter=texts, device=texts, change=texts, config_hash=texts, label=labels,
       notes=texts, block=block_names)
def test_csv_text_round_trips_and_never_starts_a_formula(method, task, submitter, device, change, config_hash, label,
                                                         notes, block):
    out = render([run_row(method=method, task=task, submitter=submitter, device=device, architecture_change=change,
                          config_hash=config_hash, label=label, notes=notes, block=block)], "csv")
    header, rows = read_csv(out)
    assert len(rows) == (2 if block is None else 4) and all(len(row) == len(header) for row in rows)
    for row in rows:
        for cell in row:
            assert isinstance(cell, float) or not cell.startswith(FORMULA_STARTS), cell
    entry = dict(zip(header, rows[1]))
    assert entry["method"] == neutralised(method) and entry["task"] == neutralised(task)
    assert entry["submitters"] == neutralised(submitter) and entry["architecture_change"] == neutralised(change)
    assert entry["config_hash"] == neutralised(config_hash)
    assert entry["devices"] == (neutralised(device) if device else "")
    assert entry["label"] == ("" if label is None else neutralised(label)) and entry["block"] == "all"
    assert entry["notes"] == neutralised(notes)
    if block is not None:
        block_entry = dict(zip(header, rows[3]))
        assert block_entry["block"] == neutralised(block) and block_entry["w2_mean"] == 0.75
    # numbers stay numbers, a negative one included (it is not text to neutralise)
    assert entry["log_likelihood_mean"] == -1.25 and entry["budget"] == 10 and entry["rank"] == 1


def test_csv_through_the_command_line_neutralises_every_injection_kind(tmp_path, run_cli):
    payloads = ['=HYPERLINK("http://evil.example","x")', "+1+1", "-2+3", "@SUM(A1:A9)", "\t=1", "\r=1",
                "a,=1", 'a";=1']
    rows = [run_row(seed, method=p, submitter="=cmd|' /C calc'!A0", device="@dev") for seed, p in enumerate(payloads)]
    db = make_board(tmp_path / "board.sqlite", rows)
    code, out, err = run_cli("leaderboard", "--db", db, "--format", "csv")
    assert code == 0, err
    header, records = read_csv(out)
    entries = [dict(zip(header, r)) for r in records if r[header.index("rank")] != ""]
    assert sorted(e["method"] for e in entries) == sorted(neutralised(p) for p in payloads)
    assert {e["submitters"] for e in entries} == {"'=cmd|' /C calc'!A0"}
    assert {e["devices"] for e in entries} == {"'@dev"}
    # read with QUOTE_NONNUMERIC, an unquoted cell would have failed to parse as a number: every text cell is
    # quoted, so a separator or a quote inside one starts no other cell
    assert all(isinstance(e["w2_mean"], float) and e["log_likelihood_mean"] == -1.25 for e in entries)


def test_csv_lists_neutralise_every_element():
    out = render([run_row(0, submitter="bob", notes="plain"), run_row(1, submitter="-bad", notes="@SUM(A1)"),
                  run_row(2, submitter="=evil", notes="=1+1")], "csv")
    header, rows = read_csv(out)
    entry = dict(zip(header, rows[1]))
    assert entry["submitters"] == "'-bad;'=evil;bob"
    assert entry["notes"] == "'=1+1\n'@SUM(A1)\nplain"


# --- Markdown ----------------------------------------------------------------------------------------------------

def unescaped(line: str, char: str) -> int:
    """How many times ``char`` occurs in ``line`` not escaped by a backslash."""
    count, i = 0, 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        count += line[i] == char
        i += 1
    return count


def markdown_cells(line: str) -> list[str]:
    cells, current, i = [], "", 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line):
            current += line[i + 1]
            i += 2
            continue
        if line[i] == "|":
            cells.append(current)
            current = ""
        else:
            current += line[i]
        i += 1
    return [html.unescape(c.strip()) for c in cells[1:]]


def shown(text: str) -> str:
    """``text`` as a Markdown cell shows it: characters that are not printable as spaces."""
    return "".join(ch if ch.isprintable() else " " for ch in text).strip()


MARKDOWN_LINE_STARTS = ("## ", "|", "- **", "Each table is one task", "This task's reference", "Per budget held by ",
                        "Notes, each once", "\u2020 ")
"""How every non-empty line of the Markdown board starts: with text of ours, never with stored text."""


@PROPERTY
@given(method=texts, task=texts, submitter=texts, device=texts, change=texts, label=labels, notes=texts,
       block=block_names)
def test_markdown_text_adds_no_column_row_html_code_or_link(method, task, submitter, device, change, label, notes,
                                                            block):
    def board(method, task, submitter, device, change, label, notes, block):
        return render([run_row(method=method, task=task, submitter=submitter, device=device,
                               architecture_change=change, label=label, notes=notes, block=block)], "md")

    out = board(method, task, submitter, device, change, label, notes, block)
    plain = board("x", "x", "x", "x" if device else "", "x" if change else change, label and "x",
                  "x" if notes else "", block and "x")
    assert len(out.splitlines()) == len(plain.splitlines()) and out.count("\n") == plain.count("\n")
    assert all(line.startswith(MARKDOWN_LINE_STARTS) for line in out.splitlines() if line)
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert len(table) == (4 if block is None else 8)  # header, delimiter, noise floor, the entry; per block the same
    assert [unescaped(line, "|") for line in table] == [unescaped(line, "|") for line in plain.splitlines()
                                                        if line.startswith("|")]
    assert "<" not in out and ">" not in out and not re.search(r"&(?!amp;|lt;|gt;)", out)
    assert unescaped(out, "`") == 0 and unescaped(out, "[") == 0 and unescaped(out, "$") == 0
    header, entry = markdown_cells(table[0]), markdown_cells(table[3])
    row = dict(zip(header, entry))
    name = method if label is None else f"{method} ({label})"
    assert row["method"] == shown(name + " \u2020")  # the changed-network mark follows the escaped name
    assert row["submitted by"] == shown(submitter)
    if block is not None:
        assert markdown_cells(table[7])[0] == shown(block)
    headings = [line for line in out.splitlines() if line.startswith("#")]
    assert headings[0] == "## How to read the board" and len(headings) == 2, headings


def test_markdown_through_the_command_line_neutralises_every_injection_kind(tmp_path, run_cli):
    payloads = ["a | b | c", "<img src=x onerror=alert(1)>", "line\nbreak | x", "`code | x`", "[link](http://e.x)",
                "![img](http://e.x/p.png)", "back\\|slash", "\u2028| sep", "\x1b[31mred"]
    rows = [run_row(seed, method=p, submitter="<b>bold</b>", architecture_change="<i>it</i>\n| x |")
            for seed, p in enumerate(payloads)]
    db = make_board(tmp_path / "board.sqlite", rows)
    code, out, err = run_cli("leaderboard", "--db", db)
    assert code == 0, err
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert len(table) == 3 + len(payloads)
    assert len({unescaped(line, "|") for line in table}) == 1
    assert "<" not in out and "\x1b" not in out and unescaped(out, "`") == 0 and unescaped(out, "[") == 0
    methods = {markdown_cells(line)[1].removesuffix(" \u2020") for line in table[3:]}
    assert methods == {shown(p) for p in payloads}
    notes = [line for line in out.splitlines() if line.startswith("\u2020")]
    assert len(notes) == len(payloads) and all(line.endswith("another posterior than the reference's")
                                               for line in notes)


# --- HTML --------------------------------------------------------------------------------------------------------

PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "section", "div", "svg", "text",
             "rect", "line", "polyline", "circle", "polygon", "table", "thead", "tbody", "tr", "th", "td", "ul", "li"}
PAGE_ATTRIBUTES = {"lang", "charset", "id", "class", "xmlns", "width", "height", "viewbox", "role", "aria-label", "x",
                   "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "fill", "stroke", "stroke-width", "stroke-dasharray",
                   "points", "text-anchor", "transform"}


class PageParser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: set[str] = set()
        self.sections: list[str | None] = []
        self.labels: list[str | None] = []
        self.text = ""

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes |= {name for name, _ in attrs}
        if tag == "section":
            self.sections.append(dict(attrs).get("id"))
        if tag == "svg":
            self.labels.append(dict(attrs).get("aria-label"))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_data(self, data):
        self.text += data


def parsed(page: str) -> PageParser:
    parser = PageParser()
    parser.feed(page)
    parser.close()
    return parser


@PROPERTY
@given(method=texts, task=texts, submitter=texts, device=texts, change=texts, label=labels, notes=texts,
       block=block_names)
# tabulate reads a first cell of "\x01" as its separating-line marker and dropped the block table's rows
@example(method="", task="", submitter="", device="", change="", label=None, notes="", block="\x01")
def test_html_page_and_its_svg_escape_text_attributes_and_titles(method, task, submitter, device, change, label,
                                                                 notes, block):
    def page(method, task, submitter, device, change, label, notes, block):
        return parsed(render([run_row(method=method, task=task, submitter=submitter, device=device,
                                      architecture_change=change, label=label, notes=notes, block=block)], "html"))

    parser = page(method, task, submitter, device, change, label, notes, block)
    plain = page("x", "x", "x", "x" if device else "", "x" if change else change, label and "x", "x" if notes else "",
                 block and "x")
    assert set(parser.tags) <= PAGE_TAGS and parser.attributes <= PAGE_ATTRIBUTES
    assert parser.tags == plain.tags, "stored text added or removed an element"
    assert parser.tags.count("section") == 2 and parser.tags.count("svg") == 1  # the reading guide's, the task's
    assert parser.tags.count("tr") == (3 if block is None else 6)
    # Shown as written, but for what is not printable (line breaks outside notes, terminal escapes, bidirectional
    # overrides that would reorder the page): a space.
    assert parser.sections == ["guide", printable(task)]
    assert parser.labels[0].startswith(f"{printable(task)}: w2 against budget")
    assert printable(method) in parser.text  # the legend and the tooltip
    if label is not None:
        assert f"{printable(method)} ({printable(label)})" in parser.text
    if notes:
        assert "\n".join(printable(line) for line in notes.split("\n")) in parser.text
    assert not any(ch in parser.text for ch in "\x1b\u202e\u2066")


def marker_as_one(tag: str) -> str:
    """A plot marker's tag as one kind: a circle and a polygon are both markers (or an off-scale arrow)."""
    return "marker" if tag in ("circle", "polygon") else tag


# --- the summary across tasks and the notes, where stored text from several tracks meets --------------------------

@PROPERTY
@given(method=texts, other=texts, label=labels, task=texts, notes=texts)
def test_the_summary_and_the_notes_escape_stored_text_in_every_format(method, other, label, task, notes):
    """Two tasks at one budget (so the board has a summary across tasks), two methods of stored names, one with a
    note: the summary's and the notes' rows add no column, row, line, element or formula."""
    assume(task != "toy-gap" and method != other)

    def rows(method, other, label, task, notes):
        return [run_row(seed, method=method, label=label, task=task, notes=notes) for seed in (0, 1)] + [
            run_row(seed, method=other, task="toy-gap") for seed in (0, 1)] + [
            run_row(seed, method=method, label=label, task="toy-gap", config_hash="c0ffee01") for seed in (0, 1)]

    stored, plain = rows(method, other, label, task, notes), rows("x", "y", label and "x", "x", "x" if notes else "")
    out, expected = render(stored, "md"), render(plain, "md")
    assert out.splitlines()[0] == "## How to read the board" and out.count("\n## Summary across tasks\n") == 1
    assert len(out.splitlines()) == len(expected.splitlines())
    assert all(line.startswith(MARKDOWN_LINE_STARTS) for line in out.splitlines() if line)
    assert [unescaped(line, "|") for line in out.splitlines() if line.startswith("|")] == [
        unescaped(line, "|") for line in expected.splitlines() if line.startswith("|")]
    assert "<" not in out and unescaped(out, "`") == 0 and unescaped(out, "[") == 0 and unescaped(out, "$") == 0
    page, plain_page = parsed(render(stored, "html")), parsed(render(plain, "html"))
    # (the tasks' sections may come in another order than the plain board's, and a series' marker shape follows its
    # name's place among the page's names: the same elements, not their order or their markers' shapes)
    assert sorted(map(marker_as_one, page.tags)) == sorted(map(marker_as_one, plain_page.tags))
    assert set(page.tags) <= PAGE_TAGS
    assert page.attributes <= PAGE_ATTRIBUTES
    assert page.sections[:2] == ["guide", "summary"]
    header, records = read_csv(render(stored, "csv"))
    summary = [dict(zip(header, r)) for r in records if r[0] == "summary"]
    assert len(summary) == 2 and all(len(r) == len(header) for r in records)
    assert all(isinstance(cell, float) or not cell.startswith(FORMULA_STARTS) for r in records for cell in r)
    assert {r["method"] for r in summary} == {neutralised(method), neutralised(other)}


# --- reading: locks, read-only files and folders, damaged and missing databases ---------------------------------

@pytest.mark.parametrize("journal, lock, readable", [
    ("wal", "IMMEDIATE", True), ("wal", "EXCLUSIVE", True), ("delete", "IMMEDIATE", True),
    ("delete", "EXCLUSIVE", False),
])
def test_a_writer_holding_the_lock_does_not_make_a_reader_wait(tmp_path, run_cli, journal, lock, readable):
    db = make_board(tmp_path / "board.sqlite", journal=journal)
    holder = sqlite3.connect(db, isolation_level=None, timeout=0)
    try:
        holder.execute(f"BEGIN {lock}")
        holder.execute("UPDATE runs SET notes = 'being written'")
        started = time.monotonic()
        code, out, err = run_cli("leaderboard", "--db", db, "--format", "csv")
        elapsed = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # A reader waits at most READ_BUSY_TIMEOUT_SECONDS (2 s), never a writer's BUSY_TIMEOUT_SECONDS (60 s): the bound
    # lies far between the two, out of reach of a loaded machine's slower start, and below a reader waiting as long as
    # a writer does.
    assert elapsed < store.BUSY_TIMEOUT_SECONDS / 4, f"the reader waited {elapsed:.1f} s"
    if readable:
        assert code == 0 and "'=1+1" in out, err
    else:
        assert_one_line(code, err, EXIT_ENVIRONMENT, str(db), "locked by another process", "run again",
                        f"(waited {store.READ_BUSY_TIMEOUT_SECONDS:g} s)")


@pytest.mark.parametrize("journal, lock", [("wal", "IMMEDIATE"), ("delete", "IMMEDIATE"), ("delete", "EXCLUSIVE")])
def test_a_writer_locked_out_past_the_wait_is_the_machine_refusing_as_a_reader_is(tmp_path, run_cli, monkeypatch,
                                                                                   journal, lock):
    """Issue 49, kind 10: a database locked past the wait was exit 3 for `leaderboard` and exit 2 ("cannot open
    leaderboard database") for `submit`, depending on where the lock was met (opening, migrating, inserting)."""
    db = make_board(tmp_path / "board.sqlite", journal=journal)
    run = write_run(tmp_path / "runs", "digits", method="new")
    monkeypatch.setattr(store, "BUSY_TIMEOUT_SECONDS", 0.2)
    holder = sqlite3.connect(db, isolation_level=None, timeout=0)
    try:
        holder.execute(f"BEGIN {lock}")
        holder.execute("UPDATE runs SET notes = 'being written'")
        code, _, err = run_cli("submit", run, "--db", db, "--name", "alice")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert_one_line(code, err, EXIT_ENVIRONMENT, str(db), "locked by another process", "run again", "(waited 0.2 s)")


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_reading_changes_nothing_in_the_database(tmp_path, run_cli, journal):
    db = make_board(tmp_path / "board.sqlite", journal=journal)
    before = snapshot(db)
    dump = "\n".join(sqlite3.connect(db).iterdump())
    for fmt in ("md", "csv", "json", "html"):
        code, _, err = run_cli("leaderboard", "--db", db, "--format", fmt)
        assert code == 0, err
    after = snapshot(db)
    assert after[:2] == before[:2], "a read changed the database file"
    if journal == "delete":  # a write-ahead-log reader may leave an empty -wal and its -shm index
        assert after[2] == before[2], "a read created a journal file"
    assert "\n".join(sqlite3.connect(db).iterdump()) == dump


def _chattr(path: Path, flag: str) -> bool:
    tool = shutil.which("chattr")
    return tool is not None and subprocess.run([tool, flag, str(path)], capture_output=True, timeout=60).returncode == 0


@contextmanager
def read_only(path: Path):
    """``path`` (a file or a folder) made read-only, for root too (the immutable attribute); skips where it cannot.
    Yields whether it is immutable (then nobody, root included, can write it)."""
    mode = stat.S_IMODE(path.stat().st_mode)
    path.chmod(0o555 if path.is_dir() else 0o444)
    immutable = False
    try:
        if os.geteuid() == 0:
            immutable = _chattr(path, "+i")
        try:  # is it really read-only here?
            if path.is_dir():
                (path / "probe").touch()
                (path / "probe").unlink()
            else:
                open(path, "r+b").close()
            writable = True
        except OSError:
            writable = False
        if writable:
            pytest.skip("chmod does not stop this user's writes (root) and `chattr +i` is not available here")
        yield immutable
    finally:
        if immutable:
            _chattr(path, "-i")
        path.chmod(mode)


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_a_read_only_database_file_can_be_read(tmp_path, run_cli, journal):
    """A file nobody can write (immutable) is read without a -wal or -shm file created beside it (issue 49, kind 10:
    it left both); one this user alone cannot write may get them, as its owner may be writing it."""
    db = make_board(tmp_path / "board.sqlite", journal=journal)
    before = snapshot(db)
    with read_only(db) as immutable:
        code, out, err = run_cli("leaderboard", "--db", db, "--format", "csv")
        during = snapshot(db)
    assert code == 0 and "'=1+1" in out, err
    assert during[:2] == before[:2]
    if immutable:
        assert during == before, "a read created a file next to an immutable database"


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_a_database_in_a_read_only_folder_can_be_read_and_no_file_is_created(tmp_path, run_cli, journal):
    folder = tmp_path / "media"
    folder.mkdir()
    db = make_board(folder / "board.sqlite", journal=journal)
    before = snapshot(db)
    with read_only(folder):
        code, out, err = run_cli("leaderboard", "--db", db, "--format", "csv")
        during = snapshot(db)
    assert code == 0 and "'=1+1" in out, err
    assert during == before, "a read changed the file or created one next to it"


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_writing_a_read_only_database_file_is_the_machine_refusing_and_creates_nothing(tmp_path, run_cli, journal):
    """It was "damaged or not a bdl-bench database" (exit 2), with -wal and -shm files left beside it."""
    db = make_board(tmp_path / "board.sqlite", journal=journal)
    run = write_run(tmp_path / "runs", "digits", method="new")
    before = snapshot(db)
    with read_only(db):
        code, _, err = run_cli("submit", run, "--db", db, "--name", "alice")
        during = snapshot(db)
    assert_one_line(code, err, EXIT_ENVIRONMENT, str(db), "is read-only", "nothing was written")
    assert during == before


def test_a_file_nobody_can_write_with_changes_in_its_log_is_refused_not_read_without_them(tmp_path, run_cli,
                                                                                       monkeypatch):
    """Read as immutable, the database would silently lack what its -wal holds."""
    db = make_board(tmp_path / "board.sqlite")
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE runs SET notes = 'in the log only'")
    monkeypatch.setattr(store, "unwritable_by_anyone", lambda path: True)
    try:
        code, _, err = run_cli("leaderboard", "--db", db)
    finally:
        writer.close()
    assert_one_line(code, err, EXIT_BAD_INPUT, str(db), "-wal", "an immutable database")


def test_a_database_that_turns_read_only_while_open_is_the_machine_refusing():
    from bench.errors import describe_failure

    code, line = describe_failure(sqlite3.OperationalError("attempt to write a readonly database"))
    assert code == EXIT_ENVIRONMENT and "read-only" in line and "damaged" not in line


def test_a_write_ahead_log_that_cannot_be_read_on_read_only_media_is_one_line(tmp_path, run_cli):
    """A database copied with the -wal of a writer that had not checkpointed: read as immutable, it would silently
    lack those rows; the reader refuses instead."""
    db = make_board(tmp_path / "board.sqlite")
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE runs SET notes = 'in the log only'")
    folder = tmp_path / "media"
    folder.mkdir()
    for suffix in ("", "-wal"):
        shutil.copyfile(f"{db}{suffix}", folder / f"board.sqlite{suffix}")
    writer.close()
    copy = folder / "board.sqlite"
    assert (folder / "board.sqlite-wal").stat().st_size > 0
    before = snapshot(copy)
    with read_only(folder):
        code, _, err = run_cli("leaderboard", "--db", copy)
        during = snapshot(copy)
    assert_one_line(code, err, EXIT_BAD_INPUT, str(copy), "-wal", "writable folder")
    assert during == before


def test_a_missing_database_is_one_line_and_is_not_created(tmp_path, run_cli, monkeypatch):
    """Where no shipped results can stand in for the database either (tests see an empty store: tests/conftest.py)."""
    missing = tmp_path / "nowhere" / "board.sqlite"
    code, _, err = run_cli("leaderboard", "--db", missing)
    assert_one_line(code, err, EXIT_BAD_INPUT, f"no leaderboard database at {missing}", "--db")
    monkeypatch.setenv("BDL_BENCH_DB", str(tmp_path / "default.sqlite"))
    code, _, err = run_cli("leaderboard")
    assert_one_line(code, err, EXIT_BAD_INPUT, "no leaderboard database at")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    code, _, err = run_cli("leaderboard", "--db", tmp_path)
    assert_one_line(code, err, EXIT_BAD_INPUT, str(tmp_path), "is a folder")


def _foreign(path: Path) -> None:
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE people (name TEXT)")
    raw.close()


def _newer(path: Path) -> None:
    make_board(path)
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    raw.close()


@pytest.mark.parametrize("make, fragment", [
    (lambda p: p.write_bytes(b"this is not sqlite" * 300), "restore it from a copy"),
    (lambda p: p.write_bytes(b""), "not a bdl-bench leaderboard database"),
    (_foreign, "not a bdl-bench leaderboard database"),
    (_newer, "newer than this release"),
], ids=["damaged", "empty", "another-schema", "newer-schema"])
def test_a_database_that_cannot_be_read_is_one_line_and_left_as_it_was(tmp_path, run_cli, make, fragment):
    db = tmp_path / "board.sqlite"
    make(db)
    before = snapshot(db)
    code, _, err = run_cli("leaderboard", "--db", db)
    assert_one_line(code, err, EXIT_BAD_INPUT, str(db), fragment)
    assert snapshot(db)[:2] == before[:2] and not db.with_name(db.name + "-journal").exists()


def test_an_older_schema_is_read_without_migrating_it(tmp_path, run_cli):
    db = tmp_path / "board.sqlite"
    raw = sqlite3.connect(db)
    for statement in filter(str.strip, store.MIGRATIONS[0].split(";")):
        raw.execute(statement)
    raw.execute("PRAGMA user_version = 1")
    run_id = raw.execute(  # a row as the release of schema version 1 wrote it
        "INSERT INTO runs (task, task_version, task_fingerprint, task_kind, method, budget, seed, reference_sha256, "
        "config_hash, config_json, source, predictions_sha256, epochs_used, test_passes, wall_seconds, device, "
        "versions_json, noise_floor_json, reliability_json, submitter, notes, finished_at, submitted_at) VALUES "
        "('toy-gap', 1, 'f', 'regression', 'old-method', 10.0, 0, 'r', 'c', '{}', 'run', 'p', 10.0, 1.0, 0.5, 'cpu', "
        "'{}', NULL, NULL, 'alice', '', NULL, 'now')").lastrowid
    raw.executemany("INSERT INTO metrics VALUES (?, 'all', ?, ?)", [(run_id, "w2", 0.5), (run_id, "w1", 0.4)])
    raw.commit()
    raw.close()
    before = snapshot(db)
    code, out, err = run_cli("leaderboard", "--db", db, "--format", "json")
    assert code == 0 and '"method": "old-method"' in out and '"verified_seeds": 0' in out, err
    assert snapshot(db) == before, "reading migrated the database"


def test_a_fifo_given_as_the_database_is_one_line_not_a_reader_blocked_forever(tmp_path, run_cli):
    fifo = tmp_path / "board.sqlite"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(run_cli("leaderboard", "--db", fifo)), daemon=True)
    reader.start()
    reader.join(60)  # a reader blocked on the FIFO never returns by itself: no bound on a loaded machine's speed
    if reader.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # a writer's end lets the blocked reader go
        reader.join(10)
        pytest.fail("the reader blocked on the FIFO")
    code, _, err = outcome[0]
    assert_one_line(code, err, EXIT_BAD_INPUT, "not a regular file")
