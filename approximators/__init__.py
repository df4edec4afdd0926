"""Approximate inference methods, one module each, registered by their command-line name.

A method outside this repository runs without editing it: ``--method package.module:ClassName``, or by the
name an installed package registers in the ``bdl_bench.methods`` entry point group."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import re
import typing

from approximators.anchored import AnchoredEnsemble
from approximators.csgmcmc import CyclicalSGMCMC
from approximators.hmc import BudgetedHMC
from approximators.base import Approximator, Problem, resolve_config
from approximators.laplace import Laplace
from approximators.map import MAP, DeepEnsemble
from approximators.mc_dropout import MCDropout
from approximators.mfvi import MFVI
from approximators.sae import SequentialAnchoredEnsemble
from approximators.sgld import StochasticGradientLangevin
from approximators.swag import SWAG, MultiSWAG, SWAGDiagonal
from approximators.vogn import VOGN
from approximators.boundary import exit_call, guarded
from approximators.registry import METHODS
from bench import descendants
from bench.errors import COMMAND_LINE, ConfigError, Spelling, text_of

METHODS.update({m.name: m for m in (
    MAP, DeepEnsemble, AnchoredEnsemble, SequentialAnchoredEnsemble, SWAG, SWAGDiagonal, MultiSWAG,
    StochasticGradientLangevin, CyclicalSGMCMC, VOGN, MFVI, MCDropout, Laplace, BudgetedHMC)})


METHOD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
"""A method's name: it names each run's folder, so never a path (``..``), a hidden file or a terminal escape."""

SETTING_TYPES = (int, float, bool, str)
"""The types a setting may have: what ``--set key=value`` parses."""

ENTRY_POINT_GROUP = "bdl_bench.methods"
"""The entry point group through which an installed package registers its methods (``name = "pkg.mod:Class"``)."""


def _checked(method, origin: str) -> type[Approximator]:
    """``method`` if it is an approximator class the harness can run, else one :class:`ConfigError` line."""
    if not (isinstance(method, type) and issubclass(method, Approximator)):
        raise ConfigError(f"{origin} is not a subclass of approximators.Approximator")
    missing = [attribute for attribute in ("name", "summary", "Config") if not hasattr(method, attribute)]
    if missing or not dataclasses.is_dataclass(method.Config):
        raise ConfigError(f"{origin}: a method class needs a name, a summary and a dataclass Config "
                          f"({', '.join(missing) or 'Config is not a dataclass'})")
    if not (isinstance(method.name, str) and METHOD_NAME.fullmatch(method.name)):
        raise ConfigError(f"{origin}: the method's name must be 1 to 100 letters, digits, '.', '_', '+' or '-', "
                          f"starting with a letter or digit (it names a folder of every run); got {method.name!r}")
    try:
        hints = typing.get_type_hints(method.Config)
    except Exception as error:  # an annotation that does not evaluate: the method's own code
        raise ConfigError(f"{origin}: its Config's annotations do not evaluate ({type(error).__name__}: {error})") \
            from None
    for field in dataclasses.fields(method.Config):
        if hints.get(field.name) not in SETTING_TYPES:
            raise ConfigError(f"{origin}: setting {field.name!r} has type {hints.get(field.name)!r}, which --set "
                              f"cannot parse; a setting is an int, float, bool or str")
    return method


def load_method(spec: str, spelling: Spelling = COMMAND_LINE) -> type[Approximator]:
    """The class named by ``package.module:ClassName`` (imported now; any failure is one line, naming ``spec`` as
    ``spelling`` does: ``--method spec`` or ``method='spec'``)."""
    given = spelling.given("method", spec)
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"{given}: write a method outside bdl-bench as package.module:ClassName")
    def failed(error: BaseException) -> str:  # the module's own code failing at import: its failure, in one line
        what = f"exited ({exit_call(error)})" if isinstance(error, SystemExit) else \
            f"failed ({type(error).__name__}: {text_of(error)})"
        return f"{given}: importing {module_name} {what}"

    # What the import starts is the module's: it ends with this process's part (bench.descendants.importing).
    with guarded(spec, "import", failed), descendants.importing(module_name):
        try:
            target = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and (module_name + ".").startswith(error.name + "."):  # the module is absent
                raise ConfigError(f"{given}: cannot import {module_name} ({error})") from None
            raise
    with guarded(spec, "class", lambda error: f"{given}: reading {attribute} from {module_name} failed "
                                              f"({type(error).__name__}: {text_of(error)})"):
        for part in attribute.split("."):
            if not hasattr(target, part):
                raise ConfigError(f"{given}: {module_name} has no {attribute}")
            target = getattr(target, part)
        return _checked(target, spec)


def installed_methods() -> dict[str, importlib.metadata.EntryPoint]:
    """Methods that installed packages register in :data:`ENTRY_POINT_GROUP`, by name (a built-in name wins)."""
    return {entry.name: entry for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
            if entry.name not in METHODS}


def get_method(name: str, spelling: Spelling = COMMAND_LINE) -> type[Approximator]:
    """A method by its name: a built-in one, one an installed package registers, or ``package.module:ClassName``
    (``spelling``: how a failure names it)."""
    if name in METHODS:
        return METHODS[name]
    if ":" in name:
        method = load_method(name, spelling)
        if method.name in METHODS:
            raise ConfigError(f"{spelling.given('method', name)}: its name {method.name!r} is a built-in method's; "
                              "give it its own")
        return method
    entry = installed_methods().get(name)
    if entry is None:
        plugins = sorted(installed_methods())
        raise ConfigError(f"unknown method {name!r}; known methods: {', '.join([*METHODS, *plugins])} "
                          f"(or package.module:ClassName)")
    method = load_method(entry.value, spelling)
    if method.name != name:
        raise ConfigError(f"the {ENTRY_POINT_GROUP} entry point {name!r} loads {entry.value}, whose name is "
                          f"{method.name!r}; the two must match")
    return method


def resolve_method(method: "str | type[Approximator]", spelling: Spelling = COMMAND_LINE) -> type[Approximator]:
    """A method given by name (as :func:`get_method` takes it) or as a class (a notebook's own subclass of
    :class:`Approximator`, checked like a plugin; it may not take a built-in method's name)."""
    if isinstance(method, str):
        return get_method(method, spelling)
    method = _checked(method, repr(method))
    if METHODS.get(method.name, method) is not method:
        raise ConfigError(f"{method.__qualname__}: its name {method.name!r} is a built-in method's; give it its own")
    return method


def method_source(method: type[Approximator]) -> str | None:
    """How to load ``method`` again (``package.module:ClassName``), or None for a built-in one."""
    if METHODS.get(method.name) is method:
        return None
    return f"{method.__module__}:{method.__qualname__}"


__all__ = ["ENTRY_POINT_GROUP", "METHODS", "Approximator", "Problem", "get_method", "installed_methods",
           "load_method", "method_source", "resolve_config", "resolve_method"]
