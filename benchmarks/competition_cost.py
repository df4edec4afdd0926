"""Cost of one charged training epoch on the competition models, as a ratio to one plain SGD epoch.

    python benchmarks/competition_cost.py [--rows 512] [--device cpu] [--tasks dermamnist uci-gap ...]

The data are random tensors of each task's official input shape (no download needed; the cost of an
epoch does not depend on the values), ``--rows`` examples. Plain SGD: ``torch.optim.SGD`` on one
``nn.Module`` with the task's batch size, no ensembling. ``sgd`` is our metered trainer with one
member; ``de`` trains 5 members in one vectorised pass, so its ratio per member-epoch below 1 is the
gain from vectorising.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cost import plain_sgd_epoch  # noqa: E402

from approximators import METHODS, resolve_config  # noqa: E402
from bench.runner import metered  # noqa: E402
from bench.tasks import Task  # noqa: E402
from bench.tasks.competition import IMDB_VOCABULARY, SPECS  # noqa: E402

INPUTS = {"cifar10": (3, 32, 32), "cifar10c": (3, 32, 32), "imdb": (100,), "dermamnist": (3, 28, 28), "uci-gap": (8,)}


def synthetic_task(name: str, rows: int, device: torch.device) -> Task:
    spec, g = SPECS[name], torch.Generator().manual_seed(0)
    shape = (rows, *INPUTS[name])
    x = (torch.randint(0, IMDB_VOCABULARY, shape, generator=g) if name == "imdb"
         else torch.randn(shape, generator=g)).to(device)
    y = (torch.randn(rows, generator=g) if spec.n_classes is None
         else torch.randint(0, spec.n_classes, (rows,), generator=g)).to(device)
    return Task(name=name, version=spec.version, description="synthetic", x_train=x, y_train=y, x_test=x[:64],
                y_test=None, model_factory=spec.model_factory, architecture=spec.architecture,
                likelihood=spec.likelihood, prior_variance=spec.prior_variance, settings={}, n_classes=spec.n_classes)


def method_epoch(task: Task, method: str, members: int, device: torch.device) -> float:
    """Seconds per member-epoch of ``method`` trained for 2 epochs per member."""
    cls = METHODS[method]
    overrides = {"members": str(members)} if method == "de" else {}
    config = resolve_config(cls, task.name, overrides)
    problem, data = metered(task, 2 * members, device)
    started = time.perf_counter()
    cls(config).fit(problem, data, torch.Generator().manual_seed(0))
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / data.meter.epochs_used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", nargs="+", default=list(SPECS))
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = []
    for name in args.tasks:
        task = synthetic_task(name, args.rows, device)
        batch = resolve_config(METHODS["sgd"], name).batch_size
        sgd_epoch = min(plain_sgd_epoch(task, batch, device) for _ in range(2))
        rows.append({"task": name, "rows": args.rows, "batch": batch, "plain SGD epoch (s)": sgd_epoch,
                     "sgd / SGD": method_epoch(task, "sgd", 1, device) / sgd_epoch,
                     "de (5 vectorised) per member-epoch / SGD": method_epoch(task, "de", 5, device) / sgd_epoch})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {device}")
    print(tabulate(rows, headers="keys", floatfmt=".2f"))


if __name__ == "__main__":
    main()
