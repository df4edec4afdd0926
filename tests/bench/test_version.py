"""One version, named alike everywhere: the package's, the installed distribution's, CITATION.cff's and the
changelog's heading for it."""

import importlib.metadata
import re
from pathlib import Path

import bench

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_one_everywhere():
    version = bench.__version__
    assert importlib.metadata.version("bdl-bench") == version, "reinstall: pyproject.toml reads bench.__version__"
    cited = re.search(r"^version: (\S+)$", (ROOT / "CITATION.cff").read_text(), flags=re.M)
    assert cited and cited.group(1) == version
    heading = f"## Unreleased ({version})" if ".dev" in version else f"## {version}"
    assert heading in (ROOT / "CHANGELOG.md").read_text().splitlines()


def test_a_release_is_dated_alike_in_the_citation_and_the_changelog():
    """A release (not ``.dev``) names its day in CITATION.cff, twice (the software's and the preferred citation's),
    and under its CHANGELOG heading; the preferred citation names the version."""
    version = bench.__version__
    citation = (ROOT / "CITATION.cff").read_text()
    if ".dev" in version:
        assert "date-released" not in citation, "an unreleased version has no release date"
        return
    dates = re.findall(r"^\s*date-released: (\d{4}-\d{2}-\d{2})$", citation, flags=re.M)
    versions = re.findall(r"^\s*version: (\S+)$", citation, flags=re.M)
    assert len(dates) == 2 and len(set(dates)) == 1 and versions == [version, version]
    lines = (ROOT / "CHANGELOG.md").read_text().splitlines()
    under = lines[lines.index(f"## {version}") + 2]
    assert under == f"Released {dates[0]}."
