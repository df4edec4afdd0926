"""``export-submission``: write finished competition runs as the competition's zip."""

from __future__ import annotations

from bench.errors import terminal_text


def command(args) -> int:
    from bench.export import export_submission

    sources = export_submission(args.runs, args.out, args.cache, args.force)
    for name, folder in sources.items():
        print(f"{name} <- {terminal_text(folder)}")
    print(f"wrote {terminal_text(args.out)}")
    return 0
