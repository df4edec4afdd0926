"""Every relative link of the README and docs/ reaches a file of the repository, and every ``#anchor`` a heading of
the file it names (as GitHub writes a heading's anchor), so that moving text between the reference docs and the lab
notebook cannot leave a reader at a dead link."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, everything but letters, digits, spaces, hyphens and underscores
    dropped, spaces made hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text())
    seen: dict[str, int] = {}
    names = set()
    for line in text.splitlines():
        match = re.match(r"#{1,6} (.+)", line)
        if match:
            name = anchor(re.sub(r"[`*]", "", match[1]))
            names.add(name if name not in seen else f"{name}-{seen[name]}")
            seen[name] = seen.get(name, 0) + 1
    return names


def links(path: Path) -> list[str]:
    return [target for target in _LINK.findall(_FENCE.sub("", path.read_text()))
            if not re.match(r"[a-z]+:", target)]


def test_anchor_is_githubs():
    assert anchor("2026-11-25 and 26: the figures of docs/speed.md (output not kept)") == \
        "2026-11-25-and-26-the-figures-of-docsspeedmd-output-not-kept"
    assert anchor("Settings: Config, BOUNDS and TASK_DEFAULTS") == "settings-config-bounds-and-task_defaults"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_its_file_and_heading(path):
    dead = []
    for target in links(path):
        file_part, _, fragment = target.partition("#")
        linked = path if not file_part else (path.parent / file_part).resolve()
        if not linked.exists():
            dead.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            dead.append(f"{target}: no heading with that anchor")
    assert dead == []
