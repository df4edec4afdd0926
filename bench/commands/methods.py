"""``methods``: list the methods and their settings (with ``--task``, the settings a run on it uses)."""

from __future__ import annotations

from bench.commands.common import SHOWN_DIGITS, shown_setting, wrapped
from bench.errors import BenchError, MethodFailed


def command(args) -> int:
    import dataclasses

    from approximators import METHODS, get_method, installed_methods, method_source, resolve_config
    from approximators.boundary import users_code
    from bench.tasks import get_task

    task = get_task(args.task, args.cache).name if args.task else None
    wanted = list(dict.fromkeys(args.methods or []))
    broken = []
    if wanted:
        loaded = [(method, method_source(method) or "built-in") for method in map(get_method, wanted)]
    else:
        loaded = [(method, "built-in") for method in METHODS.values()]
        for name, plugin in sorted(installed_methods().items()):
            try:
                loaded.append((get_method(name), f"plugin {plugin.value}"))
            except (BenchError, MethodFailed) as error:  # one broken plugin must not hide the others
                broken.append({"method": name, "source": f"plugin {plugin.value}", "what": f"cannot be loaded: {error}"})
    rows, settings = [], []
    for method, source in loaded:
        with users_code(method, "settings"):
            defaults = method.Config()
        config = resolve_config(method, task) if task else defaults
        # a method that changes the network approximates another posterior than the reference's
        with users_code(method, "architecture_change"):
            change = method.architecture_change(config)
        rows.append({"method": method.name, "source": source, "what": method.summary, "paper": method.paper,
                     "network": "task's" if change is None else f"changed: {change}"})
        settings.append({"method": method.name, "settings" if not task else f"settings on {task}": ", ".join(
            f"{field.name}={shown_setting(getattr(config, field.name))}" + ("*" if getattr(config, field.name)
                                                              != getattr(defaults, field.name) else "")
            for field in dataclasses.fields(config))})
    print(wrapped(rows + broken, {"what": 50, "network": 40, "paper": 30}))
    print()
    print(wrapped(settings, {"settings": 100, f"settings on {task}": 100}))
    print("\n* the task's own default for the method (`--set key=value` overrides any setting)" if task else
          "\nclass defaults; `methods --task T` shows the values a run on T uses, `--set key=value` overrides any")
    if any("=~" in text for row in settings for text in row.values()):
        print(f"~ rounded to {SHOWN_DIGITS} significant digits (runs use and record the exact value)")
    return 0
