"""``verify``: re-execute finished runs under the meter and compare them with their records."""

from __future__ import annotations

import sys

from bench.budget import check_planned_epochs
from bench.commands.common import LINE_CHARS, claimed_epochs
from bench.errors import EXIT_METHOD, FailedElsewhere, MethodFailed, describe_failure, terminal_text
from bench.progress import Progress


def command(args) -> int:
    from bench.executors import Isolations
    from bench.verify import verify
    from leaderboard.submission import run_folders

    folders = run_folders(args.paths)
    check_planned_epochs(claimed_epochs(folders), args.max_epochs, f"verifying {len(folders)} run(s)")
    results, failures = [], 0
    # A method that is not bdl-bench's is re-executed in a process of its own (one for all its folders); its failure
    # (exit 4) is that folder's line, and the other folders are still verified.
    with Isolations(args.threads) as isolations, Progress(len(folders), args.quiet, "verify") as progress:
        for folder in folders:
            try:
                result = verify(folder, args.cache, args.method, isolate=not args.debug, isolations=isolations)
            except (MethodFailed, FailedElsewhere) as error:
                if args.debug or error.exit_code != EXIT_METHOD:
                    raise
                progress.say(f"error: {terminal_text(folder)}: {describe_failure(error)[1]}", sys.stderr)
                progress.finished(folder.name, failed=True)
                failures += 1
                continue
            progress.say(terminal_text(result.line(), LINE_CHARS), sys.stdout)
            progress.finished(folder.name, failed=not result.passed)
            results.append(result)
    mismatched = sum(not r.passed for r in results)
    print(f"{len(results) - mismatched} of {len(folders)} runs verified"
          + (f"; {failures} could not be re-executed, their method failed (each named on stderr)" if failures else ""))
    return EXIT_METHOD if failures else 1 if mismatched else 0
