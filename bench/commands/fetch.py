"""``fetch``: download a competition task's data and official reference, or check a mirror holds them."""

from __future__ import annotations

from bench.errors import ConfigError, terminal_text


def command(args) -> int:
    from functools import partial

    from tqdm.auto import tqdm

    from bench.download import resolve_cache
    from bench.fetch import describe_fetch, fetch_task, pins_of
    from bench.tasks import COMPETITION
    from bench.tasks.competition import DATA_URL, REFERENCE_URL, SPECS

    names = list(COMPETITION) if args.all else args.task
    unknown = [n for n in names if n not in COMPETITION]
    if unknown:
        raise ConfigError(f"not a competition task: {', '.join(unknown)}; fetch takes {', '.join(COMPETITION)}")
    if args.check_mirror:
        from bench import mirror

        if args.force or args.keep_downloads or args.expect_sha256 or args.checksums:
            raise ConfigError("--check-mirror downloads nothing; --force, --keep-downloads, --expect-sha256 and "
                              "--checksums do not apply to it")
        return mirror.report(names, args.data_url, args.reference_url, args.cache)
    pins = pins_of(args.expect_sha256, args.checksums)
    fetched_files = {remote.official_url for name in names for remote in SPECS[name].remotes()}
    stray = sorted(set(pins_of(args.expect_sha256)) - fetched_files)
    if stray:
        raise ConfigError(f"--expect-sha256 names {', '.join(stray)}, a file of no task fetched now "
                          f"({', '.join(names)}); fetch its task")
    progress = partial(tqdm, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
                       disable=True if args.quiet else None)
    for name in names:
        manifest, downloaded = fetch_task(name, args.cache, args.data_url or DATA_URL,
                                          args.reference_url or REFERENCE_URL, progress=progress,
                                          keep_downloads=args.keep_downloads, force=args.force, pins=pins)
        if not downloaded:
            print(f"{name}: already fetched and unchanged (every array's sha256 checked); --force fetches again")
            if any(url in pins for url in manifest["files"]):  # what the pins checked
                print(describe_fetch(manifest))
            continue
        shapes = ", ".join(f"{k} {tuple(v['shape'])}" for k, v in manifest["arrays"].items())
        print(f"{name}: fetched into {terminal_text(resolve_cache(args.cache) / 'tasks' / name)} ({shapes}; reference "
              f"{manifest['reference']['key']} {tuple(manifest['reference']['shape'])})")
        print(describe_fetch(manifest))
    return 0
