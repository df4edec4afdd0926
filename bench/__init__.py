"""bdl-bench: how close does an approximate inference method, under a fixed epoch budget, get to HMC?"""

__version__ = "0.3.0.dev0"
"""The one place the version is set (pyproject.toml reads it; CITATION.cff and CHANGELOG.md name it, a test keeps
them in step). Between releases it is the next release's ``.devN``: records of unreleased code never carry a
released version's name."""
