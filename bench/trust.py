"""How far a file a run used is trusted: the one rule, and the words every command says it in.

A competition task's files (its data and its reference) are downloaded by ``fetch`` and each checked by its sha256
(:mod:`bench.download`). How that sha256 was trusted is the file's trust level:

- ``official``: it matched the organisers' published sha256 (``reference/official_checksums.json``);
- ``pinned``: none is published; it matched one the user supplied (``fetch --expect-sha256`` or ``--checksums``,
  say a lab's checksums of its shared mirror);
- ``first use``: none is published or supplied; it was recorded at the first download and only later downloads are
  checked against it (trust on first use): nothing says the first download was the genuine file.

The files of an installed task (``bdl-bench``) are bdl-bench's own: the package's references, each checked against its
registry. A run record written before records said how their files were trusted says ``unknown``.

Every command that shows a run or a task shows these levels (``tasks``, a run's record, ``verify``, the board,
``export-submission``); the board marks an entry scored against a file no one verified (:data:`UNVERIFIED`).
"""

from __future__ import annotations

OFFICIAL = "official"
PINNED = "pinned"
FIRST_USE = "first use"
OURS = "bdl-bench"
UNKNOWN = "unknown"

FETCHED_LEVELS = (OFFICIAL, PINNED, FIRST_USE)
"""How a fetched file (a competition task's) can be trusted, as its manifest and the fetch say it."""

RECORDED_LEVELS = (*FETCHED_LEVELS, OURS)
"""The levels a run record's ``trust`` field holds."""

UNVERIFIED = (FIRST_USE, UNKNOWN)
"""The levels no checksum of anyone else's vouches for: the board marks an entry scored against such a file."""

MEANING = {
    OFFICIAL: "matches the organisers' published sha256",
    PINNED: "matches the sha256 you supplied (fetch --expect-sha256 or --checksums)",
    FIRST_USE: "no published or supplied sha256: recorded at first download, unverified (trust on first use)",
    OURS: "bdl-bench's own reference, checked against its registry",
    UNKNOWN: "not recorded (a record written before records said how their files were trusted)",
}
"""What each level means, in the words every command uses."""

UNVERIFIED_MARK = "\u2021"
"""Follows the name of a board's entry scored against an :data:`UNVERIFIED` file (a note says why)."""

UNVERIFIED_NOTE = (f"{UNVERIFIED_MARK} scored against a file trusted on first use, or one whose trust was not "
                   "recorded: no published or supplied sha256 vouches for the reference or data it used; `python -m "
                   "bench fetch --expect-sha256 FILE=SHA256` (or --checksums) pins a file to a sha256 you trust")
"""The board's note on an entry scored against an :data:`UNVERIFIED` file."""


def unverified(level: str) -> bool:
    """Whether no checksum of anyone else's vouches for a file of this level."""
    return level in UNVERIFIED


def weakest(levels) -> str:
    """The least trusted of ``levels`` (:data:`UNKNOWN` for none): what a set of files is trusted as a whole."""
    order = (UNKNOWN, FIRST_USE, PINNED, OFFICIAL, OURS)
    levels = list(levels)
    return min(levels, key=order.index) if levels else UNKNOWN


def record_levels(trust: dict | None) -> list[str]:
    """Every level a run record's ``trust`` field holds (the reference's, then each data file's); [:data:`UNKNOWN`]
    for a record without one, or one not as a record holds it (a board's row read from a database anyone can edit)."""
    try:
        levels = [trust["reference"]["trust"], *(entry["trust"] for entry in trust["data"].values())]
    except (KeyError, TypeError, AttributeError):
        return [UNKNOWN]
    return [level if level in MEANING else UNKNOWN for level in levels]


def scored_unverified(trust: dict | None) -> bool:
    """Whether a run of this ``trust`` was scored against a file no checksum of anyone else's vouches for."""
    return any(unverified(level) for level in record_levels(trust))


def summary(trust: dict | None) -> str:
    """One phrase for a run's ``trust`` field: ``reference first use, data official (4 files)``; ``unknown`` for a
    record without one."""
    levels = record_levels(trust)
    if levels == [UNKNOWN]:
        return f"files of trust {UNKNOWN} ({MEANING[UNKNOWN]})"
    reference, data = levels[0], levels[1:]
    files = f"data {weakest(data)} ({len(data)} file{'s' * (len(data) != 1)})" if data else "no fetched data"
    return f"reference {reference}, {files}"
