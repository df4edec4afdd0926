"""``tasks``: list the tasks, their settings and their references' status."""

from __future__ import annotations

from bench.commands.common import shown_setting, wrapped
from bench.errors import terminal_text


def command(args) -> int:
    from bench.download import resolve_cache
    from bench.tasks import COMPETITION, get_task, task_names
    from bench.tasks.competition import SPECS, manifest_trust, read_manifest
    from bench.trust import MEANING, OURS, record_levels, summary
    from reference.store import reference_status

    rows, trusted = [], {}
    for name in task_names():
        task = get_task(name)
        d = task.describe()
        rows.append({"task": name, "version": task.version, "kind": task.kind, "train": task.n_train,
                     "test": task.n_test, "model": task.architecture, "parameters": task.n_parameters(),
                     "likelihood": d["likelihood"]["name"], "prior variance": shown_setting(task.prior_variance),
                     "reference": reference_status(task)})
    for name in COMPETITION:
        spec, manifest = SPECS[name], read_manifest(name, args.cache)
        task = get_task(name, args.cache) if manifest else None
        if manifest:
            trusted[name] = manifest_trust(manifest)
        rows.append({"task": name, "version": spec.version, "kind": spec.likelihood.kind,
                     "train": task.n_train if task else "-", "test": task.n_test if task else "-",
                     "model": spec.architecture.split(" (")[0],
                     "parameters": sum(p.numel() for p in spec.model_factory().parameters()),
                     "likelihood": spec.likelihood.describe()["name"],
                     "prior variance": shown_setting(spec.prior_variance),
                     "reference": f"{manifest['reference']['trust']}, {reference_status(task)}" if task
                     else "not fetched"})
    print(wrapped(rows, {"model": 40}))
    details = []
    for name in task_names():
        task = get_task(name)
        d = task.describe()
        details.append({"task": name, "what": task.description,
                        "test blocks": ", ".join(f"{block} (rows {start}-{stop})" for block, start, stop
                                                 in d["test_blocks"]) or "one block",
                        "data": _flat_settings(d["data"])})
    details += [{"task": name, "what": SPECS[name].description, "test blocks": "", "data": "fetched by `fetch`"}
                for name in COMPETITION]
    print()
    print(wrapped(details, {"what": 40, "test blocks": 30, "data": 50}))
    print(f"\ncompetition tasks are read from the cache {terminal_text(resolve_cache(args.cache))}")
    # How each file is trusted (bench.trust): the installed tasks' references are ours, a fetched task's files each
    # as its fetch checked them.
    print(f"trust: the installed tasks' references are {OURS}'s ({MEANING[OURS]})")
    for name, trust in trusted.items():
        print(f"  {name}: {summary(trust)}")
    for level in dict.fromkeys(level for trust in trusted.values() for level in record_levels(trust)):
        print(f"  {level}: {MEANING[level]}")
    return 0


def _flat_settings(values: dict, prefix: str = "") -> str:
    """``{"a": 1, "b": {"c": 2}}`` -> ``"a=1, b.c=2"``: nested settings on one readable line."""
    return ", ".join(_flat_settings(value, f"{prefix}{key}.") if isinstance(value, dict) and value
                     else f"{prefix}{key}={shown_setting(value)}" for key, value in values.items())
