"""Text from outside that reaches a terminal (exception messages, paths and names the user gave, a method's summary,
paper and network change) shows no terminal escape, bidirectional override or line break, and is bounded in length:
:func:`bench.errors.terminal_text`, the one rule for every error line and table cell. Text that would be stored
(notes, names) is refused at input, before any work."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import records
from bench.errors import EXIT_BAD_INPUT, SHOWN_TEXT_CHARS, terminal_text
from tests.reliability.test_error_boundary import assert_one_line

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202eevil\u2028\r\x00\ud800"
"""A title-setting OSC, a bell, a screen clear, a right-to-left override, a line separator, a carriage return, a NUL
and a lone surrogate (what a path from the file system may hold)."""


@settings(max_examples=300, deadline=None)
@given(text=st.text(), limit=st.integers(40, 2000))
def test_terminal_text_is_printable_bounded_and_stable(text, limit):
    shown = terminal_text(text, limit)
    assert shown.isprintable() and len(shown) <= limit
    assert terminal_text(shown, limit) == shown, "applied twice, it changes nothing more"
    if text.isprintable() and len(text) <= limit:
        assert shown == text, "printable text within the limit is shown as it is"
    if len(shown) < len(text) and not any(not ch.isprintable() for ch in text):
        assert shown.endswith(f"({len(text):,} characters in all)")


def test_hostile_text_is_shown_by_its_escapes():
    assert terminal_text(HOSTILE) == "\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil\\u2028\\r\\x00\\ud800"
    assert terminal_text("y" * 10**6).endswith("... (1,000,000 characters in all)")
    assert len(terminal_text("y" * 10**6)) == SHOWN_TEXT_CHARS


def _printable_lines(text: str) -> bool:
    return all(line.isprintable() for line in text.split("\n"))


@pytest.fixture
def hostile_folder(tmp_path):
    """A path holding every hostile character, under a regular file (so nothing can be made there)."""
    (tmp_path / "file").write_text("")
    return tmp_path / "file" / f"x{HOSTILE}y"


@pytest.mark.parametrize("argv", [
    ["verify", "{path}"],
    ["leaderboard", "--db", "{path}"],
    ["check", "--baseline", "{path}"],
    ["--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", "{path}", "--quiet"],
    ["submit", "{path}", "--db", "{path}"],
    ["export-submission", "{path}", "--out", "{path}"],
])
def test_a_path_the_user_gave_is_echoed_neutralised(run_cli, hostile_folder, argv):
    """Case 31: the path was echoed with raw ESC, BEL and U+202E in the error line."""
    code, out, err = run_cli(*[arg.replace("{path}", str(hostile_folder)) for arg in argv])
    assert code != 0 and err.count("\n") == 1 and err[:-1].isprintable(), err
    assert _printable_lines(out)


@pytest.mark.parametrize("spec", ["a\u202e:b", "\x1b[2Jmodule:Class", "module:\x1b]0;t\x07Class"])
def test_a_method_name_the_user_gave_is_echoed_neutralised(run_cli, tmp_path, spec):
    code, _, err = run_cli("--method", spec, "--budget", "1", "--task", "toy-gap", "--out", tmp_path, "--quiet")
    assert code == EXIT_BAD_INPUT and err.count("\n") == 1 and err[:-1].isprintable(), err


ESCAPING = textwrap.dedent('''
    from approximators.map import MAP

    class Escaping(MAP):
        name = "escaping"
        summary = "sum\\x1b[2J\\x1b]0;title\\x07\\u202e" + "s" * 5000
        paper = "p\\x1b[31m\\nsecond line"

        @classmethod
        def architecture_change(cls, config):
            return "dropout\\x1b[31m\\u202e\\nsecond line"
''')


def test_a_method_s_texts_in_the_methods_table_are_neutralised(tmp_path, run_cli, monkeypatch):
    """Case 11: summary, paper and network change were printed with raw ESC; a line break split the row."""
    (tmp_path / "escaping_method.py").write_text(ESCAPING)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = run_cli("methods", "--method", "escaping_method:Escaping")
    plain = run_cli("methods", "--method", "sgd")[1]
    assert code == 0, err
    assert _printable_lines(out)
    assert "\\x1b[2J" in out and "\\u202e" in out and "characters in all" in out
    from bench.commands.common import cell

    assert cell("paper\nsecond line") == "paper\\nsecond line", "a line break cannot split a row"
    assert len(plain.splitlines()) < len(out.splitlines()) < len(plain.splitlines()) + 250, "wrapped, bounded"


@pytest.mark.parametrize("option, value", [("--notes", "\x1b[2J"), ("--notes", "n\u202e"), ("--name", "\x1b]0;x\x07"),
                                           ("--name", "")])
def test_a_sweep_refuses_what_submit_would_refuse_before_any_run_trains(tmp_path, run_cli, option, value):
    """Case 30: `sweep --submit` with notes or a name holding escapes was refused only after every run trained."""
    code, _, err = run_cli("sweep", "--method", "sgd", "--budget", "1", "--task", "toy-gap", "--out", tmp_path / "runs",
                           "--submit", "--db", tmp_path / "board.sqlite", option, value, "--quiet")
    assert_one_line(code, err, EXIT_BAD_INPUT)
    assert err[:-1].isprintable()
    assert not (tmp_path / "runs").exists() and not (tmp_path / "board.sqlite").exists()
    assert not list(tmp_path.rglob(records.RESULT))
