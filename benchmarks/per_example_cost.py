"""Cost of VOGN's per-example gradient moments on the competition models, as a ratio to one plain SGD step.

    python benchmarks/per_example_cost.py [--batch 128] [--repeats 5] [--device cpu] [--tasks cifar10 imdb ...]

One minibatch of random tensors of each task's official input shape. Plain SGD step: forward, backward and
``torch.optim.SGD.step`` on one ``nn.Module``. Against it, in the same run, the mean and mean square of the
per-example gradients (``approximators.per_example.gradient_moments``, one member, into outputs it reuses, as
VOGN does) by the path the model takes (layer-wise rules; Goodfellow's identity on the MLP) and by the generic
``vmap(grad)`` path. Each figure is the fastest of ``--repeats`` (the machine is shared).
"""

from __future__ import annotations

import time

import torch
from tabulate import tabulate

from approximators import per_example
from bench import scripts
from bench.arguments import positive_whole
from bench.functional import StackedModel, seeded_module
from bench.runner import resolve_device
from bench.tasks.competition import SPECS, generated_task


def fastest(step, repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--batch", type=positive_whole, default=128)
    parser.add_argument("--repeats", type=positive_whole, default=5)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    parser.add_argument("--tasks", nargs="+", choices=list(SPECS), default=list(SPECS))
    args = parser.parse_args()
    device = resolve_device(args.device)
    rows = []
    for name in args.tasks:
        task = generated_task(name, args.batch, device=device)
        module = seeded_module(task.model_factory, 0).to(device)
        optimiser = torch.optim.SGD(module.parameters(), lr=1e-3)
        x, y = task.x_train[:args.batch], task.y_train[:args.batch]

        def plain_step():
            optimiser.zero_grad()
            (-task.likelihood.log_prob(module(x), y).mean()).backward()
            optimiser.step()

        model = StackedModel(task.model_factory())
        params = model.layout.flatten(StackedModel.stack([module])).detach()
        xs, ys = x.unsqueeze(0), y.unsqueeze(0)
        per_example.gradient_moments(model, task.likelihood, params, xs, ys)  # finds the model's plan
        plan = per_example._LAYER_PLANS.get(model)
        path = "Goodfellow (MLP)" if model.mlp_layers is not None else "layer-wise" if plan else "vmap"
        plain_step()
        plain = fastest(plain_step, args.repeats, device)
        out = (torch.empty_like(params), torch.empty_like(params))  # reused, as a training loop does
        fast = fastest(lambda: per_example.gradient_moments(model, task.likelihood, params, xs, ys, out=out),
                       args.repeats, device)
        generic = fastest(lambda: per_example._vmap_moments(model, task.likelihood, params, xs, ys, out),
                          max(1, args.repeats // 2), device)
        rows.append({"task": name, "plain SGD step (s)": plain, "path": path, "moments / step": fast / plain,
                     "vmap moments / step": generic / plain})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {device}, batch {args.batch}")
    print(tabulate(rows, headers="keys", floatfmt=".3f"))


if __name__ == "__main__":
    scripts.run(main)
