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
