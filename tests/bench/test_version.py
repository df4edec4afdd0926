"""One version, named alike everywhere: the package's and the installed distribution's, the changelog's heading for
it; and the release a clone should cite, named alike by CITATION.cff and the changelog with its day."""

import importlib.metadata
import re
from pathlib import Path

import bench

ROOT = Path(__file__).resolve().parents[2]


def _last_release() -> tuple[str, str]:
    """(version, YYYY-MM-DD) of CHANGELOG.md's newest release: its first heading that names a version alone, and the
    ``Released YYYY-MM-DD.`` line under it."""
    lines = (ROOT / "CHANGELOG.md").read_text().splitlines()
    number = next(i for i, line in enumerate(lines) if re.fullmatch(r"## \d+\.\d+\.\d+", line))
    released = re.fullmatch(r"Released (\d{4}-\d{2}-\d{2})\.", lines[number + 2])
    assert released, f"CHANGELOG.md: no 'Released YYYY-MM-DD.' under {lines[number]}"
    return lines[number][3:], released.group(1)


def test_the_version_is_one_everywhere():
    version = bench.__version__
    assert importlib.metadata.version("bdl-bench") == version, "reinstall: pyproject.toml reads bench.__version__"
    heading = f"## Unreleased ({version})" if ".dev" in version else f"## {version}"
    assert heading in (ROOT / "CHANGELOG.md").read_text().splitlines()


def test_the_citation_names_the_last_release_with_its_day():
    """CITATION.cff names what a clone should cite, the last release: its version and day, twice (the software's and
    the preferred citation's), as the changelog has them, whatever ``.dev`` version the package carries meanwhile;
    on a release, the package's own version."""
    version, day = _last_release()
    citation = (ROOT / "CITATION.cff").read_text()
    assert re.findall(r"^\s*version: (\S+)$", citation, flags=re.M) == [version, version]
    assert re.findall(r"^\s*date-released: (\S+)$", citation, flags=re.M) == [day, day]
    if ".dev" not in bench.__version__:
        assert bench.__version__ == version
    else:  # the next release's .dev, after the one cited
        next_release = bench.__version__.partition(".dev")[0]
        assert tuple(map(int, next_release.split("."))) > tuple(map(int, version.split(".")))


def test_the_readme_s_bibtex_is_the_citation_s_release():
    """The BibTeX in the README cites the release CITATION.cff names, with its version and year."""
    version, day = _last_release()
    readme = (ROOT / "README.md").read_text()
    entry = re.search(r"```bibtex\n(@software\{.*?\n\})\n```", readme, flags=re.S)
    assert entry, "README.md: no ```bibtex block"
    title = re.search(r'^title: "(.*)"$', (ROOT / "CITATION.cff").read_text(), flags=re.M).group(1)
    assert f"title = {{{{{title}}}}}" in entry.group(1)
    assert f"version = {{{version}}}" in entry.group(1) and f"year = {{{day[:4]}}}" in entry.group(1)
