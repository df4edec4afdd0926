"""``run``: train a method under a budget on tasks, score each run into its folder, and show the runs' table."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import asdict
from pathlib import Path

from bench import records
from bench.commands.common import print_tables, rehearsal_option, summary_row
from bench.errors import BenchError, FailedElsewhere, terminal_text


def command(args) -> int:
    from approximators import get_method, method_source, resolve_config
    from bench import checkpoint, executors
    from bench.progress import Progress, run_title
    from bench.rehearsal import label as task_label, run_folder
    from bench.runner import RunSpec, check_label, resolve_device, resumable, run
    from bench.tasks import COMPETITION, default_task_names, get_task

    rehearsal = rehearsal_option(args)
    check_label(args.label)
    # Paths are fixed before any of the method's code runs: a working directory it changes moves nothing we write.
    out, cache = args.out.absolute(), args.cache and args.cache.absolute()
    isolate = executors.isolates(args.method) and not args.debug  # someone else's code runs in a process of its own
    # A built-in or unknown name is checked before any task's data loads (scikit-learn's import alone takes seconds).
    method = None if isolate else get_method(args.method)
    # Each task once, under its own name (a repeated or aliased --task would train twice into one folder).
    if rehearsal is None:
        tasks = list(dict.fromkeys(get_task(task, cache).name for task in args.task or default_task_names()))
    else:  # a rehearsal's task is generated, never loaded: the competition tasks by name
        from bench.rehearsal import check as check_rehearsal

        tasks = list(dict.fromkeys(args.task or COMPETITION))
        check_rehearsal(tasks, rehearsal)
    keys = [key for key, _ in args.overrides]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise BenchError(f"--set {repeated[0]} given more than once; give each setting one value")
    with contextlib.ExitStack() as stack:
        isolated = None
        if isolate:
            isolated = stack.enter_context(executors.Isolated(args.method, args.threads))
            executors.check_isolated([args.method], [(task, tuple(args.overrides)) for task in tasks],
                                     isolated=isolated)
            method = get_method(args.method)
        seeds = list(dict.fromkeys(args.seeds or [0]))
        runs, earlier = [], []
        for task in tasks:  # fail on any bad setting or conflicting run before the first run trains
            config = asdict(resolve_config(method, task, dict(args.overrides)))
            for seed in seeds:
                folder = run_folder(out, task, method.name, args.budget, seed, rehearsal)
                # The same run finished before (same configuration) is shown, not trained again, as sweep does; a
                # finished run of another configuration is refused in one line.
                if not args.force and records.finished_with(folder, config, source=method_source(method)):
                    earlier.append(folder)
                else:
                    runs.append((task, seed))
        resolve_device(args.device)
        results = [_earlier_record(folder, rehearsal is not None) for folder in earlier]
        rows = [summary_row(result) for result in results]
        what = f"{'rehearsal: ' if rehearsal else ''}{method.name} @ {args.budget:g} epochs"  # as its rows name it
        with Progress(len(runs), args.quiet, what) as progress:
            for task, seed in runs:
                title = run_title(task_label(task, rehearsal), method.name, args.budget, seed)
                spec = RunSpec(task=task, method=args.method, budget=args.budget, seed=seed, device=args.device,
                               out=out, overrides=tuple(args.overrides), force=args.force, cache=cache,
                               label=args.label, command=args.command_line,
                               keep_predictions=not args.no_predictions, rehearsal=rehearsal,
                               checkpoint_every=args.checkpoint_every)
                try:
                    with progress.epochs(title, args.budget) as on_progress:
                        if isolated is None:
                            result = run(spec, on_progress=on_progress)
                        else:
                            outcome = isolated.attempt(spec, on_progress)
                            if outcome.result is None:
                                raise FailedElsewhere(outcome.exit_code, outcome.failure)
                            result = outcome.result
                except KeyboardInterrupt:
                    if isolated is not None:  # stopped by SIGTERM, so that its run writes its checkpoint
                        isolated.close(kill=True, running=True)
                    checkpoint.remember_kept(run_folder(out, task, method.name, args.budget, seed, rehearsal),
                                             None if resumable(method) or args.checkpoint_every is None
                                             else method.name)
                    raise
                progress.finished(title, failed=False)
                results.append(result)
                rows.append(summary_row(result))
                for warning in method_warnings(result):
                    print(f"note: {title}: {terminal_text(warning)}", file=sys.stderr)
    print_tables(rows)
    if rehearsal is not None:
        from bench.rehearsal import summary

        for result in results:
            print(terminal_text(summary(result)))
    if earlier:
        print(f"{len(earlier)} run(s) finished earlier with the same settings, shown from their records "
              f"(--force trains them again)")
    if rehearsal is not None:
        print(f"rehearsals written under {terminal_text(args.out)}/: generated data scored against a generated "
              "reference, so their metrics measure nothing; submit, export-submission, verify and check refuse them")
    else:
        print(f"results written under {terminal_text(args.out)}/")
    return 0


def method_warnings(result: dict) -> list[str]:
    """What a run's method says its result should be read with (its report's ``warnings``, a list of strings: e.g.
    ``hmc``'s chains that accepted no proposal after burn-in), shown beside the run's table and kept in its record."""
    warnings = result.get("method_report", {}).get("warnings")
    return [w for w in warnings if isinstance(w, str)] if isinstance(warnings, list) else []


def _earlier_record(folder: Path, rehearsal: bool = False) -> dict:
    """The record of a run finished earlier, checked that its table row (and a rehearsal's summary) can show it (one
    line if not)."""
    from bench.rehearsal import summary

    try:
        result = records.read_result(folder)
        summary_row(result)
        if rehearsal:
            summary(result)
        return result
    except (KeyError, TypeError, AttributeError) as error:
        raise BenchError(f"{folder}: its record cannot be shown ({type(error).__name__}: {error}); pass --force to "
                         "train the run again") from None
