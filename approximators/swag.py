r"""SWAG and SWAG-Diagonal (Maddox et al. 2019), MultiSWAG (Wilson & Izmailov 2020): ``swag``, ``swag-diag``, ``multiswag``.

Training (per run, E = floor(B / runs) epochs): SGD with momentum on the task's negative log
posterior (:mod:`approximators.engine`: likelihood at full-data scale, the prior N(0, v I) as its
exact L2 term, not a tuned weight decay). The first ``E1 = round(swa_start * E)`` epochs follow the
SWAG authors' schedule (``lr`` for the first half of E1, a linear decay to ``swa_lr`` until 90% of
E1, then ``swa_lr``); the remaining E - E1 epochs run at the constant ``swa_lr`` (or, with
``cyclic``, a linear decay from ``lr`` to ``swa_lr`` within every collection period, the SWA
paper's cyclical schedule, Izmailov et al. 2018, arXiv:1803.05407), and the moments are collected at the end of
every period of ``collect_every`` steps (0: once per epoch, as in the paper). Default ``swa_start = 161 / 300``:
the authors' CIFAR commands run 300 epochs with ``--swa_start=161`` (https://github.com/wjmaddox/swa_gaussian,
``experiments/train/README.md``) and collect once epoch + 1 > 161 (``experiments/train/run_swag.py``): the first
snapshot at the end of the 162nd. Both phases read training data and are charged.

Moments, online (n snapshots theta_1..theta_n so far):

    theta_bar <- (n theta_bar + theta) / (n + 1),   theta2_bar <- (n theta2_bar + theta^2) / (n + 1),
    D_i = theta_i - theta_bar_i (theta_bar_i: the running mean including theta_i), the last ``rank`` kept.

Posterior, with K = min(rank, n) deviations and Sigma_diag = max(theta2_bar - theta_bar^2, 1e-30)
(the authors' clamp, ``var_clamp`` in ``swag/posteriors/swag.py``):

    swag:       N(theta_bar, scale (Sigma_diag + D D^T / (K - 1)))
    swag-diag:  N(theta_bar, scale Sigma_diag)

sampled in O(K d) without a d x d matrix as theta_bar + sqrt(scale) (Sigma_diag^(1/2) z1 + D z2 / sqrt(K - 1)),
z1 ~ N(0, I_d), z2 ~ N(0, I_K). ``scale`` is the authors' (wjmaddox/swa_gaussian, ``experiments/uncertainty/README.md``:
"in the experiments we set it equal to 0.5 for SWAG and to 1. for SWAG-diagonal"): 1/2 for ``swag`` and ``multiswag``,
1 for ``swag-diag`` (until 0.2.0 it was 1/2 here too, a deviation: draws with 1/sqrt(2) of the authors' spread).
``samples`` draws per run at test
time, each one's predictive streamed into the model average. MultiSWAG trains ``runs`` (default 3)
independent SWAG runs together, vectorised like ensemble members, and pools their samples. The
method keeps only theta_bar, theta2_bar and D (and the SGD state while training).

Deviations from the papers: the prior replaces weight decay (every method targets the same
posterior); the learning-rate schedule advances per epoch as in the authors' code (``schedule(epoch)`` once an
epoch in ``run_swag.py``), over an epoch count set by the budget. Their low-rank term divides by
sqrt(max_num_models - 1) = sqrt(19) always (``swag/posteriors/swag.py``), ours by sqrt(K - 1) for the K snapshots
held (equal from 20 snapshots on); their VGG-16 collects its iterates with its two dropout layers active, the
networks here have none. No batch-norm statistics update is needed (none of the models has
batch norm). When fewer than ``rank`` snapshots fit in the budget, K is the number taken, and the
run's report says so.

Per-task defaults: the competition tasks use the SWAG authors' CIFAR settings for the network
without batch normalisation (VGG-16: lr 0.05 and swa_lr 0.01 in their CIFAR-100 command,
``experiments/train/README.md``; batch 128 and momentum 0.9 ``run_swag.py``'s defaults); none was
published for the other models. The embedded tasks' ``lr`` (with swa_lr = lr / 5, the same ratio)
is picked by ``python benchmarks/tune_trajectory.py swag``: a seeded grid search on the NLL of held-out
training rows, never the HMC reference.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from approximators import engine
from approximators.base import (SCHEDULE_WOULD_RISE, DRAWS_BOUNDS, Approximator, Footprint,
                                PredictiveAccumulator, Problem, epochs_unspent, member_generators, steps_for)
from approximators.refusals import LEAST_FRACTION, budget_refusal, least_epochs, settings_that_lower
from approximators.training import Members
from approximators.updates import SGD
from bench import checkpoint
from bench.budget import MeteredData

VARIANCE_FLOOR = 1e-30
"""The authors' clamp of the diagonal variance (``var_clamp``)."""

MIN_SNAPSHOTS = 2
"""The fewest snapshots a run's SWAG posterior is estimated from: one has no deviation from the mean."""

MAX_RANK = 1000
"""The most deviations a SWAG run keeps (``rank``, 20 by default as in the paper): the buffer of ``rank`` deviations
is allocated whole before training and each of the ``samples`` draws costs O(K d) with K = min(rank, snapshots),
none of it charged to the budget, so the count itself bounds that work. On toy-gap, one thread, budget 1000 with
``collect_every=1`` (K reaches the rank), a run took 5.3 s at rank 1000 and 3.4 s at rank 20; without a cap
``rank=10000000`` allocated 8 GB for a 2-epoch budget of 202 parameters (13 s, more on a larger network)."""


@dataclass(frozen=True)
class SWAGConfig:
    batch_size: int = 128
    lr: float = 0.05
    swa_lr: float = 0.01
    momentum: float = 0.9
    swa_start: float = 161 / 300
    collect_every: int = 0
    cyclic: bool = False
    rank: int = 20
    scale: float = 0.5
    samples: int = 30
    runs: int = 1

    BOUNDS: ClassVar[dict[str, str]] = {
        "batch_size": "[1, inf)",
        "lr": "(0, inf)",
        "swa_lr": "(0, inf)",
        "momentum": "[0, 1)",
        "swa_start": "(0, 1)",
        "collect_every": "[0, inf)",
        "rank": f"[2, {MAX_RANK}]",
        "scale": "(0, inf)",
        "samples": DRAWS_BOUNDS,
        "runs": "[1, inf)",
    }
    """Each numeric setting's interval (checked before any work: :func:`approximators.base.check_settings`)."""
    AT_MOST: ClassVar[dict] = {"swa_lr": ("lr", SCHEDULE_WOULD_RISE)}
    """Settings that may not exceed another (the rate the schedule decays to, its start), checked with the bounds."""


SWAG_DEFAULTS = {
    # `python benchmarks/tune_trajectory.py swag` (held-out NLL, seeds 0-2, budget 100); swa_lr = lr / 5.
    "toy-gap": dict(batch_size=16, lr=0.01, swa_lr=0.002),
    "diabetes-gap": dict(batch_size=32, lr=0.001, swa_lr=0.0002),
    "digits": dict(batch_size=64, lr=0.3, swa_lr=0.06),
    "digits-cnn": dict(batch_size=64, lr=0.1, swa_lr=0.02),
    "digits-lstm": dict(batch_size=64, lr=0.1, swa_lr=0.02),
    # The competition tasks use the class defaults: the authors' VGG-16 (no batch norm) CIFAR settings.
}


@dataclass
class Moments:
    """SWAG's running moments of ``R`` runs: ``mean``, ``sq_mean`` ``(R, D)``, ``deviations`` ``(R, rank, D)``
    (a ring buffer: the last ``rank`` deviations), ``count`` snapshots so far."""

    mean: torch.Tensor
    sq_mean: torch.Tensor
    deviations: torch.Tensor
    count: int = 0

    @classmethod
    def zeros(cls, runs: int, dim: int, rank: int, device: torch.device,
              dtype: torch.dtype = torch.float32) -> "Moments":
        """No snapshot yet, in the network's ``dtype`` (a float64 network's moments and draws stay float64)."""
        zeros = lambda *shape: torch.zeros(*shape, device=device, dtype=dtype)  # noqa: E731
        return cls(zeros(runs, dim), zeros(runs, dim), zeros(runs, rank, dim))

    def collect(self, params: torch.Tensor) -> None:
        """Adds one snapshot ``(R, D)`` of every run."""
        n = self.count
        with torch.no_grad():
            self.mean.mul_(n / (n + 1)).add_(params, alpha=1 / (n + 1))
            self.sq_mean.mul_(n / (n + 1)).add_(params.square(), alpha=1 / (n + 1))
            self.deviations[:, n % self.deviations.shape[1]] = params - self.mean
        self.count = n + 1

    @property
    def rank(self) -> int:
        """K: the number of deviations held (at most the buffer's size)."""
        return min(self.count, self.deviations.shape[1])

    def variance(self) -> torch.Tensor:
        return (self.sq_mean - self.mean.square()).clamp(min=VARIANCE_FLOOR)

    def sample(self, generators: list[torch.Generator], scale: float, low_rank: bool) -> torch.Tensor:
        """One draw ``(R, D)`` from each run's Gaussian, run r's noise from generator r."""
        dim, k = self.mean.shape[1], self.rank
        z1 = torch.stack([torch.randn(dim, generator=g) for g in generators]).to(self.mean)
        draw = self.variance().sqrt() * z1
        if low_rank:
            z2 = torch.stack([torch.randn(k, generator=g) for g in generators]).to(self.mean)
            draw += torch.einsum("rkd,rk->rd", self.deviations[:, :k], z2) / math.sqrt(k - 1)
        return self.mean + math.sqrt(scale) * draw


def epoch_rates(config: SWAGConfig, epochs: int, first_phase: int) -> list[float]:
    """The SWAG authors' per-epoch learning rates for the first ``first_phase`` epochs, then ``swa_lr``."""
    ratio = config.swa_lr / config.lr
    rates = []
    for epoch in range(epochs):
        t = epoch / first_phase
        factor = 1.0 if t <= 0.5 else 1.0 - (1.0 - ratio) * (t - 0.5) / 0.4 if t <= 0.9 else ratio
        rates.append(config.lr * factor)
    return rates


def cyclic_rates(config: SWAGConfig, steps: int) -> list[float]:
    """Linear decay from ``lr`` to ``swa_lr`` within each collection period of ``steps`` steps (SWA's cycle)."""
    return [(1 - t) * config.lr + t * config.swa_lr for t in ((i + 1) / steps for i in range(steps))]


class SWAG(Approximator):
    name = "swag"
    resumable = True  # a stopped run continues from its checkpoint (bench.checkpoint; tested)
    summary = "SWAG: Gaussian with diagonal plus low-rank covariance fitted to the SGD trajectory"
    paper = "Maddox et al. 2019"
    Config = SWAGConfig
    TASK_DEFAULTS = SWAG_DEFAULTS
    check_budget = 20.0
    low_rank = True

    def period(self, steps_in_epoch: int) -> int:
        """Steps between snapshots: ``collect_every``, or one epoch's steps where it says 0 (the paper's)."""
        return self.config.collect_every or steps_in_epoch

    def resolved(self, problem: Problem) -> SWAGConfig:
        """``collect_every`` as the steps of one epoch where the settings say 0."""
        c = self.config
        return dataclasses.replace(c, collect_every=self.period(engine.steps_per_epoch(problem.n_train, c.batch_size)))

    def run_plan(self, epochs: int, steps_in_epoch: int) -> tuple[int, int]:
        """(first-phase epochs, snapshots) of one run of ``epochs`` epochs."""
        first = max(1, round(self.config.swa_start * epochs))
        return first, max(0, (epochs - first) * steps_in_epoch // self.period(steps_in_epoch))

    def smallest_budget(self, steps_in_epoch: int) -> int | None:
        """Runs of the fewest epochs that give each :data:`MIN_SNAPSHOTS` snapshots."""
        epochs = least_epochs(lambda epochs: self.run_plan(epochs, steps_in_epoch)[1] >= MIN_SNAPSHOTS)
        return None if epochs is None else self.config.runs * epochs

    def plan(self, budget: float, steps_in_epoch: int) -> tuple[int, int, int]:
        """(epochs per run, first-phase epochs, snapshots per run) for a budget, or a one-line error."""
        c = self.config
        epochs = math.floor(budget / c.runs + 1e-9)
        first, snapshots = self.run_plan(epochs, steps_in_epoch)
        if snapshots < MIN_SNAPSHOTS:
            raise budget_refusal(
                self.name, budget, f"gives {c.runs} run(s) of {epochs} epochs, {snapshots} SWAG snapshot(s) after the "
                f"first {first}; at least {MIN_SNAPSHOTS} are needed", self.smallest_budget(steps_in_epoch),
                settings_that_lower(self, lambda swag: swag.smallest_budget(steps_in_epoch),
                                    {"runs": 1, "swa_start": LEAST_FRACTION, "collect_every": 1}))
        return epochs, first, snapshots

    def footprint(self, budget: float, n_train: int) -> Footprint:
        c = self.config
        self.plan(budget, engine.steps_per_epoch(n_train, c.batch_size))  # too few snapshots: refused when planned
        return Footprint(c.runs, steps_for(budget / c.runs, n_train, c.batch_size), kept=c.runs * (c.rank + 2),
                         what="run", members=c.runs, rows=min(c.batch_size, n_train), averaged=c.runs * c.samples)

    def fit(self, problem: Problem, data: MeteredData, generator: torch.Generator) -> None:
        c = self.config
        steps_in_epoch = engine.steps_per_epoch(data.n_train, c.batch_size)
        epochs, first, snapshots = self.plan(data.meter.budget_epochs, steps_in_epoch)
        period = self.period(steps_in_epoch)
        generators = member_generators(generator, c.runs)
        members = Members.start(problem, data, generators)
        layout = members.model.layout
        start = first * steps_in_epoch
        rates = [rate for rate in epoch_rates(c, first, first) for _ in range(steps_in_epoch)]
        rates += cyclic_rates(c, period) * snapshots if c.cyclic else [c.swa_lr] * snapshots * period
        rates += [c.swa_lr] * (epochs * steps_in_epoch - len(rates))  # steps after the last snapshot
        moments = checkpoint.track(Moments.zeros(c.runs, layout.size, c.rank, data.device, members.params.dtype))

        def collect(state, step):
            if step >= start and (step + 1 - start) % period == 0 and moments.count < snapshots:
                moments.collect(state.params.detach())

        engine.run(members.objective, SGD(rates, c.momentum), members.params, data, epochs, c.batch_size,
                   members.order_seeds, on_step=collect)
        self.report = {"runs": c.runs, "snapshots_per_run": moments.count, "deviations_used": moments.rank,
                       "first_phase_epochs": first, "epochs_per_run": epochs,
                       "epochs_unspent": epochs_unspent(data.meter)}
        if moments.rank < c.rank and self.low_rank:
            self.report["note"] = f"{moments.count} snapshots per run: the low-rank part has rank {moments.rank}, not {c.rank}"
        accumulator = PredictiveAccumulator(problem, c.runs * c.samples, generator)
        for _ in range(c.samples):
            accumulator.add(layout.unflatten(moments.sample(generators, c.scale, self.low_rank)))
        self._predictive = accumulator.result()


@dataclass(frozen=True)
class SWAGDiagonalConfig(SWAGConfig):
    scale: float = 1.0  # the authors' for SWAG-Diagonal (the module docstring)


class SWAGDiagonal(SWAG):
    name = "swag-diag"
    summary = "SWAG-Diagonal: Gaussian with the diagonal covariance of the SGD trajectory"
    Config = SWAGDiagonalConfig
    low_rank = False


@dataclass(frozen=True)
class MultiSWAGConfig(SWAGConfig):
    runs: int = 3


class MultiSWAG(SWAG):
    name = "multiswag"
    summary = "MultiSWAG: independent SWAG runs (budget split evenly), samples pooled"
    paper = "Wilson & Izmailov 2020"
    Config = MultiSWAGConfig
    check_budget = 60.0
