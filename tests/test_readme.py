"""The README's set-up: exactly two commands, the first making and using a virtual environment (a fresh Debian or
Ubuntu refuses pip outside one) and running the main job, the second running the tests; CI runs both word for
word, so what CI installs is what the README says."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _set_up_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set-up on a fresh machine\n", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def test_the_readme_holds_two_set_up_commands_the_first_in_a_virtual_environment():
    install, tests = _set_up_commands()
    assert "\n" not in install and "\n" not in tests, "one line each, to copy and paste"
    steps = install.split(" && ")
    assert steps[:2] == ["python3 -m venv .venv", ". .venv/bin/activate"], "a venv is made and used before pip"
    assert any(step.startswith("pip install torch==") for step in steps) and steps[-1].startswith("python -m bench ")
    assert tests == ". .venv/bin/activate && python -m pytest"


def test_ci_runs_the_readme_s_two_commands_word_for_word():
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    install, tests = _set_up_commands()
    assert install in lines and tests in lines and lines.index(install) < lines.index(tests)
    before = lines[:lines.index(install)]
    assert not [line for line in before if re.search(r"\bpip\b", line) and not line.lstrip().startswith("#")], \
        "nothing is installed with pip before the README's command"


def test_the_readme_names_the_quick_tier_beside_the_whole_suite_and_pytest_knows_its_marker(request):
    """The quick tier is prose with its command inline (the two set-up commands stay the section's only blocks)."""
    import tomllib

    from tests.conftest import QUICK_TIER

    section = (ROOT / "README.md").read_text().split("## Set-up on a fresh machine\n", 1)[1].split("\n## ", 1)[0]
    assert '`python -m pytest -m "not slow"`' in section
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(marker.startswith("slow:") for marker in markers)
    assert all((ROOT / path).exists() for path in QUICK_TIER), "the quick tier names tests that exist"
    assert request.node.get_closest_marker("slow"), "a test outside the quick tier (this one) is marked slow"
