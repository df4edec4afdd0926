"""Builds a task's HMC reference: chains, predictive, diagnostics and noise floor.

``python -m bench reference generate --task T`` calls :func:`generate`. The predictive stored is:

- classification: the Bayesian model average of softmax probabilities over every kept sample of
  every chain, ``probs`` ``(N_test, C)``;
- regression: ``samples`` ``(N_test, 1000)``, one draw of y ~ p(y | x, theta) per selected kept
  sample, the 1000 selected samples spread evenly over chains and iterations.

Beside it, the evidence (:mod:`reference.evidence`): per chain and kept draw, the predictive at stated test points
and at every test point, and the log posterior and test log-likelihood; each chain's predictive average; every
iteration's acceptance probability. The metadata's diagnostics (rank-normalised split R-hat, bulk and tail ESS, Vehtari et al. 2021), its
acceptance figures and its noise floor (the distance an independent, exact run of the reference's sampler is
expected to score against it) are computed from the evidence alone, so ``reference diagnose`` recomputes them. One
figure is not: generation refuses a reference whose worst split R-hat over every test point's predictive exceeds
``R_HAT_LIMIT`` (the evidence keeps stated points), and records that worst value as ``generation_check``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import multiprocessing
import platform
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

import bench
from bench import hmc, metrics
from bench.errors import DamagedFile, cannot_write
from bench.functional import ParameterLayout, StackedModel
from bench.io import atomic_write_bytes, exclusive, read_torch
from bench.likelihoods import Categorical
from bench.tasks import PREDICTIVE_SAMPLES, Task
from reference import diagnostics, evidence
from reference.settings import R_HAT_LIMIT, HMCSettings


@dataclass(frozen=True)
class GeneratedReference:
    """The reference's array, its metadata and its evidence file's bytes (:mod:`reference.evidence`)."""

    key: str
    array: np.ndarray
    metadata: dict
    evidence: bytes


def task_target(task: Task, dtype: torch.dtype, device: torch.device) -> tuple[hmc.Target, StackedModel]:
    """The task's full-data log posterior over flat parameters ``(C, D)``, at temperature 1."""
    model = StackedModel(task.model_factory())
    x = task.x_train.to(device=device, dtype=dtype)
    y = task.y_train.to(device=device)
    if task.kind == "regression":
        y = y.to(dtype)

    def log_likelihood(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        per_example = task.likelihood.log_prob(model.flat(theta, x), y)
        return per_example.double().sum(-1) / task.temperature

    return hmc.Target(log_likelihood, task.prior_variance, data=lambda chains: (x, y)), model


_SAMPLERS: dict[tuple, tuple[hmc.Target, StackedModel, hmc.Integrator]] = {}


def _sampler(task: Task, dtype: torch.dtype, device: torch.device, vectorise: bool,
             compiled: bool) -> tuple[hmc.Target, StackedModel, hmc.Integrator]:
    """The task's target, model and integrator, built once per process: every chain group of a generation
    then shares one compiled leapfrog step instead of compiling its own."""
    key = (task.name, task.fingerprint(), dtype, str(device), vectorise, compiled)
    if key not in _SAMPLERS:
        target, model = task_target(task, dtype, device)
        _SAMPLERS[key] = target, model, hmc.Integrator(target, vectorise=vectorise, compiled=compiled)
    return _SAMPLERS[key]


def chain_generators(seed: int, n_chains: int) -> tuple[list[int], list[torch.Generator]]:
    """Independent per-chain seeds from one root seed (numpy SeedSequence spawning)."""
    seeds = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(n_chains)]
    return seeds, [torch.Generator().manual_seed(s) for s in seeds]


def _function_space(task: Task, model: StackedModel, position: torch.Tensor, x_test: torch.Tensor,
                    y_test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-chain predictive quantities, probabilities ``(C, N, K)`` or mean and std ``(C, N, 2)``, and the test set's
    log-likelihood ``(C,)`` float64."""
    outputs = model.flat(position, x_test)
    log_likelihood = task.likelihood.log_prob(outputs, y_test).double().sum(-1)
    if task.kind == "classification":
        return Categorical.probabilities(outputs).float(), log_likelihood
    mean, std = task.likelihood.mean_and_std(outputs)
    return torch.stack([mean, std], dim=-1).float(), log_likelihood


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


CHECKPOINT_FORMAT = 2
CHECKPOINT_SECONDS = 60.0
"""A chain group writes its checkpoint at most this often (and at the end of burn-in and when it finishes)."""


@dataclass
class ChainGroupRun:
    """What one group of chains produced: kept function-space draws ``(c, S, N, Q)`` float32 and their traces ``(c, S,
    2)`` float64 (log posterior, test log-likelihood), the acceptance probabilities of the burn-in ``(n_burnin, c)``
    and kept ``(n_kept_iterations, c)`` iterations, the kept iterations' leapfrog steps ``(n_kept_iterations, c)``, the
    final step sizes ``(c,)``, the gradients computed, and the seconds spent computing (over every sitting)."""

    chains: list[int]
    draws: torch.Tensor
    traces: torch.Tensor
    burnin_accept: torch.Tensor
    kept_accept: torch.Tensor
    leapfrog_steps: torch.Tensor
    step_sizes: torch.Tensor
    gradient_evaluations: int
    compute_seconds: float


def chain_groups(settings: HMCSettings) -> list[list[int]]:
    """Chains computed together: all of them when vectorised, else one group per chain (a chain alone
    computes the same bits whichever process runs it, so groups may run in parallel workers)."""
    chains = list(range(settings.n_chains))
    return [chains] if settings.vectorise else [[c] for c in chains]


CHECKPOINTS = "chains-*.pt"
"""The names of a task's chain checkpoints (:func:`checkpoint_path`), in its folder below ``--checkpoints``."""


def checkpoint_path(folder: Path, task: Task, chains: list[int]) -> Path:
    return folder / task.name / f"chains-{chains[0]}-{chains[-1]}.pt"


def _identity(task: Task, settings: HMCSettings, chains: list[int]) -> dict:
    """What a checkpoint must match to be resumed: the task, the settings, the chains and the code's versions.

    All settings but ``n_samples``: a chain sampled for n kept iterations is, bitwise, the first n kept
    iterations of the same chain sampled for more, so a finished generation can be extended with more samples
    (raise ``n_samples`` and run it again) instead of starting over."""
    return {"format": CHECKPOINT_FORMAT, "task_fingerprint": task.fingerprint(),
            "settings": {k: v for k, v in settings.to_dict().items() if k != "n_samples"},
            "chains": chains, "bdl-bench": bench.__version__, "torch": str(torch.__version__)}


CHECKPOINT_LOCK = ".lock"


@contextlib.contextmanager
def claimed_checkpoints(folder: Path, restart: bool = False) -> Iterator[None]:
    """Holds a task's checkpoint folder for one generation: created and checked writable, locked against a
    second generation of the task until the block ends, emptied first when ``restart``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise cannot_write(f"cannot write HMC checkpoints to {folder}", error) from None
    with exclusive(folder / CHECKPOINT_LOCK, busy=f"{folder} is in use by another generation of this task; wait for "
                                                  f"it to finish", unwritable=f"cannot write HMC checkpoints to {folder}"):
        if restart:
            for checkpoint in folder.glob(CHECKPOINTS):
                checkpoint.unlink()
        yield
        for checkpoint in folder.glob(CHECKPOINTS):  # the reference is complete: nothing is left to resume
            checkpoint.unlink()


def _save_checkpoint(path: Path, identity: dict, progress: dict) -> None:
    buffer = io.BytesIO()
    torch.save({"identity": identity, **progress}, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def _load_checkpoint(path: Path, identity: dict, restart: str, total: int) -> dict | None:
    """The checkpoint at ``path`` if it exists, was written for exactly ``identity`` and has not sampled past
    ``total`` iterations; one line otherwise."""
    if not path.exists():
        return None
    saved = read_torch(path, "HMC checkpoint", restart)  # truncated, not a torch file, or holding code: one line
    if not isinstance(saved, dict) or saved.get("identity") != identity:
        raise DamagedFile(f"{path}: the HMC checkpoint was written for other settings, chains, task data or "
                          f"versions than this generation's; {restart}")
    if saved.get("iteration", 0) > total:
        raise DamagedFile(f"{path}: the HMC checkpoint holds {saved['iteration']} iterations, more than the "
                          f"{total} these settings ask for (fewer samples); {restart}")
    return saved


def run_chain_group(task: Task, settings: HMCSettings, chains: list[int], device: str = "cpu",
                    checkpoints: Path | None = None, on_iteration: Callable[[StepInfoSummary], None] | None = None,
                    ) -> ChainGroupRun:
    """Runs the chains ``chains`` of the reference's ``settings.n_chains`` (their seeds are spawned from
    ``settings.seed`` for all chains, so a chain's draws do not depend on its group), resuming from and
    writing a checkpoint in ``checkpoints`` when given. ``on_iteration`` hears of every iteration."""
    torch_device = torch.device(device)
    dtype = getattr(torch, settings.dtype)
    target, model, integrator = _sampler(task, dtype, torch_device, settings.vectorise, settings.compiled)
    seeds, generators = chain_generators(settings.seed, settings.n_chains)
    generators = [generators[c] for c in chains]
    x_test = task.x_test.to(device=torch_device, dtype=dtype)
    if task.y_test is None:
        raise ValueError("a reference's evidence holds the test log-likelihood of every draw: the task needs y_test")
    y_test = task.y_test.to(device=torch_device)
    if task.kind == "regression":
        y_test = y_test.to(dtype)
    tau = settings.trajectory_length or hmc.default_trajectory_length(task.prior_variance)
    total = settings.n_burnin + settings.n_samples * settings.thinning
    identity = _identity(task, settings, chains)
    path = None if checkpoints is None else checkpoint_path(checkpoints, task, chains)
    restart = f"pass --restart to start this task's generation again (or delete {path})"
    saved = None if path is None else _load_checkpoint(path, identity, restart, total)
    if saved is None:
        layout = ParameterLayout.of(task.model_factory())
        initial = layout.flatten(StackedModel.seeded(task.model_factory, [seeds[c] for c in chains]))
        state = hmc.init(initial.to(device=torch_device, dtype=dtype), target, settings.initial_step_size, adapt=True)
        iteration, gradient_evaluations, compute_seconds = 0, 0, 0.0
        burnin_accept, kept_accept, kept, traces, leapfrog_counts = [], [], [], [], []
    else:
        state = _state_from(saved["state"], torch_device)
        for generator, generator_state in zip(generators, saved["generators"]):
            generator.set_state(generator_state)
        iteration, gradient_evaluations = saved["iteration"], saved["gradient_evaluations"]
        compute_seconds = saved["compute_seconds"]
        burnin_accept, kept_accept = list(saved["burnin_accept"]), list(saved["kept_accept"])
        kept, traces, leapfrog_counts = list(saved["kept"]), list(saved["traces"]), list(saved["leapfrog_steps"])

    def checkpoint() -> None:
        if path is not None:
            _save_checkpoint(path, identity, {
                "iteration": iteration, "state": _state_dict(state), "generators": [g.get_state() for g in generators],
                "gradient_evaluations": gradient_evaluations, "compute_seconds": compute_seconds,
                "burnin_accept": burnin_accept, "kept_accept": kept_accept, "kept": kept, "traces": traces,
                "leapfrog_steps": leapfrog_counts})

    started = last_checkpoint = time.perf_counter()
    done_before = compute_seconds
    while iteration < total:
        if iteration == settings.n_burnin:
            state = hmc.freeze(state)
        state, info = hmc.step(state, target, tau, generators, settings.target_accept, settings.max_leapfrog_steps,
                               settings.jitter, integrator)
        gradient_evaluations += info.gradient_evaluations
        if iteration < settings.n_burnin:
            burnin_accept.append(info.accept_prob.cpu())
        else:
            kept_accept.append(info.accept_prob.cpu())
            leapfrog_counts.append(info.n_leapfrog.cpu())
            if (iteration - settings.n_burnin + 1) % settings.thinning == 0:
                with torch.no_grad():
                    quantities, test_log_likelihood = _function_space(task, model, state.position, x_test, y_test)
                kept.append(quantities.cpu())
                traces.append(torch.stack([state.log_likelihood + state.log_prior, test_log_likelihood], -1).cpu())
        iteration += 1
        now = time.perf_counter()
        compute_seconds = done_before + now - started
        if on_iteration is not None:
            on_iteration(StepInfoSummary(chains, float(info.accept_prob.mean()), int(info.n_leapfrog.max())))
        if now - last_checkpoint >= CHECKPOINT_SECONDS or iteration in (settings.n_burnin, total):
            checkpoint()
            last_checkpoint = now
    if settings.n_burnin == total:
        state = hmc.freeze(state)
    empty = torch.empty(0, len(chains), dtype=torch.float64)
    return ChainGroupRun(
        chains=chains, draws=torch.stack(kept, dim=1), traces=torch.stack(traces, dim=1),
        burnin_accept=torch.stack(burnin_accept) if burnin_accept else empty,
        kept_accept=torch.stack(kept_accept), leapfrog_steps=torch.stack(leapfrog_counts),
        step_sizes=state.step_size.cpu(), gradient_evaluations=gradient_evaluations,
        compute_seconds=compute_seconds)


@dataclass(frozen=True)
class StepInfoSummary:
    """What the progress bar hears of an iteration of a chain group."""

    chains: list[int]
    accept: float
    steps: int


def _state_dict(state: hmc.HMCState) -> dict:
    """An HMC state as plain tensors and numbers (what ``torch.load(weights_only=True)`` reads back)."""
    out = {name: getattr(state, name).cpu() for name in ("position", "log_likelihood", "log_prior", "grad",
                                                          "step_size")}
    if state.adaptation is not None:
        a = state.adaptation
        out["adaptation"] = {"mu": a.mu, "h_bar": a.h_bar, "log_step_bar": a.log_step_bar, "iteration": a.iteration}
    return out


def _state_from(saved: dict, device: torch.device) -> hmc.HMCState:
    adaptation = None
    if "adaptation" in saved:
        a = saved["adaptation"]
        adaptation = hmc.DualAveraging(mu=a["mu"], h_bar=a["h_bar"], log_step_bar=a["log_step_bar"],
                                       iteration=a["iteration"])
    return hmc.HMCState(
        position=saved["position"].to(device), log_likelihood=saved["log_likelihood"].to(device),
        log_prior=saved["log_prior"].to(device), grad=saved["grad"].to(device), step_size=saved["step_size"],
        adaptation=adaptation)


def _worker(task_name: str, settings: HMCSettings, chains: list[int], device: str, checkpoints: Path | None,
            threads: int, progress) -> ChainGroupRun:
    """One chain group in a worker process (a registered task, rebuilt here), its iterations reported on ``progress``."""
    from bench.tasks import get_task

    torch.set_num_threads(threads)
    return run_chain_group(get_task(task_name), settings, chains, device, checkpoints, on_iteration=progress.put)


def generate(task: Task, settings: HMCSettings, device: str = "cpu", progress: bool | None = True,
             checkpoints: Path | None = None, workers: int = 1, threads: int = 1) -> GeneratedReference:
    """Runs the chains and builds the reference; ``progress`` None shows a bar only on a terminal.

    ``checkpoints``: a folder where each chain group writes its progress and from which a killed
    generation resumes (bitwise the same result as an uninterrupted one). ``workers`` > 1 runs chain
    groups (chains sampled one by one: ``settings.vectorise`` false) in that many processes of ``threads``
    torch threads each, as this process samples with one worker; the result does not depend on ``workers``.
    Only a registered task can be sampled in workers.
    """
    if settings.n_chains < 2 or settings.n_chains % 2:
        raise ValueError("n_chains must be even and at least 2 (the noise floor compares two halves)")
    if task.kind == "regression" and PREDICTIVE_SAMPLES % settings.n_chains:
        raise ValueError(f"n_chains must divide the reference's {PREDICTIVE_SAMPLES} draws of y (its chains are its "
                         "columns)")
    groups = chain_groups(settings)
    workers = min(workers, len(groups))
    total = (settings.n_burnin + settings.n_samples * settings.thinning) * settings.n_chains
    bar = tqdm(total=total, desc=f"HMC {task.name}", disable=None if progress is None else not progress,
               unit="chain-it")
    done_at_start = 0
    if checkpoints is not None:
        for chains in groups:
            path = checkpoint_path(checkpoints, task, chains)
            saved = _load_checkpoint(path, _identity(task, settings, chains),
                                     f"pass --restart to start this task's generation again (or delete {path})",
                                     settings.n_burnin + settings.n_samples * settings.thinning)
            done_at_start += 0 if saved is None else saved["iteration"] * len(chains)
    bar.update(done_at_start)

    def heard(summary: StepInfoSummary) -> None:
        bar.set_postfix(chain=summary.chains[0] if len(summary.chains) == 1 else "all",
                        accept=f"{summary.accept:.2f}", steps=summary.steps)
        bar.update(len(summary.chains))

    started = time.perf_counter()
    if workers <= 1:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            runs = [run_chain_group(task, settings, chains, device, checkpoints, heard) for chains in groups]
        finally:
            torch.set_num_threads(before)
    else:
        runs = _in_workers(task, settings, groups, device, checkpoints, workers, threads, heard)
    bar.close()
    wall = time.perf_counter() - started
    return _assemble(task, settings, runs, device, wall, workers, threads)


def _leave_interrupts_to_the_parent() -> None:
    """A worker ignores Ctrl-C: the parent, which hears it too, stops every worker at once (each chain keeps its last
    checkpoint), instead of waiting for workers that were busy in compiled code to finish their chains."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _in_workers(task: Task, settings: HMCSettings, groups: list[list[int]], device: str, checkpoints: Path | None,
                workers: int, threads: int, heard: Callable[[StepInfoSummary], None]) -> list[ChainGroupRun]:
    """Chain groups in ``workers`` processes; an interrupt or a failure in any of them stops them all at once."""
    from bench.tasks import EMBEDDED

    if EMBEDDED.get(task.name) is None:
        raise ValueError("only a registered embedded task can be sampled in worker processes")
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:  # its server process ignores Ctrl-C itself
        queue = manager.Queue()
        pool = context.Pool(workers, initializer=_leave_interrupts_to_the_parent)
        try:
            results = [pool.apply_async(_worker, (task.name, settings, chains, device, checkpoints, threads, queue))
                       for chains in groups]
            while not all(result.ready() for result in results):
                time.sleep(0.2)
                while not queue.empty():
                    heard(queue.get())
                for result in results:
                    if result.ready() and not result.successful():
                        result.get()  # the first failure raises here, and stops the other workers
            runs = [result.get() for result in results]
            pool.close()
        except BaseException:
            pool.terminate()
            raise
        finally:
            pool.join()
        while not queue.empty():
            heard(queue.get())
    return runs


def _assemble(task: Task, settings: HMCSettings, runs: list[ChainGroupRun], device: str, wall: float,
              workers: int, threads: int) -> GeneratedReference:
    """The reference and its evidence from every chain group's draws (chains in order); every figure the evidence
    decides (diagnostics, acceptance, floor) is computed from the evidence itself (:func:`reference.evidence.summarise`),
    as ``reference diagnose`` recomputes it."""
    draws = torch.cat([run.draws for run in runs]).numpy()  # (C, S, N, K) or (C, S, N, 2)
    burnin_accept = torch.cat([run.burnin_accept for run in runs], dim=1)
    accept = torch.cat([run.kept_accept for run in runs], dim=1)
    leapfrog_counts = torch.cat([run.leapfrog_steps for run in runs], dim=1)
    chain_seeds, _ = chain_generators(settings.seed, settings.n_chains)
    if task.kind == "classification":
        key = "probs"
        array = draws.astype(np.float64).mean(axis=(0, 1))
        chain_average = draws.astype(np.float64).mean(axis=1).astype(np.float32)
    else:
        key = "samples"
        array = predictive_samples(draws, np.random.default_rng(np.random.SeedSequence([settings.seed, 1])))
        chain_average = None
    points = evidence.evidence_points(task)
    kept = evidence.Evidence(
        points=points, point_draws=evidence.point_quantities(task, draws, array, points),
        traces=torch.cat([run.traces for run in runs]).numpy().astype(np.float64),
        accept_prob=torch.cat([burnin_accept, accept]).T.numpy().astype(np.float64),
        leapfrog_steps=leapfrog_counts.T.numpy().astype(np.int32),
        step_size=torch.cat([run.step_sizes for run in runs]).numpy().astype(np.float64),
        chain_average=chain_average, every_point_draws=evidence.every_point_quantities(task, draws, array))
    tau = settings.trajectory_length or hmc.default_trajectory_length(task.prior_variance)
    evidence_bytes = kept.to_bytes()
    every_quantity = float(diagnostics.split_rhat(draws).max())
    metadata = {
        "task": task.describe(),
        "task_fingerprint": task.fingerprint(),
        "test_targets_sha256": task.test_targets_sha256(),
        "key": key,
        "shape": list(array.shape),
        "hmc": {**settings.to_dict(), "trajectory_length_used": tau,
                "mass_matrix": "identity", "step_size_adaptation": "dual averaging during burn-in, then frozen"},
        "chain_seeds": chain_seeds,
        **evidence.summarise(task, array, kept),
        "evidence_sha256": hashlib.sha256(evidence_bytes).hexdigest(),
        "generation_check": {
            "max_split_rhat": every_quantity, "limit": R_HAT_LIMIT,
            "quantities": "every test point's " + ("predictive probabilities" if key == "probs" else
                                                   "predictive mean and standard deviation"),
            "recomputable": "no: computed from every draw at generation, of which the evidence keeps stated points",
        },
        "gradient_evaluations": sum(run.gradient_evaluations for run in runs),
        "wall_seconds": round(wall, 1),
        "compute_seconds": round(sum(run.compute_seconds for run in runs), 1),
        "workers": workers,
        "torch_threads": threads,
        "device": device,
        "versions": {"bdl-bench": bench.__version__, "torch": torch.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
    }
    if not (math.isfinite(metadata["diagnostics"]["max_split_rhat"]) and math.isfinite(every_quantity)):
        raise RuntimeError("non-finite R-hat: the chains produced invalid predictions")
    return GeneratedReference(key, array, metadata, evidence_bytes)


def compare(task: Task, new: np.ndarray, shipped: np.ndarray) -> dict:
    """Scores of a regenerated reference against the shipped one (expect about the noise floor)."""
    return _scores(task, new, shipped)
