"""Cost of training and of HMC on the embedded tasks, measured in one run on one machine.

    python benchmarks/cost.py [--epochs 10] [--repeats 5] [--methods sgd vogn ...] [--tasks ...] [--no-hmc]
                              [--out FILE.json]

1. One charged epoch of each method (its whole ``fit``: training, validation and the predictive's
   test passes, divided by the epochs charged), as a ratio to one plain SGD epoch of the same model
   in the same run (plain SGD: ``torch.optim.SGD`` on one ``nn.Module`` at the method's batch size,
   no ensembling). The machine is shared and an epoch of these models takes milliseconds, so each
   repeat times plain SGD epochs right before the method's runs and the tables show the median of
   the repeats' ratios. A run also has a fixed cost (building the model, the predictive's test
   passes: about ten plain epochs of these tiny models), so a second run at three times the budget
   splits the cost into the marginal cost of a charged epoch and the fixed cost of a run.
2. HMC full-batch gradient evaluations per second with 1 chain and with 8 vectorised chains
   (per chain, so the vectorisation gain is the ratio of the two).

``--out`` keeps the tables (:func:`bench.scripts.keep`); docs/speed.md's are written from
``benchmarks/results/speed/cost.json``.
"""

from __future__ import annotations

import statistics
import time

import torch
from tabulate import tabulate

from approximators import METHODS, resolve_config
from approximators.base import member_seeds
from bench import scripts
from bench.arguments import positive_whole
from bench.functional import ParameterLayout, StackedModel, seeded_module
from bench.runner import metered
from bench.tasks import get_task, task_names
from reference.generate import task_target


MEASURED = {
    "sgd": None,
    "de": None,
    # Members short enough for the measured budget (``--epochs``; at 50: 5 AE members of 10 epochs,
    # SAE with E0 = 10, E_s = 2 in 2 chains of 8 members).
    "ae": {"epochs": "10"},
    "sae": {"first_epochs": "10", "sequential_epochs": "2"},
    "swag": None,
    "swag-diag": None,
    # Two runs, so that a 10-epoch measurement leaves each run two snapshots.
    "multiswag": {"runs": "2"},
    "sgld": None,
    # One sample per cycle, noise from half-way: a 10-epoch cycle then holds a sample.
    "csgmcmc": {"samples_per_cycle": "1", "exploration": "0.5"},
    "vogn": None,
    "mfvi": None,
    "mc-dropout": None,
    "laplace": None,
    # One full-data gradient per epoch; shorter trajectories than its default, so that 10 epochs hold a sample.
    "hmc": {"leapfrog_steps": "2"},
}


def plain_sgd_epoch(task, batch_size: int, device: torch.device = torch.device("cpu"), epochs: int = 1) -> float:
    """Seconds per epoch of plain SGD, the fastest of ``epochs`` epochs."""
    model = seeded_module(task.model_factory, 0).to(device)
    optimiser = torch.optim.SGD(model.parameters(), lr=1e-3)
    n = task.n_train
    fastest = float("inf")
    for _ in range(epochs):
        started = time.perf_counter()
        order = torch.randperm(n, device=device)
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            loss = -task.likelihood.log_prob(model(task.x_train[idx]), task.y_train[idx]).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        fastest = min(fastest, time.perf_counter() - started)
    return fastest


def run_method(task, name: str, budget: float, overrides: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds of a method's ``fit`` (training and predictive) and the epochs it was charged."""
    cls = METHODS[name]
    config = resolve_config(cls, task.name, overrides)
    problem, data = metered(task, budget)
    started = time.perf_counter()
    cls(config).fit(problem, data, torch.Generator().manual_seed(0))
    return time.perf_counter() - started, data.meter.epochs_used


def hmc_gradients_per_second(task, n_chains: int, evaluations: int = 200) -> float:
    target, _ = task_target(task, torch.float64, torch.device("cpu"))
    seeds = member_seeds(torch.Generator().manual_seed(0), n_chains)
    theta = ParameterLayout.of(task.model_factory()).flatten(
        StackedModel.stack([seeded_module(task.model_factory, s) for s in seeds])).double()
    target.evaluate(theta)
    started = time.perf_counter()
    for _ in range(evaluations):
        target.evaluate(theta)
    return evaluations * n_chains / (time.perf_counter() - started)


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_whole, default=10, help="epochs charged per method measurement")
    parser.add_argument("--repeats", type=positive_whole, default=5)
    parser.add_argument("--methods", nargs="+", choices=list(MEASURED), default=list(MEASURED))
    parser.add_argument("--no-hmc", action="store_true", help="skip the HMC table")
    parser.add_argument("--tasks", nargs="+", default=task_names(), choices=task_names())
    scripts.out_option(parser)
    args = parser.parse_args()
    started = time.monotonic()
    torch.manual_seed(0)
    rows, marginal_rows, fixed_rows, hmc_rows = [], [], [], []
    for name in args.tasks:
        task = get_task(name)
        plain = {}  # batch size -> fastest plain SGD epoch seen (seconds)
        row, marginal_row, fixed_row = {"task": name}, {"task": name}, {"task": name}
        for method in args.methods:
            overrides = MEASURED[method]
            # A full-batch method (hmc) is set against plain SGD at the batch size of the task's `sgd`.
            batch = getattr(resolve_config(METHODS[method], name, overrides), "batch_size", None) or \
                resolve_config(METHODS["sgd"], name).batch_size
            ratios, marginals, fixed = [], [], []
            for _ in range(args.repeats):
                reference = plain_sgd_epoch(task, batch, epochs=10)
                seconds, epochs = run_method(task, method, args.epochs, overrides)
                more_seconds, more_epochs = run_method(task, method, 3 * args.epochs, overrides)
                ratios.append(seconds / epochs / reference)
                per_epoch = (more_seconds - seconds) / (more_epochs - epochs)
                marginals.append(per_epoch / reference)
                fixed.append((seconds - per_epoch * epochs) / reference)
                plain[batch] = min(plain.get(batch, reference), reference)
            row[method] = statistics.median(ratios)
            marginal_row[method] = statistics.median(marginals)
            fixed_row[method] = statistics.median(fixed)
        row["plain SGD epoch (ms), by batch"] = ", ".join(f"{b}: {1e3 * t:.1f}" for b, t in sorted(plain.items()))
        rows.append(row)
        marginal_rows.append(marginal_row)
        fixed_rows.append(fixed_row)
        if args.no_hmc:
            continue
        one, many = hmc_gradients_per_second(task, 1), hmc_gradients_per_second(task, 8)
        hmc_rows.append({"task": name, "grad evals/s, 1 chain": one, "grad evals/s, 8 chains together": many,
                         "speed-up": round(many / one, 2)})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU; "
          f"one charged epoch of each method / one plain SGD epoch ({args.epochs} epochs charged)")
    print(tabulate(rows, headers="keys", floatfmt=".2f"))
    print(f"\nthe same, without the fixed cost: the extra seconds of a {3 * args.epochs}-epoch run per extra "
          f"epoch charged, / one plain SGD epoch")
    print(tabulate(marginal_rows, headers="keys", floatfmt=".2f"))
    print("\nthe fixed cost of a run (setup and the predictive's test passes), in plain SGD epochs")
    print(tabulate(fixed_rows, headers="keys", floatfmt=".1f"))
    if hmc_rows:
        print()
        print(tabulate(hmc_rows, headers="keys", floatfmt=".0f"))
    scripts.keep(args.out, __file__, started, {"charged": rows, "marginal": marginal_rows, "fixed": fixed_rows,
                                               "hmc": hmc_rows}, epochs=args.epochs, repeats=args.repeats)


if __name__ == "__main__":
    scripts.run(main)
