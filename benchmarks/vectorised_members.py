"""Cost of K ensemble members trained in one vectorised pass against K members trained one after another.

    python benchmarks/vectorised_members.py [--epochs 20]

For each embedded task and K in (3, 10): wall time of ``ae`` with K members trained together
(``vectorise=true``) and one at a time (``vectorise=false``), same seed, same epochs per member,
and the ratio to one plain SGD epoch of the same model measured in the same run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).parent))
from cost import plain_sgd_epoch, run_method  # noqa: E402

from bench.tasks import get_task, task_names  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20, help="epochs per member")
    args = parser.parse_args()
    rows = []
    for name in task_names():
        task = get_task(name)
        sgd_epoch = min(plain_sgd_epoch(task, 64) for _ in range(3))
        for k in (3, 10):
            timings = {}
            for vectorise in ("true", "false"):
                overrides = {"epochs": str(args.epochs), "vectorise": vectorise}
                seconds, epochs = run_method(task, "ae", k * args.epochs, overrides)
                timings[vectorise] = seconds / epochs / sgd_epoch
            rows.append({"task": name, "K": k, "vectorised epoch / SGD epoch": timings["true"],
                         "one-at-a-time epoch / SGD epoch": timings["false"],
                         "speed-up": timings["false"] / timings["true"]})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU; {args.epochs} epochs per member; "
          "plain SGD epoch at batch 64")
    print(tabulate(rows, headers="keys", floatfmt=".2f"))


if __name__ == "__main__":
    main()
