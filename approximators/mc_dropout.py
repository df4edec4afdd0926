r"""Monte Carlo dropout (Gal & Ghahramani 2016): ``mc-dropout``.

The task's network with dropout inserted, trained as MAP under the task's prior, and predicted with
dropout still active: the model average of ``samples`` (30, at most ``MAX_DRAWS`` = 1000; Gal's UCI code averages
T = 10000, ``net/net.py`` of yaringal/DropoutUncertaintyExps) stochastic forward passes,

    p(y | x, D) ~ (1/S) sum_s p(y | x, theta*, z_s),   z_s ~ Bernoulli(1 - p) per unit,

each pass an independent mask z_s over the units of every dropout site. Training minimises the
MAP objective of ``sgd`` (mean minibatch negative log-likelihood plus the task's prior as weight
decay) with a fresh mask per example and step, with Adam and the task's ``sgd`` settings.
Dropout is inverted: kept units are scaled by 1 / (1 - p), so the mean activation is unchanged.

**This changes the model.** The network with dropout defines another likelihood than the task's,
so the posterior it approximates is not the reference's: the method is marked architecture-changing
(``bench methods``, ``architecture_change`` in every result record, a mark on the leaderboard).

Where the dropout goes (``sites``: the layers whose *input* is dropped, by module name) and its rate,
per task, in :data:`SITES` and :data:`RATES`:

- MLPs (toy-gap, diabetes-gap, digits, uci-gap): the hidden units, i.e. the input of the output
  layer. Deviation from the paper's "dropout before every weight layer": not on the network's
  inputs (toy-gap has one input, which dropout would zero outright).
- ResNet-20-FRN (cifar10), the CNN-LSTM (imdb) and their small embedded counterparts (digits-cnn,
  digits-lstm): the input of the classifier (the pooled features, the LSTM's last state). AlexNet
  (cifar10c) and LeNet-5 (dermamnist): the input of every dense layer. Deviation: no dropout after convolutions (Gal & Ghahramani's
  Bayesian CNN, arXiv:1506.02158) nor inside the LSTM (their variational RNN dropout, arXiv:1512.05287).

Rates on the embedded tasks: ``python benchmarks/tune_trajectory.py mc-dropout`` (held-out NLL
over 0.005-0.1, the grid of Gal's UCI experiments (``dropout_rates.txt`` of yaringal/DropoutUncertaintyExps),
extended by us with 0.2-0.5; never the reference); on the competition
tasks an untuned 0.1.
Deviation: the paper scales the weight decay with the keep probability and a prior length-scale;
here the prior is the task's, unchanged, so that the method targets the task's prior.

Budget rule: floor(B) epochs of training; the predictive passes read only test inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from torch.func import functional_call

from approximators.base import (DRAWS_BOUNDS, Approximator, Footprint, PredictiveAccumulator, Problem, epochs_unspent,
                                member_generators, next_seed)
from approximators.map import MAP_DEFAULTS
from approximators.refusals import budget_refusal
from approximators.training import AdamConfig, Members, schedule_of, train_members
from bench import checkpoint
from bench.budget import MeteredData
from bench.errors import ConfigError
from bench.functional import StackedModel

SITES = {"toy-gap": "2", "diabetes-gap": "2", "digits": "2", "uci-gap": "2",
         "cifar10": "classifier", "imdb": "classifier", "digits-cnn": "classifier", "digits-lstm": "classifier",
         "cifar10c": "dense1,dense2,classifier", "dermamnist": "dense1,dense2,classifier"}
"""Per task, the layers (module names of the task's network) whose inputs are dropped."""

RATES = {"toy-gap": 0.01, "diabetes-gap": 0.3, "digits": 0.005, "digits-cnn": 0.005,
         "digits-lstm": 0.005}
"""Per-task dropout rates from ``python benchmarks/tune_trajectory.py mc-dropout`` (embedded tasks; held-out
NLL over 0.005-0.5, seeds 0-2, budget 100): the smallest rates win on toy-gap and the digits tasks, where the method
is then close to MAP."""


@dataclass(frozen=True)
class MCDropoutConfig(AdamConfig):
    rate: float = 0.1
    sites: str = ""
    samples: int = 30

    BOUNDS: ClassVar[dict[str, str]] = {"rate": "(0, 1)", "samples": DRAWS_BOUNDS}
    """Each numeric setting's interval (checked before any work: :func:`approximators.base.check_settings`)."""


MC_DROPOUT_DEFAULTS = {task: {**settings, "sites": SITES[task], **({"rate": RATES[task]} if task in RATES else {})}
                       for task, settings in MAP_DEFAULTS.items()}


class DropoutNetwork:
    """K stacked copies of a network with inverted dropout of rate ``rate`` on the inputs of the
    layers ``sites``, active in every call; the interface of :class:`bench.functional.StackedModel`.

    Each call draws new masks, one Bernoulli per member, example and unit, from ``generator`` (on
    the inputs' device), so a seeded run reproduces exactly. Members are evaluated one after the
    other (MC dropout trains one network; its predictive evaluates one pass at a time).
    """

    mlp_layers = None  # no batched-matmul fast path: the masks enter between layers

    def __init__(self, module: nn.Module, sites: list[str], rate: float, generator: torch.Generator):
        stacked = StackedModel(module, fast_path=False)
        self.layout, self.base = stacked.layout, stacked.base
        self.rate, self.generator = rate, generator
        layers = dict(self.base.named_modules())
        unknown = [site for site in sites if not site or site not in layers]
        if unknown:
            named = ", ".join(name for name in layers if name)
            raise ConfigError(f"mc-dropout: the network has no layer {unknown[0]!r} to put dropout before; "
                              f"its layers: {named}")
        self.sites = sites
        self._unused: set[str] | None = set(sites)  # checked on the first call: every site must run as a module
        for site in sites:
            layers[site].register_forward_pre_hook(self._hook(site))

    def _hook(self, site: str):
        def drop(_module, inputs):
            if self._unused is not None:
                self._unused.discard(site)
            (x,) = inputs
            keep = torch.empty_like(x).bernoulli_(1.0 - self.rate, generator=self.generator)
            return (x * keep / (1.0 - self.rate),)
        return drop

    def __call__(self, params: dict[str, torch.Tensor], x: torch.Tensor, shared_input: bool) -> torch.Tensor:
        """Outputs ``(K, N, n_outputs)`` for inputs ``(N, ...)`` (shared) or ``(K, N, ...)``."""
        k = next(iter(params.values())).shape[0]
        outputs = torch.stack([functional_call(self.base, {name: p[i] for name, p in params.items()},
                                               (x if shared_input else x[i],)) for i in range(k)])
        if self._unused:
            raise ConfigError(f"mc-dropout: layer {sorted(self._unused)[0]!r} is not called as a module by the "
                              f"network, so dropout cannot go before it; choose other sites (--set sites=...)")
        self._unused = None
        return outputs


class MCDropout(Approximator):
    name = "mc-dropout"
    resumable = True  # a stopped run continues from its checkpoint (bench.checkpoint; tested)
    summary = "MC dropout: MAP training of the network with dropout, predictive averaged over dropout masks"
    paper = "Gal & Ghahramani 2016"
    Config = MCDropoutConfig
    TASK_DEFAULTS = MC_DROPOUT_DEFAULTS
    check_budget = 20.0

    @classmethod
    def architecture_change(cls, config: MCDropoutConfig) -> str | None:
        return f"dropout (rate {config.rate:g}) on the inputs of layers {config.sites}"

    def footprint(self, budget: float, n_train: int) -> Footprint:
        self.plan(budget)  # a budget the rule cannot use is refused when the run is planned, before training
        return super().footprint(budget, n_train)

    def plan(self, budget: float) -> tuple[int, list[str]]:
        """(epochs, dropout sites) or a one-line error."""
        c = self.config
        sites = [site.strip() for site in c.sites.split(",") if site.strip()]
        if not sites:
            raise ConfigError("mc-dropout: no dropout sites for this task (a task of one's own has none by default); "
                              "name the layers whose inputs are dropped with --set sites=a,b")
        epochs = math.floor(budget + 1e-9)
        if epochs < self.smallest_budget():
            raise budget_refusal("mc-dropout", budget, "is less than one epoch", self.smallest_budget(), [])
        return epochs, sites

    @staticmethod
    def smallest_budget() -> int:
        """One epoch of training."""
        return 1

    def fit(self, problem: Problem, data: MeteredData, generator: torch.Generator) -> None:
        c = self.config
        epochs, sites = self.plan(data.meter.budget_epochs)
        (member,) = member_generators(generator, 1)
        start = Members.start(problem, data, [member])
        masks = checkpoint.track(torch.Generator(device=data.device).manual_seed(next_seed(member)))
        network = DropoutNetwork(problem.model_factory(), sites, c.rate, masks)
        trained = train_members(network, start.model.layout.unflatten(start.params), data, problem.likelihood,
                                problem.prior_variance, epochs, schedule_of(c), start.order_seeds)
        accumulator = PredictiveAccumulator(problem, c.samples, generator, model=network)
        for _ in range(c.samples):
            accumulator.add(trained)
        self.report = {"epochs": epochs, "masks_averaged": c.samples, "epochs_unspent": epochs_unspent(data.meter)}
        self._predictive = accumulator.result()
