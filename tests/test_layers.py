"""The layers of pyproject.toml's import-linter contracts cover every module, and hold (docs/design.md)."""

import importlib
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
PACKAGES = CONFIG["root_packages"]


def layered_modules() -> list[str]:
    layers = next(c for c in CONFIG["contracts"] if c["type"] == "layers")["layers"]
    return [name.strip() for layer in layers for name in layer.replace("|", ":").split(":")]


def package_modules() -> list[str]:
    """Every module of the packages, a package's ``__init__`` named by the package."""
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_lies_in_exactly_one_layer():
    """A module no layer names would escape the contract: each new module must be placed (docs/design.md says
    where). The packages' own ``__init__`` modules (``bench``, ``leaderboard``) are the only ones left out, and
    ``approximators`` and ``reference`` are layers whole."""
    layered = layered_modules()
    assert len(layered) == len(set(layered))
    covering = {module: [name for name in layered if module == name or module.startswith(name + ".")]
                for module in package_modules()}
    assert {module for module, names in covering.items() if len(names) != 1} == {"bench", "leaderboard"}


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter is not installed")
def test_the_layers_and_the_absence_of_circles_hold():
    done = subprocess.run(["lint-imports"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]


def test_every_name_users_are_told_to_import_still_imports():
    """What docs/writing-a-method.md and the example method import from bdl-bench, and the public API's ``__all__``,
    survive any move between layers."""
    import re

    texts = [(ROOT / "docs" / "writing-a-method.md").read_text(),
             *(path.read_text() for path in sorted((ROOT / "examples").rglob("*.py")))]
    imported = {(module, name.strip()) for text in texts
                for module, names in re.findall(r"^\s*from ((?:bench|approximators|reference|leaderboard)[\w.]*) "
                                                r"import \(?([\w,\s]+?)\)?$", text, re.MULTILINE)
                for name in names.split(",") if name.strip()}
    api = importlib.import_module("bench.api")
    imported |= {("bench.api", name) for name in api.__all__}
    assert {("bench.api", "make_task"), ("bench.api", "ParameterLayout")} <= imported
    missing = [f"{module}.{name}" for module, name in sorted(imported)
               if not hasattr(importlib.import_module(module), name)]
    assert missing == []
