"""Command line: ``python -m bench [run] --method M --budget B``, ``tasks``, ``methods``, ``fetch``,
``export-submission``, ``reference generate``, ``submit``, ``leaderboard``, ``check``, ``verify``, ``sweep``."""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
from pathlib import Path

import bench
from bench import descendants, interrupts
from bench.commands import DEFAULT_THREADS, interrupted_line
from bench.errors import (DEBUG_ENV, EXIT_CLOSED_PIPE, EXIT_ENVIRONMENT, EXIT_INTERRUPTED, EXIT_TERMINATED, BenchError,
                          closed_pipe, describe_failure)
from bench.limits import DEFAULT_EVERY_SECONDS, DEFAULT_MAX_EPOCHS
from bench.loading import load_torch
from bench.arguments import (OneLineParser, sibling_hint, budget_epochs, decimal_number, duration_or_off, finite_epochs, positive_whole,
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


# What a seeded run's exact reproduction needs (bench.runner.NUMERICS), for every --threads help that promises it.
REPRODUCES_EXACTLY = ("a seeded run reproduces exactly only with the same --threads on the same CPU kind (model and "
                      "torch's kernels for it), library versions and device")


def _add_threads(parser, help: str = f"torch threads (default {DEFAULT_THREADS}, whatever OMP_NUM_THREADS says: on "
                                     f"small models more threads spin rather than help, many times slower on a busy "
                                     f"machine); recorded in each result: {REPRODUCES_EXACTLY}",
                 default: int | None = DEFAULT_THREADS) -> None:
    parser.add_argument("--threads", type=positive_whole, default=default, help=help)


def _add_max_epochs(parser) -> None:
    parser.add_argument("--max-epochs", type=finite_epochs, default=DEFAULT_MAX_EPOCHS, metavar="EPOCHS",
                        help=f"refuse, before anything trains, to train more epochs than this in all (re-executed "
                             f"records, a baseline's rerun, or what check --update measures; default "
                             f"{DEFAULT_MAX_EPOCHS:,}): records and baselines are files anyone can edit")


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
    run.add_argument("--out", type=Path, default=None, help="output folder (default: runs/, rehearsals/ with "
                                                            "--rehearse)")
    _add_list(run, "--set", dest="overrides", type=_key_value, default=[], metavar="KEY=VALUE",
              help="override method settings (--set lr=0.01 batch_size=64, or repeated; each setting once)")
    run.add_argument("--force", action="store_true", help="overwrite a finished run")
    run.add_argument("--label", help="a human name for this configuration, shown on the leaderboard instead of its "
                                     "configuration hash (1 to 100 printable characters)")
    _add_no_predictions(run)
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_checkpoint_every(run)
    _add_rehearsal(run)
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
    sweep.add_argument("--out", type=Path, default=None, help="output folder (default: runs/, rehearsals/ with "
                                                              "--rehearse)")
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
                            f"run's round-off, and {REPRODUCES_EXACTLY}; --workers x --threads may not exceed the CPU "
                            "cores")
    sweep.add_argument("--ray-address", help="--executor ray: the cluster's address, e.g. 10.0.0.1:6379 (default: "
                                             "$RAY_ADDRESS, else one `ray start --head` started on this machine, else "
                                             "a new local one for this sweep)")
    sweep.add_argument("--force", action="store_true", help="train every run again, replacing finished ones")
    _add_checkpoint_every(sweep)
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
    _add_rehearsal(sweep)
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
    _add_list(fetch, "--expect-sha256", metavar="FILE=SHA256", default=[],
              help="pin a file with no official sha256 (every data file, CIFAR-10-C's and UCI-Gap's references) to a "
                   "sha256 you trust, say your lab's of its mirror: FILE is its name or its path on the mirror (as "
                   "eval-phase/eval_data/cifar_probs.csv); a file that does not match is not kept (exit 1), one that "
                   "matches is trusted as pinned, not first use; for a task already fetched its recorded sha256 is "
                   "checked")
    fetch.add_argument("--checksums", type=Path, default=None, metavar="FILE",
                       help="pin files as --expect-sha256 does, from a sha256sum-format file (SHA256  FILE per line; "
                            "lines naming no competition file are skipped)")
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
    submit.add_argument("--quiet", action="store_true", help="with --verify: no progress bars")
    submit.add_argument("--log", type=Path, metavar="FILE",
                        help="with --verify: the log each re-execution (and verdict) is appended to, one line each, "
                             "whatever standard error is (default: verify.log in the database's folder, beside "
                             "--db)")
    _add_threads(submit, default=None, help=f"with --verify: torch threads of the re-executions (default "
                                            f"{DEFAULT_THREADS}); a run is compared bitwise only with the thread count "
                                            f"it recorded on its CPU kind, library versions and device, else as if "
                                            f"from another machine")
    _add_cache(submit)

    verify = sub.add_parser("verify", help="re-execute finished runs under the meter and compare them with their "
                                           "records")
    verify.add_argument("paths", nargs="+", type=Path, metavar="RUN_DIR", help="a run folder or a folder of run folders")
    _add_max_epochs(verify)
    _add_threads(verify, help=f"torch threads of the re-executions (default {DEFAULT_THREADS}, whatever "
                              f"OMP_NUM_THREADS says), named in each line; a run is compared bitwise only with the "
                              f"thread count it recorded on its CPU kind, library versions and device, else as if "
                              f"from another machine")
    verify.add_argument("--quiet", action="store_true", help="no progress bars")
    verify.add_argument("--log", type=Path, metavar="FILE",
                        help="the log each re-execution (and verdict) is appended to, one line each, whatever standard "
                             "error is (default: verify.log in the leaderboard database's folder: $BDL_BENCH_DB's, "
                             "else the user's data folder)")
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
    board.add_argument("--quiet", action="store_true",
                       help="no progress bars (drawn only on a terminal: reading the records, rendering)")
    board.add_argument("--no-shipped", action="store_true",
                       help="leave out the results shipped with bdl-bench (every built-in method on every embedded "
                            "task, labelled 'shipped'; shown by default beside the database's runs)")

    check = sub.add_parser("check", help="CI gate: rerun a fixed configuration and compare it with a baseline")
    check.add_argument("--baseline", type=Path, required=True, help="baseline JSON file")
    _add_max_epochs(check)
    _add_threads(check, help=f"torch threads of the runs (default {DEFAULT_THREADS}, whatever OMP_NUM_THREADS says): "
                             f"the comparison is exact only where these, the CPU kind (model and torch's kernels for "
                             f"it), library versions and device are the baseline's, else as on another CPU kind")
    check.add_argument("--workers", type=positive_whole, default=1,
                       help="processes measuring at once, each with --threads torch threads (default 1: in this "
                            "process); every run seeds itself, so the results are the same bits")
    check.add_argument("--tolerance", type=decimal_number, default=None,
                       help="off the baseline's CPU: the test of means' threshold in standard errors (default: "
                            "Bonferroni bound for a 1%% family-wise false-alarm rate)")
    check.add_argument("--statistical", action="store_true",
                       help="compare as on another CPU kind (cross-CPU mode) even where the environment matches the "
                            "baseline's")
    _add_list(check, "--method", "--methods", dest="methods", metavar="METHOD",
              help="methods to check (--method a b, or repeated; --methods is the same option; default: every method "
                   "in the baseline; with --update: the methods --budget and --set name, else every built-in "
                   "method); a name, a plugin's name or package.module:ClassName")
    _add_list(check, "--task", metavar="TASK",
              help="tasks (--task a b, or repeated; default: every task of the baseline, with --update the embedded "
                   "MLP tasks; with --method too, an update adds the tasks named for those methods)")
    check.add_argument("--quiet", action="store_true", help="no progress bars")
    check.add_argument("--update", action="store_true",
                       help="measure the configuration and rewrite the baseline (with --method or --task: extend "
                            "it, replacing only what was measured)")
    check.add_argument("--seeds", type=positive_whole, default=None,
                       help="with --update: number of seeds (default 10); in a check: only the baseline's first N "
                            "seeds (exactly where the baseline's environment matches; elsewhere as on another CPU "
                            "kind)")
    _add_list(check, "--budget", metavar="[METHOD=]EPOCHS",
              help="with --update: the budget of every method, or of one (--budget sgd=10 de=20, or repeated; "
                   "default: each method's check_budget); stored in the baseline")
    _add_list(check, "--set", dest="settings", metavar="[METHOD.]KEY=VALUE",
              help="with --update: settings of every method, or of one (--set lr=0.01 de.members=3, or repeated; "
                   "each setting once); stored in the baseline")
    return parser


def _add_rehearsal(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rehearse", action="store_true",
                        help="rehearse a competition task before paying for a GPU: its real model at its real size "
                             "on generated data of the official shapes (training and test rows, test blocks) and a "
                             "stand-in reference, no download; measures whether the method runs, its epochs' time and "
                             "its memory. Written under rehearsals/ and marked as a rehearsal, which submit, "
                             "export-submission, verify and check refuse (default tasks: the five competition tasks)")
    parser.add_argument("--rehearse-rows", type=positive_whole, metavar="N",
                        help="with --rehearse: N training rows instead of the official count, and the official test "
                             "rows in the same proportion (at least one per test block)")


def _add_checkpoint_every(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint-every", type=duration_or_off, default=DEFAULT_EVERY_SECONDS, metavar="TIME",
                        help=f"write each run's checkpoint this often (30s, 5m, 1h; default "
                             f"{DEFAULT_EVERY_SECONDS / 60:g}m), and when SIGTERM or Ctrl-C stops it: the same command "
                             "then resumes it, with the predictions of an uninterrupted run bit for bit on the same "
                             "machine (docs/running.md); off: none (a stopped run starts again)")


def _add_cache(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache", type=Path, default=None,
                        help="folder for fetched competition data (default: $BDL_BENCH_CACHE, else ~/.cache/bdl-bench)")




def main(argv: list[str] | None = None) -> int:
    """The command line's one error boundary: every failure ends as one line on stderr and an exit code
    (:mod:`bench.errors`); ``--debug`` anywhere in ``argv`` (or ``BDL_BENCH_DEBUG=1``) lets it raise instead.
    Any failure after Ctrl-C arrived (:func:`bench.interrupts.interrupt_arrived`: a library that caught the interrupt
    in the middle of an import fails later in its own way) is reported as the interrupt (exit 130; 143 for SIGTERM,
    which stops a command as Ctrl-C does)."""
    with interrupts.command():
        try:
            code = _bounded(argv)
        finally:  # what a user's module started as this process imported it ends with the command, named
            descendants.end_started_by_imports("at the end of the command")
        return EXIT_TERMINATED if interrupts.termination_arrived() and code == EXIT_INTERRUPTED else code


def _bounded(argv: list[str] | None) -> int:
    """:func:`main`'s boundary."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command_line = " ".join([_program(), *map(shlex.quote, argv)])
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    parsed = argparse.Namespace(command=None)
    try:
        try:
            code = _dispatch(argv, command_line, debug, parsed)
        except SystemExit:  # argparse's --help, --version or error: what it printed is flushed here
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # a closed pipe is met here, inside the boundary, rather than at the interpreter's exit
        return code
    except Exception as error:
        if closed_pipe(error):
            return EXIT_CLOSED_PIPE
        if interrupts.interrupt_arrived():
            print(interrupted_line(parsed.command), file=sys.stderr)
            return EXIT_INTERRUPTED
        if debug:
            raise
        try:
            code, line = describe_failure(error)
        except MemoryError:  # too little left even to name the failure (an import it needs)
            code, line = EXIT_ENVIRONMENT, "out of memory; use a machine with more memory or raise its limit"
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


def _subparser(parser: argparse.ArgumentParser, name: str) -> OneLineParser:
    """The parser of subcommand ``name``."""
    return next(action.choices[name] for action in parser._actions if isinstance(action, argparse._SubParsersAction))


def _started() -> bool:
    """Loads PyTorch, which every command needs and the parser does not (``--version`` and ``--help`` answer without
    it): where memory is too short for it, one line (exit 3) rather than an abort (:func:`bench.loading.load_torch`).
    False, its line said, when Ctrl-C arrived during the seconds it takes: what a library that caught the interrupt
    left half-imported is unusable."""
    try:
        load_torch()
    except KeyboardInterrupt:
        pass
    except Exception:
        if not interrupts.interrupt_arrived():
            raise
    else:
        if not interrupts.interrupt_arrived():
            return True
    print(f"error: {interrupts.stopped()} while starting; nothing was done", file=sys.stderr)
    return False


def _dispatch(argv: list[str], command_line: str, debug: bool, parsed: argparse.Namespace) -> int:
    """Parses ``argv`` (into ``parsed``, which says the command to an interrupt's line) and runs its command."""
    parser = build_parser(_program())
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help", "--version"):
        first = argv[0].split("=", 1)[0]
        if _subparser(parser, "run").unknown_options([argv[0]]) and sibling_hint(parser, [first]):
            # `-V`, `--vers`: meant for python -m bench itself, not for the run it would otherwise be taken for
            parser.error(f"unrecognized arguments: {argv[0]}{sibling_hint(parser, [first])}")
        argv = ["run", *argv]
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
    if not _started():
        return interrupts.stopped_code()
    if args.command in ("run", "check", "verify", "submit"):  # they train in this process (sweep sets each run's own)
        _set_threads(args.threads or DEFAULT_THREADS)
    # Each command is its module of bench.commands (export-submission: export_submission), imported only when it runs:
    # the imports it needs (the methods, the tasks' data, the leaderboard, tabulate) are paid by that command alone.
    return importlib.import_module(f"bench.commands.{args.command.replace('-', '_')}").command(args)
