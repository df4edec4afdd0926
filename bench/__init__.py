"""bdl-bench: how close does an approximate inference method, under a fixed epoch budget, get to HMC?"""

__version__ = "0.3.0.dev0"
"""The one place the version is set (pyproject.toml reads it; CHANGELOG.md names it, a test keeps them in step).
Between releases it is the next release's ``.devN``: records of unreleased code never carry a released version's
name, while CITATION.cff names the last release, what a clone should cite."""
