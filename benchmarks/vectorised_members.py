"""Cost of K members, chains or runs trained in one vectorised pass against the same K trained one after another.

    python benchmarks/vectorised_members.py [--epochs 20] [--repeats 3] [--tasks toy-gap digits ...]

For each embedded task, each method with vectorised members and K in (3, 10): wall time of the
method's ``fit`` with K members in one pass, against K fits of one member each (``ae``: its own
``vectorise=false`` mode; the others: K runs with one chain or run, ``multiswag``'s single run being
``swag``), every member ``--epochs`` epochs. Both are shown as a ratio to one plain SGD epoch of the
same model measured in the same run, and the speed-up is their ratio (the fastest of ``--repeats``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).parent))
from cost import plain_sgd_epoch, run_method  # noqa: E402

from approximators import METHODS, resolve_config  # noqa: E402
from bench import scripts
from bench.arguments import positive_whole
from bench.tasks import get_task, task_names  # noqa: E402

# method -> (K members in one pass, one member alone): (method, settings) given K and the epochs per member.
SHORT_CYCLES = {"samples_per_cycle": "1", "exploration": "0.5"}  # a cycle of --epochs epochs still holds a sample
PAIRS = {
    "ae": (lambda k, e: ("ae", {"epochs": str(e)}), lambda e: ("ae", {"epochs": str(e), "vectorise": "false"})),
    "sgld": (lambda k, e: ("sgld", {"chains": str(k)}), lambda e: ("sgld", {"chains": "1"})),
    "csgmcmc": (lambda k, e: ("csgmcmc", {"chains": str(k), **SHORT_CYCLES}),
                lambda e: ("csgmcmc", {"chains": "1", **SHORT_CYCLES})),
    "multiswag": (lambda k, e: ("multiswag", {"runs": str(k)}), lambda e: ("swag", {})),
}


def seconds(task, method: str, budget: float, overrides: dict[str, str]) -> float:
    return run_method(task, method, budget, overrides)[0]


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_whole, default=20, help="epochs per member")
    parser.add_argument("--repeats", type=positive_whole, default=3)
    parser.add_argument("--methods", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--tasks", nargs="+", default=task_names(), choices=task_names())
    scripts.out_option(parser)
    args = parser.parse_args()
    started = time.monotonic()
    rows = []
    for name in args.tasks:
        task = get_task(name)
        for method in args.methods:
            together, alone = PAIRS[method]
            batch = resolve_config(METHODS[method], name, together(1, args.epochs)[1]).batch_size
            sgd_epoch = min(plain_sgd_epoch(task, batch, epochs=10) for _ in range(args.repeats))
            for k in (3, 10):
                member_epochs = k * args.epochs
                vectorised_method, vectorised_settings = together(k, args.epochs)
                vectorised = min(seconds(task, vectorised_method, member_epochs, vectorised_settings)
                                 for _ in range(args.repeats))
                alone_method, alone_settings = alone(args.epochs)
                if method == "ae":  # ae's one-at-a-time mode trains the same K members in one fit
                    sequential = min(seconds(task, alone_method, member_epochs, alone_settings)
                                     for _ in range(args.repeats))
                else:
                    sequential = min(sum(seconds(task, alone_method, args.epochs, alone_settings) for _ in range(k))
                                     for _ in range(args.repeats))
                rows.append({"task": name, "method": method, "K": k,
                             "vectorised epoch / SGD epoch": vectorised / member_epochs / sgd_epoch,
                             "one-at-a-time epoch / SGD epoch": sequential / member_epochs / sgd_epoch,
                             "speed-up": sequential / vectorised})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU; {args.epochs} epochs per member; "
          "plain SGD epoch at the method's batch size")
    print(tabulate(rows, headers="keys", floatfmt=".2f"))
    scripts.keep(args.out, __file__, started, {"speed-up": rows}, epochs=args.epochs, repeats=args.repeats)


if __name__ == "__main__":
    scripts.run(main)
