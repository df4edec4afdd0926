"""Shared by commands: the runs' table, shown settings, wrapped tables, the submitter, storing rows, epochs claimed."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from bench import records
from bench.errors import BenchError, DamagedFile, terminal_text


def print_tables(rows: list[dict]) -> None:
    """:func:`summary_row` rows, one table per kind of task (their metrics differ)."""
    for kind in ("regression", "classification"):
        table = [{k: cell(v) for k, v in row.items() if k != "kind"} for row in rows if row["kind"] == kind]
        if table:
            print(tabulate(table, headers="keys", floatfmt=".4f"))


LINE_CHARS = 2000
"""The most characters of a table cell or a whole line we print that carries outside text (a method's summary, a
verification's folder and detail): our own longest, a method's every setting, stays whole."""


def cell(value):
    """A table cell: text as :func:`~bench.errors.terminal_text` shows it (no terminal escape, bidirectional override
    or line break from a method's summary, a record or a path reaches the terminal or splits a row); numbers as they
    are."""
    return value if value is None or isinstance(value, (int, float)) else terminal_text(value, LINE_CHARS)


SHOWN_DIGITS = 4
"""Significant digits of a number shown as a setting (``methods``, ``tasks``): every tuned default has at most 4."""


def shown_setting(value) -> str:
    """A setting as a person reads it, the one rule for every shown setting: a float to :data:`SHOWN_DIGITS`
    significant digits, marked ``~`` where that rounds it (161/300 as ~0.5367: typed back into ``--set`` it would be
    another configuration); anything else as it is. Records keep the exact value."""
    if not isinstance(value, float):
        return str(value)
    text = f"{value:.{SHOWN_DIGITS}g}"
    return text if float(text) == value else f"~{text}"


def rehearsal_option(args):
    """The command's rehearsal (:class:`bench.rehearsal.Rehearsal`) from ``--rehearse`` and ``--rehearse-rows``, or None;
    sets ``--out``'s default: ``rehearsals/`` for a rehearsal, ``runs/`` otherwise."""
    if args.rehearse_rows is not None and not args.rehearse:
        raise BenchError("--rehearse-rows sets a rehearsal's training rows; add --rehearse")
    if not args.rehearse:
        args.out = Path("runs") if args.out is None else args.out
        return None
    from bench.rehearsal import DEFAULT_OUT, Rehearsal

    args.out = DEFAULT_OUT if args.out is None else args.out
    return Rehearsal(args.rehearse_rows)


def task_shown(result: dict) -> str:
    """A run's task as its table row shows it: a rehearsal's marked as one (``cifar10 (rehearsal, 64 rows)``)."""
    facts = result.get("rehearsal")
    if not records.is_rehearsal(result):
        return result["task"]
    rows = "" if facts["train_rows"] == facts["official_train_rows"] else f", {facts['train_rows']:,} rows"
    return f"{result['task']} (rehearsal{rows})"


def summary_row(result: dict) -> dict:
    """One line of the run table; official references have no published noise floor (shown as None)."""
    from bench.budget import budget_label

    m = result["metrics"]
    floor = (result["noise_floor"] or {}).get("all", {})
    public = result["metrics_by_block"].get("public")
    if "agreement" in m:
        fidelity = {"agreement": m["agreement"], "TV": m["total_variation"],
                    "floor agr": floor.get("agreement"), "floor TV": floor.get("total_variation"),
                    **({"public agr": public["agreement"]} if public else {}), "accuracy": m.get("accuracy")}
    else:
        fidelity = {"W1": m["w1"], "W2": m["w2"], "floor W1": floor.get("w1"), "floor W2": floor.get("w2"),
                    **({"public W (competition)": public["competition_w"]} if public else {}), "RMSE": m.get("rmse")}
    return {"kind": "classification" if "agreement" in m else "regression",
            "task": task_shown(result), "method": result["method"], "budget": budget_label(result["budget"]),
            "epochs": f"{result['epochs_used']:g}", "seed": result["seed"], **fidelity,
            "seconds": result["wall_seconds"]}


def wrapped(rows: list[dict], widths: dict[str, int]) -> str:
    """A table of ``rows`` whose columns named in ``widths`` wrap at that many characters (a terminal stays readable)."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return tabulate([[cell(row.get(column, "")) for column in columns] for row in rows], headers=columns,
                    maxcolwidths=[widths.get(column) for column in columns])


def submitter(name: str | None) -> str:
    import getpass

    if name is not None:
        return name
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in this environment
        return "anonymous"


def store_rows(rows: list, db: Path | None) -> None:
    """Inserts scored rows into the leaderboard database (all or nothing) and says what happened to each."""
    from leaderboard.store import Store, default_db_path

    db = db or default_db_path()
    with Store(db) as store:
        added, present = store.insert(rows)
    for row in added:
        print(f"added: {terminal_text(row.describe())}")
    for row in present:
        print(f"already on the leaderboard: {terminal_text(row.describe())}")
    print(f"{len(added)} added, {len(present)} already present, in {terminal_text(db)}")
