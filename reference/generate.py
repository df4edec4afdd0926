"""Builds a task's HMC reference: chains, predictive, diagnostics and noise floor.

``python -m bench reference generate --task T`` calls :func:`generate`. The predictive stored is:

- classification: the Bayesian model average of softmax probabilities over every kept sample of
  every chain, ``probs`` ``(N_test, C)``;
- regression: ``samples`` ``(N_test, 1000)``, one draw of y ~ p(y | x, theta) per selected kept
  sample, the 1000 selected samples spread evenly over chains and iterations.

Diagnostics are the rank-normalised split R-hat and bulk ESS (Vehtari et al. 2021) of function-space
quantities across chains: every test point's predictive probabilities (classification) or predictive
mean and standard deviation (regression). The worst values are stored. The noise floor is the same
metrics computed between two references built the same way from the two disjoint halves of the
chains: no method can be expected to score better than that against a reference of this size.
"""

from __future__ import annotations

import math
import platform
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

import bench
from bench import metrics
from bench.functional import ParameterLayout, StackedModel, seeded_module
from bench.likelihoods import Categorical
from bench.tasks import PREDICTIVE_SAMPLES, Task
from reference import diagnostics, hmc
from reference.settings import HMCSettings


@dataclass(frozen=True)
class GeneratedReference:
    key: str
    array: np.ndarray
    metadata: dict


def task_target(task: Task, dtype: torch.dtype, device: torch.device) -> tuple[hmc.Target, StackedModel]:
    """The task's full-data log posterior over flat parameters ``(C, D)``, at temperature 1."""
    model = StackedModel(task.model_factory())
    x = task.x_train.to(device=device, dtype=dtype)
    y = task.y_train.to(device=device)
    if task.kind == "regression":
        y = y.to(dtype)

    def log_likelihood(theta: torch.Tensor) -> torch.Tensor:
        per_example = task.likelihood.log_prob(model.flat(theta, x), y)
        return per_example.double().sum(-1) / task.temperature

    return hmc.Target(log_likelihood, task.prior_variance), model


def chain_generators(seed: int, n_chains: int) -> tuple[list[int], list[torch.Generator]]:
    """Independent per-chain seeds from one root seed (numpy SeedSequence spawning)."""
    seeds = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(n_chains)]
    return seeds, [torch.Generator().manual_seed(s) for s in seeds]


def _function_space(task: Task, model: StackedModel, position: torch.Tensor, x_test: torch.Tensor) -> torch.Tensor:
    """Per-chain predictive quantities: probabilities ``(C, N, K)`` or mean and std ``(C, N, 2)``."""
    outputs = model.flat(position, x_test)
    if task.kind == "classification":
        return Categorical.probabilities(outputs).float()
    mean, std = task.likelihood.mean_and_std(outputs)
    return torch.stack([mean, std], dim=-1).float()


def predictive_samples(mean_std: np.ndarray, generator: np.random.Generator, n: int = PREDICTIVE_SAMPLES) -> np.ndarray:
    """``n`` draws of y per test point from draws ``(C, S, N, 2)`` of (mean, std).

    The ``C * S`` parameter draws are taken chain-major and ``n`` of them selected evenly spaced
    (repeating draws only if there are fewer than ``n``); each gives one y per test point.
    """
    chains, draws = mean_std.shape[:2]
    flat = mean_std.reshape(chains * draws, *mean_std.shape[2:]).astype(np.float64)
    chosen = np.floor(np.arange(n) * (chains * draws) / n).astype(int)
    mean, std = flat[chosen, :, 0], flat[chosen, :, 1]
    return (mean + std * generator.standard_normal(mean.shape)).T


def _scores(task: Task, prediction: np.ndarray, reference: np.ndarray) -> dict:
    """The fidelity metrics of ``prediction`` against ``reference`` on the whole test set and each block."""
    score = metrics.classification_metrics if task.kind == "classification" else metrics.regression_metrics
    result = {"all": score(prediction, reference)}
    for block in task.test_blocks:
        rows = slice(block.start, block.stop)
        result[block.name] = score(prediction[rows], reference[rows])
    return result


def generate(task: Task, settings: HMCSettings, device: str = "cpu", progress: bool | None = True) -> GeneratedReference:
    """Runs the chains and builds the reference; ``progress`` None shows a bar only on a terminal."""
    if settings.n_chains < 2 or settings.n_chains % 2:
        raise ValueError("n_chains must be even and at least 2 (the noise floor compares two halves)")
    torch_device = torch.device(device)
    dtype = getattr(torch, settings.dtype)
    target, model = task_target(task, dtype, torch_device)
    chain_seeds, generators = chain_generators(settings.seed, settings.n_chains)
    layout = ParameterLayout.of(task.model_factory())
    initial = layout.flatten(StackedModel.stack([seeded_module(task.model_factory, s) for s in chain_seeds]))
    x_test = task.x_test.to(device=torch_device, dtype=dtype)
    tau = settings.trajectory_length or hmc.default_trajectory_length(task.prior_variance)

    started = time.perf_counter()
    state = hmc.init(initial.to(device=torch_device, dtype=dtype), target, settings.initial_step_size, adapt=True)
    gradient_evaluations = 0
    total = settings.n_burnin + settings.n_samples * settings.thinning
    bar = tqdm(total=total, desc=f"HMC {task.name}", disable=None if progress is None else not progress, unit="it")
    burnin_accept, kept_accept, kept, leapfrog_counts = [], [], [], []
    for iteration in range(total):
        if iteration == settings.n_burnin:
            state = hmc.freeze(state)
        state, info = hmc.step(state, target, tau, generators, settings.target_accept, settings.max_leapfrog_steps)
        gradient_evaluations += int(info.n_leapfrog.max()) * settings.n_chains
        if iteration < settings.n_burnin:
            burnin_accept.append(info.accept_prob.cpu())
        else:
            kept_accept.append(info.accept_prob.cpu())
            leapfrog_counts.append(info.n_leapfrog)
            if (iteration - settings.n_burnin + 1) % settings.thinning == 0:
                with torch.no_grad():
                    kept.append(_function_space(task, model, state.position, x_test).cpu())
        bar.set_postfix(accept=f"{float(info.accept_prob.mean()):.2f}", steps=int(info.n_leapfrog.max()))
        bar.update()
    bar.close()
    if settings.n_burnin == total:
        state = hmc.freeze(state)
    wall = time.perf_counter() - started

    draws = torch.stack(kept, dim=1).numpy()  # (C, S, N, K) or (C, S, N, 2)
    half = settings.n_chains // 2
    if task.kind == "classification":
        key = "probs"
        build = lambda d: d.astype(np.float64).mean(axis=(0, 1))  # noqa: E731
        array, halves = build(draws), (build(draws[:half]), build(draws[half:]))
    else:
        key = "samples"
        sampler = np.random.default_rng(np.random.SeedSequence([settings.seed, 1]))
        array = predictive_samples(draws, sampler)
        halves = (predictive_samples(draws[:half], sampler), predictive_samples(draws[half:], sampler))

    rhat = diagnostics.split_rhat(draws)
    ess = diagnostics.bulk_ess(draws)
    accept = torch.stack(kept_accept)
    metadata = {
        "task": task.describe(),
        "task_fingerprint": task.fingerprint(),
        "key": key,
        "shape": list(array.shape),
        "hmc": {**settings.to_dict(), "trajectory_length_used": tau,
                "mass_matrix": "identity", "step_size_adaptation": "dual averaging during burn-in, then frozen"},
        "chain_seeds": chain_seeds,
        "kept_samples_per_chain": int(draws.shape[1]),
        "kept_samples_total": int(draws.shape[0] * draws.shape[1]),
        "step_sizes": state.step_size.tolist(),
        "leapfrog_steps": torch.stack(leapfrog_counts).float().mean(0).tolist(),
        "acceptance_rate": float(accept.mean()),
        "acceptance_rate_per_chain": accept.mean(0).tolist(),
        "burnin_acceptance_rate": float(torch.stack(burnin_accept).mean()) if burnin_accept else None,
        "diagnostics": {
            "quantities": "predictive probabilities" if key == "probs" else "predictive mean and std",
            "max_split_rhat": float(np.max(rhat)),
            "min_bulk_ess": float(np.min(ess)),
            "median_bulk_ess": float(np.median(ess)),
        },
        "noise_floor": _scores(task, halves[0], halves[1]),
        "gradient_evaluations": gradient_evaluations,
        "wall_seconds": round(wall, 1),
        "device": device,
        "versions": {"bdl-bench": bench.__version__, "torch": torch.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
    }
    if not math.isfinite(metadata["diagnostics"]["max_split_rhat"]):
        raise RuntimeError("non-finite R-hat: the chains produced invalid predictions")
    return GeneratedReference(key, array, metadata)


def compare(task: Task, new: np.ndarray, shipped: np.ndarray) -> dict:
    """Scores of a regenerated reference against the shipped one (expect about the noise floor)."""
    return _scores(task, new, shipped)
