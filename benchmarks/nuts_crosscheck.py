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
reference (agreement and total variation, or W1/W2 for regression), next to our reference's noise floor and NUTS's
own, both by the same rule (the distance an independent, exact run of the same sampler is expected to score against
its estimate, d(halves) / sqrt 2: :mod:`reference.evidence`), and what they predict for two samplers of one posterior,
sqrt((floor_ours^2 + floor_NUTS^2) / 2): each floor is sqrt 2 times its estimate's noise, and the noises of
independent estimates add in square. For regression the NUTS predictive is 20,000 draws of y per test point (its
floor from halves of 10,000 each), so its own draws of y add almost nothing. The ratio of the distance to that
expectation describes the agreement (about 1 where both sample one posterior); the verdict is a test:
:func:`reference.crosscheck.permutation_test` of the two samplers' chains at the evidence's stated test points, whose
p-value, decision at level 5%, threshold and the smallest posterior-width error it detects with 80% power the results
file keeps under ``test``.

Nothing a chain computes is lost between sittings or left out of the repository. Each chain keeps, as it samples,
the same per-draw quantities as a reference's evidence (:class:`ChainSummary`: the predictive at the evidence's
stated test points, the log posterior and test log-likelihood, and the test set's predictive average or, for
regression, every draw's predictive mean and std), never its positions. A finished chain's file
(``benchmarks/results/nuts-<task>/chain-<c>.npz``) is reused by a rerun with the same arguments; a running chain saves
its whole NUTS state and what it has kept every ``CHECKPOINT_SECONDS`` (``chain-<c>.partial.npz``), and a rerun
continues it from there, so a check spans sittings when its files are committed. ``--verdict-only`` recomputes the
results JSON from the finished chains' files alone; a results file made with other settings (``--chains`` among
them) is refused rather than rewritten, unless ``--restart``. Checked on ``toy-gap`` (30 + 30 iterations): stepping
the kernel gives bitwise the draws of ``MCMC.run``, and a chain stopped after its 20th (warm-up) or 45th (sampling)
iteration and rerun gives them too.
"""

from __future__ import annotations

import concurrent.futures
import io
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

from bench import scripts
from bench.arguments import positive_whole, seed_number

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _require_the_extra() -> None:
    """Sampling needs NumPyro and JAX, bdl-bench's optional extra ``crosscheck``; recomputing a verdict from the kept
    chains (``--verdict-only``) needs neither."""
    from bench import optional
    from bench.errors import ConfigError

    absent = [name for name in ("jax", "numpyro") if not optional.installed(name)]
    if absent:
        raise ConfigError(f"{scripts.missing_extra(absent, 'sampling with NUTS')}; --verdict-only recomputes kept "
                          "chains without it")
    for name in ("jax", "numpyro", "numpyro.infer"):  # installed, but broken or mismatched: one line, exit 3
        optional.load(name, "sampling with NUTS")


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


DAMAGED_CHAIN = "delete it, or pass --restart to discard the chains' files and sample them again"
"""How a damaged chain file is repaired."""


def _read_saved(path: Path, identity: dict) -> tuple[dict, dict] | None:
    """The meta and arrays :func:`_write_saved` wrote with the same arguments, None for a missing file or one written
    with other arguments (its chain is sampled again); a damaged file (truncated, edited, not this script's) is one
    :class:`~bench.errors.DamagedFile` line naming it (:func:`bench.io.read_npz`)."""
    from bench.errors import DamagedFile
    from bench.io import read_npz

    if not path.exists():
        return None
    saved = read_npz(path, "chain file", DAMAGED_CHAIN)
    try:
        meta = json.loads(str(saved["meta"]))
        same = meta["identity"] == identity
    except (ValueError, KeyError, TypeError, RecursionError):
        raise DamagedFile(f"{path}: the chain file is damaged (it holds no readable meta of this script); "
                          f"{DAMAGED_CHAIN}") from None
    return (meta, {name: array for name, array in saved.items() if name != "meta"}) if same else None


def _save_partial(path: Path, identity: dict, leaves: list, kept: dict, seconds: float) -> None:
    """A running chain's NUTS state (every leaf of NumPyro's ``HMCState``, its adaptation and its random key
    included), what it has kept so far (:class:`ChainSummary`'s arrays) and the seconds sampled."""
    _write_saved(path, {"identity": identity, "seconds": seconds, "leaves": len(leaves), "kept": sorted(kept)},
                 {**{f"leaf_{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)},
                  **{f"kept_{name}": np.asarray(values) for name, values in kept.items()}})


def _load_partial(path: Path, identity: dict) -> dict | None:
    """A running chain's checkpoint written with the same arguments, else None (then the chain starts over)."""
    from bench.errors import DamagedFile

    try:
        saved = _read_saved(path, identity)
    except DamagedFile as error:  # written atomically, so only an edit damages it: say so, and start over
        print(f"note: {error}; chain starts over", flush=True)
        return None
    if saved is None:
        return None
    meta, arrays = saved
    return {"seconds": meta["seconds"], "leaves": [arrays[f"leaf_{i}"] for i in range(meta["leaves"])],
            "kept": {name: arrays[f"kept_{name}"] for name in meta["kept"]}}


def reference_classes(task, reference: np.ndarray) -> list[int] | None:
    """The class ``reference`` (``(N, K)`` probabilities) predicts at each of the evidence's stated test points: all
    that a chain's kept draws take from the reference (classification; None for regression, whose draws take
    nothing from it)."""
    from reference.evidence import evidence_points

    return reference[evidence_points(task)].argmax(axis=1).tolist() if task.kind == "classification" else None


def chain_identity(task, reference: np.ndarray, warmup: int, samples: int, dtype: str, seed: int) -> dict:
    """What a saved chain must match to be reused: the task, the arguments, and of the reference only
    :func:`reference_classes`. NUTS's path never sees the reference, so a reference sampled again that predicts the
    same classes at those points keeps every chain, bit for bit what sampling against it would give."""
    return {"task": task.name, "fingerprint": task.fingerprint(),
            "reference_classes": reference_classes(task, reference), "warmup": warmup, "samples": samples,
            "dtype": dtype, "seed": seed}


class ChainSummary:
    """What a chain keeps of each kept draw, computed as it samples (positions are not kept: the CNN-LSTM's would be
    5 MB a chain), the same quantities as a reference's evidence (:mod:`reference.evidence`):

    - ``point_draws`` ``(S, P, q)`` float32: at the evidence's stated test points, the probability of the class our
      reference predicts (q = 1) or the predictive mean and std (q = 2);
    - ``traces`` ``(S, 2)`` float64: the log posterior (minus NumPyro's potential energy) and the test log-likelihood;
    - ``probability_sum`` ``(N, K)`` float64 (classification): the sum of the draws' test-set probabilities;
    - ``mean_std`` ``(S, N, 2)`` float32 (regression): every draw's predictive mean and std on the test set, which
      the 20,000 draws of y of NUTS's predictive are drawn from;
    - ``num_steps``, ``accept_prob``, ``diverging`` ``(S,)``: NumPyro's per-iteration diagnostics.
    """

    def __init__(self, task, reference: np.ndarray, dtype: str, kept: dict | None = None):
        import jax
        import jax.numpy as jnp

        import jax_models
        from reference.evidence import evidence_points

        self.task = task
        self.points = evidence_points(task)
        classes = reference_classes(task, reference)
        self.classes = None if classes is None else np.asarray(classes)
        jdtype = jnp.float64 if dtype == "float64" else jnp.float32
        self.predict = jax.jit(jax_models.predict_fn(task, jdtype))
        self.x_test = jnp.asarray(task.x_test.numpy(), jdtype)
        self.y_test = task.y_test.numpy()
        self.kept = {name: list(values) for name, values in (kept or {}).items() if name != "probability_sum"}
        for name in ("point_draws", "traces", "num_steps", "accept_prob", "diverging"):
            self.kept.setdefault(name, [])
        self.probability_sum = (kept or {}).get("probability_sum")
        if task.kind == "regression":
            self.kept.setdefault("mean_std", [])

    def add(self, state) -> None:
        """The draw of ``state`` (a NumPyro ``HMCState`` after a kept transition)."""
        import jax.numpy as jnp

        outputs = np.asarray(self.predict(jnp.asarray(state.z), self.x_test), dtype=np.float64)
        rows = np.arange(len(self.y_test))
        if self.task.kind == "classification":
            log_probs = outputs - outputs.max(-1, keepdims=True)
            log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
            probs = np.exp(log_probs)
            self.probability_sum = probs if self.probability_sum is None else self.probability_sum + probs
            self.kept["point_draws"].append(probs[self.points, self.classes][:, None].astype(np.float32))
            test_log_likelihood = log_probs[rows, self.y_test.astype(int)].sum()
        else:
            mean, std = outputs[..., 0], np.logaddexp(0.0, outputs[..., 1])
            mean_std = np.stack([mean, std], axis=-1)
            self.kept["mean_std"].append(mean_std.astype(np.float32))
            self.kept["point_draws"].append(mean_std[self.points].astype(np.float32))
            test_log_likelihood = (-0.5 * ((self.y_test - mean) / std) ** 2 - np.log(std)
                                   - 0.5 * np.log(2 * np.pi)).sum()
        self.kept["traces"].append(np.array([-float(state.potential_energy), test_log_likelihood]))
        for name in ("num_steps", "accept_prob", "diverging"):
            self.kept[name].append(np.asarray(getattr(state, name)))

    def arrays(self) -> dict:
        out = {name: np.asarray(values) for name, values in self.kept.items()}
        if self.probability_sum is not None:
            out["probability_sum"] = self.probability_sum
        return out


def run_chain(task_name: str, chain: int, seed: int, warmup: int, samples: int, dtype: str,
              folder: Path, identity: dict) -> dict:
    """One NUTS chain: its :class:`ChainSummary` arrays and its diagnostics.

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
    from reference.store import load_reference

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
    seconds = 0.0
    reference = load_reference(task).array
    summary = ChainSummary(task, reference, dtype)
    if resumed is not None:
        state = jax.tree_util.tree_unflatten(structure, [jnp.asarray(leaf) for leaf in resumed["leaves"]])
        summary = ChainSummary(task, reference, dtype, resumed["kept"])
        seconds = resumed["seconds"]
    step = jax.jit(lambda current: kernel.sample(current, (), {}))
    started = last_save = time.perf_counter()
    while int(state.i) < warmup + samples:
        state = step(state)
        if int(state.i) > warmup:  # state i is the i-th transition; MCMC.run keeps W+1 .. W+S
            summary.add(state)
        if time.perf_counter() - last_save > CHECKPOINT_SECONDS:
            last_save = time.perf_counter()
            _save_partial(path, identity, jax.tree_util.tree_leaves(state), summary.arrays(),
                          seconds + last_save - started)
    seconds += time.perf_counter() - started
    kept = summary.arrays()
    return {"chain": chain, "arrays": kept, "seconds": seconds,
            "sampling_gradients": int(np.sum(kept["num_steps"])),
            "mean_accept_prob": float(np.mean(kept["accept_prob"])),
            "divergences": int(np.sum(kept["diverging"])),
            "mean_tree_steps": float(np.mean(kept["num_steps"])),
            "step_size": float(state.adapt_state.step_size)}


REGRESSION_DRAWS = 20_000
"""Draws of y per test point of the NUTS predictive (regression): 20 times the reference's 1000, so that the
comparison's noise is the reference's own."""


def _save_chain(folder: Path, chain: dict, identity: dict) -> None:
    """One finished chain's summary arrays and diagnostics, with the arguments that produced it."""
    meta = {k: v for k, v in chain.items() if k != "arrays"}
    _write_saved(folder / f"chain-{chain['chain']}.npz", {"identity": identity, "chain": meta}, chain["arrays"])


def _saved_chain(folder: Path, index: int, identity: dict) -> dict | None:
    """Chain ``index`` as saved by an earlier run with the same arguments, else None (a run with other
    arguments, or a damaged file, is sampled again)."""
    saved = _read_saved(folder / f"chain-{index}.npz", identity)
    if saved is None or "traces" not in saved[1]:  # not this script's, or an earlier version's, which kept positions
        return None
    return {**saved[0]["chain"], "arrays": saved[1]}


def verdict(task, reference, chains: list[dict], seed: int) -> dict:
    """The cross-check's result from the chains' summaries: per block, NUTS's predictive against our reference, our
    noise floor, NUTS's own (its halves of chains, the same rule as ours: :func:`reference.evidence.noise_floor`) and
    the distance two samplers of one posterior are expected to be apart, sqrt((floor_ours^2 + floor_NUTS^2) / 2)
    (each floor is sqrt 2 times the noise of its sampler's estimate, and the noises of independent estimates add in
    square); the ratio of the distance to that, and NUTS's own diagnostics."""
    from bench import metrics
    from reference import crosscheck, diagnostics, evidence
    from reference.generate import predictive_samples

    n_chains = len(chains)
    if task.kind == "classification":
        averages = np.stack([c["arrays"]["probability_sum"] / len(c["arrays"]["traces"]) for c in chains])
        nuts = averages.mean(axis=0)
        kept = evidence.Evidence(np.zeros(1), np.zeros((n_chains, 1, 1, 1)), np.zeros((n_chains, 1, 2)),
                                 np.zeros((n_chains, 1)), np.zeros((n_chains, 1)), np.zeros(n_chains),
                                 averages.astype(np.float32))
        score, distance = metrics.classification_metrics, "total_variation"
    else:
        nuts = predictive_samples(np.stack([c["arrays"]["mean_std"] for c in chains]), np.random.default_rng(seed),
                                  REGRESSION_DRAWS)
        kept = evidence.Evidence(np.zeros(1), np.zeros((n_chains, 1, 1, 2)), np.zeros((n_chains, 1, 2)),
                                 np.zeros((n_chains, 1)), np.zeros((n_chains, 1)), np.zeros(n_chains))
        score, distance = metrics.regression_metrics, "w1"
    nuts_floor = evidence.noise_floor(task, nuts, kept)
    blocks = {"all": slice(None), **{b.name: slice(b.start, b.stop) for b in task.test_blocks}}
    rows = {}
    for name, rows_of in blocks.items():
        against = score(nuts[rows_of], reference.array[rows_of])
        ours, theirs = reference.noise_floor[name][distance], nuts_floor[name][distance]
        expected = float(np.sqrt((ours**2 + theirs**2) / 2))
        rows[name] = {"nuts_vs_reference": against, "reference_noise_floor": reference.noise_floor[name],
                      "nuts_noise_floor": nuts_floor[name], "expected_if_equal": expected,
                      "ratio": against[distance] / expected}
    quantities = np.concatenate([np.stack([c["arrays"]["point_draws"] for c in chains]).reshape(
        n_chains, len(chains[0]["arrays"]["traces"]), -1).astype(np.float64),
        np.stack([c["arrays"]["traces"] for c in chains])], axis=2)
    from reference.store import PACKAGE_DATA, RESTORE_EVIDENCE, evidence_path

    ours = evidence.load(evidence_path(PACKAGE_DATA, task.name), RESTORE_EVIDENCE, installed=True)
    decision = crosscheck.permutation_test(ours.point_draws, np.stack([c["arrays"]["point_draws"] for c in chains]),
                                           task.kind)
    return {"task": task.name, "reference_sha256": reference.sha256, "distance": distance, "blocks": rows,
            "test": decision,
            "nuts_max_split_rhat": float(diagnostics.split_rhat(quantities).max()),
            "nuts_min_bulk_ess": float(diagnostics.bulk_ess(quantities).min()),
            "nuts_min_tail_ess": float(diagnostics.tail_ess(quantities).min()),
            "chains": [{k: v for k, v in c.items() if k != "arrays"} for c in chains]}


RESULTS = Path(__file__).resolve().parent / "results"


def results_paths(task_name: str, out: Path | None = None) -> tuple[Path, Path]:
    """The results JSON (default ``benchmarks/results/nuts-<task>.json``) and the folder of its chains' files beside
    it (``nuts-<task>/``), both in the repository."""
    out = out or RESULTS / f"nuts-{task_name}.json"
    return out, out.with_suffix("")


SETTINGS = ("chains", "warmup", "samples", "dtype", "seed")
"""The arguments a results JSON records, and a rerun must repeat to write over it."""


def _overwritten_verdict(out: Path, settings: dict) -> str | None:
    """Why writing a verdict made with ``settings`` over ``out`` would replace another check's, else None: a committed
    verdict of 8 chains is never silently rewritten from 4 of them."""
    if not out.exists():
        return None
    from bench.errors import DamagedFile
    from bench.io import read_json

    try:
        held = read_json(out, "results file", "")["settings"]
    except (DamagedFile, KeyError):
        held = None
    if not isinstance(held, dict):
        return f"{out} is not a results file of this script (or is damaged)"
    changed = [f"--{name} {held.get(name)} there, {value} here" for name, value in settings.items()
               if held.get(name) != value]
    return f"{out} holds the verdict of another check ({'; '.join(changed)})" if changed else None


def main(argv: list[str] | None = None) -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--chains", type=positive_whole, default=4)
    parser.add_argument("--warmup", type=positive_whole, default=500)
    parser.add_argument("--samples", type=positive_whole, default=500)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--seed", type=seed_number, default=2021, help="root of the NUTS chains' seeds (the references use 0)")
    parser.add_argument("--workers", type=positive_whole, default=2)
    parser.add_argument("--out", type=Path, help="JSON file for the results (default: benchmarks/results/"
                                                 "nuts-<task>.json, its chains' files in nuts-<task>/ beside it)")
    parser.add_argument("--restart", action="store_true",
                        help="discard chains' files and a results file made with other arguments (without it, they "
                             "are refused: hours of sampling are never overwritten by a mistyped argument)")
    parser.add_argument("--verdict-only", action="store_true",
                        help="sample nothing: recompute the results from the chains' files alone (every chain must "
                             "have finished)")
    args = parser.parse_args(argv)
    if args.chains < 2 or args.chains % 2:
        parser.error(f"--chains must be even and at least 2 (NUTS's noise floor compares two halves), got {args.chains}")
    if min(args.warmup, args.samples, args.workers) < 1:
        parser.error("--warmup, --samples and --workers must be at least 1")

    import torch

    import jax_models
    from bench.errors import DamagedFile
    from bench.io import atomic_write_bytes
    from bench.functional import StackedModel, seeded_module
    from bench.tasks import get_task
    from reference.store import load_reference
    from reference.tables import crosscheck_sentence

    torch.set_num_threads(1)
    task = get_task(args.task)
    if task.kind == "regression" and REGRESSION_DRAWS % args.chains:
        parser.error(f"--chains must divide the {REGRESSION_DRAWS} draws of y of a regression predictive, got "
                     f"{args.chains}")
    reference = load_reference(task)
    out, saved = results_paths(task.name, args.out)
    saved.mkdir(parents=True, exist_ok=True)
    identity = chain_identity(task, reference.array, args.warmup, args.samples, args.dtype, args.seed)
    foreign = []
    for path in sorted(saved.glob("chain-*.npz")):
        try:
            other = _read_saved(path, identity) is None
        except DamagedFile:
            if not args.restart:
                raise
            other = True
        if other:
            foreign.append(path.name)
    if foreign and not args.restart:
        parser.exit(2, f"error: {saved} holds {', '.join(foreign)}, made with other arguments (or damaged); run with "
                       "the arguments they were made with, or pass --restart to discard them\n")
    settings = {name: getattr(args, name) for name in SETTINGS}
    overwritten = _overwritten_verdict(out, settings)
    if overwritten and not args.restart:
        parser.exit(2, f"error: {overwritten}; run with its arguments, write elsewhere with --out, or pass --restart "
                       "to replace it\n")
    for name in foreign:
        (saved / name).unlink()
    chains = [chain for chain in (_saved_chain(saved, c, identity) for c in range(args.chains)) if chain]
    missing = sorted(set(range(args.chains)) - {chain["chain"] for chain in chains})
    if chains:
        print(f"reusing {len(chains)} finished chain(s) from {saved}")
    if missing and args.verdict_only:
        parser.exit(1, f"error: chains {missing} of {saved} have not finished; run without --verdict-only to sample "
                       "them\n")
    twin = None
    if missing:
        _require_the_extra()
        _setup_jax("float64")
        probe = StackedModel(task.model_factory()).layout.flatten(
            StackedModel.stack([seeded_module(task.model_factory, s) for s in (1, 2)])).double()
        twin = jax_models.check_against_torch(task, probe.numpy())
        print(f"{task.name}: JAX twin agrees with PyTorch to {twin:.1e} (relative, float64)")
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
    result = {**verdict(task, reference, chains, args.seed), "settings": settings}
    distance = result["distance"]
    print(f"{'block':<16}{'NUTS vs ours':>14}{'our floor':>12}{'NUTS floor':>12}{'expected':>12}{'ratio':>8}")
    for name, row in result["blocks"].items():
        print(f"{name:<16}{row['nuts_vs_reference'][distance]:>14.4f}{row['reference_noise_floor'][distance]:>12.4f}"
              f"{row['nuts_noise_floor'][distance]:>12.4f}{row['expected_if_equal']:>12.4f}{row['ratio']:>8.2f}")
    print(crosscheck_sentence(result["test"]).replace("**", ""))
    print(f"NUTS: worst split R-hat {result['nuts_max_split_rhat']:.3f}, "
          f"{sum(c['seconds'] for c in chains):.0f} s of sampling over {args.chains} chains")
    atomic_write_bytes(out, (json.dumps(result, indent=2, sort_keys=True) + "\n").encode())
    print(f"wrote {out}")


if __name__ == "__main__":
    scripts.run(main)
