"""How far each method's defaults at the benchmark's budgets stop from the method's own converged target.

    python benchmarks/converged_gap.py linear [--methods ...] [--budgets 100 1000] [--seeds 8] [--rows 64]
                                              [--set KEY=VALUE ...]
    python benchmarks/converged_gap.py embedded [--methods ...] [--tasks ...] [--budgets 100 1000]
                                                [--converged 10000] [--seed 0] [--out runs-converged]
    python benchmarks/converged_gap.py elbo [--methods mfvi vogn] [--task toy-gap] [--budgets 100 1000 10000]

A method can only be as close to the reference as its own approximation allows; this measures the other part of its
distance, how far its defaults are from that approximation at the budget.

``linear``: Bayesian linear regression (:mod:`reference.conjugate`, by default the conformance suite's 64 rows, where an
epoch is two steps of batch 32; ``--rows`` more for a task whose epoch is many steps), where each
method's target is known in closed form (:data:`LINEAR_TARGETS`): the posterior (the samplers, Laplace), the MAP
(``sgd``, ``de``; MC dropout's MAP of the expected dropout objective), each member's anchored MAP (``ae``, ``sae``),
VOGN's fixed point, the mean-field optimum (``mfvi``), and for the SWAG family the MAP (the mean of SGD's iterates)
with no closed form for the spread (the stationary law of SGD's iterates; at full batch, these defaults on 64 rows,
the iterates converge and the spread's target is zero). The method runs with its class defaults (what a task of
one's own gets) at each budget for ``--seeds`` seeds; reported: the mean error, the largest over the four
parameters of |E theta - target| in posterior standard deviations (per member for the anchored ensembles), and the
variance ratio Var theta / target variance, smallest and largest over the parameters. Gaussian approximations are
read from their fitted moments (VOGN and MFVI's q, SWAG's moments, Laplace's posterior), averaged over seeds;
samplers and ensembles from the members they add to their model average, pooled over seeds.

``embedded``: on the embedded tasks no target is known in closed form, so the target is the same method run to
convergence: ``--converged`` epochs (default 10x the largest budget; one seed, ``--seed``, to stay affordable on a
shared CPU), with the settings of :data:`CONVERGED_SETTINGS` where the defaults themselves do not converge there.
Reported per budget: the task's distance between the method's predictive and its converged predictive (W1 for
regression, total variation for classification: the method against itself, not against the reference), a scale
statistic (regression: the mean predictive standard deviation; classification: the mean predictive entropy; as a
ratio to the converged run's), and, beside them, both runs' distance to the reference. Runs are written under
``--out`` (the converged ones under ``--out``/converged) and reused when finished, as ``bench sweep`` does.

``elbo``: for the mean-field methods, whether running longer improves their own objective while moving away from the
reference: at each budget (seed ``--seed``, the task's defaults) the ELBO of the fitted q, E_q log p(D | w) -
KL(q || N(0, v I)) (the expectation by :data:`ELBO_DRAWS` draws over the whole training set), the fraction of weights
q has pruned back to the prior (KL(q_j || p_j) < :data:`PRUNED_KL` nats), and the distance to the reference.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from tabulate import tabulate

from approximators import METHODS, anchored, hmc as budgeted_hmc, mfvi, sae, vogn
from approximators.base import PredictiveAccumulator
from approximators.swag import Moments
from approximators.training import ValidationSplit, train_members
from bench import metrics, records, scripts
from bench.arguments import budget_epochs, positive_whole, seed_number
from bench.api import fit
from bench.functional import StackedModel
from bench.runner import RunSpec, run
from bench.tasks import get_task, task_names
from reference.conjugate import NOISE, anchored_map, linear_gaussian, vogn_fixed_point
from reference.store import load_reference

LINEAR_TARGETS = {
    "sgd": "MAP", "de": "MAP", "mc-dropout": "dropout MAP", "ae": "anchored MAP", "sae": "anchored MAP",
    "swag": "MAP (mean)", "swag-diag": "MAP (mean)", "multiswag": "MAP (mean)",
    "sgld": "posterior", "csgmcmc": "posterior", "hmc": "posterior", "laplace": "posterior",
    "vogn": "VOGN's fixed point", "mfvi": "mean-field optimum",
}
"""Each method's target on Bayesian linear regression (module docstring)."""

SPREAD_TO_ZERO = ("de", "swag", "swag-diag", "multiswag")
"""Methods whose spread vanishes at their target here (a deep ensemble's members all reach the one MAP; at full batch
SGD's iterates converge): their spread is shown as a fraction of the posterior's variance."""

LINEAR_SETTINGS = {"mc-dropout": {"sites": "0"}}
"""Settings a method needs on the linear problem beyond its class defaults: MC dropout has no default sites on a task
of one's own; on one linear layer it drops the inputs."""

CONVERGED_SETTINGS: dict[str, dict] = {}
"""Settings of the converged runs where a method's defaults do not converge within ``--converged`` epochs."""


@contextlib.contextmanager
def spied():
    """What each method's approximation consists of, recorded as it is built: ``members`` (every parameter set added
    to a model average, ``(K, D)``), ``q`` (VOGN's and MFVI's fitted mean-field Gaussians), ``moments`` (SWAG's),
    ``trained`` (anchored members with their anchors), ``splits`` and ``positions`` (HMC's kept states)."""
    seen = {"members": [], "q": [], "moments": [], "trained": [], "splits": [], "positions": []}
    add, collect, split = PredictiveAccumulator.add, Moments.collect, ValidationSplit.random.__func__

    def adding(self, params):
        seen["members"].append(torch.cat([p.detach().flatten(1) for p in params.values()], 1).double())
        return add(self, params)

    def collecting(self, params):
        if not seen["moments"] or seen["moments"][-1] is not self:
            seen["moments"].append(self)
        return collect(self, params)

    def splitting(cls, *args):
        seen["splits"].append(split(cls, *args))
        return seen["splits"][-1]

    def fitted_q(real):
        def recording(problem, generator, layout, mean, std, noise, samples):
            seen["q"].append((mean.detach().double().clone(), std.detach().double().clone()))
            return real(problem, generator, layout, mean, std, noise, samples)
        return recording

    def training(model, params, *args, anchors=None, **kwargs):
        trained = train_members(model, params, *args, anchors=anchors, **kwargs)
        if anchors is not None:
            flat = lambda values: torch.cat([p.detach().flatten(1) for p in values.values()], 1).double()  # noqa: E731
            seen["trained"].append((flat(trained), flat(anchors)))
        return trained

    def outputs(problem, model, position):
        seen["positions"].append(position.detach().double().clone())
        return real_outputs(problem, model, position)

    real_outputs = budgeted_hmc._test_outputs
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(PredictiveAccumulator, "add", adding))
        stack.enter_context(mock.patch.object(Moments, "collect", collecting))
        stack.enter_context(mock.patch.object(ValidationSplit, "random", classmethod(splitting)))
        for module in (vogn, mfvi):
            stack.enter_context(mock.patch.object(module, "mean_field_predictive", fitted_q(module.mean_field_predictive)))
        for module in (anchored, sae):
            stack.enter_context(mock.patch.object(module, "train_members", training))
        stack.enter_context(mock.patch.object(budgeted_hmc, "_test_outputs", outputs))
        yield seen


def dropout_map(problem, rate: float) -> torch.Tensor:
    """The minimum of MC dropout's expected objective on one linear layer with inverted dropout of its inputs:
    E_z (y - (z * x)^T w / (1 - p) - b)^2 = (y - x^T w - b)^2 + p / (1 - p) sum_j x_j^2 w_j^2, so the MAP solves
    (Lambda + diag(p / (1 - p) sum_i x_ij^2, 0) / s^2) theta = Phi^T y / s^2."""
    penalty = torch.cat([problem.x.square().sum(0) * rate / (1 - rate), torch.zeros(1, dtype=torch.float64)])
    return torch.linalg.solve(problem.precision + torch.diag(penalty) / NOISE**2, problem.phi.T @ problem.y / NOISE**2)


def split_anchored_map(problem, anchors: torch.Tensor, split) -> torch.Tensor:
    """The anchored MAP of the rows a member trains on (``split.fit``), the likelihood scaled by N / n_fit as the
    engine scales it (the task's full N): Lambda_s^-1 ((N / n_s) Phi_s^T y_s / s^2 + a / v)."""
    if split is None:
        return anchored_map(problem, anchors)
    phi, y, scale = problem.phi[split.fit], problem.y[split.fit], problem.n / len(split.fit)
    precision = scale * phi.T @ phi / NOISE**2 + torch.eye(4, dtype=torch.float64) / problem.prior_variance
    right = (scale * phi.T @ y / NOISE**2)[None] + anchors / problem.prior_variance
    return torch.linalg.solve(precision, right.T).T


def linear_gap(method: str, budget: float, seeds: int, problem, overrides: dict[str, str]) -> dict:
    """The mean error and variance ratio of ``method``'s defaults (and ``overrides``) at ``budget`` against its target
    (module docstring)."""
    means, variances, draws, errors = [], [], [], []
    posterior_variance = torch.diagonal(problem.covariance)
    target_mean, target_variance = problem.mean, posterior_variance
    for seed in range(seeds):
        with spied() as seen:
            fitted = fit(problem.task, method, budget, seed, settings={**LINEAR_SETTINGS.get(method, {}), **overrides})
        c = fitted.config
        if method in ("vogn", "mfvi"):
            ((mean, std),) = seen["q"]
            means.append(mean[0])
            variances.append(std[0].square())
            target_variance = vogn_fixed_point(problem) if method == "vogn" else 1 / torch.diagonal(problem.precision)
        elif method in ("swag", "swag-diag", "multiswag"):
            moments = seen["moments"][-1]
            deviations = moments.deviations[:, :moments.rank].double()
            variance = c.scale * (moments.variance().double()
                                  + (deviations.square().sum(1) / (moments.rank - 1) if method != "swag-diag" else 0))
            mean = moments.mean.double()
            means.append(mean.mean(0))  # MultiSWAG: the mixture of its runs' Gaussians
            variances.append(variance.mean(0) + mean.var(0, unbiased=False))
            target_variance = None
        elif method == "laplace":
            means.append(fitted.approximator.posterior.mean.double())
            variances.append(torch.diagonal(fitted.approximator.posterior.covariance().double()))
        elif method in ("ae", "sae"):
            split = seen["splits"][0]
            for trained, anchors in seen["trained"]:
                errors += (((trained - split_anchored_map(problem, anchors, split)) / problem.sd).abs().amax(1)).tolist()
                draws.append(trained)
        elif method == "hmc":
            draws += seen["positions"]
        elif method == "mc-dropout":
            draws.append(seen["members"][0][:1])
            target_mean = dropout_map(problem, c.rate)
        else:
            draws += seen["members"]
    if method in ("sgd", "de", "mc-dropout"):
        target_variance = None
    if method in ("ae", "sae"):
        # Anchors from the prior: Cov(theta) = Lambda^-1 Cov(a) Lambda^-1 / v^2 = Lambda^-1 Lambda^-1 / v.
        inverse = torch.linalg.inv(problem.precision)
        target_variance = torch.diagonal(inverse @ inverse) / problem.prior_variance
    if draws:
        pooled = torch.cat(draws)
        mean, variance = pooled.mean(0), pooled.var(0) if len(pooled) > 1 else None
        count = len(pooled)
    else:
        mean, variance, count = torch.stack(means).mean(0), torch.stack(variances).mean(0), len(means)
    error = float(np.mean(errors)) if errors else float(((mean - target_mean).abs() / problem.sd).max())
    row = {"mean error (sds)": f"{error:.3g}"}
    if target_variance is not None and variance is not None:
        ratio = variance / target_variance
        row["variance ratio"] = f"{float(ratio.min()):.3g}-{float(ratio.max()):.3g}"
    elif method in SPREAD_TO_ZERO and variance is not None:
        ratio = variance / posterior_variance
        row["variance ratio"] = f"({float(ratio.min()):.2g}-{float(ratio.max()):.2g} of the posterior's)"
    else:
        row["variance ratio"] = "-"
    row["draws"] = count
    return row


def linear(args) -> None:
    torch.set_num_threads(1)
    problem = linear_gaussian("linear-gaussian", args.rows, NOISE)
    rows = []
    for method in args.methods:
        for budget in args.budgets:
            rows.append({"method": method, "target": LINEAR_TARGETS[method], "budget": f"{budget:g}",
                         **linear_gap(method, budget, args.seeds, problem, dict(args.overrides))})
    settings = " ".join(f"{key}={value}" for key, value in args.overrides)
    print(f"Bayesian linear regression, {args.rows} rows, class defaults{' and ' + settings if settings else ''}, "
          f"seeds 0-{args.seeds - 1}")
    print(tabulate(rows, headers="keys", tablefmt="github", disable_numparse=True))


DISTANCE = {"classification": ("total_variation", metrics.total_variation),
            "regression": ("w1", metrics.w1_distance)}


def predictive(result: dict, out: Path) -> np.ndarray:
    folder = records.run_folder(out, result["task"], result["method"], result["budget"], result["seed"])
    return records.read_predictions_array(folder, result)


def scale(task, predictions: np.ndarray) -> float:
    """The mean predictive standard deviation (regression) or entropy (classification) over the test rows."""
    if task.kind == "regression":
        return float(predictions.std(1).mean())
    p = np.clip(predictions, 1e-300, 1.0)
    return float(-(p * np.log(p)).sum(1).mean())


def finished_or_run(spec: RunSpec) -> dict:
    folder = records.run_folder(spec.out, spec.task, spec.method, spec.budget, spec.seed)
    if (folder / records.RESULT).exists():
        return records.read_result(folder)
    return run(spec)


def embedded(args) -> None:
    torch.set_num_threads(1)
    converged_budget = args.converged or 10 * max(args.budgets)
    rows = []
    for task_name in args.tasks:
        task = get_task(task_name)
        name, distance = DISTANCE[task.kind]
        for method in args.methods:
            overrides = tuple((k, str(v)) for k, v in CONVERGED_SETTINGS.get(method, {}).items())
            target = finished_or_run(RunSpec(task_name, method, converged_budget, args.seed, out=args.out / "converged",
                                             overrides=overrides))
            converged = predictive(target, args.out / "converged")
            for budget in args.budgets:
                result = finished_or_run(RunSpec(task_name, method, budget, args.seed, out=args.out))
                predictions = predictive(result, args.out)
                rows.append({"task": task_name, "method": method, "budget": f"{budget:g}",
                             f"{name} to converged": f"{distance(predictions, converged):.3f}",
                             "scale ratio": f"{scale(task, predictions) / scale(task, converged):.3f}",
                             f"{name} to reference": f"{result['metrics'][name]:.3f}",
                             "converged to reference": f"{target['metrics'][name]:.3f}"})
                # Each row as it is measured: a long sweep stopped part-way still leaves its figures.
                print(" | ".join(f"{key} {value}" for key, value in rows[-1].items()), flush=True)
    print(f"seed {args.seed}; converged: {converged_budget:g} epochs"
          + (f" (settings {CONVERGED_SETTINGS})" if CONVERGED_SETTINGS else ""))
    print(tabulate(rows, headers="keys", tablefmt="github", disable_numparse=True))


ELBO_DRAWS = 256
PRUNED_KL = 0.01
"""A weight whose q_j is within this KL (nats) of the prior N(0, v) is counted as pruned back to it."""


def elbo(args) -> None:
    torch.set_num_threads(1)
    task = get_task(args.task)
    name, distance = DISTANCE[task.kind]
    reference = load_reference(task)
    model = StackedModel(task.model_factory())
    v = task.prior_variance
    rows = []
    for method in args.methods:
        for budget in args.budgets:
            with spied() as seen:
                fitted = fit(args.task, method, budget, args.seed)
            ((mean, std),) = seen["q"]
            mean, std = mean[0].float(), std[0].float()
            kl = 0.5 * ((std.square() + mean.square()) / v - 1 - torch.log(std.square() / v))
            generator = torch.Generator().manual_seed(args.seed)
            expected = []
            with torch.no_grad():
                for _ in range(ELBO_DRAWS // 32):
                    draws = mean + std * torch.randn(32, mean.numel(), generator=generator)
                    outputs = model(model.layout.unflatten(draws), task.x_train, shared_input=True)
                    expected.append(task.likelihood.log_prob(outputs, task.y_train).sum(-1))
            rows.append({"method": method, "budget": f"{budget:g}",
                         "ELBO": f"{float(torch.cat(expected).double().mean() - kl.double().sum()):.1f}",
                         "pruned": f"{float((kl < PRUNED_KL).double().mean()):.1%}",
                         "mean sigma": f"{float(std.mean()):.3g}",
                         f"{name} to reference": f"{distance(fitted.predictive, reference.array):.3f}"})
    print(f"{args.task}, seed {args.seed}, the task's defaults; ELBO by {ELBO_DRAWS} draws of q; pruned: "
          f"KL(q_j || prior) < {PRUNED_KL} nats")
    print(tabulate(rows, headers="keys", tablefmt="github", disable_numparse=True))


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    where = parser.add_subparsers(dest="where", required=True)
    on_linear = where.add_parser("linear")
    on_linear.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    on_linear.add_argument("--budgets", type=budget_epochs, nargs="+", default=[100, 1000])
    on_linear.add_argument("--seeds", type=positive_whole, default=8)
    on_linear.add_argument("--rows", type=positive_whole, default=64)
    on_linear.add_argument("--set", dest="overrides", nargs="+", default=[], metavar="KEY=VALUE",
                           type=lambda text: tuple(text.split("=", 1)), help="settings of every method run")
    on_tasks = where.add_parser("embedded")
    on_tasks.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    on_tasks.add_argument("--tasks", nargs="+", default=task_names(), choices=task_names())
    on_tasks.add_argument("--budgets", type=budget_epochs, nargs="+", default=[100, 1000])
    on_tasks.add_argument("--converged", type=budget_epochs, default=None)
    on_tasks.add_argument("--seed", type=seed_number, default=0)
    on_tasks.add_argument("--out", type=Path, default=Path("runs-converged"))
    on_elbo = where.add_parser("elbo")
    on_elbo.add_argument("--methods", nargs="+", default=["mfvi", "vogn"], choices=["mfvi", "vogn"])
    on_elbo.add_argument("--task", default="toy-gap", choices=task_names())
    on_elbo.add_argument("--budgets", type=budget_epochs, nargs="+", default=[100, 1000, 10000])
    on_elbo.add_argument("--seed", type=seed_number, default=0)
    args = parser.parse_args()
    {"linear": linear, "embedded": embedded, "elbo": elbo}[args.where](args)


if __name__ == "__main__":
    scripts.run(main)
