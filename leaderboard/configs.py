"""What a configuration hash on the leaderboard stands for: the stored configuration's differences from the
method's defaults for the task, as this installation resolves them (``approximators.resolve_config``).

A method that cannot be resolved here (a user's plugin that is not installed, one that fails to load or to build
its defaults) is no error: its legend shows the whole stored configuration and says why. Stored method names are
looked up only as built-in or installed method names, never imported as ``package.module:ClassName``, so reading
the leaderboard runs no module that a stored text names.
"""

from __future__ import annotations

import dataclasses
import json


def method_defaults(method: str, task: str) -> dict | None:
    """The configuration ``method`` resolves to on ``task`` with no overrides, as a run record stores it (JSON
    values), or None where the method cannot be loaded or resolved here."""
    if ":" in method:  # a class path, not a method's name: importing it would run the module it names
        return None
    # Imported here, not at the top: approximators imports torch, which only a legend needs.
    from approximators import get_method, resolve_config
    from bench.records import as_recorded

    try:
        return as_recorded(dataclasses.asdict(resolve_config(get_method(method), task)))
    except Exception:  # a plugin is code outside bdl-bench: whatever it raises, the legend shows the stored config
        return None


def _value(value) -> str:
    return json.dumps(value, sort_keys=True)


def differences(method: str, task: str, config: dict, source: str) -> str:
    """One line saying what ``config`` (of a run of ``method`` on ``task``; ``source``: ``run`` or
    ``competition-zip``) changes from the method's defaults for the task."""
    if source == "competition-zip":
        return "a competition zip, whose configuration is not recorded"
    if not isinstance(config, dict):  # a database edited by hand: nothing to compare setting by setting
        return f"a stored configuration that is not a mapping of settings: {_value(config)}"
    defaults = method_defaults(method, task)
    if defaults is None:
        return (f"{method} cannot be loaded in this installation, so its defaults are unknown; its whole stored "
                f"configuration: {_value(config)}")
    changed = [f"{name} = {_value(config[name])} (default {_value(default)})" for name, default in defaults.items()
               if name in config and config[name] != default]
    unknown = [f"{name} = {_value(value)} (not a setting of {method} here)" for name, value in sorted(config.items())
               if name not in defaults]
    unrecorded = [f"{name} not recorded (default {_value(default)})" for name, default in defaults.items()
                  if name not in config]
    return "; ".join(changed + unknown + unrecorded) or f"{method}'s defaults for {task}"
