"""Where the time goes where ours is slower than a peer (``benchmarks/peers.py``), and in a one-member run.

    OMP_NUM_THREADS=1 python benchmarks/profiles.py [--cases vogn sgld swag sgd] [--epochs 10] [--repeats 3] [--quick]

Each case runs its sides as ``benchmarks/peers.py`` builds them (same network, data, batch size, epochs and draws;
ours through :func:`bench.api.fit`), first timed without a profiler (once untimed, then ``--repeats`` times
interleaved: the median of the ratios to the peer), then once each under ``torch.profiler`` (CPU, one thread). A
profile's self-CPU time is sorted into buckets by the named regions an operation runs in (the first that applies):

- ``predictive``: the test predictive (ours: :class:`~approximators.base.PredictiveAccumulator`, SWAG's and the
  mean-field draws; a peer: its region :data:`peers.PREDICTIVE`);
- ``per-example curvature``: VOGN's per-layer rules, which form every example's gradient from the layer's input and
  output gradient and sum g_i and g_i ** 2 (:func:`approximators.per_example._unit_moments`);
- ``backward``: the autograd engine's work (``autograd::engine::evaluate_function``);
- ``forward``: the network (ours: :class:`~bench.functional.StackedModel` and the per-example forward pass; a
  peer: its top-level module, by hooks on the task's networks);
- ``data``: reading minibatches (ours: through the meter, :meth:`~bench.budget.MeteredData.batch`);
- ``moments``: SWAG's snapshots (ours: :meth:`~approximators.swag.Moments.collect`; the authors':
  ``SWAG.collect_model``);
- ``update``: the optimiser's or sampler's step (ours: the update rule, and VOGN's draw of the weights; a peer:
  ``torch.optim``'s ``Optimizer.step`` and ``zero_grad``, IVON's weight sampling, posteriors' ``update`` around its
  gradient);
- ``other ops``: operations outside every region (a peer's minibatch indexing, our engine's data order).

Each bucket's time is the self time of its operations (``ops``) plus that of its regions (``Python``: the time in
a region outside every operation: module calls, vmap's and the autograd engine's bookkeeping); ``Python outside``
is the profiled run's wall time less all of it (loops, configuration, the profiler's own records). The profiler
adds a few microseconds per operation, so the profiled seconds exceed the unprofiled ones; the shares are what a
profile tells. Then the top operations by self time.

Cases (``--cases``):

- ``vogn`` (``digits-cnn``, LeNet-5): ours, IVON, and ours with VOGN's per-example curvature replaced by the
  square of the minibatch gradient (Adam's statistic: what a VOGN without per-example work would cost; a
  counterfactual for timing, never a method);
- ``sgld`` (LeNet-5): 4 chains vectorised (the default), the same 4 chains' work as 4 runs of 1 chain one after
  another, 1 chain, against posteriors with 4 and 1 chains; the convolution kernels' time per chain-epoch;
- ``swag`` (``digits-cnn``, LeNet-5): ours against the authors' ``swa_gaussian``;
- ``sgd`` (``digits``, ``toy-gap``): ours, one member, against a plain ``torch.optim.Adam`` loop with the same
  schedule, prior (as weight decay), batch size and epochs, and the same test predictive (softmax, or the
  likelihood's draws for regression); and a plain ``torch.optim.SGD`` loop as ``benchmarks/cost.py`` times its
  reference epoch (constant rate, no momentum, no prior), with the same predictive, the ratios' reference; also
  timed at ``MARGINAL_FACTOR`` times the epochs, for the marginal cost of an epoch and each side's fixed cost.

A case whose peer is not installed is skipped with one line saying which.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

import torch
from tabulate import tabulate
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402

import approximators.base  # noqa: E402
import approximators.per_example  # noqa: E402
import approximators.swag  # noqa: E402
import approximators.updates  # noqa: E402
import approximators.vogn  # noqa: E402
import bench.budget  # noqa: E402
import bench.functional  # noqa: E402
from approximators.engine import Objective  # noqa: E402

from bench import scripts
from bench.arguments import positive_whole

REGION = "region::"
"""The prefix of the regions this script names (``torch.profiler.record_function``)."""
BUCKETS = ("predictive", "per-example curvature", "backward", "forward", "data", "moments", "update")
"""The buckets, in the order that decides an operation's (the first region around it that names one)."""
FULL = {"epochs": 10, "repeats": 3}
QUICK = peers.QUICK
CASES = {"vogn": ("digits-cnn", "dermamnist"), "sgld": ("dermamnist",), "swag": ("digits-cnn", "dermamnist"),
         "sgd": ("digits", "toy-gap")}
MARGINAL_FACTOR = 5  # sgd: runs this many times longer give the marginal cost of an epoch
CASE_PEERS = {"vogn": "ivon", "sgld": "posteriors", "swag": "swag", "sgd": None}

OURS_REGIONS = [  # (owner, attribute, bucket): our functions whose calls are the bucket's regions
    (approximators.base.PredictiveAccumulator, "add", "predictive"),
    (approximators.base.PredictiveAccumulator, "add_outputs", "predictive"),
    (approximators.vogn, "mean_field_predictive", "predictive"),
    (approximators.swag.Moments, "sample", "predictive"),
    (approximators.per_example, "_unit_moments", "per-example curvature"),
    (bench.functional.StackedModel, "__call__", "forward"),
    (approximators.per_example, "functional_call", "forward"),
    (approximators.per_example, "recorded_mlp_forward", "forward"),
    (bench.budget.MeteredData, "batch", "data"),
    (approximators.swag.Moments, "collect", "moments"),
    (approximators.updates.Adam, "update", "update"),
    (approximators.updates.SGD, "update", "update"),
    (approximators.updates.SGLD, "update", "update"),
    (approximators.vogn.VOGNRule, "gradient", "update"),  # its draw of w; the moments inside have their own buckets
    (approximators.vogn.VOGNRule, "update", "update"),
]


def peer_regions(case: str) -> list[tuple[object, str, str]]:
    """A peer's functions whose calls are a bucket's regions (torch.optim names its steps itself)."""
    if case == "vogn":
        import ivon

        return [(ivon.IVON, "_sample_params", "update"), (ivon.IVON, "_restore_param_average", "update")]
    if case == "sgld":
        import posteriors

        return [(posteriors.sgmcmc.sgld, "update", "update")]
    if case == "swag":
        return [(peers.authors_swag().swag.SWAG, "collect_model", "moments")]
    return []


def in_region(function: Callable, bucket: str) -> Callable:
    @functools.wraps(function)
    def named(*args, **kwargs):
        with record_function(REGION + bucket):
            return function(*args, **kwargs)

    return named


@contextlib.contextmanager
def regions(targets: list[tuple[object, str, str]]):
    """Each ``(owner, attribute, bucket)``'s function called inside a region named for its bucket, while inside."""
    saved = [(owner, name, vars(owner)[name]) for owner, name, _ in targets]
    for owner, name, bucket in targets:
        setattr(owner, name, in_region(vars(owner)[name], bucket))
    try:
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def with_forward_region(task):
    """``task`` whose networks run their forward pass inside a ``forward`` region (a peer's side: hooks on the
    top-level module; the computation is unchanged)."""
    def factory():
        module = task.model_factory()
        open_regions = []
        module.register_forward_pre_hook(
            lambda *_: open_regions.append(record_function(REGION + "forward").__enter__()))
        module.register_forward_hook(lambda *_: open_regions.pop().__exit__(None, None, None))
        return module

    return dataclasses.replace(task, model_factory=factory)


def bucket_of(event) -> str:
    named = set()
    while event is not None:
        if event.name.startswith(REGION):
            named.add(event.name[len(REGION):])
        elif event.name == peers.PREDICTIVE:
            named.add("predictive")
        elif event.name.startswith("autograd::engine::evaluate_function"):
            named.add("backward")
        elif event.name.startswith("Optimizer."):  # torch.optim's step and zero_grad
            named.add("update")
        event = event.cpu_parent
    return next((bucket for bucket in BUCKETS if bucket in named), "other ops")


@dataclasses.dataclass
class Profile:
    wall: float
    ops: dict[str, float]  # bucket -> seconds of operations' self time
    python: dict[str, float]  # bucket -> seconds of its regions' self time
    by_op: dict[str, list]  # operation -> [seconds, calls]

    @property
    def outside(self) -> float:
        return self.wall - sum(self.ops.values()) - sum(self.python.values())


def profiled(run: Callable[[], object], targets: list) -> Profile:
    """One run under the profiler, its functions in ``targets`` in their regions."""
    with regions(targets), profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        run()
        wall = time.perf_counter() - started
    ops, python = collections.defaultdict(float), collections.defaultdict(float)
    by_op = collections.defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        seconds, bucket = event.self_cpu_time_total * 1e-6, bucket_of(event)
        if event.is_user_annotation:
            python[bucket] += seconds
        else:
            ops[bucket] += seconds
            by_op[event.name][0] += seconds
            by_op[event.name][1] += 1
    return Profile(wall, dict(ops), dict(python), dict(by_op))


def convolution_seconds(profile_: Profile) -> float:
    """The convolution kernels' self time, forward and backward."""
    return sum(seconds for name, (seconds, _) in profile_.by_op.items() if "conv" in name.lower())


def report(title: str, sides: dict[str, Profile], per: dict[str, float] | None = None) -> None:
    """The buckets of every side (ms and share of its profiled wall time), then each side's top operations."""
    print(f"\n{title}: profiled wall time by bucket, ms (share)")
    rows = []
    for bucket in (*BUCKETS, "other ops"):
        cells = {f"{side}": f"{1e3 * p.ops.get(bucket, 0):.0f} + {1e3 * p.python.get(bucket, 0):.0f} "
                             f"({(p.ops.get(bucket, 0) + p.python.get(bucket, 0)) / p.wall:.0%})"
                 for side, p in sides.items()}
        if any(p.ops.get(bucket, 0) + p.python.get(bucket, 0) > 0 for p in sides.values()):
            rows.append({"bucket (ops + Python)": bucket, **cells})
    rows.append({"bucket (ops + Python)": "Python outside",
                 **{side: f"{1e3 * p.outside:.0f} ({p.outside / p.wall:.0%})" for side, p in sides.items()}})
    rows.append({"bucket (ops + Python)": "profiled wall",
                 **{side: f"{1e3 * p.wall:.0f}" for side, p in sides.items()}})
    convolutions = {side: convolution_seconds(p) for side, p in sides.items()}
    if any(convolutions.values()):
        rows.append({"bucket (ops + Python)": "of which convolution kernels",
                     **{side: f"{1e3 * s:.0f} ({s / sides[side].wall:.0%})"
                        + (f", {1e3 * s / per[side]:.1f} per chain-epoch" if per else "")
                        for side, s in convolutions.items()}})
    print(tabulate(rows, headers="keys", tablefmt="github"))
    for side, p in sides.items():
        top = sorted(p.by_op.items(), key=lambda item: -item[1][0])[:8]
        print(f"\n{side}: top operations by self CPU time")
        print(tabulate([{"op": name, "ms": 1e3 * seconds, "calls": calls, "share": f"{seconds / p.wall:.0%}"}
                        for name, (seconds, calls) in top], headers="keys", floatfmt=".0f", tablefmt="github"))


def timed_ratios(sides: dict[str, Callable], peer: str, repeats: int) -> dict[str, float]:
    """Each side's unprofiled wall time (median of ``repeats`` interleaved runs, after one untimed) and its median
    ratio to ``peer``'s, printed; returns the medians."""
    for run in sides.values():
        run()
    seconds = {side: [] for side in sides}
    names = list(sides)
    for repeat in range(repeats):
        for side in names if repeat % 2 == 0 else reversed(names):
            seconds[side].append(peers.timed(sides[side]))
    rows = []
    for side in names:
        ratios = [a / b for a, b in zip(seconds[side], seconds[peer])]
        rows.append({"side": side, "s (median)": statistics.median(seconds[side]),
                     f"/ {peer}": f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"})
    print(tabulate(rows, headers="keys", floatfmt=".3f", tablefmt="github"))
    return {row["side"]: row["s (median)"] for row in rows}


def minibatch_moments(model, likelihood, params, x, y, out=None):
    """A counterfactual VOGN's (g, h): the minibatch gradient and its square, no per-example work."""
    g = Objective(model, likelihood, 1.0, 1).likelihood_gradient(params.detach().requires_grad_(True), x, y)
    if out is None:
        return g, g.square()
    out[0].copy_(g)
    torch.square(g, out=out[1])
    return out


def without_curvature(run: Callable) -> Callable:
    def counterfactual():
        original, approximators.vogn.gradient_moments = approximators.vogn.gradient_moments, minibatch_moments
        try:
            return run()
        finally:
            approximators.vogn.gradient_moments = original

    return counterfactual


def plain_sgd(task, model: torch.nn.Module, c, epochs: int, generator: torch.Generator) -> None:
    """The plain SGD epochs ``benchmarks/cost.py`` divides by: ``torch.optim.SGD`` at a constant rate, no momentum,
    no prior (less work per step than our ``sgd``'s Adam with its schedule and prior)."""
    optimiser = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(epochs):
        for idx in peers.batches(task.n_train, c.batch_size, generator):
            loss = -task.likelihood.log_prob(model(task.x_train[idx]), task.y_train[idx]).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()


def plain_loop(task, epochs: int, train: Callable) -> Callable[[], torch.Tensor]:
    """A plain loop at our ``sgd``'s batch size and epochs: ``train`` (:func:`peers.adam_map`, our ``sgd``'s work,
    or :func:`plain_sgd`), then the test predictive."""
    c = peers.config_of(task, "sgd")

    def run():
        generator, model = peers.fresh_start(task)
        train(task, model, c, epochs, generator)
        with torch.no_grad(), record_function(peers.PREDICTIVE):
            outputs = model(task.x_test)
            if task.kind == "classification":
                return torch.softmax(outputs.double(), dim=-1)
            return task.likelihood.sample(outputs.double(), approximators.base.PREDICTIVE_SAMPLES, generator)

    return run


def sides_of(case: str, task, epochs: int) -> tuple[dict[str, Callable], str, dict[str, float] | None]:
    """The case's runs by side name, the peer's side, and each side's chain-epochs (sgld) or None."""
    labelled = with_forward_region(task)
    if case == "vogn":
        ours = peers.ours(task, "vogn", epochs + 1)
        return {"ours": ours, "ours, h = g^2 (no per-example work)": without_curvature(ours),
                "IVON": peers.ivon_peer(labelled, epochs)}, "IVON", None
    if case == "swag":
        return {"ours": peers.ours(task, "swag", epochs), "swa_gaussian": peers.swag_peer(labelled, epochs)}, \
            "swa_gaussian", None
    if case == "sgd":
        return {"ours": peers.ours(task, "sgd", epochs),
                "plain Adam loop": plain_loop(labelled, epochs, peers.adam_map),
                "plain SGD loop": plain_loop(labelled, epochs, plain_sgd)}, "plain SGD loop", None
    per_chain = max(2, epochs // 2)  # as peers.py's sgld rows
    one = peers.ours(task, "sgld", per_chain, {"chains": 1})

    def one_after_another():
        for _ in range(4):
            one()

    sides = {"ours, 4 chains": peers.ours(task, "sgld", 4 * per_chain, {"chains": 4}),
             "ours, 4 x 1 chain": one_after_another, "ours, 1 chain": one,
             "posteriors, 4 chains": peers.posteriors_peer(labelled, per_chain, 4),
             "posteriors, 1 chain": peers.posteriors_peer(labelled, per_chain, 1)}
    chain_epochs = {side: (1 if "1 chain" in side and "4 x" not in side else 4) * per_chain for side in sides}
    return sides, "posteriors, 4 chains", chain_epochs


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--models", nargs="+", choices=["digits", "digits-cnn", "dermamnist", "toy-gap"],
                        help="only these of each case's models")
    parser.add_argument("--epochs", type=positive_whole, help=f"epochs per run (default {FULL['epochs']})")
    parser.add_argument("--repeats", type=positive_whole, help=f"unprofiled interleaved repeats (default {FULL['repeats']})")
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke run: {QUICK['epochs']} epochs, {QUICK['repeats']} repeat, one model a case")
    args = parser.parse_args()
    epochs, repeats = peers.epochs_and_repeats(parser, args, FULL)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=FutureWarning)  # tensordict's, on importing posteriors
    present = peers.installed()
    for case in args.cases:
        if CASE_PEERS[case] is not None and CASE_PEERS[case] not in present:
            continue
        models = [m for m in CASES[case] if args.models is None or m in args.models][:1 if args.quick else None]
        for name in models:
            task = peers.model_task(name)
            sides, peer, per = sides_of(case, task, epochs)
            print(f"\n=== {case} on {name}, {epochs} epochs (sgld: {max(2, epochs // 2)} a chain); torch "
                  f"{torch.__version__}, {torch.get_num_threads()} thread; unprofiled, {repeats} interleaved repeats:",
                  flush=True)
            seconds = timed_ratios(sides, peer, repeats)
            if case == "sgd":  # the marginal epoch, a run's fixed cost cancelled, as benchmarks/cost.py reports it
                longer = MARGINAL_FACTOR * epochs
                print(f"{longer} epochs:")
                more = timed_ratios(sides_of(case, task, longer)[0], peer, repeats)
                marginal = {side: (more[side] - seconds[side]) / (longer - epochs) for side in sides}
                print(tabulate([{"side": side, "marginal epoch, ms": 1e3 * marginal[side],
                                 f"/ {peer}": marginal[side] / marginal[peer],
                                 "fixed, ms": 1e3 * (seconds[side] - epochs * marginal[side])} for side in sides],
                               headers="keys", floatfmt=".2f", tablefmt="github"))
            targets = OURS_REGIONS + peer_regions(case)
            report(f"{case} on {name}", {side: profiled(run, targets) for side, run in sides.items()}, per)


if __name__ == "__main__":
    scripts.run(main)
