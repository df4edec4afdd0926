"""Command line: ``python -m bench [run] --method M --budget B``, ``tasks``, ``methods``, ``fetch``,
``export-submission``, ``reference generate``, ``submit``, ``leaderboard``, ``check``, ``verify``, ``sweep``."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from dataclasses import asdict
from pathlib import Path

from tabulate import tabulate

from bench.budget import DEFAULT_MAX_EPOCHS, check_planned_epochs
import bench
from bench import interrupts, records
from bench.errors import (DEBUG_ENV, EXIT_INTERRUPTED, EXIT_METHOD, EXIT_TERMINATED, BenchError, ConfigError,
                          FailedElsewhere, MethodFailed, describe_failure, terminal_text)
from bench.arguments import (OneLineParser, budget_epochs, decimal_number, finite_epochs, positive_whole,
                             seed_number)

SUBCOMMANDS = ("run", "tasks", "methods", "fetch", "export-submission", "reference", "submit", "leaderboard", "check",
               "verify", "sweep")

SWEEP_DESCRIPTION = """\
Runs every combination of --method, --task, --budget, --seed and setting variant, each as `run` would, into
its run folder under --out. Every run is checked before the first one trains; a finished run of the same
configuration is skipped, so the same command run again resumes an interrupted sweep, and a finished run
of another configuration stops the sweep. A run that fails does not stop the others: each failure is one
line at the end, and the exit code is not 0.

Variants: --set KEY=VALUE fixes a setting of every method of the sweep; the same KEY given several values
sweeps over them, and several swept keys make every combination. With more than one variant, each variant
writes under its own folder named by its swept values, as `run --out runs/lr=0.01 --set lr=0.01` would:

  python -m bench sweep --method sgd de --task toy-gap digits --budget 10 20 --seed 0 1 2 \\
      --set lr=0.01 lr=0.02 batch_size=64 --workers 2
  -> runs/lr=0.01/toy-gap/sgd/budget-10/seed-0/, ..., runs/lr=0.02/digits/de/budget-20/seed-2/

Executors: one run after another in this process (default), --workers N processes on this machine, or
--executor ray (each run a task of --threads CPUs on a Ray cluster, writing into the shared --out).
"""


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def _add_list(parser, *flags: str, **kwargs) -> None:
    """A list-valued option, with one grammar in every subcommand: several values after one flag (``--task a b``),
    and a repeated flag adds its values to the earlier ones (``--task a --task b``)."""
    parser.add_argument(*flags, nargs="+", action="extend", **kwargs)


DEFAULT_THREADS = 1
"""torch's threads in every command that trains, whatever OMP_NUM_THREADS says: on small models more threads spin
rather than help, many times slower on a busy machine."""


def _add_threads(parser, help: str = f"torch threads (default {DEFAULT_THREADS}, whatever OMP_NUM_THREADS says: on "
                                     f"small models more threads spin rather than help, many times slower on a busy "
                                     f"machine); recorded in each result, and seeded runs reproduce exactly at equal "
                                     f"--threads",
                 default: int | None = DEFAULT_THREADS) -> None:
    parser.add_argument("--threads", type=positive_whole, default=default, help=help)


def _add_max_epochs(parser) -> None:
    parser.add_argument("--max-epochs", type=finite_epochs, default=DEFAULT_MAX_EPOCHS, metavar="EPOCHS",
                        help=f"refuse, before anything trains, to train more epochs than this in all (re-executed "
                             f"records, a baseline's rerun, or what check --update measures; default "
                             f"{DEFAULT_MAX_EPOCHS:,}): records and baselines are files anyone can edit")


def _claimed_epochs(folders) -> float:
    """The epochs the records in ``folders`` claim, each record checked first as verify and submit check it
    (:func:`records.checked_result`): an edited one is one line before anything is planned or trains."""
    return sum(records.checked_result(folder)["budget"] for folder in folders)


def _add_no_predictions(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-predictions", action="store_true",
                        help="keep each run's record alone, without predictions.npz (the record holds the "
                             "predictions' sha256, which `verify` compares bitwise; `submit` needs the predictions)")


def build_parser(prog: str = "python -m bench") -> argparse.ArgumentParser:
    parser = OneLineParser(prog=prog, description=(
        "Score approximate Bayesian inference methods against HMC reference posteriors under an epoch budget. "
        "Without a subcommand, `run` is assumed."))
    parser.add_argument("--version", action="version", version=f"bdl-bench {bench.__version__}",
                        help="print bdl-bench's version (every result record names it) and exit")
    sub = parser.add_subparsers(dest="command", parser_class=OneLineParser)

    run = sub.add_parser("run", help="train a method under a budget on tasks and score it (default)")
    _add_threads(run)
    run.add_argument("--method", required=True, help="method name (see `methods`)")
    run.add_argument("--budget", required=True, type=budget_epochs, help="training epochs, summed over everything trained")
    _add_list(run, "--task", metavar="TASK",
              help="task names (--task a b, or repeated); default: the embedded MLP tasks toy-gap, diabetes-gap and digits "
                          "(the others run when named; competition tasks need `fetch` first)")
    _add_list(run, "--seed", type=seed_number, dest="seeds", metavar="SEED",
              help="the runs' seeds, in [0, 2^63) (--seed 0 1 2, or repeated: one run per seed; default 0)")
    run.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu", help="where to train: cpu (default), cuda, or auto (cuda when PyTorch sees a GPU)")
    run.add_argument("--out", type=Path, default=Path("runs"), help="output folder (default: runs/)")
    _add_list(run, "--set", dest="overrides", type=_key_value, default=[], metavar="KEY=VALUE",
              help="override method settings (--set lr=0.01 batch_size=64, or repeated; each setting once)")
    run.add_argument("--force", action="store_true", help="overwrite a finished run")
    run.add_argument("--label", help="a human name for this configuration, shown on the leaderboard instead of its "
                                     "configuration hash (1 to 100 printable characters)")
    _add_no_predictions(run)
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_cache(run)

    sweep = sub.add_parser("sweep", help="run every combination of methods, tasks, budgets, seeds and setting "
                                         "values; run again, it resumes where it stopped",
                           description=SWEEP_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_list(sweep, "--method", dest="methods", required=True, metavar="METHOD",
              help="methods, as `run --method` takes them (several, or repeat the option)")
    _add_list(sweep, "--task", dest="tasks", metavar="TASK",
              help="tasks (default: the embedded MLP tasks toy-gap, diabetes-gap, digits)")
    _add_list(sweep, "--budget", dest="budgets", type=budget_epochs, required=True, metavar="EPOCHS",
              help="budgets in training epochs")
    _add_list(sweep, "--seed", dest="seeds", type=seed_number, metavar="SEED",
              help="seeds in [0, 2^63) (default 0)")
    _add_list(sweep, "--set", dest="overrides", type=_key_value, default=[], metavar="KEY=VALUE",
              help="settings of every method of the sweep; the same KEY with several values sweeps over them "
                   "(variants, see above)")
    sweep.add_argument("--out", type=Path, default=Path("runs"), help="output folder (default: runs/)")
    sweep.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu",
                       help="where each run trains: cpu (default), cuda (on Ray: a GPU per run), or auto")
    sweep.add_argument("--executor", choices=("local", "ray"), default="local",
                       help="local (default): this machine, see --workers; ray: each run a task of a Ray cluster "
                            "(pip install -e '.[ray]')")
    sweep.add_argument("--workers", type=positive_whole,
                       help="local executor: runs at once, each in its own process (default 1: one after another "
                            "in this process)")
    sweep.add_argument("--threads", type=positive_whole, default=1,
                       help="torch threads of each run (default 1), whatever executes it: the thread count changes a "
                            "run's round-off, so seeded runs reproduce exactly at equal --threads; --workers x "
                            "--threads may not exceed the CPU cores")
    sweep.add_argument("--ray-address", help="--executor ray: the cluster's address, e.g. 10.0.0.1:6379 (default: "
                                             "$RAY_ADDRESS, else one `ray start --head` started on this machine, else "
                                             "a new local one for this sweep)")
    sweep.add_argument("--force", action="store_true", help="train every run again, replacing finished ones")
    sweep.add_argument("--submit", action="store_true",
                       help="at the end, add every finished run of the sweep to the leaderboard (as `submit`)")
    sweep.add_argument("--db", type=Path, help="with --submit: the leaderboard database (default: $BDL_BENCH_DB, "
                                               "else the user's data folder)")
    sweep.add_argument("--name", help="with --submit: the submitter's name (default: the user name)")
    sweep.add_argument("--notes", help="with --submit: free-text notes stored with every run")
    _add_no_predictions(sweep)
    sweep.add_argument("--skip-infeasible", action="store_true",
                       help="leave out, listed, the runs whose method's budget rule refuses their budget (sae below "
                            "its first member's epochs, csgmcmc below a cycle that keeps its samples) instead of "
                            "failing them; a method that runs in a process of its own is left to its runs")
    sweep.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_cache(sweep)

    tasks = sub.add_parser("tasks", help="list tasks, their settings and reference status")
    _add_cache(tasks)

    fetch = sub.add_parser("fetch", help="download a competition task's data and official reference (the only "
                                         "command that downloads)")
    which = fetch.add_mutually_exclusive_group(required=True)
    _add_list(which, "--task", metavar="TASK", help="competition tasks (--task a b, or repeated)")
    which.add_argument("--all", action="store_true", help="every competition task")
    _add_cache(fetch)
    fetch.add_argument("--keep-downloads", action="store_true",
                       help="keep the downloaded text and npz files after conversion")
    fetch.add_argument("--data-url", default=None, help="mirror of the organisers' data bucket (default: the official one)")
    fetch.add_argument("--reference-url", default=None,
                       help="mirror of the starter-kit repository's raw files (default: the official one)")
    fetch.add_argument("--force", action="store_true",
                       help="download and convert again even if the cached task is complete and unchanged")
    fetch.add_argument("--quiet", action="store_true", help="no progress bars")
    fetch.add_argument("--check-mirror", action="store_true",
                       help="download nothing: check that the mirror at --data-url and --reference-url (http(s), a "
                            "folder or file://) holds every file of the tasks where fetch looks for it; exit 1 if not")

    export = sub.add_parser("export-submission", help="write finished competition runs as the competition's zip")
    export.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run folders, one per task")
    export.add_argument("--out", type=Path, default=Path("submission.zip"), help="zip to write (default: submission.zip)")
    export.add_argument("--force", action="store_true", help="replace an existing zip")
    _add_cache(export)
    methods = sub.add_parser("methods", help="list methods and their settings")
    methods.add_argument("--task", help="show the settings a run on this task would use (each method's task defaults)")
    _add_list(methods, "--method", dest="methods", metavar="METHOD",
              help="only these methods (--method a b, or repeated; a name, a plugin's name or "
                   "package.module:ClassName)")
    _add_cache(methods)

    ref = sub.add_parser("reference", help="HMC reference posteriors")
    ref_sub = ref.add_subparsers(dest="reference_command", required=True, parser_class=OneLineParser,
                                 metavar="{generate,diagnose}")
    gen = ref_sub.add_parser("generate", help="run HMC for a task and write its reference")
    gen.add_argument("--task", required=True, help="the embedded task whose reference to sample")
    gen.add_argument("--out", type=Path, default=Path("references"),
                     help="folder for the new reference (default: references/)")
    gen.add_argument("--install", action="store_true",
                     help="write into the package's reference/data and update the checksum registry")
    gen.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu",
                     help="where to run the HMC chains: cpu (default), cuda, or auto")
    gen.add_argument("--checkpoints", type=Path, default=Path("references") / "checkpoints",
                     help="folder where the chains save their progress (at least once a minute) and from which an "
                          "interrupted generation resumes (default: references/checkpoints/)")
    gen.add_argument("--restart", action="store_true",
                     help="discard the task's checkpoints and start its chains again")
    gen.add_argument("--force", action="store_true",
                     help="replace a reference of the task already in the output folder (with --install: the shipped "
                          "one)")
    gen.add_argument("--workers", type=positive_whole, default=1,
                     help="processes sampling chains at once, --threads each, for a reference sampled chain by "
                          "chain (default 1); the result does not depend on it")
    _add_threads(gen, help=f"torch threads sampling in this process, or in each of --workers (default "
                           f"{DEFAULT_THREADS}, whatever OMP_NUM_THREADS says; --workers x --threads at most the "
                           f"usable cores); recorded in the reference's metadata")
    gen.add_argument("--quiet", action="store_true", help="no progress bars")
    diagnose = ref_sub.add_parser("diagnose", help="recompute a reference's diagnostics, acceptance and noise floor "
                                                   "from its evidence and compare them with its metadata")
    _add_list(diagnose, "--task", dest="tasks", metavar="TASK",
              help="the embedded tasks whose references to diagnose (default: every embedded task)")
    diagnose.add_argument("--folder", type=Path, default=None,
                          help="diagnose the reference `reference generate --out FOLDER` wrote there, not the "
                               "shipped one")
    diagnose.add_argument("--update", action="store_true",
                          help="rewrite the metadata's figures from the evidence where they differ (after a change of "
                               "how a figure is computed; the reference itself is untouched), and the registry's "
                               "checksum of the shipped .json")

    db_help = "leaderboard database (default: $BDL_BENCH_DB, else the user's data folder)"
    submit = sub.add_parser("submit", help="re-score runs (or a competition zip) and add them to the leaderboard")
    submit.add_argument("paths", nargs="+", type=Path, metavar="RUN_DIR",
                        help="a run folder, a folder of run folders, or a competition submission .zip")
    submit.add_argument("--db", type=Path, help=db_help)
    submit.add_argument("--name", help="submitter's name (default: the user name)")
    submit.add_argument("--notes", default="", help="free-text notes stored with every run of this submission")
    submit.add_argument("--method", help="for a .zip: the method's name; with --verify and run folders: the method to "
                                         "re-execute them with (package.module:ClassName; a record never chooses code "
                                         "to import)")
    submit.add_argument("--label", help="for a .zip: a human name for its configuration, shown on the leaderboard "
                                        "instead of its hash (1 to 100 printable characters); a run folder carries "
                                        "the label it was run with (`run --label`)")
    submit.add_argument("--budget", type=budget_epochs, help="for a .zip: the declared budget in epochs")
    submit.add_argument("--seed", type=seed_number, default=0, help="for a .zip: the seed (default 0)")
    _add_max_epochs(submit)
    submit.add_argument("--verify", action="store_true",
                        help="re-execute every run under the meter first and refuse any that does not reproduce; "
                             "the leaderboard marks them verified")
    _add_threads(submit, default=None, help=f"with --verify: torch threads of the re-executions (default "
                                            f"{DEFAULT_THREADS}); a run reproduces bitwise only with the thread count "
                                            f"it recorded, else it is compared as if from another machine")
    _add_cache(submit)

    verify = sub.add_parser("verify", help="re-execute finished runs under the meter and compare them with their "
                                           "records")
    verify.add_argument("paths", nargs="+", type=Path, metavar="RUN_DIR", help="a run folder or a folder of run folders")
    _add_max_epochs(verify)
    _add_threads(verify, help=f"torch threads of the re-executions (default {DEFAULT_THREADS}, whatever "
                              f"OMP_NUM_THREADS says), named in each line; a run reproduces bitwise only with the "
                              f"thread count it recorded, else it is compared as if from another machine")
    verify.add_argument("--method", help="the method to re-execute the runs with, for runs of a package.module:ClassName "
                                         "method (a run's record never chooses code to import)")
    _add_cache(verify)

    board = sub.add_parser("leaderboard", help="rank the stored runs per task and budget")
    _add_list(board, "--task", metavar="TASK", help="only these tasks (--task a b, or repeated)")
    _add_list(board, "--budget", type=budget_epochs, metavar="EPOCHS", help="only these budgets (--budget 10 100, or repeated)")
    board.add_argument("--format", choices=("md", "html", "csv", "json"), default="md",
                       help="md (Markdown tables, default), html (a page with plots), csv or json (every stored value)")
    board.add_argument("--output", type=Path, help="write to this file instead of standard output (a regular file, "
                                                   "new or replaced; a folder, FIFO, device or /dev/stdout is "
                                                   "refused: leave --output out to write to standard output)")
    board.add_argument("--db", type=Path, help=db_help)
    board.add_argument("--no-shipped", action="store_true",
                       help="leave out the results shipped with bdl-bench (every built-in method on every embedded "
                            "task, labelled 'shipped'; shown by default beside the database's runs)")

    check = sub.add_parser("check", help="CI gate: rerun a fixed configuration and compare it with a baseline")
    check.add_argument("--baseline", type=Path, required=True, help="baseline JSON file")
    _add_max_epochs(check)
    _add_threads(check)
    check.add_argument("--workers", type=positive_whole, default=1,
                       help="processes measuring at once, each with --threads torch threads (default 1: in this "
                            "process); every run seeds itself, so the results are the same bits")
    check.add_argument("--tolerance", type=decimal_number, default=None,
                       help="statistical mode: threshold in standard errors (default: Bonferroni bound for a 1%% "
                            "family-wise false-alarm rate)")
    check.add_argument("--statistical", action="store_true",
                       help="compare means statistically even where the environment matches the baseline's")
    _add_list(check, "--method", "--methods", dest="methods", metavar="METHOD",
              help="methods to check (--method a b, or repeated; --methods is the same option; default: every method "
                   "in the baseline; with --update: the methods --budget and --set name, else every built-in "
                   "method); a name, a plugin's name or package.module:ClassName")
    _add_list(check, "--task", metavar="TASK",
              help="tasks (--task a b, or repeated; default: every task of the baseline, with --update the embedded "
                   "MLP tasks; with --method too, an update adds the tasks named for those methods)")
    check.add_argument("--update", action="store_true",
                       help="measure the configuration and rewrite the baseline (with --method or --task: extend "
                            "it, replacing only what was measured)")
    check.add_argument("--seeds", type=positive_whole, default=None,
                       help="with --update: number of seeds (default 10); in a check: only the baseline's first N "
                            "seeds (exactly where the baseline's environment matches; elsewhere a weaker statistical "
                            "test of the means on N seeds)")
    _add_list(check, "--budget", metavar="[METHOD=]EPOCHS",
              help="with --update: the budget of every method, or of one (--budget sgd=10 de=20, or repeated; "
                   "default: each method's check_budget); stored in the baseline")
    _add_list(check, "--set", dest="settings", metavar="[METHOD.]KEY=VALUE",
              help="with --update: settings of every method, or of one (--set lr=0.01 de.members=3, or repeated; "
                   "each setting once); stored in the baseline")
    return parser


def _add_cache(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache", type=Path, default=None,
                        help="folder for fetched competition data (default: $BDL_BENCH_CACHE, else ~/.cache/bdl-bench)")


def _cmd_run(args) -> int:
    from approximators import get_method, resolve_config
    from bench import executors, records
    from bench.progress import Progress, run_title
    from bench.runner import RunSpec, check_label, resolve_device, run
    from bench.tasks import default_task_names, get_task

    check_label(args.label)
    # Paths are fixed before any of the method's code runs: a working directory it changes moves nothing we write.
    out, cache = args.out.absolute(), args.cache and args.cache.absolute()
    isolate = executors.isolates(args.method) and not args.debug  # someone else's code runs in a process of its own
    # A built-in or unknown name is checked before any task's data loads (scikit-learn's import alone takes seconds).
    method = None if isolate else get_method(args.method)
    # Each task once, under its own name (a repeated or aliased --task would train twice into one folder).
    tasks = list(dict.fromkeys(get_task(task, cache).name for task in args.task or default_task_names()))
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
                folder = records.run_folder(out, task, method.name, args.budget, seed)
                # The same run finished before (same configuration) is shown, not trained again, as sweep does; a
                # finished run of another configuration is refused in one line.
                if not args.force and records.finished_with(folder, config):
                    earlier.append(folder)
                else:
                    runs.append((task, seed))
        resolve_device(args.device)
        rows = [_earlier_row(folder) for folder in earlier]
        with Progress(len(runs), args.quiet, f"{args.method} @ {args.budget:g} epochs") as progress:
            for task, seed in runs:
                title = run_title(task, method.name, args.budget, seed)
                spec = RunSpec(task=task, method=args.method, budget=args.budget, seed=seed, device=args.device,
                               out=out, overrides=tuple(args.overrides), force=args.force, cache=cache,
                               label=args.label, command=args.command_line,
                               keep_predictions=not args.no_predictions)
                with progress.epochs(title, args.budget) as on_progress:
                    if isolated is None:
                        result = run(spec, on_progress=on_progress)
                    else:
                        outcome = isolated.attempt(spec, on_progress)
                        if outcome.result is None:
                            raise FailedElsewhere(outcome.exit_code, outcome.failure)
                        result = outcome.result
                progress.finished(title, failed=False)
                rows.append(_summary_row(result))
                for warning in method_warnings(result):
                    print(f"note: {title}: {terminal_text(warning)}", file=sys.stderr)
    _print_tables(rows)
    if earlier:
        print(f"{len(earlier)} run(s) finished earlier with the same settings, shown from their records "
              f"(--force trains them again)")
    print(f"results written under {terminal_text(args.out)}/")
    return 0


def method_warnings(result: dict) -> list[str]:
    """What a run's method says its result should be read with (its report's ``warnings``, a list of strings: e.g.
    ``hmc``'s chains that accepted no proposal after burn-in), shown beside the run's table and kept in its record."""
    warnings = result.get("method_report", {}).get("warnings")
    return [w for w in warnings if isinstance(w, str)] if isinstance(warnings, list) else []


def _print_tables(rows: list[dict]) -> None:
    """:func:`_summary_row` rows, one table per kind of task (their metrics differ)."""
    for kind in ("regression", "classification"):
        table = [{k: _cell(v) for k, v in row.items() if k != "kind"} for row in rows if row["kind"] == kind]
        if table:
            print(tabulate(table, headers="keys", floatfmt=".4f"))


LINE_CHARS = 2000
"""The most characters of a table cell or a whole line we print that carries outside text (a method's summary, a
verification's folder and detail): our own longest, a method's every setting, stays whole."""


def _cell(value):
    """A table cell: text as :func:`~bench.errors.terminal_text` shows it (no terminal escape, bidirectional override
    or line break from a method's summary, a record or a path reaches the terminal or splits a row); numbers as they
    are."""
    return value if value is None or isinstance(value, (int, float)) else terminal_text(value, LINE_CHARS)


def _cmd_sweep(args) -> int:
    from bench import executors, records, sweep

    if not args.submit and (args.db is not None or args.name is not None or args.notes is not None):
        raise BenchError("--db, --name and --notes say where and as whom --submit submits; add --submit")
    if args.submit and args.no_predictions:
        raise BenchError("--submit re-scores each run from its predictions; leave out --no-predictions")
    if args.submit:  # who submits is checked before a run trains, not after the last one
        from leaderboard.submission import check_submitter

        check_submitter(_submitter(args.name), args.notes or "")
    sweep.check_executor(args.executor, args.workers, args.threads, args.ray_address)
    foreign = [method for method in args.methods if executors.isolates(method)]
    with contextlib.ExitStack() as stack:
        # Someone else's code is loaded first in a process of its own, which then runs its runs (on this machine).
        spare = stack.enter_context(executors.Isolated(foreign[0], args.threads)) \
            if foreign and not args.debug and args.executor == "local" else None
        runs = sweep.plan(args.methods, args.tasks, args.budgets, args.seeds or [0], args.overrides, args.out,
                          args.device, args.cache, args.command_line, args.force, isolate=not args.debug,
                          isolated=spare, keep_predictions=not args.no_predictions)
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
            print(interrupted_line("sweep"), file=sys.stderr)
            return EXIT_INTERRUPTED
    finished = [run for run in runs if run.finished or outcomes[run].result is not None]
    rows = [{**({"variant": run.variant} if run.variant else {}),
             **_summary_row(outcomes[run].result if run in outcomes else records.read_result(run.folder)),
             "trained": "now" if run in outcomes else "earlier"} for run in finished]
    _print_tables(rows)
    failed = [run for run in runs if run in outcomes and outcomes[run].result is None]
    print(f"{len(finished) - skipped} trained, {skipped} finished earlier, {len(failed)} failed; "
          f"results under {terminal_text(args.out)}/")
    if args.submit and finished:
        from leaderboard import submission

        name = _submitter(args.name)
        _store([submission.score_run(run.folder, name, args.notes or "", args.cache) for run in finished], args.db)
    for run in failed:
        print(f"error: {terminal_text(run.folder)}: {terminal_text(outcomes[run].failure)}", file=sys.stderr)
    if failed:
        print(f"error: {len(failed)} of {len(runs)} runs failed (each named above); run the same command again to "
              "retry them", file=sys.stderr)
        return max(outcomes[run].exit_code for run in failed)
    return 0


SHOWN_DIGITS = 4
"""Significant digits of a number shown as a setting (``methods``, ``tasks``): every tuned default has at most 4."""


def _shown_setting(value) -> str:
    """A setting as a person reads it, the one rule for every shown setting: a float to :data:`SHOWN_DIGITS`
    significant digits, marked ``~`` where that rounds it (161/300 as ~0.5367: typed back into ``--set`` it would be
    another configuration); anything else as it is. Records keep the exact value."""
    if not isinstance(value, float):
        return str(value)
    text = f"{value:.{SHOWN_DIGITS}g}"
    return text if float(text) == value else f"~{text}"


def _earlier_row(folder: Path) -> dict:
    """The table row of a run finished earlier, from its record (one line if the record cannot show it)."""
    try:
        return _summary_row(records.read_result(folder))
    except (KeyError, TypeError, AttributeError) as error:
        raise BenchError(f"{folder}: its record cannot be shown ({type(error).__name__}: {error}); pass --force to "
                         "train the run again") from None


def _summary_row(result: dict) -> dict:
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
            "task": result["task"], "method": result["method"], "budget": budget_label(result["budget"]),
            "epochs": f"{result['epochs_used']:g}", "seed": result["seed"], **fidelity,
            "seconds": result["wall_seconds"]}


def _cmd_tasks(args) -> int:
    from bench.download import resolve_cache
    from bench.tasks import COMPETITION, get_task, task_names
    from bench.tasks.competition import SPECS, read_manifest
    from reference.store import reference_status

    rows = []
    for name in task_names():
        task = get_task(name)
        d = task.describe()
        rows.append({"task": name, "version": task.version, "kind": task.kind, "train": task.n_train,
                     "test": task.n_test, "model": task.architecture, "parameters": task.n_parameters(),
                     "likelihood": d["likelihood"]["name"], "prior variance": _shown_setting(task.prior_variance),
                     "reference": reference_status(task)})
    for name in COMPETITION:
        spec, manifest = SPECS[name], read_manifest(name, args.cache)
        task = get_task(name, args.cache) if manifest else None
        rows.append({"task": name, "version": spec.version, "kind": spec.likelihood.kind,
                     "train": task.n_train if task else "-", "test": task.n_test if task else "-",
                     "model": spec.architecture.split(" (")[0],
                     "parameters": sum(p.numel() for p in spec.model_factory().parameters()),
                     "likelihood": spec.likelihood.describe()["name"],
                     "prior variance": _shown_setting(spec.prior_variance),
                     "reference": f"official, {reference_status(task)}" if task else "not fetched"})
    print(_wrapped(rows, {"model": 40}))
    details = []
    for name in task_names():
        task = get_task(name)
        d = task.describe()
        details.append({"task": name, "what": task.description,
                        "test blocks": ", ".join(f"{block} (rows {start}-{stop})" for block, start, stop
                                                 in d["test_blocks"]) or "one block",
                        "data": _flat_settings(d["data"])})
    details += [{"task": name, "what": SPECS[name].description, "test blocks": "", "data": "fetched by `fetch`"}
                for name in COMPETITION]
    print()
    print(_wrapped(details, {"what": 40, "test blocks": 30, "data": 50}))
    print(f"\ncompetition tasks are read from the cache {terminal_text(resolve_cache(args.cache))}")
    return 0


def _wrapped(rows: list[dict], widths: dict[str, int]) -> str:
    """A table of ``rows`` whose columns named in ``widths`` wrap at that many characters (a terminal stays readable)."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return tabulate([[_cell(row.get(column, "")) for column in columns] for row in rows], headers=columns,
                    maxcolwidths=[widths.get(column) for column in columns])


def _flat_settings(values: dict, prefix: str = "") -> str:
    """``{"a": 1, "b": {"c": 2}}`` -> ``"a=1, b.c=2"``: nested settings on one readable line."""
    return ", ".join(_flat_settings(value, f"{prefix}{key}.") if isinstance(value, dict) and value
                     else f"{prefix}{key}={_shown_setting(value)}" for key, value in values.items())


def _cmd_fetch(args) -> int:
    from functools import partial

    from tqdm.auto import tqdm

    from bench.download import resolve_cache
    from bench.fetch import describe_fetch, fetch_task
    from bench.tasks import COMPETITION
    from bench.tasks.competition import DATA_URL, REFERENCE_URL

    names = list(COMPETITION) if args.all else args.task
    unknown = [n for n in names if n not in COMPETITION]
    if unknown:
        raise ConfigError(f"not a competition task: {', '.join(unknown)}; fetch takes {', '.join(COMPETITION)}")
    if args.check_mirror:
        from bench import mirror

        if args.force or args.keep_downloads:
            raise ConfigError("--check-mirror downloads nothing; --force and --keep-downloads do not apply to it")
        return mirror.report(names, args.data_url, args.reference_url, args.cache)
    progress = partial(tqdm, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
                       disable=True if args.quiet else None)
    for name in names:
        manifest, downloaded = fetch_task(name, args.cache, args.data_url or DATA_URL,
                                          args.reference_url or REFERENCE_URL, progress=progress,
                                          keep_downloads=args.keep_downloads, force=args.force)
        if not downloaded:
            print(f"{name}: already fetched and unchanged (every array's sha256 checked); --force fetches again")
            continue
        shapes = ", ".join(f"{k} {tuple(v['shape'])}" for k, v in manifest["arrays"].items())
        print(f"{name}: fetched into {terminal_text(resolve_cache(args.cache) / 'tasks' / name)} ({shapes}; reference "
              f"{manifest['reference']['key']} {tuple(manifest['reference']['shape'])})")
        print(describe_fetch(manifest))
    return 0


def _cmd_export(args) -> int:
    from bench.export import export_submission

    sources = export_submission(args.runs, args.out, args.cache, args.force)
    for name, folder in sources.items():
        print(f"{name} <- {terminal_text(folder)}")
    print(f"wrote {terminal_text(args.out)}")
    return 0


def _cmd_methods(args) -> int:
    import dataclasses

    from approximators import METHODS, get_method, installed_methods, method_source, resolve_config
    from approximators.boundary import users_code
    from bench.tasks import get_task

    task = get_task(args.task, args.cache).name if args.task else None
    wanted = list(dict.fromkeys(args.methods or []))
    broken = []
    if wanted:
        loaded = [(method, method_source(method) or "built-in") for method in map(get_method, wanted)]
    else:
        loaded = [(method, "built-in") for method in METHODS.values()]
        for name, plugin in sorted(installed_methods().items()):
            try:
                loaded.append((get_method(name), f"plugin {plugin.value}"))
            except (BenchError, MethodFailed) as error:  # one broken plugin must not hide the others
                broken.append({"method": name, "source": f"plugin {plugin.value}", "what": f"cannot be loaded: {error}"})
    rows, settings = [], []
    for method, source in loaded:
        with users_code(method, "settings"):
            defaults = method.Config()
        config = resolve_config(method, task) if task else defaults
        # a method that changes the network approximates another posterior than the reference's
        with users_code(method, "architecture_change"):
            change = method.architecture_change(config)
        rows.append({"method": method.name, "source": source, "what": method.summary, "paper": method.paper,
                     "network": "task's" if change is None else f"changed: {change}"})
        settings.append({"method": method.name, "settings" if not task else f"settings on {task}": ", ".join(
            f"{field.name}={_shown_setting(getattr(config, field.name))}" + ("*" if getattr(config, field.name)
                                                              != getattr(defaults, field.name) else "")
            for field in dataclasses.fields(config))})
    print(_wrapped(rows + broken, {"what": 50, "network": 40, "paper": 30}))
    print()
    print(_wrapped(settings, {"settings": 100, f"settings on {task}": 100}))
    print("\n* the task's own default for the method (`--set key=value` overrides any setting)" if task else
          "\nclass defaults; `methods --task T` shows the values a run on T uses, `--set key=value` overrides any")
    if any("=~" in text for row in settings for text in row.values()):
        print(f"~ rounded to {SHOWN_DIGITS} significant digits (runs use and record the exact value)")
    return 0


def _cmd_reference(args) -> int:
    if args.reference_command == "diagnose":
        return _cmd_reference_diagnose(args)
    return _cmd_reference_generate(args)


def _cmd_reference_diagnose(args) -> int:
    """Every figure of each reference's metadata recomputed from its evidence: a table of its diagnostics against the
    gold standard, its noise floor estimated from 2, 4 and 8 parts, and one line per figure the metadata states
    otherwise (exit 1)."""
    from bench.tasks import get_task
    from reference import store
    from reference.settings import REFERENCE_SETTINGS

    names = args.tasks or list(REFERENCE_SETTINGS)
    unknown = [name for name in names if name not in REFERENCE_SETTINGS]
    if unknown:
        raise ConfigError(f"reference diagnose reads the embedded tasks' references ({', '.join(REFERENCE_SETTINGS)}); "
                          f"{', '.join(map(repr, unknown))} is not one of them")
    if args.update:
        for name in names:
            for line in store.restate(get_task(name), args.folder):
                print(f"{name}: rewrote {line}")
    diagnoses, refused = [], []
    for name in names:  # one reference that cannot be diagnosed does not hide the others
        try:
            diagnoses.append(store.diagnose(get_task(name), args.folder))
        except BenchError as error:
            refused.append(name)
            print(f"error: {name}: {error}", file=sys.stderr)
    rows, floors = [], []
    for found in diagnoses:
        gold = found.gold_standard
        rows.append({"task": found.task, "chains x draws": f"{len(found.summary['step_sizes'])} x "
                                                          f"{found.summary['kept_samples_per_chain']}",
                     "acceptance": f"{found.summary['acceptance_rate']:.3f}",
                     **{name: f"{gold[name]['value']:{'.4f' if name == 'max_split_rhat' else '.0f'}} "
                              f"({'met' if gold[name]['met'] else 'short'}: "
                              f"{gold[name]['limit']})" for name in gold},
                     "figures agree": "yes" if not found.differences else f"NO ({len(found.differences)})"})
        parts = found.summary["noise_floor_by_parts"]
        for metric, value in found.summary["noise_floor"]["all"].items():
            floors.append({"task": found.task, "metric": metric, "noise floor": f"{value:.4g}",
                           **{f"from {k} parts": (f"{1 - parts[k]['disagreement']:.4g}" if metric == "agreement"
                                                  else f"{parts[k][metric]:.4g}" if metric in parts[k] else "")
                              for k in parts}})
    print(_wrapped(rows, {}))
    print()
    print(_wrapped(floors, {}))
    for found in diagnoses:
        for line in found.differences:
            print(f"{found.task}: {line}")
    mismatched = [found.task for found in diagnoses if found.differences]
    print(f"\n{len(diagnoses) - len(mismatched)} of {len(names)} references' metadata recomputed from their evidence"
          + (f"; {', '.join(mismatched)} state figures their evidence does not give" if mismatched else "")
          + (f"; {', '.join(refused)} could not be diagnosed (each named on stderr)" if refused else ""))
    return 2 if refused else 1 if mismatched else 0


def _cmd_reference_generate(args) -> int:
    from bench.records import check_writable
    from bench.runner import resolve_device
    from bench.sweep import check_executor
    from bench.tasks import get_task
    from reference import store
    from reference.generate import claimed_checkpoints, compare, generate
    from reference.settings import R_HAT_LIMIT, REFERENCE_SETTINGS

    if args.task not in REFERENCE_SETTINGS:
        raise ConfigError(f"reference generate samples the embedded tasks' references ({', '.join(REFERENCE_SETTINGS)}); "
                          f"{args.task!r} is not one of them (a competition task's reference is the official one, "
                          f"from `fetch`)")
    task = get_task(args.task)
    device = str(resolve_device(args.device))
    check_executor("local", args.workers, args.threads, None)
    folder = store.PACKAGE_DATA if args.install else args.out
    if (folder / f"{task.name}.npz").exists() and not args.force:
        raise BenchError(f"{folder / (task.name + '.npz')} already holds a reference of {task.name}; pass --force to "
                         f"replace it" + ("" if args.install else " or choose another --out"))
    check_writable(folder, force=True)  # before an hour of sampling, not after
    # The checkpoints stay until the reference is written: a failure anywhere before loses no sampling.
    try:
        with claimed_checkpoints(args.checkpoints / task.name, restart=args.restart):
            generated = generate(task, REFERENCE_SETTINGS[task.name], device=device,
                                 progress=None if not args.quiet else False, checkpoints=args.checkpoints,
                                 workers=args.workers, threads=args.threads)
            meta = generated.metadata
            rhat = meta["generation_check"]["max_split_rhat"]
            print(f"{task.name}: acceptance {meta['acceptance_rate']:.3f}, worst split R-hat {rhat:.4f} over every "
                  f"test point ({meta['diagnostics']['max_split_rhat']:.4f} over the evidence's), min bulk ESS "
                  f"{meta['diagnostics']['min_bulk_ess']:.0f}, {meta['compute_seconds']:.0f} s of sampling")
            print(f"noise floor: {meta['noise_floor']['all']}")
            if rhat > R_HAT_LIMIT:
                raise BenchError(f"worst split R-hat {rhat:.4f} exceeds {R_HAT_LIMIT}: not writing the reference; "
                                 "raise n_samples in reference/settings.py and run again (the chains continue from their checkpoints)")
            try:
                shipped = store.load_reference(task)
                print(f"against the shipped reference: {compare(task, generated.array, shipped.array)['all']}")
            except Exception as error:  # the shipped reference may legitimately be absent or stale here
                print(f"no valid shipped reference to compare with ({error})")
            entry = store.write_reference(folder, task.name, generated.key, generated.array, meta, generated.evidence)
            if args.install:
                store.register(task.name, entry)
    except KeyboardInterrupt:  # the checkpoints stay (the claim removes them only once the reference is written)
        kept = args.checkpoints / task.name
        if any(kept.glob("chains-*.pt")):
            print(f"{interrupted_line(None)}; each chain's progress is kept in {terminal_text(kept)} (at most a "
                  f"minute of sampling per chain is lost): run the same command again to continue", file=sys.stderr)
        else:
            print(f"{interrupted_line(None)}; no chain had saved its progress yet (the first checkpoint comes within "
                  "a minute), so nothing is kept: run the same command again to start", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"wrote {terminal_text(folder / (task.name + '.npz'))} (sha256 {entry['npz_sha256']})"
          + (" and updated the registry" if args.install else ""))
    return 0


def _submitter(name: str | None) -> str:
    import getpass

    if name is not None:
        return name
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in this environment
        return "anonymous"


def _cmd_submit(args) -> int:
    from bench.executors import Isolations
    from bench.verify import verified_row
    from leaderboard import submission

    name = _submitter(args.name)
    if args.verify:
        from leaderboard.submission import run_folders

        folders = run_folders([p for p in args.paths if p.suffix != ".zip"])
        check_planned_epochs(_claimed_epochs(folders), args.max_epochs, f"verifying {len(folders)} run(s)")
    rows = []
    # --verify re-executes a method that is not bdl-bench's in a process of its own, one for all its folders.
    with Isolations(args.threads or DEFAULT_THREADS) as isolations:
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
                rows += [verified_row(folder, name, args.notes, args.cache, args.method, not args.debug, isolations)
                         if args.verify else submission.score_run(folder, name, args.notes, args.cache)
                         for folder in submission.run_folders([path])]
    _store(rows, args.db)
    return 0


def _store(rows: list, db: Path | None) -> None:
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


def _cmd_leaderboard(args) -> int:
    from leaderboard.render import render
    from leaderboard.submission import with_current_floors
    from leaderboard.store import Store, default_db_path
    from bench.io import atomic_write_bytes, file_to_write

    if args.output:  # a folder, FIFO or device there: refused before the database is read
        file_to_write(args.output, "the --output file")
    tasks, budgets = dict.fromkeys(args.task or [None]), dict.fromkeys(args.budget or [None])
    db = args.db or default_db_path()
    shipped_rows, stale = [], []
    if not args.no_shipped:
        from leaderboard import shipped

        shipped_rows, stale = shipped.rows(args.task, args.budget)
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
    text = render(with_current_floors(rows), args.format)
    if args.output:
        atomic_write_bytes(args.output, text.encode(), "the --output file")
        print(f"wrote {terminal_text(args.output)}")
    else:
        sys.stdout.write(text)
    return 0


def _cmd_check(args) -> int:
    from bench.sweep import check_executor
    from leaderboard import gate

    check_executor("local", args.workers, args.threads, None)
    if args.update:
        if args.tolerance is not None or args.statistical:
            raise BenchError("--tolerance and --statistical choose how a check compares; --update only measures")
        baseline = gate.update(args.baseline, methods=args.methods, tasks=args.task, seeds=args.seeds,
                               budgets=gate.budget_options(args.budget), settings=gate.setting_options(args.settings),
                               max_epochs=args.max_epochs, workers=args.workers, threads=args.threads)
        print(gate.describe_baseline(baseline))
        print(f"wrote {terminal_text(args.baseline)}")
        return 0
    if args.budget or args.settings:
        raise BenchError("--budget and --set choose what --update measures; a check reruns the baseline's "
                         "budgets and settings")
    report = gate.check(args.baseline, methods=args.methods, tasks=args.task, tolerance=args.tolerance,
                        statistical=args.statistical, max_epochs=args.max_epochs, workers=args.workers,
                        threads=args.threads, seeds=args.seeds)
    print(report.text())
    return 0 if report.passed else 1


def _cmd_verify(args) -> int:
    from bench.executors import Isolations
    from bench.verify import verify
    from leaderboard.submission import run_folders

    folders = run_folders(args.paths)
    check_planned_epochs(_claimed_epochs(folders), args.max_epochs, f"verifying {len(folders)} run(s)")
    results, failures = [], 0
    # A method that is not bdl-bench's is re-executed in a process of its own (one for all its folders); its failure
    # (exit 4) is that folder's line, and the other folders are still verified.
    with Isolations(args.threads) as isolations:
        for folder in folders:
            try:
                result = verify(folder, args.cache, args.method, isolate=not args.debug, isolations=isolations)
            except (MethodFailed, FailedElsewhere) as error:
                if args.debug or error.exit_code != EXIT_METHOD:
                    raise
                print(f"error: {terminal_text(folder)}: {describe_failure(error)[1]}", file=sys.stderr)
                failures += 1
                continue
            print(terminal_text(result.line(), LINE_CHARS))
            results.append(result)
    mismatched = sum(not r.passed for r in results)
    print(f"{len(results) - mismatched} of {len(folders)} runs verified"
          + (f"; {failures} could not be re-executed, their method failed (each named on stderr)" if failures else ""))
    return EXIT_METHOD if failures else 1 if mismatched else 0


INTERRUPTED = {
    "run": "finished runs are complete, the interrupted one was not written",
    "sweep": "finished runs are complete and unfinished ones were not written; run the same command again to resume",
    "submit": "a submission is stored whole or not at all: the leaderboard holds every run of it or none",
    "leaderboard": "the database was only read, and --output is written whole or not at all",
    "fetch": "the task's cached data is as it was (a fetch puts it in place only once complete); run the same "
             "command again and the downloads continue where they stopped",
    "export-submission": "the zip is written whole or not at all",
    "check": "nothing was written (--update writes the baseline only once every measurement is done)",
    "verify": "verify changes no run; nothing was written",
    "reference": "no reference was written",
}
"""What an interrupted command left, by command (``tasks`` and ``methods`` only read: nothing to say)."""


def interrupted_line(command: str | None) -> str:
    """The one line of a command interrupted by Ctrl-C or terminated by SIGTERM."""
    left = INTERRUPTED.get(command)
    return f"error: {interrupts.stopped()}" \
        + (f"; {left}" if left else "")


def main(argv: list[str] | None = None) -> int:
    """The command line's one error boundary: every failure ends as one line on stderr and an exit code
    (:mod:`bench.errors`); ``--debug`` anywhere in ``argv`` (or ``BDL_BENCH_DEBUG=1``) lets it raise instead.
    Any failure after Ctrl-C arrived (:func:`bench.interrupts.interrupt_arrived`: a library that caught the interrupt
    in the middle of an import fails later in its own way) is reported as the interrupt (exit 130; 143 for SIGTERM,
    which stops a command as Ctrl-C does)."""
    with interrupts.command():
        code = _bounded(argv)
        return EXIT_TERMINATED if interrupts.termination_arrived() and code == EXIT_INTERRUPTED else code


def _bounded(argv: list[str] | None) -> int:
    """:func:`main`'s boundary."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command_line = " ".join([_program(), *map(shlex.quote, argv)])
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    parsed = argparse.Namespace(command=None)
    try:
        return _dispatch(argv, command_line, debug, parsed)
    except Exception as error:
        if interrupts.interrupt_arrived():
            print(interrupted_line(parsed.command), file=sys.stderr)
            return EXIT_INTERRUPTED
        if debug:
            raise
        code, line = describe_failure(error)
        print(f"error: {line}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        print(interrupted_line(parsed.command), file=sys.stderr)
        return EXIT_INTERRUPTED


def _program() -> str:
    """How this process was started, as a person would type it: ``bdl-bench`` or ``python -m bench``."""
    return "bdl-bench" if Path(sys.argv[0]).name == "bdl-bench" else "python -m bench"


def _set_threads(threads: int) -> None:
    """torch's threads for this process: ``--threads``, at most the CPU cores this process may use."""
    import torch

    from bench.executors import usable_cores

    cores = usable_cores()
    if threads > cores:
        raise BenchError(f"--threads {threads} is more than the {cores} CPU core(s) this process may use; the extra "
                         "threads would only wait for each other")
    torch.set_num_threads(threads)


def _dispatch(argv: list[str], command_line: str, debug: bool, parsed: argparse.Namespace) -> int:
    """Parses ``argv`` (into ``parsed``, which says the command to an interrupt's line) and runs its command."""
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help", "--version"):
        argv = ["run", *argv]
    parser = build_parser(_program())
    args, unknown = parser.parse_known_args(argv, namespace=parsed)
    if unknown:  # named by the subcommand's parser, so the line points to that subcommand's --help
        parser.refuse_unknown(args, unknown)
    args.command_line = command_line  # stored in every result record: how the run was asked for
    args.debug = debug  # with --debug a method that is not bdl-bench's runs in this process, for its traceback
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "submit" and args.threads is not None and not args.verify:
        raise BenchError("--threads sets the threads --verify re-executes the runs with; add --verify")
    if args.command in ("run", "check", "verify", "submit"):  # they train in this process (sweep sets each run's own)
        _set_threads(args.threads or DEFAULT_THREADS)
    handler = {"run": _cmd_run, "tasks": _cmd_tasks, "methods": _cmd_methods, "fetch": _cmd_fetch,
               "export-submission": _cmd_export, "reference": _cmd_reference,
               "submit": _cmd_submit, "leaderboard": _cmd_leaderboard, "check": _cmd_check,
               "verify": _cmd_verify, "sweep": _cmd_sweep}
    return handler[args.command](args)
