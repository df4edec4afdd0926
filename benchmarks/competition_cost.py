"""Cost of one charged training epoch on the competition models, as a ratio to one plain SGD epoch.

    python benchmarks/competition_cost.py [--rows 512] [--device cpu] [--tasks dermamnist uci-gap ...] [--methods ...]
                                          [--marginal]

The data are random tensors of each task's official input shape (no download needed; the cost of an
epoch does not depend on the values), ``--rows`` examples. Plain SGD: ``torch.optim.SGD`` on one
``nn.Module`` at the method's batch size, no ensembling. Every method runs a short run
(:data:`SHORT_RUNS`); the ratio is per charged epoch, so for vectorised members or chains (``de``: 5
members in one pass) a ratio below 1 is the gain from vectorising. ``--marginal`` also runs each method at
twice its short budget and reports the cost of the extra epochs alone (the run's fixed cost, such as the
predictive's passes, cancels), the figure a long run approaches: after one discarded warm-up run, the median
of three such pairs of runs.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cost import plain_sgd_epoch  # noqa: E402

from approximators import METHODS, resolve_config  # noqa: E402
from bench import scripts
from bench.arguments import positive_whole
from bench.runner import metered, resolve_device  # noqa: E402
from bench.tasks import Task  # noqa: E402
from bench.tasks.competition import SPECS, generated_task  # noqa: E402

SHORT_RUNS = {
    # (budget, settings) per method: a few epochs per member or chain, every part of the method exercised.
    "sgd": (2, {}),
    "de": (10, {"members": "5"}),
    "ae": (4, {"epochs": "2"}),
    "sae": (4, {"first_epochs": "2", "sequential_epochs": "1", "chains": "1"}),
    "swag": (4, {}),
    "swag-diag": (4, {}),
    "multiswag": (8, {"runs": "2"}),
    "sgld": (4, {"chains": "2"}),
    "csgmcmc": (4, {"samples_per_cycle": "1", "exploration": "0.5"}),
    "vogn": (4, {}),
    "mfvi": (4, {"map_fraction": "0.25"}),
    "mc-dropout": (4, {}),
    "laplace": (4, {}),
    # Full batch: every epoch is one leapfrog step (or a step of the step-size search) of one chain.
    "hmc": (60, {"chains": "2", "leapfrog_steps": "4"}),
}

# The vectorised members and chains against the same ones trained one after another (``--methods`` names them).
SEQUENTIAL = {f"{method}-sequential": method for method in ("ae", "sae", "sgld")}

MARGINAL_REPEATS = 3


def short_run(task: Task, method: str, device: torch.device, scale: int = 1) -> tuple[object, float, float, int]:
    """``method``'s short run (training and predictive) at ``scale`` times its budget, seed 0: the fitted method,
    its seconds, its charged epochs and its batch size."""
    if method in SEQUENTIAL:
        budget, overrides = SHORT_RUNS[SEQUENTIAL[method]]
        method, overrides = SEQUENTIAL[method], {**overrides, "vectorise": "false"}
    else:
        budget, overrides = SHORT_RUNS[method]
    cls = METHODS[method]
    config = resolve_config(cls, task.name, overrides)
    problem, data = metered(task, budget * scale, device)
    started = time.perf_counter()
    fitted = cls(config)
    fitted.fit(problem, data, torch.Generator().manual_seed(0))
    if device.type == "cuda":
        torch.cuda.synchronize()
    # A full-batch method's epoch is one gradient of the whole training set: its plain peer is one step of
    # full-batch gradient descent.
    batch = getattr(config, "batch_size", task.n_train)
    return fitted, time.perf_counter() - started, data.meter.epochs_used, batch


def method_run(task: Task, method: str, device: torch.device, scale: int = 1) -> tuple[float, float, int]:
    """Seconds and charged epochs of ``method``'s short run (training and predictive) at ``scale`` times its
    budget, and its batch size."""
    return short_run(task, method, device, scale)[1:]


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--rows", type=positive_whole, default=512)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    parser.add_argument("--tasks", nargs="+", choices=list(SPECS), default=list(SPECS))
    parser.add_argument("--methods", nargs="+", default=list(SHORT_RUNS), choices=[*SHORT_RUNS, *SEQUENTIAL])
    parser.add_argument("--marginal", action="store_true", help="also the marginal cost of an epoch")
    scripts.out_option(parser)
    args = parser.parse_args()
    started = time.monotonic()
    device = resolve_device(args.device)
    rows, plain_seconds = [], {}
    for name in args.tasks:
        task = generated_task(name, args.rows, test_rows=min(args.rows, 64), device=device)
        plain = {}  # batch size -> seconds of one plain SGD epoch
        row = {"task": name, "rows": args.rows}
        method_run(task, "sgd", device)  # warm-up: the device's context, kernel choices and caches
        for method in args.methods:
            try:
                seconds, epochs, batch = method_run(task, method, device)
            except Exception as error:  # one method failing on one model leaves the others' figures
                row[method] = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:80]}"
                print(name, method, row[method], flush=True)
                continue
            if batch not in plain:
                plain[batch] = min(plain_sgd_epoch(task, batch, device) for _ in range(2))
            row[method] = seconds / epochs / plain[batch]
            print(name, method, f"{row[method]:.2f}", flush=True)
            if args.marginal:
                extra = []
                for _ in range(MARGINAL_REPEATS):
                    seconds, epochs, _ = method_run(task, method, device)
                    longer_seconds, longer_epochs, _ = method_run(task, method, device, scale=2)
                    extra.append((longer_seconds - seconds) / (longer_epochs - epochs))
                row[f"{method} marginal"] = statistics.median(extra) / plain[batch]
        row["plain SGD epoch (s), by batch"] = ", ".join(f"{b}: {t:.3f}" for b, t in sorted(plain.items()))
        plain_seconds[name] = {str(b): t for b, t in sorted(plain.items())}
        rows.append(row)
        print(row, flush=True)  # a long run on a lent machine keeps each task's row if a later one is cut off
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {device}; "
          "one charged epoch of each method / one plain SGD epoch at the method's batch size")
    print(tabulate(rows, headers="keys", floatfmt=".2f"))
    scripts.keep(args.out, __file__, started, {"charged": rows}, device=str(device), rows=args.rows,
                 plain_seconds=plain_seconds)


if __name__ == "__main__":
    scripts.run(main)
