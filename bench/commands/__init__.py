"""The commands of ``python -m bench``, one module each with its ``command(args) -> int``, imported by
:mod:`bench.cli`'s dispatch only when its command runs; what several commands share is in
:mod:`bench.commands.common`, and here what the boundary in :mod:`bench.cli` shares with them (the threads' default,
the line an interrupted command ends with)."""

from bench import interrupts

DEFAULT_THREADS = 1
"""torch's threads in every command that trains, whatever OMP_NUM_THREADS says: on small models more threads spin
rather than help, many times slower on a busy machine."""


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

RESUMABLE = {
    "run": "finished runs are complete; the interrupted one's progress is kept in {path}: run the same command again "
           "to continue it",
    "sweep": "finished runs are complete; {count} unfinished run(s) kept their progress ({path}{more}): run the same "
             "command again to resume the sweep, and they continue where they stopped",
}
"""What an interrupted ``run`` or ``sweep`` left when its stopped runs wrote their checkpoints (:mod:`bench.checkpoint`)."""


def interrupted_line(command: str | None, kept: list | None = None) -> str:
    """The one line of a command interrupted by Ctrl-C or terminated by SIGTERM, naming the checkpoints its stopped
    runs wrote (:mod:`bench.checkpoint`): ``kept`` (a sweep's, found in its runs' folders), else the one this process
    wrote."""
    from bench.checkpoint import kept_on_stop, restarts
    from bench.errors import terminal_text

    kept = list(kept or ([] if kept_on_stop() is None else [kept_on_stop()]))
    left = RESUMABLE[command].format(path=terminal_text(kept[0]), count=len(kept),
                                     more=f" and {len(kept) - 1} more" if len(kept) > 1 else "") \
        if kept and command in RESUMABLE else INTERRUPTED.get(command)
    if not kept and restarts() is not None and command == "run":
        left += (f"; method {terminal_text(repr(restarts()))} keeps no checkpoint (it does not declare resumable = "
                 "True, docs/running.md), so the same command starts it again")
    return f"error: {interrupts.stopped()}" \
        + (f"; {left}" if left else "")
