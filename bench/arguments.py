"""The command-line grammar every parser of bdl-bench shares, the CLI's and the benchmark scripts' alike: one line per
error, pointing to the parser's ``--help``; no abbreviated option (with a did-you-mean hint); an option of one value
given once; numbers written in digits (``' 1'``, ``1_0`` and ``nan`` are not numbers here)."""

from __future__ import annotations

import argparse
import errno
import math
import re
import sys

from bench.errors import number_text
from bench.limits import MAX_BUDGET_EPOCHS

WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")
NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
"""How a count, seed, budget or tolerance is typed on a command line: ASCII digits and a sign, for a number a point
and an exponent, nothing else (Python's ``int`` and ``float`` also take spaces, underscores, other scripts' digits,
nan and inf)."""

SEED_LIMIT = 2**63
"""Seeds lie in [0, 2^63): torch's generators and the leaderboard's integer columns hold them."""


def whole_number(text: str) -> int:
    if not WHOLE_NUMBER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a whole number written in digits: {text!r}")
    return int(text)


def decimal_number(text: str) -> float:
    if not NUMBER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a number written in digits: {text!r}")
    return float(text)


def budget_epochs(text: str) -> float:
    value = decimal_number(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of epochs, got {text!r}")
    if value > MAX_BUDGET_EPOCHS:
        raise argparse.ArgumentTypeError(f"at most {number_text(MAX_BUDGET_EPOCHS)} epochs, got {text}")
    return value


def seed_number(text: str) -> int:
    value = whole_number(text)
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"a seed must lie in [0, 2^63), got {text}")
    return value


def finite_epochs(text: str) -> float:
    """A positive, finite number of epochs (``--max-epochs``: NaN would compare as no bound at all)."""
    value = decimal_number(text)
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive, finite number of epochs, got {text!r}")
    return value


DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
MAX_DURATION_SECONDS = 366 * 24 * 3600.0


def duration_or_off(text: str) -> float | None:
    """A time between checkpoints, ``30s``, ``5m``, ``1.5h`` (seconds without a unit), at least 1 s and at most a
    year, or ``off`` (None: no checkpoints at all)."""
    if text == "off":
        return None
    number, unit = (text[:-1], text[-1]) if text[-1:] in DURATION_UNITS else (text, "s")
    if not NUMBER.fullmatch(number):
        raise argparse.ArgumentTypeError(f"not a time such as 30s, 5m or 1.5h, or off: {text!r}")
    seconds = float(number) * DURATION_UNITS[unit]
    if not 1 <= seconds <= MAX_DURATION_SECONDS:
        raise argparse.ArgumentTypeError(f"must lie between 1 s and a year, got {text!r}")
    return seconds


def positive_whole(text: str) -> int:
    value = whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


class Once(argparse.Action):
    """A single-valued option given twice is refused (argparse would silently keep the last value)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = set(getattr(namespace, "_given_once", ()))
        if self.dest in given:
            parser.error(f"{option_string} given more than once; it takes one value"
                         + ("" if self.dest != "seed" else " (several seeds: `run` or `sweep`)"))
        namespace._given_once = given | {self.dest}
        setattr(namespace, self.dest, values)


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser under the rules above."""

    def __init__(self, *args, **kwargs):
        # An abbreviation could mean another option than the one typed (`check --seed 1` was `--seeds 1`, a count).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        if args and args[0].startswith("-") and kwargs.get("action", "store") == "store" and "nargs" not in kwargs:
            kwargs["action"] = Once
        return super().add_argument(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):
        parsed, unknown = self.parse_known_args(args, namespace)
        self.refuse_unknown(parsed, unknown)
        return parsed

    def parse_known_args(self, args=None, namespace=None):
        self._parsing = list(sys.argv[1:] if args is None else args)  # what error() looks through for unknown options
        return super().parse_known_args(args, namespace)

    def unknown_options(self, args: list[str]) -> list[str]:
        """The options among ``args`` this parser does not have (``-V``, ``--vers``), up to a ``--``."""
        unknown = []
        for arg in args:
            if arg == "--":
                break
            flag = arg.split("=", 1)[0]
            if (arg.startswith("-") and len(arg) > 1 and flag not in self._option_string_actions
                    and not self._negative_number_matcher.match(arg)):
                unknown.append(arg)
        return unknown

    def refuse_unknown(self, parsed: argparse.Namespace, unknown: list[str]) -> None:
        """Refuses arguments no parser took, named by the (sub)subcommand's parser ``parsed`` chose, so that the line
        points to that subcommand's ``--help``, with a hint where an option is close to one of its own."""
        if unknown:
            innermost = _innermost(self, parsed)
            innermost.error(f"unrecognized arguments: {' '.join(unknown)}{sibling_hint(innermost, unknown)}")

    def _print_message(self, message, file=None):
        # argparse drops a failed write of --help or --version: a closed pipe is let through, to end the command as
        # every other output to a closed pipe does (bench.errors.closed_pipe)
        if message:
            file = file or sys.stderr
            try:
                file.write(message)
            except AttributeError:  # no standard output at all (pythonw)
                pass
            except OSError as error:
                if error.errno == errno.EPIPE:
                    raise

    def error(self, message: str):
        unknown = self.unknown_options(getattr(self, "_parsing", []))
        if unknown and message.startswith("the following arguments are required"):
            # an option mistyped (`-V`, `--vers`, `--metod`) is what to fix first, not what it left missing
            message = f"unrecognized arguments: {' '.join(unknown)}{sibling_hint(self, unknown)}"
        # A subcommand's parser is named by its whole command line (`python -m bench reference generate`).
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def sibling_hint(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """``; did you mean --seeds?`` for an unknown option close to one ``parser`` has (a prefix of it, or a near
    spelling, since abbreviations are refused; for a short option such as ``-V``, the long ones of its letter); empty
    if none is."""
    import difflib

    known = [flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")]
    for text in (u.split("=", 1)[0] for u in unknown if u.startswith("-") and len(u) > 1):
        if not text.startswith("--"):  # a short option, as other tools have them (-V, -m): the long ones it starts
            close = [flag for flag in known if len(text) == 2 and flag[2:3] == text[1].lower()]
        else:
            close = [flag for flag in known if flag.startswith(text)] or [
                f"--{name}" for name in difflib.get_close_matches(text[2:], [k[2:] for k in known], n=1,
                                                                  cutoff=0.8)]
        if close:
            return f" ({text} is not an option here; did you mean {' or '.join(close)}?)"
    return ""


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)subcommand ``args`` chose, whose ``--help`` an error about its arguments points to."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and getattr(args, action.dest, None) in action.choices:
            return _innermost(action.choices[getattr(args, action.dest)], args)
    return parser
