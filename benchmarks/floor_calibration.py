"""How often "within floor" (:func:`leaderboard.ranking.within_noise_floor`) is said of an exact sampler, and of a
sampler of a posterior whose width is off, by simulation with a known answer.

    python benchmarks/floor_calibration.py [--replicates 400] [--seeds 10] --out benchmarks/results/floor-calibration.json

Each replicate builds a reference as ``reference generate`` does, from 8 chains whose law is exactly the target, and
its floor and floor spread (:func:`reference.evidence.noise_floor`, :func:`reference.evidence.floor_spread`) from
those chains alone. A method is ``--seeds`` runs, each 8 chains of the same kind sampling a posterior whose width
(standard deviation in every direction of the weights) is the target's times a factor: 1 is an exact sampler; 0.8,
0.9 and 0.95 a posterior 20, 10 and 5% too narrow; 1.05, 1.1, 1.2 one too wide. Kept per replicate and width: the
largest over the metrics the verdict is judged on (:data:`leaderboard.ranking.FLOOR_METRICS`: total variation,
W1) of the statistic the board compares with ``FLOOR_CRITICAL``, (the seeds' mean worse than the floor) /
sqrt(spread^2 + standard error^2) (:func:`leaderboard.ranking.floor_excess`). How often each
is within floor follows from them at any critical value, so the results file serves the test of the constant
(``tests/benchmarks/test_floor_calibration.py``) and the table docs/leaderboard.md shows.

Four settings, each a known posterior:

- ``classification``: a logistic model (4 features, 300 test points, two classes) whose weights' posterior is
  Gaussian; the predictive is the chains' average of the probabilities;
- ``regression``: the closed-form posterior of Bayesian linear regression (:func:`reference.conjugate.linear_gaussian`),
  1000 draws of y taken chain-major as the references take them;
- each with *homogeneous* chains (every chain an AR(1) of coefficient 0.7 started in the law) and *heterogeneous*
  ones (each chain's coefficient drawn from U(0.3, 0.97): chains that mix at different speeds, as the convnet's and
  the CNN-LSTM's references do). An exact sampler's runs are drawn the same way as the reference's.

``--reference-splits TASK ...`` checks the shipped references' own chains instead (:func:`reference_splits`), kept
in ``benchmarks/results/floor-reference-splits.json``:

    python benchmarks/floor_calibration.py --reference-splits toy-gap diabetes-gap digits digits-cnn digits-lstm --out benchmarks/results/floor-reference-splits.json

half of a reference's chains as a smaller reference, the other half as one exact run; per metric with a floor, how
far that run scores beyond its floor, which is how :data:`~leaderboard.ranking.FLOOR_METRICS` was chosen.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
from pathlib import Path

import numpy as np

from bench import scripts
from bench.arguments import positive_whole

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHAINS, DRAWS = 8, 150
HOMOGENEOUS_RHO, HETEROGENEOUS_RHO = 0.7, (0.3, 0.97)
WIDTHS = (1.0, 0.8, 0.9, 0.95, 1.05, 1.1, 1.2)
"""The factors on the target's width a method samples at: 1 is exact."""
SETTINGS = ("classification, homogeneous", "classification, heterogeneous", "regression, homogeneous",
            "regression, heterogeneous")


def chains(mean: np.ndarray, cholesky: np.ndarray, rng: np.random.Generator, heterogeneous: bool) -> np.ndarray:
    """``(CHAINS, DRAWS, D)`` draws of N(mean, L L^T), each chain an AR(1) started in the law."""
    rho = rng.uniform(*HETEROGENEOUS_RHO, CHAINS) if heterogeneous else np.full(CHAINS, HOMOGENEOUS_RHO)
    noise = rng.standard_normal((CHAINS, DRAWS, len(mean))) @ cholesky.T
    out = np.empty_like(noise)
    out[:, 0] = noise[:, 0]
    for t in range(1, DRAWS):
        out[:, t] = rho[:, None] * out[:, t - 1] + np.sqrt(1 - rho**2)[:, None] * noise[:, t]
    return out + mean


def _evidence(chain_average: np.ndarray | None, q: int):
    """An evidence holding what the floor and its spread read: the number of chains, and their averages."""
    from reference.evidence import Evidence

    return Evidence(np.zeros(1), np.zeros((CHAINS, DRAWS, 1, q)), np.zeros((CHAINS, DRAWS, 2)),
                    np.zeros((CHAINS, 1)), np.zeros((CHAINS, 1)), np.zeros(CHAINS), chain_average)


def _problem(setting: str, rng: np.random.Generator):
    """The setting's task, a function drawing one predictive (and its evidence) at a width, and the metrics that
    score a method's predictive against a reference."""
    from bench import metrics
    from bench.tasks import get_task
    from reference.conjugate import linear_gaussian
    from reference.generate import predictive_samples

    heterogeneous = setting.endswith("heterogeneous")
    if setting.startswith("classification"):
        features, points = 4, 300
        x = rng.standard_normal((points, features))
        weight_mean = rng.standard_normal(features)
        task = dataclasses.replace(get_task("digits"), test_blocks=())  # only its kind and blocks are read

        def draw(width: float):
            cholesky = width * math.sqrt(0.6) * np.eye(features)
            p = 1 / (1 + np.exp(-(chains(weight_mean, cholesky, rng, heterogeneous) @ x.T)))  # (C, S, N)
            average = p.mean(axis=1)
            average = np.stack([1 - average, average], axis=-1)  # (C, N, 2)
            return average.mean(axis=0), _evidence(average, 1)

        def score(a, r):
            return {"agreement": metrics.agreement(a, r), "total_variation": metrics.total_variation(a, r)}
        return task, draw, score

    problem = linear_gaussian("floor", rows=20, residual=0.5)
    phi_test = np.concatenate([problem.x_test.numpy(), np.ones((len(problem.x_test), 1))], axis=1)
    mean, cholesky = problem.mean.numpy(), np.linalg.cholesky(problem.covariance.numpy())

    def draw(width: float):
        f = chains(mean, width * cholesky, rng, heterogeneous) @ phi_test.T  # (C, S, N)
        return predictive_samples(np.stack([f, np.full_like(f, problem.noise)], axis=-1), rng), _evidence(None, 2)

    def score(a, r):
        return {"w1": metrics.w1_distance(a, r)}
    return problem.task, draw, score


def replicate(setting: str, replicates: int, seeds: int, seed: int) -> dict[str, list[float]]:
    """Per width (its factor as a string), one statistic per replicate: the largest over the metrics the verdict is
    judged on (:data:`leaderboard.ranking.FLOOR_METRICS`) of :func:`leaderboard.ranking.floor_excess`."""
    from leaderboard.ranking import FLOOR_METRICS, floor_excess, higher_is_better
    from reference.evidence import floor_spread, noise_floor

    rng = np.random.default_rng(seed)
    task, draw, score = _problem(setting, rng)
    found: dict[str, list[float]] = {f"{width:g}": [] for width in WIDTHS}
    for _ in range(replicates):
        reference, kept = draw(1.0)
        floor, spread = noise_floor(task, reference, kept)["all"], floor_spread(task, reference, kept)["all"]
        for width in WIDTHS:
            scored = [score(draw(width)[0], reference) for _ in range(seeds)]
            excess = []
            for metric in FLOOR_METRICS[task.kind]:
                values = np.array([s[metric] for s in scored])
                worse_by = floor[metric] - values.mean() if higher_is_better(metric) else values.mean() - floor[metric]
                excess.append(floor_excess(worse_by, float(values.std(ddof=1)) / math.sqrt(seeds), spread[metric]))
            found[f"{width:g}"].append(max(excess))
    return found


def reference_splits(task_name: str, critical: float) -> list[dict]:
    """The shipped reference's own chains as exact runs (:func:`split_rows`)."""
    from bench.tasks import get_task
    from reference import evidence
    from reference.store import PACKAGE_DATA, RESTORE_EVIDENCE, evidence_path, load_reference

    task = get_task(task_name)
    kept = evidence.load(evidence_path(PACKAGE_DATA, task_name), RESTORE_EVIDENCE, installed=True)
    return split_rows(task_name, task.kind, [split_statistics(task, load_reference(task).array, kept)], critical)


def synthetic_splits(setting: str, replicates: int, seed: int, critical: float) -> list[dict]:
    """The same check on ``replicates`` references of the setting's exact chains (:func:`split_rows`): what it gives
    where the floor's assumptions hold by construction, to read the shipped references' rows against."""
    rng = np.random.default_rng(seed)
    task, draw, _ = _problem(setting, rng)
    return split_rows(setting, task.kind, [split_statistics(task, *draw(1.0)) for _ in range(replicates)], critical)


def split_statistics(task, reference: np.ndarray, kept) -> dict[str, list[tuple[float, float]]]:
    """Every choice of half of a reference's chains is a smaller reference (its floor and spread from its own
    chains), the other half one exact run of its size; per metric of :data:`SPLIT_METRICS`, per choice, what the run
    scores beyond the floor as a share of the floor's distance (1 - agreement for agreement) and in spreads
    (:func:`leaderboard.ranking.floor_excess` of one seed: no standard error)."""
    from leaderboard.ranking import floor_excess, higher_is_better
    from reference import evidence

    beyond: dict[str, list[tuple[float, float]]] = {name: [] for name in SPLIT_METRICS[task.kind]}
    for smaller in itertools.combinations(range(kept.chains), kept.chains // 2):
        run = [c for c in range(kept.chains) if c not in smaller]
        sub = dataclasses.replace(kept, point_draws=kept.point_draws[list(smaller)],
                                  chain_average=None if kept.chain_average is None else kept.chain_average[list(smaller)])
        r = evidence._half(task, reference, kept, list(smaller))  # regression: its chains' columns, in order
        a = evidence._half(task, reference, kept, run)
        floor, spread = evidence.noise_floor(task, r, sub)["all"], evidence.floor_spread(task, r, sub)["all"]
        scored = evidence._as_metrics(task, evidence._distances(task, a, r))
        for name in beyond:
            worse_by = floor[name] - scored[name] if higher_is_better(name) else scored[name] - floor[name]
            distance = 1 - floor[name] if name == "agreement" else floor[name]
            beyond[name].append((worse_by / distance, floor_excess(worse_by, 0.0, spread[name])))
    return beyond


def split_rows(name: str, kind: str, found: list[dict[str, list[tuple[float, float]]]], critical: float) -> list[dict]:
    """A row per metric, pooling the choices of every reference in ``found`` (:func:`split_statistics`): whether the
    verdict is judged on it (:data:`leaderboard.ranking.FLOOR_METRICS`), the mean over the choices of what the run
    scores beyond the floor, as a share of it and in spreads, and the share of the choices within ``critical`` on
    that metric alone. An exact run scores at its floor on average where the floor holds; one run per choice and
    choices that share chains make the shares rough: a check of the synthetic calibration, not one."""
    from leaderboard.ranking import FLOOR_METRICS

    rows = []
    for metric in SPLIT_METRICS[kind]:
        share, excess = np.asarray([pair for one in found for pair in one[metric]]).T
        rows.append({"reference": name, "metric": metric, "judged on": "yes" if metric in FLOOR_METRICS[kind] else "no",
                     "choices": len(share), "beyond the floor, share of it": float(share.mean()),
                     "beyond the floor, in spreads": float(excess.mean()), "within floor": float(np.mean(excess <= critical))})
    return rows


SPLIT_METRICS = {"classification": ("agreement", "total_variation"), "regression": ("w1", "w2")}
"""The metrics the split check reports: the verdict's and the primary ones beside them."""
SPLIT_REPLICATES = 20
"""Synthetic references per setting in the split check (70 choices each)."""
SPLIT_BIAS_LIMIT = 0.5
"""The most an exact run may score beyond its floor on average, in spreads, over a shipped reference's choices of
half its chains, for the verdict to be judged on that metric (:data:`leaderboard.ranking.FLOOR_METRICS`): about
twice the largest mean of the synthetic references' split check, where the floor holds by construction (+0.27)."""


def within_rates(statistics: dict, critical: float) -> dict[str, dict[str, float]]:
    """Per setting and width, the fraction of replicates called within floor at ``critical``."""
    return {setting: {width: float(np.mean(np.asarray(values) <= critical)) for width, values in widths.items()}
            for setting, widths in statistics.items()}


WIDTH_NAMES = {"1": "exact", "0.8": "20% narrower", "0.9": "10% narrower", "0.95": "5% narrower",
               "1.05": "5% wider", "1.1": "10% wider", "1.2": "20% wider"}
"""The table's column for each width."""


def rate_rows(statistics: dict, critical: float) -> list[dict]:
    """The table docs/leaderboard.md shows: per setting, how often each width is called within floor."""
    return [{"setting": setting, **{WIDTH_NAMES[width]: rate for width, rate in row.items()}}
            for setting, row in within_rates(statistics, critical).items()]


def main(argv: list[str] | None = None) -> int:
    import time

    from leaderboard.ranking import FLOOR_CRITICAL
    from reference.settings import REFERENCE_SETTINGS

    started = time.monotonic()
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--replicates", type=positive_whole, default=400)
    parser.add_argument("--seeds", type=positive_whole, default=10, help="a method's seeds (at least 2)")
    parser.add_argument("--reference-splits", nargs="+", metavar="TASK", choices=list(REFERENCE_SETTINGS),
                        help="instead: the check on these shipped references' own chains (reference_splits): "
                             f"{', '.join(REFERENCE_SETTINGS)}")
    scripts.out_option(parser)
    args = parser.parse_args(argv)
    if args.reference_splits:
        rows = []
        for index, setting in enumerate(SETTINGS):
            rows += synthetic_splits(setting, SPLIT_REPLICATES, seed=index, critical=FLOOR_CRITICAL)
        for task_name in args.reference_splits:
            rows += reference_splits(task_name, FLOOR_CRITICAL)
        for row in rows:
            print(f"{row['reference']} {row['metric']}: {row['choices']} choices of half the chains, one run each: "
                  f"beyond the floor by {row['beyond the floor, share of it']:+.1%} of it, "
                  f"{row['beyond the floor, in spreads']:+.2f} spreads; within floor {row['within floor']:.3f} "
                  f"at {FLOOR_CRITICAL}", flush=True)
        scripts.keep(args.out, __file__, started, {"reference-splits": rows}, critical=FLOOR_CRITICAL,
                     synthetic_replicates=SPLIT_REPLICATES)
        return 0
    if args.seeds < 2:
        parser.error("--seeds must be at least 2: the test needs the seeds' spread")
    statistics = {}
    for index, setting in enumerate(SETTINGS):
        statistics[setting] = replicate(setting, args.replicates, args.seeds, seed=index)
        print(f"{setting}: {args.replicates} replicates", flush=True)
    rows = rate_rows(statistics, FLOOR_CRITICAL)
    print(f"called within floor at FLOOR_CRITICAL = {FLOOR_CRITICAL}:")
    for row in rows:
        print(f"  {row['setting']:<32}" + "  ".join(f"{name}: {row[name]:.3f}" for name in WIDTH_NAMES.values()))
    scripts.keep(args.out, __file__, started, {"within-floor": rows}, replicates=args.replicates, seeds=args.seeds,
                 chains=CHAINS, draws=DRAWS, critical=FLOOR_CRITICAL, statistics=statistics)
    return 0


if __name__ == "__main__":
    scripts.run(main)
