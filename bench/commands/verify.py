"""``verify``: re-execute finished runs under the meter and compare them with their records."""

from __future__ import annotations

import sys

from bench.budget import check_planned_epochs
from bench.commands.common import LINE_CHARS
from bench.commands.reexecutions import Reexecutions, log_path
from bench.errors import EXIT_BAD_INPUT, EXIT_METHOD, MachineRefused, describe_failure, terminal_text
from bench.progress import Progress


def command(args) -> int:
    from bench.executors import Isolations
    from bench.verify import planned_epochs, verify_many
    from leaderboard.submission import run_folders

    folders = run_folders(args.paths)
    check_planned_epochs(planned_epochs(folders, args.method, damaged_count_nothing=True), args.max_epochs,
                         f"verifying {len(folders)} run(s)")
    counts = {"failures": 0, "refused": 0}
    # Each folder is its own verdict: a record refused (damaged, another task or reference, a budget its method's rule
    # refuses) or a re-execution that fails (a method that is not bdl-bench's in its own process, exit 4; a built-in
    # one diverging on the record's settings) is that folder's line on stderr, and the other folders are still verified.
    # The machine's refusals (a full disk) stop the command.
    with Isolations(args.threads) as isolations, Progress(len(folders), args.quiet, "verify") as progress, \
            Reexecutions(log_path(args.log), "verify", progress) as log:
        log.write(f"verifying {len(folders)} run folder(s), {args.threads} torch thread(s)")

        def refused(folder, error: BaseException) -> None:
            code, line = describe_failure(error)
            if args.debug or isinstance(error, MachineRefused) or code not in (EXIT_METHOD, EXIT_BAD_INPUT):
                raise error
            named = line if line.startswith(terminal_text(folder)) else f"{terminal_text(folder)}: {line}"
            progress.say(f"error: {named}", sys.stderr)
            log.write(f"error: {named}")
            progress.finished(folder.name, failed=True)
            counts["failures"] += code == EXIT_METHOD
            counts["refused"] += code == EXIT_BAD_INPUT

        def decided(result) -> None:
            progress.say(terminal_text(result.line(), LINE_CHARS), sys.stdout)
            log.write(result.line())
            progress.finished(result.folder.name, failed=not result.passed)

        results = verify_many(folders, args.cache, args.method, isolate=not args.debug, isolations=isolations,
                              on_refused=refused, on_verdict=decided, on_reexecution=log)
        failures, refused_count = counts["failures"], counts["refused"]
        mismatched = sum(not r.passed for r in results)
        summary = (f"{len(results) - mismatched} of {len(folders)} runs verified"
                   + (f"; {refused_count} refused or failed to re-execute (each named on stderr)" if refused_count
                      else "")
                   + (f"; {failures} could not be re-executed, their method failed (each named on stderr)" if failures
                      else ""))
        log.write(summary)
    print(summary)
    return EXIT_METHOD if failures else EXIT_BAD_INPUT if refused_count else 1 if mismatched else 0
