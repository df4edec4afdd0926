"""Per-task step sizes of the SGD-trajectory, SG-MCMC and variational methods, MC dropout's rate and Laplace's
predictive, on the embedded tasks, picked without the HMC reference.

    python benchmarks/tune_trajectory.py [swag sgld csgmcmc vogn mfvi mc-dropout sgd hmc laplace] [--budget 100 [1000]]
                                         [--seeds 0 1 2] [--tasks digits-cnn digits-lstm] [--converged 10]

For each seed, a seeded 10% of each task's training rows is held out. For every learning rate (MC
dropout: every dropout rate, at ``sgd``'s learning rate of the task; Laplace: each predictive, at the
task's own settings) on
the grid the method runs at the budget on the other 90% (its budget counted on those rows) and is
scored by the negative log-likelihood of its predictive on the held-out rows: the mean log
probability of the label (classification), or the log density of the moment-matched Gaussian of its
predictive samples (regression). The lowest NLL averaged over seeds wins, among the rates one grid
step (a factor of about 3) from divergence: a rate that diverges for any seed scores infinity, and
so does a rate whose next larger grid rate diverges for any seed (a default on the edge of
divergence failed at budget 1000 and on other seeds: csgmcmc on diabetes-gap at 0.1). The batch size is
the MAP default of the task (``approximators.map.EMBEDDED_DEFAULTS``); SWAG's ``swa_lr`` follows
as ``lr / 5``, the ratio of the authors' settings. VOGN's and MFVI's grids are over two settings each, and only the
settings whose q reaches the variance of the same method's converged run (``--converged`` times the budget, on the
same split and seed) within :data:`REACH` are eligible (:data:`CONVERGED`): held-out NLL alone can prefer a q that
has barely left its start. With several budgets (``--budget 100 1000``) a setting scores the mean of its NLLs at each,
and only settings eligible at every budget compete: ``hmc``'s leapfrog steps are tuned so, since its best trajectory
grows with the budget (on ``digits-lstm`` 3 steps at 100, 30 at 1000) and one default serves both budgets the
benchmark reports.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import torch
from tabulate import tabulate

from approximators import METHODS, resolve_config
from approximators.map import EMBEDDED_DEFAULTS
from bench import scripts
from bench.arguments import budget_epochs, decimal_number, seed_number
from bench.errors import BudgetExhausted, TrainingDiverged
from bench.runner import execute, metered
from bench.tasks import get_task, task_names

sys.path.insert(0, str(Path(__file__).resolve().parent))
from converged_gap import DISTANCE, spied  # noqa: E402

GRID = [0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]


def product(**axes) -> list[dict]:
    """Every combination of the settings' values, the first named setting varying slowest."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*axes.values())]


GRIDS = {"vogn": product(beta2=[0.001, 0.01, 0.1], lr=[3e-4, 0.001, 0.003, 0.01, 0.03, 0.1]),
         "mfvi": product(init_std=[0.001, 0.01, 0.1], lr=[0.003, 0.01, 0.03, 0.1]),
         "csgmcmc": GRID + [3.0, 10.0],
         "mc-dropout": [0.005, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5],  # Gal & Ghahramani's UCI grid, and larger
         "sgd": [3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3], "sgld": product(chains=[1, 2, 4], lr=GRID + [3.0, 10.0]),
         "hmc": [3, 10, 30, 100],
         "laplace": ["sampling", "probit"]}
"""Per-method grids where the default one does not apply. VOGN's and MFVI's are over two settings each: VOGN's step
is a Newton step and beta2 sets how fast its curvature s forgets its start (the squared gradients at the
initialisation, far above their fixed point: at 0.001 it needs about 1000 steps, more than a budget of 100 epochs
takes on toy-gap); MFVI's rho moves by about ``lr`` per Adam step, so from ``init_std`` its sigma takes
log(target / init_std) / lr steps to grow. ``csgmcmc``'s reaches further up since at the authors' friction 0.9 a step
moves about 1/9 as far as at the 0.1 it was first tuned with. ``hmc``'s grid is over its leapfrog steps per trajectory,
from nearly Langevin to the references' length; ``laplace``'s over its predictives, ``glm`` left out since it is
``sampling`` for the default last-layer structure. ``sgd``'s and ``sgld``'s reach further up since their best rate
on ``digits-cnn`` was the largest of the earlier grids. ``sgld``'s is also over how many chains share the budget
(fewer chains are longer ones: at 4 chains of 250 epochs on ``toy-gap`` its predictive stopped 1.6 times as wide as
its own 10,000-epoch run's, ``benchmarks/converged_gap.py``)."""
TUNED_SETTING = {"mc-dropout": "rate", "hmc": "leapfrog_steps", "laplace": "predictive"}
"""The setting a method's grid is over, where it is not ``lr`` (a grid of dicts names its settings itself)."""
COUPLED = {"sgd": {"min_lr": 0.01}}
"""Settings that follow the tuned one in a fixed ratio (``sgd``: a cosine decay to lr / 100, as on ``digits``)."""

CONVERGED = {"vogn": {"lr": 0.01, "beta2": 0.01}, "mfvi": {"lr": 0.01, "init_std": 0.01}}
"""Variational methods whose grid includes settings that stop far from their own target at the budget (variational
parameters that barely move from their start, which held-out NLL may prefer), and the settings of the run that
stands for that target: ``--converged`` times the budget on the same split and seed. Each grid setting's fitted q is
compared with that run's by the ratio of their geometric-mean variances, exp(mean_j log sigma_j^2) (a statistic that
does not depend on how the network's units are ordered, so it compares runs in different modes), and only the
settings that :func:`reaches` accepts are eligible."""
REACH = 2.0
"""A setting reaches its own target if its q's geometric-mean variance is within this factor of the converged
run's, either way (VOGN's defaults before 0.2.0 stopped at 3-20% of it on Bayesian linear regression, MFVI's at
0.2%)."""


UNORDERED = {"hmc", "laplace"}
"""Methods whose grid has no edge of divergence to keep a margin from: trajectory lengths do not diverge, and
Laplace's predictives share one trained network."""


def grid(method: str) -> list:
    return GRIDS.get(method, GRID)


def label(value) -> str:
    if isinstance(value, dict):
        return " ".join(f"{name}={setting:g}" for name, setting in value.items())
    return value if isinstance(value, str) else f"{value:g}"


HELD_OUT = 0.1


def held_out_nll(task, predictive: np.ndarray, y: np.ndarray) -> float:
    if task.kind == "classification":
        return float(-np.log(np.clip(predictive[np.arange(len(y)), y], 1e-300, None)).mean())
    mean, std = predictive.mean(1), predictive.std(1) + 1e-12
    return float((0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y - mean) / std) ** 2).mean())


def settings(method: str, task: str, value) -> dict[str, str]:
    if method in TUNED_SETTING:
        return {TUNED_SETTING[method]: str(int(value) if method == "hmc" else value)}
    values = {"batch_size": str(EMBEDDED_DEFAULTS[task]["batch_size"])}
    values.update({name: str(setting) for name, setting in (value if isinstance(value, dict) else {"lr": value}).items()})
    lr = float(values["lr"])
    if method == "swag":
        values["swa_lr"] = str(lr / 5)
    values.update({name: str(lr * ratio) for name, ratio in COUPLED.get(method, {}).items()})
    return values


def with_margin(method: str, scores: np.ndarray) -> np.ndarray:
    """Scores with every setting set to infinity whose next larger learning rate (the other settings the same)
    diverges (an infinite mean score)."""
    values, kept = grid(method), scores.copy()
    for i, value in enumerate(values):
        larger = [j for j, other in enumerate(values) if lr_of(other) > lr_of(value) and rest(other) == rest(value)]
        if larger and np.isinf(scores[min(larger, key=lambda j: lr_of(values[j]))]):
            kept[i] = math.inf
    return kept


def lr_of(value) -> float:
    return value["lr"] if isinstance(value, dict) else value


def rest(value) -> dict:
    return {k: v for k, v in value.items() if k != "lr"} if isinstance(value, dict) else {}


def reaches(variance_ratio: float) -> bool:
    """Whether a setting's q has reached its own target's variance: within a factor :data:`REACH` of it."""
    return 1 / REACH <= variance_ratio <= REACH


def tune(method: str, task_name: str, budgets: list[float], seeds: list[int],
         factor: float) -> tuple[object, list[dict]]:
    """The chosen setting and, per grid setting, its mean held-out NLL over ``seeds`` at each of ``budgets`` and
    their mean (and, for a method of :data:`CONVERGED`, its mean distance and scale ratio to the converged run). With
    several budgets the lowest mean over budgets wins, among the settings eligible at every budget."""
    rows, kept = [{} for _ in grid(method)], np.zeros(len(grid(method)))
    for budget in budgets:
        splits = [scores_on_split(method, task_name, budget, seed, factor) for seed in seeds]
        columns = {key: np.mean([split[key] for split in splits], axis=0) for key in splits[0]}
        # The margin guards step sizes near divergence.
        eligible = columns["nll"] if method in UNORDERED else with_margin(method, columns["nll"])
        if "variance ratio" in columns:
            eligible = np.where([reaches(ratio) for ratio in columns["variance ratio"]], eligible, math.inf)
        kept += eligible / len(budgets)
        at = "" if len(budgets) == 1 else f" at {budget:g}"
        for i, row in enumerate(rows):
            row.update({key + at: float(values[i]) for key, values in columns.items()})
    if len(budgets) > 1:
        for row, score in zip(rows, kept):
            row["mean nll"] = float(score)
    return grid(method)[int(np.argmin(kept))] if np.isfinite(kept).any() else None, rows


def split_of(task_name: str, seed: int):
    """The task with a seeded 10% of its training rows held out as its test inputs, and those rows' indices."""
    task = get_task(task_name)
    order = torch.randperm(task.n_train, generator=torch.Generator().manual_seed(seed))
    cut = round(HELD_OUT * task.n_train)
    held, kept = order[:cut], order[cut:]
    return dataclasses.replace(task, x_train=task.x_train[kept], y_train=task.y_train[kept],
                               x_test=task.x_train[held]), held


def predict(method: str, split, task_name: str, budget: float, seed: int, values: dict[str, str]):
    """The method's predictive on the held-out rows and, for a variational method, the geometric-mean variance of
    its q (else None); (None, None) where it diverged (or, ``hmc``, kept no sample)."""
    cls = METHODS[method]
    problem, data = metered(split, budget)
    with spied() as seen:
        try:
            predictive, _ = execute(cls, resolve_config(cls, task_name, values), problem, data, seed)
        except (TrainingDiverged, BudgetExhausted):
            return None, None
    if not np.isfinite(predictive).all():
        return None, None
    variance = float(seen["q"][0][1].square().log().mean().exp()) if seen["q"] else None
    return predictive, variance


def scores_on_split(method: str, task_name: str, budget: float, seed: int, factor: float) -> dict[str, list[float]]:
    task = get_task(task_name)
    split, held = split_of(task_name, seed)
    y = task.y_train[held].numpy()
    columns = {"nll": []}
    if method in CONVERGED:
        values = dict(CONVERGED[method])
        for _ in range(3):  # a step a third smaller where the converged run diverges on this task
            converged, converged_variance = predict(method, split, task_name, factor * budget, seed,
                                                    settings(method, task_name, values))
            if converged is not None:
                break
            print(f"{method} on {task_name}, seed {seed}: the converged run diverged at {label(values)}; "
                  f"lr / 3", file=sys.stderr)
            values["lr"] /= 3
        else:
            raise SystemExit(f"{method}'s converged run diverged on {task_name}, seed {seed}, down to {label(values)}")
        columns.update({"variance ratio": [], "distance to converged": []})
    for value in grid(method):
        predictive, variance = predict(method, split, task_name, budget, seed, settings(method, task_name, value))
        score = math.inf if predictive is None else held_out_nll(task, predictive, y)
        columns["nll"].append(score if math.isfinite(score) else math.inf)
        if method in CONVERGED:
            _, distance = DISTANCE[task.kind]
            columns["variance ratio"].append(math.inf if predictive is None else variance / converged_variance)
            columns["distance to converged"].append(math.inf if predictive is None else distance(predictive, converged))
    return columns


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("methods", nargs="*", default=["swag", "sgld", "csgmcmc", "vogn", "mfvi", "mc-dropout"],
                        choices=list(METHODS))
    parser.add_argument("--budget", type=budget_epochs, nargs="+", default=[100.0],
                        help="budgets to score at; with several, the lowest mean NLL over them wins")
    parser.add_argument("--seeds", type=seed_number, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=task_names(), choices=task_names())
    parser.add_argument("--converged", type=decimal_number, default=10.0,
                        help="the converged run's budget as a multiple of --budget (methods of CONVERGED)")
    args = parser.parse_args()
    if min(args.budget) <= 0 or args.converged <= 0:
        parser.error(f"--budget and --converged must be positive, got --budget {args.budget} --converged "
                     f"{args.converged}")
    torch.set_num_threads(1)
    rows = []
    for method in args.methods:
        for task in args.tasks:
            best, scores = tune(method, task, args.budget, args.seeds, args.converged)
            for value, columns in zip(grid(method), scores):
                rows.append({"method": method, "task": task, TUNED_SETTING.get(method, "setting"): label(value),
                             **{key: f"{number:.3f}" for key, number in columns.items()},
                             "chosen": "*" if value == best else ""})
    print(f"held-out NLL, mean over seeds {args.seeds} (budget {' and '.join(f'{b:g}' for b in args.budget)}"
          + (f"; converged runs: {args.converged:g}x the budget" if set(args.methods) & set(CONVERGED) else "") + ")")
    print(tabulate(rows, headers="keys", tablefmt="github", disable_numparse=True))


if __name__ == "__main__":
    scripts.run(main)
