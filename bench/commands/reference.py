"""``reference generate`` samples an embedded task's HMC reference; ``reference diagnose`` recomputes its metadata."""

from __future__ import annotations

import sys

from bench.commands import interrupted_line
from bench.commands.common import wrapped
from bench.errors import EXIT_INTERRUPTED, BenchError, ConfigError, terminal_text


def command(args) -> int:
    if args.reference_command == "diagnose":
        return _diagnose(args)
    return _generate(args)


def _diagnose(args) -> int:
    """Every figure of each reference's metadata recomputed from its evidence: a table of its diagnostics against the
    gold standard, its noise floor estimated from 2, 4 and 8 parts, and one line per figure the metadata states
    otherwise (exit 1)."""
    from bench.tasks import get_task
    from reference import store
    from reference.settings import REFERENCE_SETTINGS

    names = args.tasks or list(REFERENCE_SETTINGS)
    unknown = [name for name in names if name not in REFERENCE_SETTINGS]
    if unknown:
        raise ConfigError(f"reference diagnose reads the embedded tasks' references ({', '.join(REFERENCE_SETTINGS)}); "
                          f"{', '.join(map(repr, unknown))} is not one of them")
    if args.folder is not None:
        names = _held(args.folder, names, given=bool(args.tasks))
    if args.update:
        for name in names:
            for line in store.restate(get_task(name), args.folder):
                print(f"{name}: rewrote {line}")
    diagnoses, refused = [], []
    for name in names:  # one reference that cannot be diagnosed does not hide the others
        try:
            diagnoses.append(store.diagnose(get_task(name), args.folder))
        except BenchError as error:
            refused.append(name)
            print(f"error: {name}: {error}", file=sys.stderr)
    rows, floors = [], []
    for found in diagnoses:
        gold = found.gold_standard
        rows.append({"task": found.task, "chains x draws": f"{len(found.summary['step_sizes'])} x "
                                                          f"{found.summary['kept_samples_per_chain']}",
                     "acceptance": f"{found.summary['acceptance_rate']:.3f}",
                     **{name: f"{gold[name]['value']:{'.0f' if 'ess' in name else '.4f'}} "
                              f"({'met' if gold[name]['met'] else 'short'}: "
                              f"{gold[name]['limit']})" for name in gold},
                     "figures agree": "yes" if not found.differences else f"NO ({len(found.differences)})"})
        parts, spread = found.summary["noise_floor_by_parts"], found.summary["noise_floor_spread"]["all"]
        for metric, value in found.summary["noise_floor"]["all"].items():
            floors.append({"task": found.task, "metric": metric, "noise floor": f"{value:.4g}",
                           "spread of an exact run": f"{spread[metric]:.2g}",
                           **{f"from {k} parts": (f"{1 - parts[k]['disagreement']:.4g}" if metric == "agreement"
                                                  else f"{parts[k][metric]:.4g}" if metric in parts[k] else "")
                              for k in parts}})
    print(wrapped(rows, {}))
    print()
    print(wrapped(floors, {}))
    for found in diagnoses:
        for line in found.differences:
            print(f"{found.task}: {line}")
    mismatched = [found.task for found in diagnoses if found.differences]
    print(f"\n{len(diagnoses) - len(mismatched)} of {len(names)} references' metadata recomputed from their evidence"
          + (f"; {', '.join(mismatched)} state figures their evidence does not give" if mismatched else "")
          + (f"; {', '.join(refused)} could not be diagnosed (each named on stderr)" if refused else ""))
    return 2 if refused else 1 if mismatched else 0


def _held(folder, names: list[str], given: bool) -> list[str]:
    """The tasks of ``names`` whose reference ``folder`` (``--folder``) holds: every one of them where the tasks were
    named, else those it holds. A folder that is not there, or holds none, is the user's input to fix (exit 2)."""
    if not folder.is_dir():
        raise BenchError(f"--folder {terminal_text(folder)}: {'not a folder' if folder.exists() else 'no such folder'}; "
                         "give the folder `python -m bench reference generate --out FOLDER` wrote")
    held = [name for name in names if (folder / f"{name}.json").is_file()]
    lacking = [name for name in names if name not in held]
    if (given and lacking) or not held:
        raise BenchError(f"--folder {terminal_text(folder)} holds no reference of {', '.join(lacking)} (no "
                         f"{lacking[0]}.json); `python -m bench reference generate --task {lacking[0]} --out "
                         f"{terminal_text(folder)}` writes one")
    return held


def _generate(args) -> int:
    from bench.records import check_writable
    from bench.runner import resolve_device
    from bench.sweep import check_executor
    from bench.tasks import get_task
    from reference import store
    from reference.generate import CHECKPOINTS, claimed_checkpoints, compare, generate
    from reference.settings import R_HAT_LIMIT, REFERENCE_SETTINGS

    if args.task not in REFERENCE_SETTINGS:
        raise ConfigError(f"reference generate samples the embedded tasks' references ({', '.join(REFERENCE_SETTINGS)}); "
                          f"{args.task!r} is not one of them (a competition task's reference is the official one, "
                          f"from `fetch`)")
    task = get_task(args.task)
    device = str(resolve_device(args.device))
    check_executor("local", args.workers, args.threads, None)
    folder = store.PACKAGE_DATA if args.install else args.out
    if (folder / f"{task.name}.npz").exists() and not args.force:
        raise BenchError(f"{folder / (task.name + '.npz')} already holds a reference of {task.name}; pass --force to "
                         f"replace it" + ("" if args.install else " or choose another --out"))
    check_writable(folder, force=True)  # before an hour of sampling, not after
    stray = sorted(path.name for path in args.checkpoints.glob(CHECKPOINTS))
    if stray and not args.restart and not any((args.checkpoints / task.name).glob(CHECKPOINTS)):
        # Chains moved into the folder itself would otherwise be passed over, and hours sampled again.
        raise ConfigError(f"{terminal_text(args.checkpoints)} holds chain checkpoints itself ({', '.join(stray[:3])}"
                          f"{', ...' if len(stray) > 3 else ''}); a task's are kept in its own folder below it: move "
                          f"them into {terminal_text(args.checkpoints / task.name)} to continue them, or pass --restart "
                          "to sample again")
    # The checkpoints stay until the reference is written: a failure anywhere before loses no sampling.
    try:
        with claimed_checkpoints(args.checkpoints / task.name, restart=args.restart):
            generated = generate(task, REFERENCE_SETTINGS[task.name], device=device,
                                 progress=None if not args.quiet else False, checkpoints=args.checkpoints,
                                 workers=args.workers, threads=args.threads)
            meta = generated.metadata
            rhat = meta["generation_check"]["max_split_rhat"]
            print(f"{task.name}: acceptance {meta['acceptance_rate']:.3f}, worst split R-hat {rhat:.4f} over every "
                  f"test point ({meta['diagnostics']['max_split_rhat']:.4f} over the evidence's), min bulk ESS "
                  f"{meta['diagnostics']['min_bulk_ess']:.0f}, {meta['compute_seconds']:.0f} s of sampling")
            print(f"noise floor: {meta['noise_floor']['all']}")
            if rhat > R_HAT_LIMIT:
                raise BenchError(f"worst split R-hat {rhat:.4f} exceeds {R_HAT_LIMIT}: not writing the reference; "
                                 "raise n_samples in reference/settings.py and run again (the chains continue from their checkpoints)")
            try:
                shipped = store.load_reference(task)
                print(f"against the shipped reference: {compare(task, generated.array, shipped.array)['all']}")
            except Exception as error:  # the shipped reference may legitimately be absent or stale here
                print(f"no valid shipped reference to compare with ({error})")
            entry = store.write_reference(folder, task.name, generated.key, generated.array, meta, generated.evidence)
            if args.install:
                store.register(task.name, entry)
    except KeyboardInterrupt:  # the checkpoints stay (the claim removes them only once the reference is written)
        kept = args.checkpoints / task.name
        if any(kept.glob(CHECKPOINTS)):
            print(f"{interrupted_line(None)}; each chain's progress is kept in {terminal_text(kept)} (at most a "
                  f"minute of sampling per chain is lost): run the same command again to continue", file=sys.stderr)
        else:
            print(f"{interrupted_line(None)}; no chain had saved its progress yet (the first checkpoint comes within "
                  "a minute), so nothing is kept: run the same command again to start", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"wrote {terminal_text(folder / (task.name + '.npz'))} (sha256 {entry['npz_sha256']})"
          + (" and updated the registry" if args.install else ""))
    return 0
