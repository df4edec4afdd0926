"""``export-submission``: write finished competition runs as the competition's zip."""

from __future__ import annotations

from bench.errors import terminal_text


def command(args) -> int:
    from bench.export import export_submission
    from bench.trust import MEANING, record_levels, summary, unverified

    sources = export_submission(args.runs, args.out, args.cache, args.force)
    for name, (folder, trust) in sources.items():
        print(f"{name} <- {terminal_text(folder)} (scored against {summary(trust)})")
    doubtful = dict.fromkeys(level for _, trust in sources.values() for level in record_levels(trust)
                             if unverified(level))
    for level in doubtful:
        print(f"{level}: {MEANING[level]}")
    print(f"wrote {terminal_text(args.out)}")
    return 0
