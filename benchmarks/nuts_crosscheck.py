"""An independent check of an embedded task's HMC reference: NumPyro's NUTS on the same posterior.

    pip install -e ".[crosscheck]"   # jax, jaxlib, numpyro: never a core or test dependency
    python benchmarks/nuts_crosscheck.py --task digits-cnn [--chains 4] [--warmup 500] [--samples 500] [--workers 2]

NUTS (Hoffman & Gelman 2014, NumPyro's defaults: step size and a diagonal mass matrix adapted during warm-up,
target acceptance 0.8, trees of depth at most 10) samples the task's posterior p(theta | D) ∝ p(D | theta)
N(theta; 0, v I) through the JAX twin of its network (``benchmarks/jax_models.py``, checked equal to the PyTorch
network's log-likelihood in float64 before anything runs), from initialisations of its own (seeds independent
of the reference's). A different algorithm, implementation and initialisation: what the two agree on is not an
artefact of our sampler.

Reported, on the whole test set and on each test block: the metrics of the NUTS predictive against our
reference (agreement and total variation, or W1/W2 for regression), next to our reference's noise floor (its two
halves of chains against each other) and to NUTS's own (its two halves of chains), and what the two floors
predict for two unbiased estimates of one predictive, 1/2 sqrt(floor_ours^2 + floor_NUTS^2) (a distance between
two Monte Carlo averages grows as the root of the sum of their variances; each floor compares halves, with twice
the variance of the whole). For regression the NUTS predictive is 20,000 draws of y per test point, so that
the draws of y add noise to our side only (the reference holds 1000 and each half of its floor 1000 too):
the expected distance is then at most sqrt(floor_ours^2 / 2 + floor_NUTS^2 / 4). A reference whose distance to NUTS exceeds its own noise floor does not ship.
Chains run in ``--workers`` processes of one thread each; results go to ``--out`` (JSON) with the per-chain NUTS
diagnostics and timings. Each finished chain's kept positions are saved beside it (``<out>.chains/chain-<c>.npz``,
written atomically; the predictive is computed from them, so a chain of the CNN-LSTM is 5 MB rather than the 29 MB of
its test-set probabilities) and a rerun with the same arguments reuses it; a running chain saves its whole NUTS state every
``CHECKPOINT_SECONDS`` (``chain-<c>.partial.npz``) and a rerun continues it from there, so a long check can span
several sittings. Checked on ``toy-gap`` (30 + 30 iterations): stepping the kernel gives bitwise the draws of
``MCMC.run``, and a chain stopped after its 20th (warm-up) or 45th (sampling) iteration and rerun gives them too.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _setup_jax(dtype: str) -> None:
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    import jax

    jax.config.update("jax_enable_x64", dtype == "float64")


CHECKPOINT_SECONDS = 120.0
"""How often a running chain saves its sampler state (a chain of the CNN-LSTM takes hours)."""


def _partial_path(folder: Path, chain: int) -> Path:
    return folder / f"chain-{chain}.partial.npz"


def _write_saved(path: Path, meta: dict, arrays: dict) -> None:
    """``arrays`` and ``meta`` (JSON, the arguments' ``identity`` among it) in one ``.npz``, written atomically."""
    from bench.io import atomic_write_bytes

    buffer = io.BytesIO()
    np.savez(buffer, meta=json.dumps(meta), **arrays)
    atomic_write_bytes(path, buffer.getvalue())


def _read_saved(path: Path, identity: dict) -> tuple[dict, dict] | None:
    """The meta and arrays :func:`_write_saved` wrote with the same arguments, else None (a file written with other
    arguments, missing or damaged: its chain is sampled again)."""
    try:
        with np.load(path) as saved:
            meta = json.loads(str(saved["meta"]))
            if meta["identity"] != identity:
                return None
            return meta, {name: saved[name] for name in saved.files if name != "meta"}
    except (OSError, ValueError, KeyError, json.JSONDecodeError):
        return None


def _save_partial(path: Path, identity: dict, leaves: list, kept: list, fields: dict, seconds: float) -> None:
    """A running chain's NUTS state (every leaf of NumPyro's ``HMCState``, its adaptation and its random key
    included), the draws kept so far and the seconds sampled."""
    _write_saved(path, {"identity": identity, "seconds": seconds, "leaves": len(leaves)},
                 {"kept": np.asarray(kept).reshape(len(kept), -1) if kept else np.zeros((0, 0)),
                  **{f"leaf_{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)},
                  **{f"field_{name}": np.asarray(values) for name, values in fields.items()}})


def _load_partial(path: Path, identity: dict) -> dict | None:
    """A running chain's checkpoint written with the same arguments, else None (then the chain starts over)."""
    saved = _read_saved(path, identity)
    if saved is None:
        return None
    meta, arrays = saved
    return {"seconds": meta["seconds"], "kept": list(arrays["kept"]),
            "leaves": [arrays[f"leaf_{i}"] for i in range(meta["leaves"])],
            "fields": {name[len("field_"):]: list(values) for name, values in arrays.items()
                       if name.startswith("field_")}}


def run_chain(task_name: str, chain: int, seed: int, warmup: int, samples: int, dtype: str,
              folder: Path, identity: dict) -> dict:
    """One NUTS chain: its kept positions ``(S, D)`` and its diagnostics.

    The chain is NumPyro's NUTS kernel stepped one iteration at a time (``kernel.init`` then ``kernel.sample``,
    what ``MCMC.run`` does inside one compiled loop), so that every ``CHECKPOINT_SECONDS`` its whole state can be
    saved; a chain killed and rerun with the same arguments continues from its last checkpoint along the same
    path: resumed and uninterrupted chains give the same bits (each iteration is the same compiled function of the
    same saved arrays).
    """
    _setup_jax(dtype)
    import jax
    import jax.numpy as jnp
    import torch
    from numpyro.infer import NUTS

    import jax_models
    from bench.functional import StackedModel, seeded_module
    from bench.tasks import get_task

    torch.set_num_threads(1)
    task = get_task(task_name)
    jdtype = jnp.float64 if dtype == "float64" else jnp.float32
    log_likelihood, layout = jax_models.log_likelihood_fn(task, jdtype)
    variance = task.prior_variance

    def potential(theta):
        return -(log_likelihood(theta) - 0.5 * jnp.sum(theta**2) / variance)

    init_seed = int(np.random.SeedSequence(seed).spawn(chain + 1)[chain].generate_state(1)[0])
    initial = layout.flatten(StackedModel.stack([seeded_module(task.model_factory, init_seed)]))[0].numpy()
    kernel = NUTS(potential_fn=potential)
    state = kernel.init(jax.random.PRNGKey(init_seed % 2**31), warmup, jnp.asarray(initial, jdtype), (), {})
    structure = jax.tree_util.tree_structure(state)
    path = _partial_path(folder, chain)
    resumed = _load_partial(path, identity)
    kept, fields, seconds = [], {"num_steps": [], "accept_prob": [], "diverging": []}, 0.0
    if resumed is not None:
        state = jax.tree_util.tree_unflatten(structure, [jnp.asarray(leaf) for leaf in resumed["leaves"]])
        kept, seconds = resumed["kept"], resumed["seconds"]
        fields.update(resumed["fields"])
    step = jax.jit(lambda current: kernel.sample(current, (), {}))
    started = last_save = time.perf_counter()
    while int(state.i) < warmup + samples:
        state = step(state)
        if int(state.i) > warmup:  # state i is the i-th transition; MCMC.run keeps W+1 .. W+S
            kept.append(np.asarray(state.z))
            for name in fields:
                fields[name].append(np.asarray(getattr(state, name)))
        if time.perf_counter() - last_save > CHECKPOINT_SECONDS:
            last_save = time.perf_counter()
            _save_partial(path, identity, jax.tree_util.tree_leaves(state), kept, fields,
                          seconds + last_save - started)
    seconds += time.perf_counter() - started
    return {"chain": chain, "positions": np.stack(kept), "seconds": seconds,
            "sampling_gradients": int(np.sum(fields["num_steps"])),
            "mean_accept_prob": float(np.mean(fields["accept_prob"])),
            "divergences": int(np.sum(fields["diverging"])),
            "mean_tree_steps": float(np.mean(fields["num_steps"])),
            "step_size": float(state.adapt_state.step_size)}


def chain_predictor(task, dtype: str):
    """A function from one chain's kept positions ``(S, D)`` to their test-set predictions: class probabilities
    ``(S, N_test, K)`` or the predictive mean and standard deviation ``(S, N_test, 2)``, float32. Built (and its
    network jit-compiled) once, for every chain."""
    import jax
    import jax.numpy as jnp

    import jax_models

    jdtype = jnp.float64 if dtype == "float64" else jnp.float32
    predict = jax.jit(jax_models.predict_fn(task, jdtype))
    x_test = jnp.asarray(task.x_test.numpy(), jdtype)

    def chain_predictions(positions: np.ndarray) -> np.ndarray:
        outputs = np.stack([np.asarray(predict(jnp.asarray(theta), x_test), dtype=np.float64) for theta in positions])
        if task.kind == "classification":
            outputs = np.exp(outputs - outputs.max(-1, keepdims=True))
            return (outputs / outputs.sum(-1, keepdims=True)).astype(np.float32)
        mean, std = outputs[..., 0], np.logaddexp(0.0, outputs[..., 1])
        return np.stack([mean, std], axis=-1).astype(np.float32)

    return chain_predictions


REGRESSION_DRAWS = 20_000
"""Draws of y per test point of the NUTS predictive (regression): 20 times the reference's 1000, so that the
comparison's noise is the reference's own."""


def _save_chain(folder: Path, chain: dict, identity: dict) -> None:
    """One finished chain's kept positions and diagnostics, with the arguments that produced it."""
    meta = {k: v for k, v in chain.items() if k != "positions"}
    _write_saved(folder / f"chain-{chain['chain']}.npz", {"identity": identity, "chain": meta},
                 {"positions": chain["positions"]})


def _saved_chain(folder: Path, index: int, identity: dict) -> dict | None:
    """Chain ``index`` as saved by an earlier run with the same arguments, else None (a run with other
    arguments, or a damaged file, is sampled again)."""
    saved = _read_saved(folder / f"chain-{index}.npz", identity)
    if saved is None or "positions" not in saved[1]:  # not this script's, or an earlier version's, which kept none
        return None
    return {**saved[0]["chain"], "positions": saved[1]["positions"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--seed", type=int, default=2021, help="root of the NUTS chains' seeds (the references use 0)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="JSON file for the results (default: nuts-<task>.json)")
    args = parser.parse_args()
    if args.chains < 2 or args.chains % 2:
        parser.error(f"--chains must be even and at least 2 (NUTS's noise floor compares two halves), got {args.chains}")
    if min(args.warmup, args.samples, args.workers) < 1:
        parser.error("--warmup, --samples and --workers must be at least 1")
    _setup_jax("float64")

    import torch

    import jax_models
    from bench import metrics
    from bench.io import atomic_write_bytes
    from bench.functional import StackedModel, seeded_module
    from bench.tasks import get_task
    from reference import diagnostics
    from reference.generate import predictive_samples
    from reference.store import load_reference

    torch.set_num_threads(1)
    task = get_task(args.task)
    reference = load_reference(task)
    probe = StackedModel(task.model_factory()).layout.flatten(
        StackedModel.stack([seeded_module(task.model_factory, s) for s in (1, 2)])).double()
    worst = jax_models.check_against_torch(task, probe.numpy())
    print(f"{task.name}: JAX twin agrees with PyTorch to {worst:.1e} (relative, float64)")

    out = args.out or Path(f"nuts-{task.name}.json")
    saved = Path(f"{out}.chains")
    saved.mkdir(parents=True, exist_ok=True)
    identity = {"task": task.name, "fingerprint": task.fingerprint(),
                **{k: getattr(args, k) for k in ("warmup", "samples", "dtype", "seed")}}
    chains = [chain for chain in (_saved_chain(saved, c, identity) for c in range(args.chains)) if chain]
    missing = sorted(set(range(args.chains)) - {chain["chain"] for chain in chains})
    if chains:
        print(f"reusing {len(chains)} finished chain(s) from {saved}")
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context) as pool:
        futures = [pool.submit(run_chain, task.name, c, args.seed, args.warmup, args.samples, args.dtype,
                               saved, identity) for c in missing]
        for future in concurrent.futures.as_completed(futures):
            chain = future.result()
            _save_chain(saved, chain, identity)
            _partial_path(saved, chain["chain"]).unlink(missing_ok=True)
            print(f"chain {chain['chain']}: {chain['seconds']:.0f} s, {chain['sampling_gradients']} gradients "
                  f"sampling, mean tree {chain['mean_tree_steps']:.0f} steps, step size {chain['step_size']:.2e}",
                  flush=True)
            chains.append(chain)
    chains.sort(key=lambda r: r["chain"])
    chain_predictions = chain_predictor(task, args.dtype)
    draws = np.stack([chain_predictions(c["positions"]) for c in chains])  # (C, S, N, K) or (C, S, N, 2)
    half = args.chains // 2
    if task.kind == "classification":
        build = lambda d: d.astype(np.float64).mean(axis=(0, 1))  # noqa: E731
        score = metrics.classification_metrics
    else:
        rng = np.random.default_rng(args.seed)
        build = lambda d: predictive_samples(d, rng, REGRESSION_DRAWS)  # noqa: E731
        score = metrics.regression_metrics
    nuts, halves = build(draws), (build(draws[:half]), build(draws[half:]))
    blocks = {"all": slice(None), **{b.name: slice(b.start, b.stop) for b in task.test_blocks}}
    rows = {}
    for name, rows_of in blocks.items():
        against = score(nuts[rows_of], reference.array[rows_of])
        own_floor = score(halves[0][rows_of], halves[1][rows_of])
        rows[name] = {"nuts_vs_reference": against, "reference_noise_floor": reference.noise_floor[name],
                      "nuts_noise_floor": own_floor}
    rhat = diagnostics.split_rhat(draws)
    result = {
        "task": task.name, "reference_sha256": reference.sha256, "settings": vars(args) | {"out": str(args.out)},
        "twin_relative_difference": worst, "blocks": rows,
        "nuts_max_split_rhat": float(rhat.max()), "nuts_min_bulk_ess": float(diagnostics.bulk_ess(draws).min()),
        "chains": [{k: v for k, v in c.items() if k != "positions"} for c in chains],
    }
    distance = "total_variation" if task.kind == "classification" else "w1"
    print(f"{'block':<16}{'NUTS vs ours':>14}{'our floor':>12}{'NUTS floor':>12}{'expected':>12}")
    for name, row in rows.items():
        ours, theirs = row["reference_noise_floor"][distance], row["nuts_noise_floor"][distance]
        # Classification: two Monte Carlo averages, each floor of twice the variance of its whole. Regression: the
        # reference's 1000 draws of y add noise that its halves carry twice and NUTS's many draws hardly at all,
        # so at most sqrt(ours^2 / 2 + theirs^2 / 4) (all of our floor y-noise) and at least the classification value.
        row["expected_if_equal"] = (0.5 * float(np.hypot(ours, theirs)) if task.kind == "classification"
                                    else float(np.sqrt(ours**2 / 2 + theirs**2 / 4)))
        print(f"{name:<16}{row['nuts_vs_reference'][distance]:>14.4f}{ours:>12.4f}{theirs:>12.4f}"
              f"{row['expected_if_equal']:>12.4f}")
    verdict = rows["all"]["nuts_vs_reference"][distance] <= rows["all"]["reference_noise_floor"][distance]
    result["within_noise_floor"] = bool(verdict)
    print(f"NUTS: worst split R-hat {result['nuts_max_split_rhat']:.3f}, "
          f"{sum(c['seconds'] for c in chains):.0f} s of sampling over {args.chains} chains; "
          f"{distance} to our reference {'within' if verdict else 'BEYOND'} its noise floor")
    atomic_write_bytes(out, (json.dumps(result, indent=2, sort_keys=True) + "\n").encode())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
