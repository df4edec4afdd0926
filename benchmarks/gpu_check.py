"""Every method on a GPU, on each competition model: the cost of an epoch, the memory, and whether a run repeats.

    python benchmarks/gpu_check.py [--cpu] [--rows 512] [--tasks cifar10 ...] [--methods sgd ...] [--seconds 420]
                                   [--threads 1] [--out FILE.json]

Made for a session lent a GPU for a few minutes: one command, within 8 minutes on one H100 at the defaults. Each
competition model (ResNet-20-FRN, AlexNet, CNN-LSTM, LeNet-5, MLP) gets ``--rows`` random examples of its official
input shape (:func:`bench.tasks.competition.generated_task`; the values do not change what an epoch costs), and
every method runs the short run of ``competition_cost.py`` (:data:`competition_cost.SHORT_RUNS`) twice, seed 0,
after one warm-up run of ``sgd`` on the model. For each method and model:

- ``epoch / plain SGD``: the first run's seconds per charged epoch over one plain SGD epoch (``torch.optim.SGD`` on
  one ``nn.Module``) at the method's batch size on the same device, the faster of two;
- ``peak MiB``: the most memory PyTorch's CUDA allocator held during the first run
  (``torch.cuda.max_memory_allocated``); empty on the CPU, where no allocator counts it;
- ``same bits``: whether the two runs' predictives are the same bytes (on a GPU, PyTorch's default kernels may
  add in another order from one run to the next: this says whether they did);
- ``finite``: whether both predictives are free of NaN and infinity.

A method that fails on a model is that row's ``failed: ...`` (a CUDA out-of-memory included); the others go on.
Past ``--seconds`` of checking no run starts, and each case left is a row saying so. With ``--out`` the table so far
is kept after every model, so a machine taken back mid-way leaves what it measured. ``--cpu`` runs it all on the
CPU: how the script itself is tested, with a few rows.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from competition_cost import SHORT_RUNS, short_run  # noqa: E402
from cost import plain_sgd_epoch  # noqa: E402

from approximators import METHODS  # noqa: E402
from bench import scripts  # noqa: E402
from bench.arguments import positive_whole  # noqa: E402
from bench.errors import BenchError, describe_failure  # noqa: E402
from bench.runner import resolve_device  # noqa: E402
from bench.tasks.competition import SPECS, generated_task  # noqa: E402

LIMIT_SECONDS = 420
"""The default time after which no run starts: a lent GPU's session has minutes, and 8 fit one call with room."""


def check(task, method: str, device: torch.device) -> dict:
    """Two short runs of ``method`` on ``task``: the first's seconds, charged epochs, batch size and peak memory
    (MiB, None off CUDA), and whether the runs' predictives are the same bytes and finite."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    first, seconds, epochs, batch = short_run(task, method, device)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    second = short_run(task, method, device)[0]
    ours, again = np.asarray(first.predictive()), np.asarray(second.predictive())
    return {"seconds": seconds, "epochs": epochs, "batch": batch, "peak": peak,
            "same": ours.shape == again.shape and ours.dtype == again.dtype and ours.tobytes() == again.tobytes(),
            "finite": bool(np.isfinite(ours).all() and np.isfinite(again).all())}


def device_line(device: torch.device) -> str:
    """The device, named as a table's reader needs it: the card and its CUDA and cuDNN, or the CPU."""
    if device.type != "cuda":
        return f"cpu, torch {torch.__version__}, {torch.get_num_threads()} thread(s)"
    return (f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()}")


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU instead (the script's own test)")
    parser.add_argument("--rows", type=positive_whole, default=512, help="random training examples per model")
    parser.add_argument("--tasks", nargs="+", default=list(SPECS), choices=list(SPECS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seconds", type=positive_whole, default=LIMIT_SECONDS,
                        help="no run starts after this many seconds of checking")
    parser.add_argument("--threads", type=positive_whole, default=1, help="torch's CPU threads")
    scripts.out_option(parser)
    args = parser.parse_args()
    missing = [method for method in args.methods if method not in SHORT_RUNS]
    if missing:
        raise BenchError(f"no short run for {', '.join(missing)}: add one to SHORT_RUNS in "
                         "benchmarks/competition_cost.py")
    torch.set_num_threads(args.threads)
    device = resolve_device("cpu" if args.cpu else "cuda")
    started = time.monotonic()
    print(device_line(device), flush=True)
    rows = []
    for name in args.tasks:
        task, plain = None, {}  # batch size -> seconds of one plain SGD epoch
        for method in args.methods:
            row = {"task": name, "method": method}
            rows.append(row)
            if time.monotonic() - started > args.seconds:
                row["note"] = f"not run: past --seconds {args.seconds}"
            else:
                try:
                    if task is None:
                        task = generated_task(name, args.rows, test_rows=min(args.rows, 64), device=device)
                        short_run(task, "sgd", device)  # warm-up: the device's context, kernel choices and caches
                    found = check(task, method, device)
                    if found["batch"] not in plain:
                        plain[found["batch"]] = min(plain_sgd_epoch(task, found["batch"], device) for _ in range(2))
                except Exception as error:  # one method failing on one model leaves the others' rows
                    row["note"] = f"failed: {describe_failure(error)[1][:120]}"
                else:
                    row.update({"epoch / plain SGD": found["seconds"] / found["epochs"] / plain[found["batch"]],
                                "peak MiB": found["peak"], "same bits": found["same"], "finite": found["finite"],
                                "seconds": found["seconds"]})
            print(", ".join(f"{key}: {value:.3g}" if isinstance(value, float) else f"{key}: {value}"
                            for key, value in row.items()), flush=True)
        scripts.keep(args.out, __file__, started, {"gpu check": rows}, device=device_line(device), rows=args.rows)
    print(f"{device_line(device)}; {args.rows} random rows per model; one charged epoch of each method's first run / "
          "one plain SGD epoch at its batch size")
    print(tabulate(rows, headers="keys", floatfmt=".3g", missingval=""))


if __name__ == "__main__":
    scripts.run(main)
