"""``submit``: re-score runs (or a competition zip), re-executed first with ``--verify``, onto the leaderboard."""

from __future__ import annotations

import contextlib

from bench.budget import check_planned_epochs
from bench.commands import DEFAULT_THREADS
from bench.commands.common import LINE_CHARS, store_rows, submitter
from bench.commands.reexecutions import Reexecutions, log_path
from bench.errors import BenchError, terminal_text
from bench.progress import Progress


def command(args) -> int:
    from bench.executors import Isolations
    from bench.verify import planned_epochs, verified_rows
    from leaderboard import submission

    name = submitter(args.name)
    if args.log is not None and not args.verify:
        raise BenchError("--log names the log of --verify's re-executions; add --verify")
    run_paths = [p for p in args.paths if p.suffix != ".zip"]
    if args.verify:
        from leaderboard.submission import run_folders

        folders = run_folders(run_paths)
        check_planned_epochs(planned_epochs(folders, args.method), args.max_epochs,
                             f"verifying {len(folders)} run(s)")
    rows = []
    # --verify re-executes a method that is not bdl-bench's in a process of its own, one for all its folders, and
    # logs each re-execution (bench.commands.reexecutions).
    with Isolations(args.threads or DEFAULT_THREADS) as isolations, \
            Progress(len(folders) if args.verify else 0, args.quiet, "verify") as progress, \
            (Reexecutions(log_path(args.log, args.db), "submit --verify", progress) if args.verify
             else contextlib.nullcontext()) as log:
        for path in args.paths:  # everything is validated, scored and verified before the store is touched
            if path.suffix == ".zip":
                if args.method is None or args.budget is None:
                    raise BenchError(f"{path}: a competition zip needs --method and --budget (the declared budget)")
                if args.verify:
                    raise BenchError(f"{path}: a competition zip holds predictions only and cannot be re-executed; "
                                     "submit run folders to --verify")
                rows += submission.score_competition_zip(path, args.method, args.budget, args.seed, name, args.notes,
                                                         cache=args.cache, label=args.label)
            else:
                if args.label is not None:
                    raise BenchError(f"{path}: --label names a competition zip's configuration; a run folder carries "
                                     "the label it was run with (`python -m bench run --label`)")
                if args.method is not None and not args.verify:
                    raise BenchError(f"{path}: --method names a competition zip's method, or with --verify the code "
                                     "that re-executes a run folder; a run folder records its own method")
                if not args.verify:
                    rows += [submission.score_run(folder, name, args.notes, args.cache)
                             for folder in submission.run_folders([path])]
        if not args.verify:  # each record checked, each folder's path names its run, and no run comes twice (with
            # --verify, verified_rows checks the same before re-executing)
            submission.check_folders_name_their_runs(submission.run_folders(run_paths) if run_paths else [])
        if args.verify:  # every path's runs together: one configuration's are verified together (verify_many)
            log.write(f"verifying {len(folders)} run folder(s) to submit, {args.threads or DEFAULT_THREADS} torch "
                      "thread(s)")

            def decided(verdict) -> None:
                log.write(verdict.line())
                progress.note(terminal_text(verdict.line(), LINE_CHARS))
                progress.finished(verdict.folder.name, failed=not verdict.passed)

            rows += verified_rows(folders, name, args.notes, args.cache, args.method, not args.debug, isolations,
                                  on_verdict=decided, on_reexecution=log)
    store_rows(rows, args.db)
    return 0
