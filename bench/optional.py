"""Optional dependencies: the one way bdl-bench and its scripts import a package it can run without (Ray for
``--executor ray``, JAX and NumPyro for the NUTS cross-checks, pandas for :func:`bench.api.dataframe`, POT for the
Wasserstein timing), so that a package that is missing, or installed but failing to import (half installed, built
for another Python or NumPy, a version that does not match its own dependencies), is one line naming it and how to
repair it, never a traceback or an internal error.

- missing: :class:`MissingDependency`, a :class:`~bench.errors.ConfigError` (exit 2): what was asked for needs an
  extra the user did not install;
- broken: :class:`BrokenDependency`, a :class:`~bench.errors.MachineRefused` (exit 3): the installation is at fault,
  whatever its import raised (an ``ImportError`` from inside the package, an ``AttributeError``, a ``RuntimeError``,
  even a ``SystemExit``), and reinstalling it repairs it.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType

from bench.errors import ConfigError, MachineRefused, out_of_memory, text_of


@dataclass(frozen=True)
class Extra:
    """What installs a module: its distribution and the ``pip install`` that brings it."""

    distribution: str
    install: str


EXTRAS = {
    "ray": Extra("ray", "pip install -e '.[ray]'"),
    "jax": Extra("jax", "pip install -e '.[crosscheck]'"),
    "jaxlib": Extra("jaxlib", "pip install -e '.[crosscheck]'"),
    "numpyro": Extra("numpyro", "pip install -e '.[crosscheck]'"),
    "pandas": Extra("pandas", "pip install -e '.[pandas]'"),
    "ot": Extra("POT", "pip install pot (or the test extra: pip install -e '.[test]')"),
}
"""Each optional module bdl-bench or a script imports, by its import name."""


class MissingDependency(ConfigError):
    """An optional package that is not installed (exit 2)."""


class BrokenDependency(MachineRefused):
    """An optional package that is installed but fails to import or start (exit 3)."""


def _extra(module: str) -> Extra:
    root = module.split(".")[0]
    return EXTRAS.get(root, Extra(root, f"pip install {root}"))


def _absent(module: str, error: BaseException) -> bool:
    """Whether ``error``, raised importing ``module``, says the package itself is not there (rather than something
    inside it failing: a dependency of its own missing is a broken installation)."""
    return isinstance(error, ModuleNotFoundError) and error.name is not None \
        and (module == error.name or module.startswith(error.name + "."))


def failure(module: str, purpose: str, error: BaseException,
            missing: str | None = None) -> ConfigError | MachineRefused:
    """The one-line error for ``purpose`` (``--executor ray``, ``sampling with NUTS``), which needs ``module``, whose
    import raised ``error``: :class:`MissingDependency` if the package is not installed (its line ``missing`` where
    given), else :class:`BrokenDependency` naming what the import raised and the reinstall that repairs it."""
    extra = _extra(module)
    if _absent(module, error):
        return MissingDependency(missing or f"{purpose} needs {extra.distribution}, which is not installed here: "
                                            f"{extra.install}")
    detail = " ".join(text_of(error).split())[:200]
    reinstall = f"pip install --force-reinstall --no-deps {extra.distribution}, or {extra.install}"
    return BrokenDependency(f"{purpose} needs {extra.distribution}, which is installed but fails to import or start here "
                            f"({type(error).__name__}{': ' + detail if detail else ''}): a broken or mismatched "
                            f"installation; reinstall it: {reinstall}")


def load(module: str, purpose: str, missing: str | None = None) -> ModuleType:
    """``module`` imported, or the one line of :func:`failure` (whatever its import raised but Ctrl-C)."""
    try:
        return importlib.import_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - an import may raise anything, SystemExit included
        if out_of_memory(error):  # the machine's refusal, said as such (exit 3), not the package's fault
            raise
        raise failure(module, purpose, error, missing) from None


def installed(module: str) -> bool:
    """Whether ``module`` is there to import (found, whether or not its import works); never raises."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing or broken, or a module without a spec
        return False
