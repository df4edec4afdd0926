"""Full-batch HMC speed: gradient evaluations per second, ours (four ways) beside NumPyro's, same model and data.

    pip install -e ".[crosscheck]"
    OMP_NUM_THREADS=1 python benchmarks/hmc_speed.py [--tasks digits-cnn digits-lstm] [--chains 1 8] [--repeats 3]

Both sides run fixed-step HMC iterations: a fresh momentum, L = ``--steps`` leapfrog steps of one step size (the
task's reference step size where it has one), a Metropolis test, over the task's whole training set, one thread
each. Ours: :func:`bench.hmc.step` with each :class:`bench.hmc.Integrator` (chains vectorised or one by
one, eager or compiled). NumPyro: its ``HMC`` kernel (``adapt_step_size=False, adapt_mass_matrix=False``), the
whole sampling loop compiled by XLA as ``MCMC(progress_bar=False)`` compiles it (a progress bar runs a slower
host loop and would flatter us), several chains ``vmap``-ped as ``chain_method="vectorized"`` does. Each measurement times ``--iterations``
iterations after a warm-up call that compiles; the repeats are interleaved (ours, theirs, ours, ...) so that the
machine's load falls on both alike, and the table shows the median and range of chain-gradients per second and the
ratio of ours to NumPyro's at the same dtype (above 1: ours is faster). Compile times are reported apart.

``--profile``: after the timings of each case, one measurement of our fastest way runs under ``torch.profiler`` and
its self-CPU time per chain-gradient is split into the matrix products, the compiled graph's own (generated) kernels,
the compiled call's entry (guards, cache lookup, wrappers), the rest, beside a bare ``jit(grad)`` of the JAX twin's
log posterior at the same dtype: where our time goes, and whether NumPyro's lead is its loop or its kernels.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from tabulate import tabulate  # noqa: E402

from bench import optional  # noqa: E402

UNAVAILABLE: tuple[str, BaseException] | None = None
"""The optional extra's module (pip install -e ".[crosscheck]") that failed to import, missing or broken, and what its
import raised: main() says so in one line."""
for _module in ("jax", "numpyro", "numpyro.infer"):
    try:
        importlib.import_module(_module)
    except KeyboardInterrupt:
        raise
    except BaseException as _error:  # noqa: BLE001 - a broken installation may raise anything on import
        UNAVAILABLE = (_module, _error)
        break
if UNAVAILABLE is None:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from numpyro.infer import HMC

    import jax_models

from bench import scripts
from bench.arguments import positive_whole
from bench.functional import StackedModel, seeded_module  # noqa: E402
from bench.tasks import get_task, task_names  # noqa: E402
from bench import hmc  # noqa: E402
from reference.generate import task_target  # noqa: E402
from reference.store import load_reference  # noqa: E402

MODES = {"vectorised": (True, False), "chain by chain": (False, False), "vectorised, compiled": (True, True),
         "chain by chain, compiled": (False, True)}


def step_size_of(task) -> float:
    try:
        return float(np.median(load_reference(task).metadata["step_sizes"]))
    except Exception:  # no reference yet: a step size of the right order for these networks
        return 0.005


class Ours:
    def __init__(self, task, dtype: str, chains: int, mode: str, steps: int, eps: float):
        torch_dtype = getattr(torch, dtype)
        target, _ = task_target(task, torch_dtype, torch.device("cpu"))
        vectorise, compiled = MODES[mode]
        self.integrator = hmc.Integrator(target, vectorise=vectorise, compiled=compiled)
        self.target, self.steps = target, steps
        position = StackedModel(task.model_factory()).layout.flatten(
            StackedModel.stack([seeded_module(task.model_factory, s) for s in range(chains)])).to(torch_dtype)
        self.state = hmc.init(position, target, eps)
        self.generators = [torch.Generator().manual_seed(c) for c in range(chains)]

    def __call__(self, iterations: int) -> None:
        for _ in range(iterations):
            self.state, _ = hmc.step(self.state, self.target, 0.0, self.generators, integrator=self.integrator,
                                     n_leapfrog=self.steps)


def jax_log_posterior(task, jdtype):
    """The JAX twin's log posterior ``theta (D,) -> scalar`` over the task's whole training set, and its layout."""
    log_likelihood, layout = jax_models.log_likelihood_fn(task, jdtype)
    variance = task.prior_variance
    return (lambda theta: log_likelihood(theta) - 0.5 * jnp.sum(theta**2) / variance), layout


class Theirs:
    """NumPyro's HMC kernel, its sampling loop compiled whole (``lax.fori_loop`` of ``HMC.sample`` under ``jit``,
    what ``MCMC(progress_bar=False)`` runs), chains ``vmap``-ped as ``chain_method="vectorized"`` does."""

    def __init__(self, task, dtype: str, chains: int, steps: int, eps: float, iterations: int):
        # Under x64 NumPyro draws float64 momenta and would promote a float32 position: each measurement runs with
        # JAX's x64 set to the dtype measured, so that float32 means float32 throughout, as on our side.
        self.x64 = dtype == "float64"
        with jax.enable_x64(self.x64):
            self._build(task, dtype, chains, steps, eps, iterations)

    def _build(self, task, dtype: str, chains: int, steps: int, eps: float, iterations: int) -> None:
        jdtype = jnp.float64 if dtype == "float64" else jnp.float32
        log_posterior, layout = jax_log_posterior(task, jdtype)
        # trajectory_length=None: NumPyro's default (2 pi) would otherwise set the step to 2 pi / num_steps, not eps.
        kernel = HMC(potential_fn=lambda t: -log_posterior(t), step_size=eps, num_steps=steps, trajectory_length=None,
                     adapt_step_size=False, adapt_mass_matrix=False)
        init = layout.flatten(StackedModel.stack([seeded_module(task.model_factory, s) for s in range(chains)]))
        states = [kernel.init(jax.random.PRNGKey(c), 0, jnp.asarray(init[c].numpy(), jdtype), (), {})
                  for c in range(chains)]
        self.states = jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)

        def loop(state):
            return jax.lax.fori_loop(0, iterations, lambda _, s: kernel.sample(s, (), {}), state)

        self.run = jax.jit(jax.vmap(loop))

    def __call__(self, iterations: int) -> None:
        with jax.enable_x64(self.x64):
            self.states = jax.block_until_ready(self.run(self.states))


def timed(run, iterations: int) -> float:
    started = time.perf_counter()
    run(iterations)
    return time.perf_counter() - started


PROFILE_BUCKETS = {
    "matrix products": ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::convolution",
                        "aten::mkldnn_convolution", "aten::_convolution"),
    "compiled call entry": ("TorchDynamo Cache Lookup", "Torch-Compiled Region", "AOTDispatcher Runtime Wrapper Prologue",
                            "Pregraph bytecode"),
}
"""Profiler events by name; the compiled graph's own kernels are the events named ``## Call CompiledFxGraph ...``."""


def bucket_of(name: str) -> str:
    if name.startswith("## Call CompiledFxGraph"):
        return "compiled graph's kernels"
    return next((bucket for bucket, names in PROFILE_BUCKETS.items() if name in names), "other")


def profile_ours(runner: Ours, chains: int, steps: int, iterations: int) -> dict[str, float]:
    """Milliseconds of self-CPU time per chain-gradient, by bucket, over one measurement of ``runner``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        runner(iterations)
    buckets: dict[str, float] = {}
    for event in prof.key_averages():
        bucket = bucket_of(event.key)
        buckets[bucket] = buckets.get(bucket, 0.0) + event.self_cpu_time_total / 1e3
    gradients = chains * steps * iterations
    return {bucket: ms / gradients for bucket, ms in sorted(buckets.items())}


def bare_jax_gradient_ms(task, dtype: str, repeats: int, calls: int = 100) -> float:
    """The best of ``repeats`` mean times of one jitted gradient of the JAX twin's log posterior, in ms."""
    with jax.enable_x64(dtype == "float64"):
        jdtype = jnp.float64 if dtype == "float64" else jnp.float32
        log_posterior, layout = jax_log_posterior(task, jdtype)
        gradient = jax.jit(jax.grad(log_posterior))
        theta = jnp.asarray(layout.flatten(StackedModel.stack([seeded_module(task.model_factory, 0)]))[0].numpy(),
                            jdtype)
        gradient(theta).block_until_ready()
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(calls):
                result = gradient(theta)
            result.block_until_ready()
            best = min(best, (time.perf_counter() - started) / calls)
    return best * 1e3


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["digits-cnn", "digits-lstm"], choices=task_names())
    parser.add_argument("--chains", type=positive_whole, nargs="+", default=[1, 8])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float64"], choices=["float32", "float64"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--steps", type=positive_whole, default=20)
    parser.add_argument("--iterations", type=positive_whole, default=5)
    parser.add_argument("--repeats", type=positive_whole, default=3)
    parser.add_argument("--profile", action="store_true", help="also profile our fastest way (see the docstring)")
    scripts.out_option(parser)
    args = parser.parse_args()
    if UNAVAILABLE is not None:
        module, error = UNAVAILABLE
        raise optional.failure(module, "timing NumPyro", error,
                               missing=scripts.missing_extra([module.split(".")[0]], "timing NumPyro"))
    started = time.monotonic()
    torch.set_num_threads(1)
    rows = []
    for task_name in args.tasks:
        task = get_task(task_name)
        eps = step_size_of(task)
        for dtype in args.dtypes:
            for chains in args.chains:
                runners, compile_seconds = {}, {}
                for name in [*args.modes, "NumPyro HMC"]:
                    runner = Theirs(task, dtype, chains, args.steps, eps, args.iterations) if name == "NumPyro HMC" \
                        else Ours(task, dtype, chains, name, args.steps, eps)
                    compile_seconds[name] = timed(runner, 1)
                    runner(1)  # NumPyro's states come back typed as the loop made them: one more trace
                    runners[name] = runner
                rates = {name: [] for name in runners}
                for _ in range(args.repeats):
                    for name, runner in runners.items():
                        seconds = timed(runner, args.iterations)
                        rates[name].append(chains * args.steps * args.iterations / seconds)
                theirs = statistics.median(rates["NumPyro HMC"])
                for name, values in rates.items():
                    rows.append({"task": task_name, "dtype": dtype, "chains": chains, "sampler": name,
                                 "chain-gradients/s": f"{statistics.median(values):.0f} "
                                                      f"({min(values):.0f}-{max(values):.0f})",
                                 "per chain": f"{statistics.median(values) / chains:.0f}",
                                 "vs NumPyro": f"{statistics.median(values) / theirs:.2f}",
                                 "first call s": f"{compile_seconds[name]:.1f}"})
                print(tabulate(rows[-len(rates):], headers="keys"), flush=True)
                if args.profile:
                    fastest = max(args.modes, key=lambda name: statistics.median(rates[name]))
                    split = profile_ours(runners[fastest], chains, args.steps, args.iterations)
                    per_gradient = 1e3 * chains / statistics.median(rates[fastest])
                    print(f"{fastest}, ms per chain-gradient: {per_gradient:.3f} timed; profiled self-CPU "
                          + ", ".join(f"{bucket} {ms:.3f}" for bucket, ms in split.items())
                          + f"; NumPyro HMC {1e3 * chains / theirs:.3f} timed; a bare jitted JAX gradient "
                          f"{bare_jax_gradient_ms(task, dtype, args.repeats):.3f}", flush=True)
    print(f"\nfixed-step HMC, {args.steps} leapfrog steps per iteration, {args.iterations} iterations per "
          f"measurement, median (range) of {args.repeats} interleaved repeats, one thread")
    print(tabulate(rows, headers="keys"))
    scripts.keep(args.out, __file__, started, {"rates": rows}, steps=args.steps, iterations=args.iterations,
                 repeats=args.repeats, versions={name: importlib.metadata.version(name) for name in ("jax", "numpyro")})


if __name__ == "__main__":
    scripts.run(main)
