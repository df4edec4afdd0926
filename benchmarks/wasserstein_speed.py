"""Our exact integer-grid 1-D Wasserstein distances against POT's ``ot.wasserstein_1d``, side by side.

    python benchmarks/wasserstein_speed.py [--repeats 7]

Both compute W1 and W2 for every test point of a regression predictive in one call: 256 points x
1000 samples against 1000 reference samples (the UCI-Gap shape), and against 700 (unequal counts).
Reports the best of ``--repeats`` wall times and POT's time as a ratio to ours, and the largest
relative difference between the two results (they must agree to 1e-9).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from tabulate import tabulate

from bench import metrics, optional, scripts
from bench.arguments import positive_whole


def best_seconds(f, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        f()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--repeats", type=positive_whole, default=7)
    args = parser.parse_args()
    ot = optional.load("ot", "timing POT's wasserstein_1d")
    rng = np.random.default_rng(0)
    rows = []
    for reference_samples in (1000, 700):
        a = rng.standard_normal((256, 1000))
        b = 1.3 * rng.standard_normal((256, reference_samples)) + 0.2
        at, bt = torch.from_numpy(a.T.copy()), torch.from_numpy(b.T.copy())
        for p, ours in ((1, metrics.w1_distance), (2, metrics.w2_distance)):
            pot_numpy = lambda: np.mean(ot.wasserstein_1d(a.T, b.T, p=p) ** (1 / p))  # noqa: E731
            pot_torch = lambda: float(torch.mean(ot.wasserstein_1d(at, bt, p=p) ** (1 / p)))  # noqa: E731
            ours_s = best_seconds(lambda: ours(a, b), args.repeats)
            numpy_s, torch_s = best_seconds(pot_numpy, args.repeats), best_seconds(pot_torch, args.repeats)
            value = ours(a, b)
            rows.append({"shape": f"256 x 1000 vs {reference_samples}", "metric": f"W{p}", "ours (ms)": ours_s * 1e3,
                         "POT numpy / ours": numpy_s / ours_s, "POT torch / ours": torch_s / ours_s,
                         "max rel. difference": max(abs(pot_numpy() - value), abs(pot_torch() - value)) / value})
    print(f"numpy {np.__version__}, POT {ot.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(tabulate(rows, headers="keys", floatfmt=".3g"))


if __name__ == "__main__":
    scripts.run(main)
