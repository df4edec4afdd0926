"""How far two CPU kinds' runs of one configuration and seed drift apart, and what ``verify`` and the CI gate make of
it: the measurement behind ``bench.drift`` and the false-refusal, false-alarm and power tables of docs/leaderboard.md.

Two gate baselines (``python -m bench check --update``) of the same code, measured on different CPU kinds, hold every
method's metrics for the same seeds; the one measured here (``--here``, format 3) also holds them with another CPU
kind's kernels (``other_kernels``, :data:`bench.executors.OTHER_KERNELS`). The other one's runs (``--elsewhere``) are
honest runs made elsewhere, so

- **drift**: per configuration (method, task), the largest relative difference between the two CPU kinds over its
  seeds and compared metrics, the same in its seeds' standard deviations, and what the other kernels moved it here;
- **verify's false refusals**: each of the other CPU kind's runs is a record made elsewhere, re-executed here
  (:func:`bench.verify.judged`, with this baseline's seeds as the re-executions and its other kernels' values): how
  many are refused, alone and with their configuration's other records;
- **verify's power**: a record of this baseline with its primary metrics (every block) moved by 0.5 to 4 seed standard
  deviations, alone, and the configuration's 10 records all moved by half a standard deviation: how many are refused;
- **the gate's false alarms**: the other CPU kind's runs of CI's first 2 seeds (and of all 10) checked against this
  baseline (:func:`leaderboard.gate.compare`): what is flagged;
- **the gate's power**, per method and task: a change that moves the method's primary metrics by one standard
  deviation, simulated with known answer: CI's 2 seeds replaced by 2 others of this baseline (a change makes a run
  another draw) moved by one standard deviation, over every ordered pair of the other 8 seeds; and the same move
  without the new draw (a formula's change).

``--task``: tasks whose reference is the same in both (every metric compared); ``--reference-free``: tasks whose
reference changed between the two, compared on the metrics that do not read it (the power, which needs no other CPU
kind, is of every metric); ``--changed``: methods whose code changed since the other baseline was measured (``hmc``'s
step-size search, issue 63), left out of the comparisons with it. The kept result:

    python benchmarks/cross_cpu_round_off.py --elsewhere benchmarks/results/cross-cpu/baseline-intel-xeon-avx512.json \\
        --here benchmarks/baseline.json --task toy-gap diabetes-gap --reference-free digits digits-cnn digits-lstm \\
        --changed hmc --out benchmarks/results/cross-cpu.json
"""

from __future__ import annotations

import copy
import itertools
import math
import time
from pathlib import Path

from bench import drift, scripts
from bench.tasks import get_task

READS_THE_REFERENCE = {"agreement", "total_variation", "w1", "w2", "competition_w"}
"""Metrics computed against the reference posterior; the others (accuracy, nll, ece, rmse, log_likelihood) read the
test labels alone."""
SHIFTS = (0.5, 1.0, 2.0, 4.0)
"""Edits of a record's primary metrics, in its configuration's seed standard deviations."""
GROUP_SHIFT = 0.5
GATE_SHIFT = 1.0
CI_SEEDS = 2


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b)) if a != b else 0.0


def spread(stats: dict) -> float:
    return max(stats["std"], stats["floor"])


def configurations(here: dict, elsewhere: dict | None, tasks: list[str], reference_free: list[str]):
    """(method, task, compared metric names or None for all) of every configuration both measured at one budget."""
    budgets = here["configuration"]["budgets"]
    for method in sorted(here["results"]):
        if elsewhere is not None and elsewhere["configuration"]["budgets"].get(method) != budgets[method]:
            continue
        for task in [*tasks, *reference_free]:
            if task not in here["results"][method]:
                continue
            if elsewhere is not None and task not in elsewhere["results"].get(method, {}):
                continue
            yield method, task, (None if task in tasks else
                                 {m for m in here["results"][method][task]["all"] if m not in READS_THE_REFERENCE})


def _series(baseline: dict, method: str, task: str, metrics: set | None):
    for block, by_metric in baseline["results"][method][task].items():
        for metric, stats in by_metric.items():
            if metrics is None or metric in metrics:
                yield block, metric, stats


def seed_values(baseline: dict, method: str, task: str, metrics: set | None, key: str = "values") -> dict:
    """seed -> {(block, metric): value} (``key``: ``values`` or ``other_kernels``)."""
    seeds = baseline["configuration"]["seeds"]
    values: dict = {seed: {} for seed in seeds}
    for block, metric, stats in _series(baseline, method, task, metrics):
        for seed, value in zip(seeds, stats[key]):
            values[seed][(block, metric)] = value
    return values


def drift_rows(elsewhere: dict, here: dict, tasks: list[str], reference_free: list[str]) -> list[dict]:
    """Per configuration: its largest drift between the CPU kinds, relative and in seed standard deviations, what the
    other kernels moved it here (in standard deviations), and its seeds' smallest relative spread."""
    if elsewhere["configuration"]["seeds"] != here["configuration"]["seeds"]:
        raise SystemExit("error: the two baselines measured different seeds; nothing to compare seed by seed")
    rows = []
    for method, task, metrics in configurations(here, elsewhere, tasks, reference_free):
        worst, in_sd, kernels, smallest = 0.0, 0.0, 0.0, math.inf
        for block, metric, stats in _series(here, method, task, metrics):
            then = elsewhere["results"][method][task][block][metric]["values"]
            worst = max(worst, *(relative(a, b) for a, b in zip(then, stats["values"], strict=True)))
            in_sd = max(in_sd, *(abs(a - b) / spread(stats) for a, b in zip(then, stats["values"])))
            if stats.get("other_kernels") is not None:
                kernels = max(kernels, *(abs(a - b) / spread(stats)
                                         for a, b in zip(stats["other_kernels"], stats["values"])))
            smallest = min(smallest, stats["std"] / max(abs(stats["mean"]), 1e-300))
        rows.append({"method": method, "task": task, "budget": here["configuration"]["budgets"][method],
                     "drift (relative)": worst, "drift (sd)": in_sd, "other kernels (sd)": kernels,
                     "seed spread (relative)": smallest})
    return rows


def _moved(here: dict, method: str, task: str, metrics: set | None) -> dict | None:
    """Per (block, metric), the most the other kernels moved a seed here (None where not measured)."""
    most = {}
    for block, metric, stats in _series(here, method, task, metrics):
        if stats.get("other_kernels") is None:
            return None
        most[(block, metric)] = max(abs(a - b) for a, b in zip(stats["other_kernels"], stats["values"]))
    return most


def _judge(here: dict, method: str, task: str, metrics: set | None, claims: list[tuple[int, dict]]):
    from bench.verify import judged
    from leaderboard.gate import block_sizes

    native = seed_values(here, method, task, metrics)
    gated = get_task(task)
    return judged(claims, native, _moved(here, method, task, metrics), block_sizes(gated), gated.kind)


def verify_refusals(elsewhere: dict, here: dict, tasks: list[str], reference_free: list[str]) -> list[dict]:
    """Per configuration: the other CPU kind's records judged as verify judges records made elsewhere, each alone and
    the ten together; how many were refused, and how many were its re-execution's to round-off."""
    rows = []
    for method, task, metrics in configurations(here, elsewhere, tasks, reference_free):
        records = seed_values(elsewhere, method, task, metrics)
        alone = [_judge(here, method, task, metrics, [(seed, claimed)]) for seed, claimed in records.items()]
        _, together = _judge(here, method, task, metrics, list(records.items()))
        rows.append({"method": method, "task": task, "records": len(records),
                     "round-off": sum(m == "cross-environment, round-off" for m, _ in alone),
                     "refused alone": sum(not j[0].passed for _, j in alone),
                     # the test of the records' mean is of primary metrics, which read the reference
                     "refused together": None if metrics is not None else sum(not j.passed for j in together)})
    return rows


def _edited(values: dict, here: dict, method: str, task: str, by: float) -> dict:
    """``values`` ({(block, metric): value}) with every primary metric moved by ``by`` of its seed spread (the
    direction that makes it worse)."""
    from leaderboard.ranking import PRIMARY, higher_is_better

    primary = PRIMARY[get_task(task).kind]
    edited = dict(values)
    for (block, metric), value in values.items():
        if metric in primary:
            stats = here["results"][method][task][block][metric]
            edited[(block, metric)] = value + (-by if higher_is_better(metric) else by) * spread(stats)
    return edited


def verify_power(here: dict, tasks: list[str]) -> list[dict]:
    """Per configuration: the fraction of its 10 records refused when one's primary metrics (every block) are moved by
    each of :data:`SHIFTS` seed standard deviations, alone; and whether its 10 records moved by :data:`GROUP_SHIFT`
    together are refused."""
    rows = []
    for method, task, _ in configurations(here, None, tasks, []):
        records = seed_values(here, method, task, None)
        row = {"method": method, "task": task}
        for by in SHIFTS:
            refused = [not _judge(here, method, task, None, [(seed, _edited(claimed, here, method, task, by))])[1][0]
                       .passed for seed, claimed in records.items()]
            row[f"alone, {by:g} sd"] = sum(refused) / len(refused)
        _, together = _judge(here, method, task, None, [(seed, _edited(claimed, here, method, task, GROUP_SHIFT))
                                                        for seed, claimed in records.items()])
        row[f"10 together, {GROUP_SHIFT:g} sd"] = float(not together[0].passed)
        rows.append(row)
    return rows


def _restricted(baseline: dict, keep) -> dict:
    """A copy of ``baseline`` holding only the series for which ``keep(method, task, block, metric)``."""
    restricted = copy.deepcopy(baseline)
    for method, by_task in list(restricted["results"].items()):
        for task, by_block in list(by_task.items()):
            for block, by_metric in list(by_block.items()):
                for metric in list(by_metric):
                    if not keep(method, task, block, metric):
                        del by_metric[metric]
                if not by_metric:
                    del by_block[block]
            if not by_block:
                del by_task[task]
                restricted["runs"][method].pop(task)
        if not by_task:
            del restricted["results"][method]
            restricted["runs"].pop(method)
    return restricted


def _measured(baseline: dict, method: str, task: str, seeds: list[int], shift: float = 0.0, draws=None) -> dict:
    """What ``measure`` returns for one configuration: its seeds' values from ``baseline`` (``draws``: the seeds whose
    values stand for them), every primary metric moved by ``shift`` seed standard deviations."""
    measured = []
    all_seeds = baseline["configuration"]["seeds"]
    for position, seed in enumerate(seeds):
        source = all_seeds.index(draws[position] if draws is not None else seed)
        values = {(b, m): stats["values"][source] for b, m, stats in _series(baseline, method, task, None)}
        values = _edited(values, baseline, method, task, shift) if shift else values
        metrics: dict = {}
        for (block, metric), value in values.items():
            metrics.setdefault(block, {})[metric] = value
        measured.append({"metrics": metrics, **{name: baseline["runs"][method][task][name][all_seeds.index(seed)]
                                                  for name in ("epochs_used", "test_passes")}})
    return measured


def gate_false_alarms(elsewhere: dict, here: dict, tasks: list[str], reference_free: list[str]) -> list[dict]:
    """The other CPU kind's runs checked against this baseline as on another CPU kind, for CI's first seeds and for
    all of them: metrics compared, moved, flagged, and which configurations."""
    from leaderboard import gate

    compared = {(method, task): metrics for method, task, metrics in
                configurations(here, elsewhere, tasks, reference_free)}
    baseline = _restricted(here, lambda method, task, block, metric: (method, task) in compared and (
        compared[(method, task)] is None or metric in compared[(method, task)]))
    rows = []
    for n_seeds in (CI_SEEDS, len(here["configuration"]["seeds"])):
        seeds = here["configuration"]["seeds"][:n_seeds]
        measured = {method: {task: _measured(elsewhere, method, task, seeds)
                             for task in baseline["results"][method]} for method in baseline["results"]}
        report = gate.compare(baseline, measured, statistical=True)
        alarmed = sorted({f"{m.method} on {m.task}" for m in report.moves}
                         | {f"{f.method} on {f.task}" for f in report.flagged})
        rows.append({"seeds": n_seeds, "metrics compared": report.n_compared,
                     "seed by seed": report.n_seed_by_seed, "by their mean": len(report.findings),
                     "moved": len(report.moves), "flagged": len(report.flagged),
                     "configurations alarmed": ", ".join(alarmed) or "none"})
    return rows


def gate_power(here: dict, tasks: list[str]) -> list[dict]:
    """Per method and task: how the gate compares its primary metrics off the baseline's CPU, and the fraction of
    simulated changes of :data:`GATE_SHIFT` seed standard deviations it fails (a new draw moved, over every ordered
    pair of the seeds CI does not rerun; and the move alone, a formula's change)."""
    from leaderboard import gate
    from leaderboard.ranking import PRIMARY

    seeds = here["configuration"]["seeds"]
    ci = seeds[:CI_SEEDS]
    full = gate.compare(here, {m: {t: _measured(here, m, t, ci) for t in by_task}
                               for m, by_task in here["results"].items()}, statistical=True)
    tolerance = full.tolerance  # CI's: Bonferroni over every mean its full check tests
    rows = []
    for method, task, _ in configurations(here, None, tasks, []):
        baseline = _restricted(here, lambda m, t, b, metric: (m, t) == (method, task))
        primary = [metric for metric in PRIMARY[get_task(task).kind] if metric in here["results"][method][task]["all"]]
        stats = here["results"][method][task]["all"][primary[0]]
        allowance = gate.seed_allowance(stats, primary[0], gate.block_sizes(get_task(task))["all"])
        pairs = list(itertools.permutations(seeds[CI_SEEDS:], CI_SEEDS))
        caught = sum(not gate.compare(baseline, {method: {task: _measured(here, method, task, ci, GATE_SHIFT, pair)}},
                                      tolerance, statistical=True).passed for pair in pairs)
        formula = not gate.compare(baseline, {method: {task: _measured(here, method, task, ci, GATE_SHIFT)}},
                                   tolerance, statistical=True).passed
        rows.append({"method": method, "task": task, "primary metric": primary[0],
                     "off the baseline's CPU": ("its mean" if allowance is None else
                                                f"each seed ± {allowance / spread(stats):.2f} sd"),
                     f"power, new draws {GATE_SHIFT:g} sd": caught / len(pairs),
                     f"power, formula {GATE_SHIFT:g} sd": float(formula)})
    return rows


def _sum(values) -> float | None:
    """The sum of the values that were measured (None: not measured); None where none was."""
    measured = [value for value in values if value is not None]
    return sum(measured) if measured else None


def by_task(rows: list[dict], tasks: list[str], counts: tuple[str, ...], shares: tuple[str, ...]) -> list[dict]:
    """``rows`` (one per configuration) summed per task: ``counts`` added, ``shares`` averaged over its
    configurations (one row per task, then every task)."""
    summary = []
    for task in [*tasks, "every task"]:
        chosen = [row for row in rows if task in (row["task"], "every task")]
        if not chosen:
            continue
        summary.append({"task": task, "configurations": len(chosen),
                        **{name: _sum(row[name] for row in chosen) for name in counts},
                        **{name: sum(row[name] for row in chosen) / len(chosen) for name in shares}})
    return summary


def _baseline(path: Path) -> dict:
    """The gate baseline at ``path``, checked as ``check`` checks one, with the machine it names; a damaged one is one
    line naming it."""
    from bench.errors import DamagedFile
    from leaderboard.gate.baseline import load_baseline

    baseline = load_baseline(path)
    environment = baseline.get("environment")
    if not (isinstance(environment, dict) and all(isinstance(environment.get(k), str)
                                                  for k in ("cpu_id", "cpu_capability"))):
        raise DamagedFile(f"{path}: the baseline names no machine (environment.cpu_id, environment.cpu_capability); "
                          f"write it again with `python -m bench check --update --baseline {path}`")
    return baseline


def main(argv: list[str] | None = None) -> None:
    from tabulate import tabulate

    parser = scripts.parser(__file__, __doc__.split("\n\n")[0])
    parser.add_argument("--elsewhere", type=Path, required=True, help="the code's baseline measured on another CPU kind")
    parser.add_argument("--here", type=Path, required=True,
                        help="the same code's baseline measured here, with other kernels (format 3)")
    parser.add_argument("--task", nargs="+", default=[], help="tasks whose reference both baselines share")
    parser.add_argument("--reference-free", nargs="+", default=[],
                        help="tasks whose reference changed between the two: only metrics that do not read it")
    parser.add_argument("--changed", nargs="+", default=[],
                        help="methods whose code changed since --elsewhere was measured: left out of every comparison "
                             "with it (its runs are another code's), kept in the power, which reads --here alone")
    scripts.out_option(parser)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # nothing trains; numpy and scipy only, as one thread computes them anywhere
    started = time.monotonic()
    elsewhere, here = (_baseline(path) for path in (args.elsewhere, args.here))
    elsewhere = {**elsewhere, "results": {method: series for method, series in elsewhere["results"].items()
                                          if method not in args.changed}}
    print(f"elsewhere: {elsewhere['environment']['cpu_id']} ({elsewhere['environment']['cpu_capability']}); "
          f"here: {here['environment']['cpu_id']} ({here['environment']['cpu_capability']})")
    every_task = [*args.task, *args.reference_free]
    refusals, power = verify_refusals(elsewhere, here, args.task, args.reference_free), verify_power(here, every_task)
    tables = {"drift": sorted(drift_rows(elsewhere, here, args.task, args.reference_free),
                              key=lambda row: row["drift (relative)"]),
              "verify-refusals": by_task(refusals, every_task, ("records", "round-off", "refused alone",
                                                                "refused together"), ()),
              "verify-power": by_task(power, every_task, (), tuple(name for name in power[0] if "sd" in name)),
              "verify-refusals-by-configuration": refusals, "verify-power-by-configuration": power,
              "gate-false-alarms": gate_false_alarms(elsewhere, here, args.task, args.reference_free),
              "gate-power": gate_power(here, every_task)}
    for name, rows in tables.items():
        print(f"\n{name}\n" + tabulate(rows, headers="keys", floatfmt=".3g"))
    drifts = [row["drift (relative)"] for row in tables["drift"]]
    print(f"\nwithin {drift.CROSS_CPU_ROUND_OFF:g} relative: {sum(d <= drift.CROSS_CPU_ROUND_OFF for d in drifts)} of "
          f"{len(drifts)} configurations")
    scripts.keep(args.out, __file__, started, tables, elsewhere=elsewhere["environment"]["cpu_id"],
                 here=here["environment"]["cpu_id"])


if __name__ == "__main__":
    scripts.run(main)
