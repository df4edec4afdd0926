"""``check``: the CI gate: rerun a baseline's configuration and compare it, or measure it anew with ``--update``."""

from __future__ import annotations

from bench.errors import BenchError, terminal_text


def command(args) -> int:
    from bench.sweep import check_executor
    from leaderboard import gate

    check_executor("local", args.workers, args.threads, None)
    if args.update:
        if args.tolerance is not None or args.statistical:
            raise BenchError("--tolerance and --statistical choose how a check compares; --update only measures")
        baseline = gate.update(args.baseline, methods=args.methods, tasks=args.task, seeds=args.seeds,
                               budgets=gate.budget_options(args.budget), settings=gate.setting_options(args.settings),
                               max_epochs=args.max_epochs, workers=args.workers, threads=args.threads,
                               quiet=args.quiet)
        print(gate.describe_baseline(baseline))
        print(f"wrote {terminal_text(args.baseline)}")
        return 0
    if args.budget or args.settings:
        raise BenchError("--budget and --set choose what --update measures; a check reruns the baseline's "
                         "budgets and settings")
    report = gate.check(args.baseline, methods=args.methods, tasks=args.task, tolerance=args.tolerance,
                        statistical=args.statistical, max_epochs=args.max_epochs, workers=args.workers,
                        threads=args.threads, seeds=args.seeds, quiet=args.quiet)
    print(report.text())
    return 0 if report.passed else 1
