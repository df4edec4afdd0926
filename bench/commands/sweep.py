"""``sweep``: run every combination of methods, tasks, budgets, seeds and setting values; run again, it resumes."""

from __future__ import annotations

import contextlib
import sys

from bench.checkpoint import CHECKPOINT
from bench.commands import interrupted_line
from bench.commands.common import print_tables, rehearsal_option, store_rows, submitter, summary_row
from bench.errors import EXIT_INTERRUPTED, BenchError, terminal_text


def command(args) -> int:
    from bench import executors, records, sweep

    rehearsal = rehearsal_option(args)
    if rehearsal is not None and args.submit:
        raise BenchError("a rehearsal is never submitted (generated data, a stand-in reference); leave out --submit, "
                         "or --rehearse")
    if not args.submit and (args.db is not None or args.name is not None or args.notes is not None):
        raise BenchError("--db, --name and --notes say where and as whom --submit submits; add --submit")
    if args.submit and args.no_predictions:
        raise BenchError("--submit re-scores each run from its predictions; leave out --no-predictions")
    if args.submit:  # who submits is checked before a run trains, not after the last one
        from leaderboard.submission import check_submitter

        check_submitter(submitter(args.name), args.notes or "")
    sweep.check_executor(args.executor, args.workers, args.threads, args.ray_address)
    foreign = [method for method in args.methods if executors.isolates(method)]
    with contextlib.ExitStack() as stack:
        # Someone else's code is loaded first in a process of its own, which then runs its runs (on this machine).
        spare = stack.enter_context(executors.Isolated(foreign[0], args.threads)) \
            if foreign and not args.debug and args.executor == "local" else None
        runs = sweep.plan(args.methods, args.tasks, args.budgets, args.seeds or [0], args.overrides, args.out,
                          args.device, args.cache, args.command_line, args.force, isolate=not args.debug,
                          isolated=spare, keep_predictions=not args.no_predictions, rehearsal=rehearsal,
                          checkpoint_every=args.checkpoint_every)
        if args.skip_infeasible:
            runs, lines = sweep.feasible(runs, args.cache)
            for line in lines:
                print(terminal_text(line))
        skipped = sum(run.finished for run in runs)
        print(f"sweep: {len(runs)} run{'s' if len(runs) != 1 else ''}, {skipped} finished earlier (skipped), "
              f"{len(runs) - skipped} to train")
        try:
            outcomes = sweep.execute(runs, args.executor, args.workers, args.threads, args.ray_address, args.quiet,
                                     isolate=not args.debug, spare=spare)
        except KeyboardInterrupt:
            print(interrupted_line("sweep", kept=[run.folder / CHECKPOINT for run in runs
                                                  if (run.folder / CHECKPOINT).exists()]), file=sys.stderr)
            return EXIT_INTERRUPTED
    finished = [run for run in runs if run.finished or outcomes[run].result is not None]
    from leaderboard import shipped

    if args.out is not None and args.out.resolve() == shipped.FOLDER.resolve():  # the shipped store: its manifest lists what it now holds
        print(f"wrote the shipped store's manifest, {terminal_text(shipped.write_manifest())}")
    rows = [{**({"variant": run.variant} if run.variant else {}),
             **summary_row(outcomes[run].result if run in outcomes else records.read_result(run.folder)),
             "trained": "now" if run in outcomes else "earlier"} for run in finished]
    print_tables(rows)
    failed = [run for run in runs if run in outcomes and outcomes[run].result is None]
    if rehearsal is not None:
        from bench.rehearsal import summary

        for _, result in sweep.finished_records(finished, outcomes):
            print(terminal_text(summary(result)))
    kind = "rehearsals (their metrics measure nothing; submit refuses them)" if rehearsal is not None else "results"
    print(f"{len(finished) - skipped} trained, {skipped} finished earlier, {len(failed)} failed; "
          f"{kind} under {terminal_text(args.out)}/")
    if args.submit and finished:
        from leaderboard import submission

        name = submitter(args.name)
        store_rows([submission.score_run(run.folder, name, args.notes or "", args.cache) for run in finished], args.db)
    for run in failed:
        print(f"error: {terminal_text(run.folder)}: {terminal_text(outcomes[run].failure)}", file=sys.stderr)
    if failed:
        print(f"error: {len(failed)} of {len(runs)} runs failed (each named above); run the same command again to "
              "retry them", file=sys.stderr)
        return max(outcomes[run].exit_code for run in failed)
    return 0
