"""The noise floor's rule against exact samplers: how far d(H1, H2) / sqrt(2), computed from one reference alone, is
from the mean distance of independent exact samplers to that reference.

    python benchmarks/floor_simulation.py [--replicates-regression 400] [--replicates-classification 600]

A "reference" here is built as ``reference generate`` builds one, from 8 chains whose law is exactly the target (AR(1)
chains with coefficient 0.7 started in it: autocorrelated like MCMC, but exact): a regression reference from the
closed-form posterior of Bayesian linear regression (:func:`reference.conjugate.linear_gaussian`), its 1000 draws of y
taken chain-major; a classification one as the average of a logistic model's probabilities over weights drawn from a
Gaussian. An independent sampler is built the same way. Printed per metric: the floor's relative bias (mean of
floor - distance over the replicates, over the mean distance) and its standard error; as a control, the bias of the
halves' distance undivided; and the estimators the floor did not choose (one split of the chains into halves, or 8
parts of one chain each), with every estimator's spread over the replicates (its relative standard deviation: how
far one reference's floor may be from another's). ``tests/reference/test_evidence.py`` asserts the same figures at half the replicates.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np

from bench import scripts
from bench.arguments import positive_whole

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHAINS, DRAWS, RHO = 8, 150, 0.7


def exact_chains(mean: np.ndarray, cholesky: np.ndarray, rng: np.random.Generator, draws: int = DRAWS) -> np.ndarray:
    """``(CHAINS, draws, D)`` draws of N(mean, L L^T), each chain an AR(1) with coefficient RHO started in the law."""
    noise = rng.standard_normal((CHAINS, draws, len(mean))) @ cholesky.T
    out = np.empty_like(noise)
    out[:, 0] = noise[:, 0]
    for t in range(1, draws):
        out[:, t] = RHO * out[:, t - 1] + math.sqrt(1 - RHO**2) * noise[:, t]
    return out + mean


def relative_bias(estimates: list[float], truths: list[float]) -> tuple[float, float]:
    """The mean of estimate - truth over replicates relative to the truth's mean, and its standard error."""
    difference = np.asarray(estimates) - np.asarray(truths)
    scale = float(np.mean(truths))
    return float(difference.mean()) / scale, float(difference.std(ddof=1)) / math.sqrt(len(difference)) / scale


def _evidence(chains: int, draws: int, q: int, chain_average: np.ndarray | None = None):
    """An evidence holding what the floor reads: its number of chains, and the chains' averages (classification)."""
    from reference.evidence import Evidence

    return Evidence(np.zeros(1), np.zeros((chains, draws, 1, q)), np.zeros((chains, draws, 2)),
                    np.zeros((chains, 1)), np.zeros((chains, 1)), np.zeros(chains), chain_average)


def regression(replicates: int, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Relative bias of the W1 and W2 floors (and of W1's halves undivided) against exact samplers."""
    from bench import metrics
    from reference.conjugate import linear_gaussian
    from reference.evidence import noise_floor
    from reference.generate import predictive_samples

    problem = linear_gaussian("floor", rows=20, residual=0.5)
    phi_test = np.concatenate([problem.x_test.numpy(), np.ones((len(problem.x_test), 1))], axis=1)
    mean, cholesky = problem.mean.numpy(), np.linalg.cholesky(problem.covariance.numpy())
    rng = np.random.default_rng(seed)

    def reference() -> np.ndarray:
        f = exact_chains(mean, cholesky, rng) @ phi_test.T  # (C, S, N)
        return predictive_samples(np.stack([f, np.full_like(f, problem.noise)], axis=-1), rng)

    kept = _evidence(CHAINS, DRAWS, 2)
    estimates, truths = [], []
    for _ in range(replicates):
        r, a = reference(), reference()
        estimates.append({**noise_floor(problem.task, r, kept)["all"], **_alternatives(problem.task, r, kept)})
        truths.append({"w1": metrics.w1_distance(a, r), "w2": metrics.w2_distance(a, r)})
    found = {metric: relative_bias([e[metric] for e in estimates], [t[metric] for t in truths])
             for metric in ("w1", "w2")}
    found["w1, halves undivided"] = relative_bias([e["w1"] * math.sqrt(2) for e in estimates],
                                                  [t["w1"] for t in truths])
    return {**found, **_alternative_biases(estimates, truths, ("w1", "w2"))}


def _alternatives(task, reference: np.ndarray, kept) -> dict[str, float]:
    """The estimators the floor did not choose: one split (the first and second half of the chains) and the 8 chains
    as 8 parts, each pair's distance / sqrt(8)."""
    from reference.evidence import parts_check

    parts = parts_check(task, reference, kept)
    return {f"{metric}, {name}": parts[k][metric] for k, name in (("2", "one split"), ("8", "8 parts"))
            for metric in parts[k]}


def _alternative_biases(estimates: list[dict], truths: list[dict], metrics: tuple[str, ...]) -> dict:
    """Each alternative estimator's relative bias, and every estimator's relative standard deviation over the
    replicates (how far one reference's floor is from another's)."""
    out = {}
    for metric in metrics:
        distance = "disagreement" if metric == "agreement" else metric
        truth = [1 - t[metric] if metric == "agreement" else t[metric] for t in truths]
        scale = float(np.mean(truth))
        chosen = [1 - e[metric] if metric == "agreement" else e[metric] for e in estimates]
        out[f"{distance}, spread of the floor"] = (float(np.std(chosen, ddof=1)) / scale, float("nan"))
        for name in ("one split", "8 parts"):
            values = [e[f"{distance}, {name}"] for e in estimates]
            out[f"{distance}, {name}"] = relative_bias(values, truth)
            out[f"{distance}, spread of {name}"] = (float(np.std(values, ddof=1)) / scale, float("nan"))
    return out


def classification(replicates: int, draws: int = DRAWS, seed: int = 1) -> dict[str, tuple[float, float]]:
    """Relative bias of the total variation and disagreement (1 - agreement) floors against exact samplers, for a
    logistic model (two classes keep it fast; the rule does not depend on their number) on 300 points."""
    from bench import metrics
    from bench.tasks import get_task
    from reference.evidence import noise_floor

    rng = np.random.default_rng(seed)
    features, points = 4, 300
    x = rng.standard_normal((points, features))
    weight_mean = rng.standard_normal(features)
    task = dataclasses.replace(get_task("digits"), test_blocks=())  # only its kind and blocks are read

    def chain_average() -> np.ndarray:
        p = 1 / (1 + np.exp(-(exact_chains(weight_mean, 0.6 * np.eye(features), rng, draws) @ x.T)))  # (C, S, N)
        average = p.mean(axis=1)
        return np.stack([1 - average, average], axis=-1)  # (C, N, 2)

    estimates, truths = [], []
    for _ in range(replicates):
        averages = chain_average()
        r, a = averages.mean(axis=0), chain_average().mean(axis=0)
        kept = _evidence(CHAINS, draws, 1, averages)
        estimates.append({**noise_floor(task, r, kept)["all"], **_alternatives(task, r, kept)})
        truths.append({"total_variation": metrics.total_variation(a, r), "agreement": metrics.agreement(a, r)})
    return {"total_variation": relative_bias([e["total_variation"] for e in estimates],
                                             [t["total_variation"] for t in truths]),
            "disagreement": relative_bias([1 - e["agreement"] for e in estimates],
                                          [1 - t["agreement"] for t in truths]),
            **_alternative_biases(estimates, truths, ("total_variation", "agreement"))}


def main(argv: list[str] | None = None) -> int:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--replicates-regression", type=positive_whole, default=400)
    parser.add_argument("--replicates-classification", type=positive_whole, default=600)
    parser.add_argument("--draws", type=positive_whole, default=DRAWS, help="draws per chain of the classification references")
    args = parser.parse_args(argv)
    if min(args.replicates_regression, args.replicates_classification) < 2 or args.draws < 1:
        parser.error("--replicates-* must be at least 2 and --draws at least 1")
    print(f"{'estimate':<40}{'relative bias':>15}{'standard error':>16}")
    for name, (bias, error) in {**regression(args.replicates_regression),
                                **classification(args.replicates_classification, args.draws)}.items():
        if "spread" in name:
            print(f"{name:<40}{bias:>15.4f}{'(relative sd)':>16}")
        else:
            print(f"{name:<40}{bias:>+15.4f}{error:>16.4f}")
    return 0


if __name__ == "__main__":
    scripts.run(main)
