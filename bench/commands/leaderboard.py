"""``leaderboard``: rank the stored and shipped runs per task and budget, as md, html, csv or json."""

from __future__ import annotations

import sys

from bench.errors import BenchError, terminal_text


def command(args) -> int:
    from leaderboard.render import render
    from leaderboard.submission import InstalledReferences, with_current_floors
    from leaderboard.store import Store, default_db_path
    from bench.io import atomic_write_bytes, file_to_write
    from bench.progress import steps

    if args.output:  # a folder, FIFO or device there: refused before the database is read
        file_to_write(args.output, "the --output file")
    tasks, budgets = dict.fromkeys(args.task or [None]), dict.fromkeys(args.budget or [None])
    db = args.db or default_db_path()
    shipped_rows, stale = [], []
    installed = InstalledReferences()  # each task and reference loaded once, for the shipped rows and the floors
    if not args.no_shipped:
        from leaderboard import shipped

        with steps("reading the shipped results", "records", args.quiet) as read:
            shipped_rows, stale = shipped.rows(args.task, args.budget, installed=installed, on_record=read)
    rows = []
    if args.db is not None or db.exists() or not shipped_rows:  # a database named, or there, or nothing else to show
        with Store(db, read_only=True) as store:  # never writes, never waits long
            rows = [row for task in tasks for budget in budgets for row in store.runs(task=task, budget=budget)]
    else:
        print(f"no leaderboard database at {terminal_text(db)} yet: showing the shipped results", file=sys.stderr)
    rows += shipped_rows
    for line in stale:
        print(terminal_text(line), file=sys.stderr)
    if not rows:
        chosen = " ".join(f"{name} {', '.join(f'{v:g}' if isinstance(v, float) else v for v in values)}"
                          for name, values in (("task", tasks), ("budget", budgets)) if None not in values)
        raise BenchError(f"no runs on the leaderboard{' for ' + chosen if chosen else ''}")
    with steps(f"rendering the board ({args.format})", "tracks", args.quiet) as rendered:
        text = render(with_current_floors(rows, installed), args.format, on_track=rendered)
    if args.output:
        atomic_write_bytes(args.output, text.encode(), "the --output file")
        print(f"wrote {terminal_text(args.output)}")
    else:
        sys.stdout.write(text)
    return 0
