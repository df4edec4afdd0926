"""What ``MAX_DRAWS`` (the most draws a predictive may average, ``--set samples=``) bounds: the seconds one draw
takes (a pass of the network over the test set) on each task, and what ``MAX_DRAWS`` draws take, beside one plain SGD
epoch of the same model.

    python benchmarks/predictive_draws.py [--tasks toy-gap diabetes-gap digits digits-cnn digits-lstm] [--draws 30]

Per task, on one thread: the mean-field predictive (``mfvi``'s and ``vogn``'s, :func:`mean_field_predictive`) of
``--draws`` draws around the network's initial weights (the values do not change the cost), timed after a warm-up of
two draws, then extrapolated to ``MAX_DRAWS`` draws; ``plain``: one plain SGD epoch at batch size 64
(``benchmarks/cost.py``'s). Run on 2026-11-25 on a busy 2-core machine (load 8), ``--draws 30`` and ``--draws 100``:
1 s (toy-gap) to 18-26 s (digits-lstm, 0.12 plain epochs per draw) at ``MAX_DRAWS`` = 1000; the cap was 10^5 draws
before, 1 to 2 minutes on toy-gap and 30 to 44 minutes on digits-lstm.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cost import plain_sgd_epoch  # noqa: E402

from approximators.base import MAX_DRAWS, Problem, mean_field_predictive  # noqa: E402
from approximators.updates import NoiseStream  # noqa: E402
from bench import scripts
from bench.arguments import positive_whole
from bench.budget import BudgetMeter  # noqa: E402
from bench.functional import StackedModel, seeded_module  # noqa: E402
from bench.tasks import get_task, task_names  # noqa: E402


def seconds_per_draw(task, draws: int) -> float:
    problem = Problem.for_task(task, BudgetMeter(1, task.n_train))
    layout = StackedModel(seeded_module(task.model_factory, 0)).layout
    mean = layout.flatten({name: p.detach()[None] for name, p in seeded_module(task.model_factory, 0).named_parameters()})
    std = torch.full_like(mean, 0.01)
    generator = torch.Generator().manual_seed(0)
    noise = NoiseStream([torch.Generator().manual_seed(1)], mean)
    mean_field_predictive(problem, generator, layout, mean, std, noise, 2)  # warm-up
    started = time.perf_counter()
    mean_field_predictive(problem, generator, layout, mean, std, noise, draws)
    return (time.perf_counter() - started) / draws


def main() -> None:
    parser = scripts.parser(__file__, __doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=task_names())
    parser.add_argument("--draws", type=positive_whole, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name in args.tasks:
        task = get_task(name)
        per_draw, plain = seconds_per_draw(task, args.draws), plain_sgd_epoch(task, 64)
        rows.append({"task": name, "test rows": task.n_test, "s per draw": f"{per_draw:.4f}",
                     "draw / plain epoch": f"{per_draw / plain:.2f}", f"{MAX_DRAWS} draws (s)": f"{per_draw * MAX_DRAWS:.0f}",
                     "plain epoch (s)": f"{plain:.3f}"})
    print(tabulate(rows, headers="keys"))


if __name__ == "__main__":
    scripts.run(main)
