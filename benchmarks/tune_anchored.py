"""Random search of the anchored methods' optimiser settings on the embedded tasks.

    python benchmarks/tune_anchored.py [--trials 16] [--seed 0] [--tasks digits-cnn digits-lstm]

The SAE authors tuned, per task, the first member's (batch, lr -> min_lr, beta1, beta2) and the
sequential members' (lr -> min_lr, beta1, beta2). This does the same for the embedded tasks with a
seeded random search whose objective is the **validation** negative log-likelihood on the 10% of the
training set the methods hold out: never the HMC reference, which would tune the benchmark to its
own answer. First members train E0 epochs from scratch towards a prior-drawn anchor; sequential
members start from the best first member, move the anchor by one guided-walk step and train E_s
epochs. The winners are printed as the dictionaries that ``approximators/anchored.py`` and
``approximators/sae.py`` hold as defaults.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from approximators import guided_walk
from approximators.sae import SAE_DEFAULTS
from approximators.training import AdamConfig, ValidationSplit, initial_members, train_members
from bench import scripts
from bench.arguments import positive_whole, seed_number
from bench.budget import BudgetMeter, MeteredData
from bench.functional import StackedModel
from bench.tasks import get_task, task_names


def validation_nll(model, params, task, split) -> float:
    with torch.no_grad():
        x, y = task.x_train[split.validation], task.y_train[split.validation]
        return float(-task.likelihood.log_prob(model(params, x, shared_input=True), y).mean())


def sample_schedule(rng: np.random.Generator, batch_choices: list[int], lr_range) -> AdamConfig:
    lr = math.exp(rng.uniform(*np.log(lr_range)))
    return AdamConfig(batch_size=int(rng.choice(batch_choices)), lr=lr,
                        min_lr=lr * math.exp(rng.uniform(np.log(1e-4), np.log(1e-1))),
                        beta1=rng.uniform(0.8, 0.95), beta2=rng.uniform(0.99, 0.9999))


def train(task, model, params, anchors, schedule, epochs, split, seed) -> dict:
    data = MeteredData(task.x_train, task.y_train, BudgetMeter(10 * epochs + 10, task.n_train))
    return train_members(model, params, data, task.likelihood, task.prior_variance, epochs, schedule,
                         [seed], anchors=anchors, split=split)


def tune(task_name: str, trials: int, seed: int) -> tuple[dict, dict]:
    task = get_task(task_name)
    defaults = SAE_DEFAULTS[task_name]
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    split = ValidationSplit.random(task.n_train, 0.1, generator)
    model = StackedModel(task.model_factory())
    walk_generators = [torch.Generator().manual_seed(seed + 1)]
    walk = guided_walk.init(walk_generators, model.layout.size, task.prior_variance)
    anchors = model.layout.unflatten(walk.anchor)
    start = initial_members(task.model_factory, [seed])
    batches = [b for b in (16, 32, 64, 128) if b < len(split.fit)]

    first = []
    for _ in range(trials):
        schedule = sample_schedule(rng, batches, (1e-4, 3e-2))
        trained = train(task, model, start, anchors, schedule, 100, split, seed)
        first.append((validation_nll(model, trained, task, split), schedule, trained))
    first.sort(key=lambda t: t[0])
    best_nll, best_first, best_params = first[0]

    walk, _ = guided_walk.step(walk, walk_generators, defaults["walk_step"], task.prior_variance)
    anchors = model.layout.unflatten(walk.anchor)
    sequential = []
    for _ in range(trials):
        schedule = sample_schedule(rng, [best_first.batch_size], (1e-4, 1e-2))
        trained = train(task, model, best_params, anchors, schedule, defaults["sequential_epochs"], split, seed)
        sequential.append((validation_nll(model, trained, task, split), schedule))
    sequential.sort(key=lambda t: t[0])
    best_seq = sequential[0][1]
    print(f"{task_name}: first member validation NLL {best_nll:.4f} (worst trial {first[-1][0]:.4f}); "
          f"sequential member {sequential[0][0]:.4f} (worst {sequential[-1][0]:.4f})")
    round_ = lambda v: float(f"{v:.4g}")  # noqa: E731
    return (dict(batch_size=best_first.batch_size, lr=round_(best_first.lr), min_lr=round_(best_first.min_lr),
                 beta1=round_(best_first.beta1), beta2=round_(best_first.beta2)),
            dict(seq_lr=round_(best_seq.lr), seq_min_lr=round_(best_seq.min_lr),
                 seq_beta1=round_(best_seq.beta1), seq_beta2=round_(best_seq.beta2)))


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--trials", type=positive_whole, default=16)
    parser.add_argument("--seed", type=seed_number, default=0)
    parser.add_argument("--tasks", nargs="+", default=task_names(), choices=task_names())
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {name: tune(name, args.trials, args.seed) for name in args.tasks}
    print("\nfirst members:")
    for name, (first, _) in results.items():
        print(f'    "{name}": dict({", ".join(f"{k}={v}" for k, v in first.items())}),')
    print("sequential members:")
    for name, (_, seq) in results.items():
        print(f'    "{name}": dict({", ".join(f"{k}={v}" for k, v in seq.items())}),')


if __name__ == "__main__":
    scripts.run(main)
