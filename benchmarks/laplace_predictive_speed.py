"""Laplace's last-layer predictive, before and after computing the body's features once, and the probit predictive,
as ratios to one plain SGD epoch of the same model on as many rows, measured side by side.

    python benchmarks/laplace_predictive_speed.py [--tasks digits digits-cnn digits-lstm dermamnist imdb cifar10]
                                                  [--rows 512] [--repeats 3] [--structure last-layer-kron]

Per task, on one thread: the network at its initial weights (the values do not change the cost), a posterior of
``--structure`` from one curvature epoch (not timed), then, after one discarded warm-up of each, interleaved
``--repeats`` times (the order rotated), and the median of each:

- ``plain``: one plain SGD epoch (``benchmarks/cost.py``'s, at Laplace's batch size of the task);
- ``whole``: the predictive before: the whole network at each of the 30 draws theta* + Delta (a
  :class:`PredictiveAccumulator` pass over the test rows per draw, as ``fit`` did);
- ``cached``: the ``sampling`` predictive now: the body's features once, then the 30 last layers in one product;
- ``probit``: the closed-form linearised predictive.

Embedded tasks use their own training and test rows; competition tasks (``dermamnist``: LeNet-5, ``imdb``: the
CNN-LSTM, ``cifar10``: ResNet-20-FRN) random rows of the official input shapes, ``--rows`` of them for training and
the same rows as the test set.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cost import plain_sgd_epoch  # noqa: E402

from approximators import METHODS, resolve_config  # noqa: E402
from approximators.base import PredictiveAccumulator  # noqa: E402
from approximators.laplace import (GaussianPosterior, _curvature_epoch, last_layer_predictive,  # noqa: E402
                                   last_layer_to_layout)
from bench import scripts
from bench.arguments import positive_whole
from bench.functional import StackedModel, seeded_module  # noqa: E402
from bench.runner import metered  # noqa: E402
from bench.tasks import get_task, task_names  # noqa: E402
from bench.tasks.competition import SPECS, generated_task  # noqa: E402

SAMPLES = 30


def task_of(name: str, rows: int):
    if name in task_names():
        return get_task(name)
    task = generated_task(name, rows)
    return dataclasses.replace(task, x_test=task.x_train)


def timed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def measure(name: str, rows: int, repeats: int, structure: str) -> dict:
    task = task_of(name, rows)
    config = resolve_config(METHODS["laplace"], task.name, {"structure": structure})
    problem, data = metered(task, 1)
    model = StackedModel(task.model_factory())
    theta = model.layout.flatten(StackedModel.stack([seeded_module(task.model_factory, 0)]))
    curvature = _curvature_epoch(problem, data, model, theta, structure, config.batch_size, order_seed=0)
    posterior = GaussianPosterior(structure, theta[0], 1 / task.prior_variance, task.n_train, last=curvature)

    def whole():
        draws, accumulator = torch.Generator().manual_seed(1), PredictiveAccumulator(problem, SAMPLES, torch.Generator())
        for _ in range(SAMPLES):
            delta = last_layer_to_layout(posterior.sample(draws), posterior.n_outputs, model.layout.size).to(theta)
            accumulator.add(model.layout.unflatten(theta + delta))
        accumulator.result()

    def predictive(kind):
        return lambda: last_layer_predictive(problem, model, theta, posterior, kind, SAMPLES,
                                             torch.Generator().manual_seed(1), torch.Generator())

    runs = {"plain": lambda: plain_sgd_epoch(task, config.batch_size), "whole": whole,
            "cached": predictive("sampling"), "probit": predictive("probit")}
    for run in runs.values():  # warm-up, discarded: first calls pay for lazy initialisation
        run()
    seconds = {key: [] for key in runs}
    for repeat in range(repeats):
        keys = list(runs)[repeat % len(runs):] + list(runs)[:repeat % len(runs)]  # rotated: no fixed order
        for key in keys:
            seconds[key].append(timed(runs[key]))
    median = {key: statistics.median(values) for key, values in seconds.items()}
    return {"task": name, "train / test rows": f"{task.n_train} / {task.x_test.shape[0]}",
            "plain epoch (s)": median["plain"],
            **{f"{key} / plain": median[key] / median["plain"] for key in ("whole", "cached", "probit")},
            "cached / whole": median["cached"] / median["whole"], "probit / whole": median["probit"] / median["whole"]}


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["digits", "digits-cnn", "digits-lstm", "dermamnist", "imdb",
                                                        "cifar10"], choices=task_names() + list(SPECS))
    parser.add_argument("--rows", type=positive_whole, default=512)
    parser.add_argument("--repeats", type=positive_whole, default=3)
    parser.add_argument("--structure", default="last-layer-kron", choices=["last-layer-kron", "last-layer-full"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [measure(name, args.rows, args.repeats, args.structure) for name in args.tasks]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, {args.structure}, {SAMPLES} draws; "
          f"median of {args.repeats} interleaved repeats")
    print(tabulate(rows, headers="keys", floatfmt=".3g"))


if __name__ == "__main__":
    scripts.run(main)
