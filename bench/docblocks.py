"""The docs' figures written by commands, never by hand: ``python -m bench.docblocks --write`` rewrites every generated
block of ``docs/``, ``--check`` (what the tests run) says which blocks differ from what their sources give.

A block sits between ``<!-- generated: NAME by `python -m bench.docblocks --write` -->`` and ``<!-- end: NAME -->``;
:data:`GENERATORS` says which function writes NAME from which files of the repository. Everything between the two
markers is replaced; the prose around them is the doc's own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path

from bench.arguments import OneLineParser
from bench.errors import BenchError

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
COMMAND = "python -m bench.docblocks --write"
_BLOCK = re.compile(r"<!-- generated: (?P<name>[a-z0-9-]+) by `[^`]*` -->\n(?P<body>.*?)<!-- end: (?P=name) -->",
                    re.DOTALL)
_OPENING = re.compile(r"<!-- generated: (?P<name>[^ ]*)")


def _reference_table() -> str:
    from reference.tables import references_table

    return references_table()


def _floor_parts_table() -> str:
    from reference.tables import floor_parts_table

    return floor_parts_table()


def _architectures_table() -> str:
    from reference.tables import architectures_table

    return architectures_table()


def _nuts_table() -> str:
    from reference.tables import nuts_table

    return nuts_table(ROOT / "benchmarks" / "results")


def _shipped_fidelity() -> str:
    from leaderboard import shipped

    return shipped.fidelity_tables(shipped.rows()[0])


def _shipped_store() -> str:
    from leaderboard import shipped

    return shipped.store_summary()


def _shipped_separation() -> str:
    from leaderboard import shipped

    return shipped.separation_table(shipped.rows()[0])


CALIBRATION = ROOT / "benchmarks" / "results" / "gate-calibration.json"
"""What ``python benchmarks/gate_calibration.py --out`` kept: the gate's test of means against fresh seeds."""

CALIBRATION_COLUMNS = {"seeds": "seeds", "means": "means tested", "tolerance": "tolerance (SE)",
                       "max_abs_z": "max |z|", "flagged": "flagged", "budget_mismatches": "budget mismatches"}
"""Each set's fields, as the table heads them."""


def calibration_table(rows: list[dict]) -> str:
    """The gate calibration's sets as a table (what the script prints and the doc shows)."""
    from tabulate import tabulate

    return tabulate([{head: row[key] for key, head in CALIBRATION_COLUMNS.items()} for row in rows],
                    headers="keys", tablefmt="github", floatfmt=".2f")


def _reads(where: Callable[..., Path]):
    """A generator of kept files: a field one of them lacks, or holds as another type, is one
    :class:`~bench.errors.DamagedFile` line naming the file (``where``, given the generator's arguments), never an
    internal error."""
    def decorate(function):
        @functools.wraps(function)
        def reading(*args, **kwargs):
            from bench.io import malformed_is_damage

            path = where(*args, **kwargs)
            with malformed_is_damage(path, "kept measurement", _repair(path)):
                return function(*args, **kwargs)
        return reading
    return decorate


def _repair(path: Path) -> str:
    return f"run the command its doc names with `--out {path.relative_to(ROOT)}`"


@_reads(lambda: CALIBRATION)
def _gate_calibration() -> str:
    from bench.io import read_json

    kept = read_json(CALIBRATION, "the gate calibration", "run `python benchmarks/gate_calibration.py --sets 4 "
                     "--seeds 2 --workers 2 --out benchmarks/results/gate-calibration.json`")
    return (f"`{kept['command']}` on {kept['cpu']}, {kept['date']}, against the baseline of sha256 "
            f"{kept['baseline_sha256'][:16]}... ({kept['minutes']:g} minutes with {kept['workers']} worker(s)):\n\n"
            f"{calibration_table(kept['sets'])}\n")


MEASUREMENTS = ROOT / "benchmarks" / "results"
"""Where the measuring scripts' kept results lie (``--out``, :func:`bench.scripts.keep`), one JSON file each."""

MEASURED_TABLES = {
    "speed-cost": ("speed/cost", "charged", ".2f"),
    "speed-cost-marginal": ("speed/cost", "marginal", ".2f"),
    "speed-cost-fixed": ("speed/cost", "fixed", ".1f"),
    "speed-hmc-rates": ("speed/cost", "hmc", ("", ".0f", ".0f", ".2f")),
    "speed-vectorised-members": ("speed/vectorised-members", "speed-up", ".2f"),
    "speed-competition": ("speed/competition-cost", "charged", ".2f"),
    "speed-peers": ("speed/peers", "ratios", ".2f"),
    "speed-hmc-numpyro": ("speed/hmc-speed", "rates", ".2f"),
    "cross-cpu-drift": ("cross-cpu", "drift", ("", "", ".0f", ".1e", ".2g", ".2g", ".1e")),
    "cross-cpu-verify-refusals": ("cross-cpu", "verify-refusals", ".0f"),
    "cross-cpu-verify-power": ("cross-cpu", "verify-power", ".2f"),
    "cross-cpu-gate-false-alarms": ("cross-cpu", "gate-false-alarms", ".0f"),
    "cross-cpu-gate-power": ("cross-cpu", "gate-power", ".2f"),
    "floor-calibration": ("floor-calibration", "within-floor", ".3f"),
    "floor-reference-splits": ("floor-reference-splits", "reference-splits", ("", "", "", ".0f", "+.1%", "+.2f", ".3f")),
    "memory-plan": ("memory-plan", "competition", ("", "", "", "", "g", ".1f", ".1f", ".2f")),
    "resume-check": ("resume-check", "resume", ("", ".0f", ".1f", ".1f", ".2f", ".2f", "", "", "")),
    "checkpoint-write-cost": ("resume-check", "write-cost", ("", "", ".1f", ".2f", ".1e")),
}
"""Block name -> (the file's path in :data:`MEASUREMENTS` without ``.json``, the table, how its floats are written:
one format for all, or one per column)."""


def kept_measurement(stem: str) -> dict:
    """The file a measuring script kept at ``MEASUREMENTS / stem.json``; one line where it is missing or unreadable."""
    from bench.io import read_json

    path = MEASUREMENTS / f"{stem}.json"
    repair = f"run the command its doc names with `--out {path.relative_to(ROOT)}`"
    if not path.exists():
        raise BenchError(f"{path}: no such kept measurement; {repair}")
    return read_json(path, "a kept measurement", repair)


def _kept(stem: str) -> Path:
    return MEASUREMENTS / f"{stem}.json"


@_reads(lambda stem, *_: _kept(stem))
def measured_table(stem: str, table: str, floatfmt: str | tuple[str, ...]) -> str:
    """One kept table, headed by the command that measured it and where and when it ran."""
    from tabulate import tabulate

    kept = kept_measurement(stem)
    path = MEASUREMENTS / f"{stem}.json"
    if table not in kept.get("tables", {}):
        raise BenchError(f"{path}: no table {table!r}; it holds {', '.join(kept.get('tables', {})) or 'none'}")
    columns, rows = kept["tables"][table]["columns"], kept["tables"][table]["rows"]
    formats = [floatfmt] * len(columns) if isinstance(floatfmt, str) else list(floatfmt)
    # Floats written here, not by tabulate, which leaves them unformatted in a column that also holds text (a
    # method's failure).
    cells = [[format(value, fmt) if isinstance(value, float) else value for value, fmt in zip(row, formats)]
             for row in rows]
    load = ", ".join(f"{x:g}" for x in kept["load_average"])
    return (f"`{kept['command']}`: {kept['cpu']} ({kept['cpu_count']} cores, load average {load} at the end), "
            f"torch {kept['torch']}, {kept['threads']} thread(s), {kept['date']}, {kept['minutes']:g} minutes.\n\n"
            f"{tabulate(cells, headers=columns, tablefmt='github', disable_numparse=True, missingval='')}\n")


@_reads(lambda: _kept("honesty"))
def honesty_probes() -> str:
    """The honesty probe's kept table (``benchmarks/results/honesty.json``), and how many probes were dishonest."""
    kept = kept_measurement("honesty")
    return f"{measured_table('honesty', 'probes', 'g')}\n{kept['probes']} probes, {kept['dishonest']} dishonest.\n"


@_reads(lambda: _kept("honesty"))
def honesty_summary() -> str:
    """The honesty probe's kept table (``benchmarks/results/honesty.json``) summed up per method: its probes, tasks,
    probes at non-default settings, the settings those moved, and how many probes were honest."""
    from tabulate import tabulate

    kept = kept_measurement("honesty")
    table = kept["tables"]["probes"]
    by_method: dict[str, list[dict]] = {}
    for values in table["rows"]:
        row = dict(zip(table["columns"], values))
        by_method.setdefault(row["method"], []).append(row)
    rows = []
    for method, probes in by_method.items():
        moved = [probe["settings"] for probe in probes if probe["settings"] != "(defaults)"]
        honest = sum(probe["honest"] == "yes" for probe in probes)
        rows.append({"method": f"`{method}`", "probes": len(probes), "tasks": len({probe["task"] for probe in probes}),
                     "non-default settings probed": len(moved),
                     "settings moved": ", ".join(sorted({part.split("=")[0] for text in moved for part in text.split()})),
                     "honest": f"{honest} of {len(probes)}"})
    return (f"`{kept['command']}`, {kept['date']}, {kept['minutes']:g} minutes on {kept['cpu']}: {kept['probes']} "
            f"probes, {kept['dishonest']} dishonest; per method:\n\n{tabulate(rows, headers='keys', tablefmt='github')}\n")


OFFICIAL_TRAIN_ROWS = {"cifar10": 50_000, "cifar10c": 50_000, "imdb": 25_000}
"""Training rows of the competition tasks whose training set has one official size (CIFAR-10's and IMDB's training
sets; ``cifar10c`` trains on CIFAR-10's), to scale a measured epoch to a whole run."""


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86_400), ("hours", 3_600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.2g} s"


@_reads(lambda: _kept("speed/competition-cost"))
def competition_run_time() -> str:
    """How long a competition run takes on the CPU that measured ``competition-cost.json``: a plain SGD epoch (batch
    128) per 1,000 training rows, times the least and the most any method's charged epoch cost there, times the
    budget; scaled to the official training set where it has one size (:data:`OFFICIAL_TRAIN_ROWS`)."""
    from tabulate import tabulate

    kept = kept_measurement("speed/competition-cost")
    table = kept["tables"]["charged"]
    rows = []
    for values in table["rows"]:
        row = dict(zip(table["columns"], values))
        ratios = [value for column, value in row.items() if isinstance(value, float) and column != "rows"]
        plain = kept["plain_seconds"][row["task"]]
        per_thousand = plain.get("128", min(plain.values())) * 1000 / kept["rows"]
        low, high = min(ratios), max(ratios)
        official = OFFICIAL_TRAIN_ROWS.get(row["task"])
        official_epoch = None if official is None else per_thousand * official / 1000
        rows.append({"task": f"`{row['task']}`", "plain SGD epoch per 1,000 rows": _duration(per_thousand),
                     "charged epoch, in plain epochs": f"{low:.2f}-{high:.2f}",
                     **{f"budget {budget}, per 1,000 rows": f"{_duration(per_thousand * budget * low)} to "
                                                            f"{_duration(per_thousand * budget * high)}"
                        for budget in (100, 1000)},
                     "budget 1000, official training set": "" if official is None else
                     f"{_duration(official_epoch * 1000 * low)} to {_duration(official_epoch * 1000 * high)} "
                     f"({official:,} rows)"})
    return (f"From `{kept['command']}` ({kept['cpu']}, {kept['threads']} thread(s), {kept['date']}):\n\n"
            f"{tabulate(rows, headers='keys', tablefmt='github')}\n")


GPU_CHECK = "speed/gpu-check"
"""Where ``benchmarks/gpu_check.py`` keeps its table, run on a lent GPU (no such file until a GPU has run it)."""


@_reads(lambda: _kept(GPU_CHECK))
def gpu_check() -> str:
    """The GPU check's kept table with the card that ran it, or the line that no GPU has run it yet."""
    if not (MEASUREMENTS / f"{GPU_CHECK}.json").exists():
        return (f"No GPU has run it yet: `{MEASUREMENTS.relative_to(ROOT) / GPU_CHECK}.json` does not exist.\n")
    return f"On {kept_measurement(GPU_CHECK)['device']}:\n\n{measured_table(GPU_CHECK, 'gpu check', '.3g')}"


def official_rows() -> str:
    """The competition tasks' official sizes a rehearsal reproduces, with their sources
    (:data:`bench.tasks.competition.OFFICIAL_ROWS`)."""
    from bench.tasks.competition import CIFAR10C_BLOCKS, OFFICIAL_ROWS, PUBLIC_ROWS

    lines = ["| task | training rows | test rows | test blocks | where the training rows are stated | where the test "
             "rows are stated |", "|---|---|---|---|---|---|"]
    for name, rows in OFFICIAL_ROWS.items():
        blocks = (f"{len(CIFAR10C_BLOCKS)} of {rows.test // len(CIFAR10C_BLOCKS):,}, the first public"
                  if name == "cifar10c" else f"public: the first {PUBLIC_ROWS[name]:,}" if name in PUBLIC_ROWS
                  else "-")
        train = f"{rows.train:,}" if rows.train_published else f"{rows.train:,} (stand-in)"
        lines.append(f"| `{name}` | {train} | {rows.test:,} | {blocks} | {rows.train_source} | {rows.test_source} |")
    return "\n".join(lines) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "official-rows": official_rows,
    "gate-calibration": _gate_calibration,
    "shipped-fidelity": _shipped_fidelity,
    "shipped-store": _shipped_store,
    "shipped-separation": _shipped_separation,
    "reference-diagnostics": _reference_table,
    "reference-floor-parts": _floor_parts_table,
    "nuts-crosschecks": _nuts_table,
    "reference-architectures": _architectures_table,
    "competition-run-time": competition_run_time,
    "honesty-probes": honesty_probes,
    "honesty-summary": honesty_summary,
    "gpu-check": gpu_check,
    **{name: (lambda stem=stem, table=table, floatfmt=floatfmt: measured_table(stem, table, floatfmt))
       for name, (stem, table, floatfmt) in MEASURED_TABLES.items()},
}
"""Block name -> the function that writes its body (markdown, ending in a newline) from the repository's files."""


def blocks(text: str) -> list[tuple[str, str]]:
    """(name, body) of every generated block of ``text``, in order."""
    return [(match["name"], match["body"]) for match in _BLOCK.finditer(text)]


def rewritten(text: str, path: Path) -> str:
    """``text`` with every generated block's body written anew by its generator."""
    def body(match: re.Match) -> str:
        generator = GENERATORS.get(match["name"])
        if generator is None:
            raise BenchError(f"{path}: no generator writes the block {match['name']!r}; known: {', '.join(GENERATORS)}")
        return f"<!-- generated: {match['name']} by `{COMMAND}` -->\n{generator()}<!-- end: {match['name']} -->"

    whole = {match.start() for match in _BLOCK.finditer(text)}
    for opening in _OPENING.finditer(text):  # a block whose end marker is missing or misspelt would go unchecked
        if opening.start() not in whole:
            raise BenchError(f"{path}: the block {opening['name']!r} has no end marker `<!-- end: {opening['name']} "
                             "-->` after it; add it")
    return _BLOCK.sub(body, text)


def stale(paths: list[Path]) -> list[str]:
    """One line per generated block of ``paths`` whose text differs from what its generator writes now."""
    lines = []
    for path in paths:
        text = path.read_text()
        fresh = dict(blocks(rewritten(text, path)))
        lines += [f"{path}: the block {name!r} differs from what `{COMMAND}` writes from its sources"
                  for name, body in blocks(text) if fresh[name] != body]
    return lines


def doc_files() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def main(argv: list[str] | None = None) -> int:
    """The command: ``--write`` or ``--check`` (exit 1 when a block differs); a failure is raised, for the boundary
    (:func:`bench.scripts.run`) to turn into one line."""
    parser = OneLineParser(prog="python -m bench.docblocks",
                           description="write the docs' generated blocks from their sources, or check them")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite every generated block of docs/")
    action.add_argument("--check", action="store_true", help="exit 1 naming every block that differs")
    args = parser.parse_args(argv)
    if args.check:
        lines = stale(doc_files())
        for line in lines:
            print(line)
        return 1 if lines else 0
    from bench.errors import cannot_write
    from bench.io import atomic_write_bytes

    for path in doc_files():
        text = path.read_text()
        new = rewritten(text, path)
        if new != text:
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            try:
                atomic_write_bytes(path, new.encode())
            except OSError as error:  # the doc named, not the temporary file beside it; no option of another command
                raise cannot_write(f"cannot rewrite {shown}", error, "make it (and its folder) writable, e.g. "
                                   "`chmod u+w` or `chattr -i`, and run again") from error
            print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    from bench import scripts

    scripts.run(main)
