"""bdl-bench's methods beside the implementations a user would otherwise run: same model, data and work, side by side.

    pip install -e ".[peers]" torch==2.13.0   # torch named: a peer's requirement would otherwise upgrade it
    pip install --no-deps laplace-torch==0.3 asdfghjkl==0.1a4 swa_gaussian==0.1.9   # their torchvision is never used
    OMP_NUM_THREADS=1 python benchmarks/peers.py [--models digits digits-cnn dermamnist] [--epochs 10] [--repeats 5]
                                                 [--quick] [--out FILE.json]

For each method with a public peer, both sides do the same work on the same network, training rows, test rows,
batch size, epochs and number of posterior draws, on one torch thread: the whole run as a user would time it, from an
untrained network to the test predictive. Ours goes through :func:`bench.api.fit`, the public path, so the epoch
meter, the config resolution and the predictive accumulator are included; the peer is its library's documented use,
its loop indexing tensors already in memory (no per-row ``DataLoader``, the fastest way to feed it; laplace-torch's
``fit`` takes a ``DataLoader``, given whole minibatches by a ``BatchSampler``). Each pair runs once
untimed (lazy initialisation), then ``--repeats`` times interleaved, the side that goes first alternating, and the
table shows the median of the repeats' ratios our time / peer time (lower is better) with their range.

Pairs (``--models``: ``digits``, the MLP, and ``digits-cnn``, the convnet, on their embedded data; ``dermamnist``,
LeNet-5 from the competition's model builder on ``ROWS`` random rows of its input shape, the same rows as test set):

- ``swag`` vs the SWAG authors' ``swa_gaussian`` (``SWAG`` collection on plain ``torch.optim.SGD``, the authors'
  ``utils.train_epoch``, ``utils.schedule`` and ``utils.predict``; its class loaded from its file, since its package
  imports torchvision): E epochs, a snapshot after each of the last E - round(swa_start E), rank 20, 30 draws.
- ``vogn`` vs torchsso's ``VOGN`` (``torchsso`` does not install against torch 2.x: a **transcription** of its update
  step, :class:`TorchssoVOGN`, set to our hyperparameters) and vs IVON (``ivon-opt``): E epochs, one MC sample a
  step, 10 draws for the predictive.
- ``laplace`` (last-layer Kronecker, its default; ``sampling`` with 30 draws, its default, and ``probit``) vs
  laplace-torch (``Laplace(subset_of_weights="last_layer", hessian_structure="kron")``, ``pred_type="nn"`` with 30
  MC draws, and ``pred_type="glm", link_approx="probit"``), after the same MAP epochs with Adam.
- ``sgld`` with 4 chains (vectorised, its default) and with 1 vs ``posteriors``' ``sgmcmc.sgld`` (its ``update``
  in place), one chain after another: E / 2 epochs per chain, a sample after each epoch of the second half, each
  sample's test predictive averaged; the ratio of whole runs is the ratio per chain-epoch.
- HMC is not timed here: ``benchmarks/hmc_speed.py`` puts our sampler beside NumPyro's fixed-step HMC
  (docs/speed.md).

A peer that is not installed is skipped with one line saying which; the others still run.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
import math
import statistics
import sys
import time
import types
import warnings
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from tabulate import tabulate

from approximators import METHODS, resolve_config
from bench import api, scripts
from bench.arguments import positive_whole
from bench.tasks import get_task
from bench.tasks.competition import generated_task
from bench.tasks.models import SameConv2d

PREDICTIVE = "peer::predictive"
"""The name of the region that holds a peer's test predictive (``torch.profiler.record_function``, which costs
nothing measurable without a profiler): ``benchmarks/profiles.py`` counts the time in it as the predictive's."""
ROWS = 512  # LeNet-5's random training rows (and test rows): a few hundred keep a measurement within seconds
PEERS = {"swag": ("swa_gaussian", "pip install --no-deps swa_gaussian==0.1.9"),
         "ivon": ("ivon-opt", 'pip install -e ".[peers]"'),
         "laplace": ("laplace-torch", "pip install --no-deps laplace-torch==0.3 asdfghjkl==0.1a4"),
         "posteriors": ("posteriors", 'pip install -e ".[peers]"')}
"""Each peer's module: the distribution it comes from and how to install it (after ``pip install -e ".[peers]"``,
which brings the dependencies of the two that go in without theirs)."""
FULL = {"epochs": 10, "repeats": 5}  # a full measurement: about 8 minutes of one core
QUICK = {"epochs": 4, "repeats": 1}


def model_task(name: str):
    """The embedded task ``name``, or LeNet-5's competition task on ``ROWS`` random rows that are also its test set."""
    if name == "dermamnist":
        task = generated_task(name, ROWS)
        return dataclasses.replace(task, x_test=task.x_train)
    return get_task(name)


def config_of(task, method: str, settings: dict | None = None):
    return resolve_config(METHODS[method], task.name, dict(settings or {}))


def batches(n: int, batch_size: int, generator: torch.Generator):
    """A fresh random order of ``n`` rows in minibatches of ``batch_size`` index tensors (the last one shorter)."""
    return torch.randperm(n, generator=generator).split(batch_size)


def fresh_start(task) -> tuple[torch.Generator, torch.nn.Module]:
    """A peer run's data order and a new network, both seeded, so that every repeat does the same work."""
    torch.manual_seed(0)
    return torch.Generator().manual_seed(0), task.model_factory()


class Loader:
    """The authors' ``train_epoch`` wants a sized iterable of ``(inputs, targets)``: one epoch's minibatches in a
    random order, indexed from tensors in memory."""

    def __init__(self, x, y, batch_size: int, generator: torch.Generator):
        self.x, self.y, self.batch_size, self.generator = x, y, batch_size, generator

    def __len__(self) -> int:
        return math.ceil(self.x.shape[0] / self.batch_size)

    def __iter__(self):
        for idx in batches(self.x.shape[0], self.batch_size, self.generator):
            yield self.x[idx], self.y[idx]


# --- SWAG: the authors' swa_gaussian --------------------------------------------------------------------------------

@functools.cache
def authors_swag() -> types.SimpleNamespace:
    """``swag.posteriors.swag``, ``swag.utils`` and ``swag.losses`` loaded from their files without the package's
    ``__init__`` (which imports torchvision for its data sets)."""
    spec = importlib.util.find_spec("swag")
    if spec is None:
        raise ImportError("No module named 'swag'")
    root = Path(spec.submodule_search_locations[0])
    for name, folder in (("swag", root), ("swag.posteriors", root / "posteriors")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules.setdefault(name, package)
    loaded = {}
    for name, file in (("swag.utils", "utils.py"), ("swag.losses", "losses.py"),
                       ("swag.posteriors.swag", "posteriors/swag.py")):
        spec = importlib.util.spec_from_file_location(name, root / file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        loaded[name.rsplit(".", 1)[-1]] = module
    return types.SimpleNamespace(**loaded)


def swag_peer(task, epochs: int) -> Callable[[], torch.Tensor]:
    c = config_of(task, "swag")
    swag = authors_swag()
    swa_start = round(c.swa_start * epochs)  # our rule for the epoch collection starts after

    def run():
        generator, model = fresh_start(task)
        collector = swag.swag.SWAG(task.model_factory, no_cov_mat=False, max_num_models=c.rank)
        # The prior N(0, v I) as weight decay on the mean minibatch loss, as the authors regularise.
        optimiser = torch.optim.SGD(model.parameters(), lr=c.lr, momentum=c.momentum,
                                    weight_decay=1 / (task.prior_variance * task.n_train))
        loader = Loader(task.x_train, task.y_train, c.batch_size, generator)
        for epoch in range(epochs):
            swag.utils.adjust_learning_rate(optimiser, swag.utils.schedule(epoch, c.lr, epochs, True, swa_start,
                                                                           c.swa_lr))
            swag.utils.train_epoch(loader, model, swag.losses.cross_entropy, optimiser, "cpu")
            if epoch + 1 > swa_start:
                collector.collect_model(model)
        test = [(task.x_test, torch.zeros(task.x_test.shape[0]))]
        probabilities = 0
        with torch.profiler.record_function(PREDICTIVE):
            for _ in range(c.samples):
                collector.sample(scale=c.scale, cov=True)
                probabilities = probabilities + swag.utils.predict(test, collector, "cpu")["predictions"]
        return probabilities / c.samples

    return run


# --- VOGN: torchsso's update step, transcribed; IVON -----------------------------------------------------------------

class Accumulator:
    """torchsso's ``TensorAccumulator``: a scaled running sum of lists of tensors, cloned out and cleared by ``get``."""

    def __init__(self):
        self.total = None

    def update(self, data: list, scale: float) -> None:
        self.total = [d.mul(scale) for d in data] if self.total is None else \
            [a.add(d, alpha=scale) for a, d in zip(self.total, data)]

    def get(self) -> list:
        data, self.total = [d.clone() for d in self.total], None
        return data


class DiagCov:
    """torchsso's ``DiagCovLinear`` / ``DiagCovConv2d`` on one layer: the mean over the minibatch of the squared
    per-example gradients, from the layer's input (forward hook) and its output's gradient (backward hook), rescaled
    by the batch size squared (torchsso's ``adjust_data_scale``), then its EMA, inverse and standard deviation.
    Checked once in float64 against autograd's per-example gradients on all three models: the weights' terms agree to
    round-off; a convolution's bias term does not, as in torchsso, which sums the squared deltas over output positions
    instead of squaring their sum (the same cost as the exact term)."""

    def __init__(self, module: torch.nn.Module, ema_decay: float, damping: float):
        self.module, self.ema_decay, self.damping_base = module, ema_decay, damping
        self.data = self.ema = self.inv = self.std = None
        self.l2_reg = self.l2_reg_ema = 0.0
        module.register_forward_hook(self.forward_postprocess)
        with warnings.catch_warnings():  # torchsso registers the (now deprecated) module backward hook
            warnings.simplefilter("ignore")
            module.register_backward_hook(self.backward_postprocess)

    def forward_postprocess(self, module, inputs, output):
        module.data_input = inputs[0].detach()

    def backward_postprocess(self, module, grad_input, grad_output):
        grad_output = grad_output[0]
        if isinstance(module, torch.nn.Linear):
            self.data = self.linear(module.data_input, grad_output)
        else:
            self.data = self.conv(module, module.data_input, grad_output)
        batch_size = grad_output.shape[0]
        self.data = [d.mul(batch_size**2) for d in self.data]

    @staticmethod
    def linear(data_input, grad_output) -> list:
        n = data_input.shape[0]
        in_in, grad_grad = data_input.mul(data_input), grad_output.mul(grad_output)
        return [torch.einsum("ki,kj->ij", grad_grad, in_in).div(n), grad_grad.mean(dim=0)]

    @staticmethod
    def conv(conv2d, data_input, grad_output) -> list:
        # torchsso unfolds with the layer's own padding; a SAME layer's padding is what its forward applies.
        data_input, padding = conv2d.padded_input(data_input) if isinstance(conv2d, SameConv2d) \
            else (data_input, conv2d.padding)
        input2d = F.unfold(data_input, kernel_size=conv2d.kernel_size, stride=conv2d.stride, padding=padding,
                           dilation=conv2d.dilation)
        n, c_out, h, w = grad_output.shape
        grad_output2d = grad_output.reshape(n, c_out, -1)
        grad_in = torch.einsum("bik,bjk->bij", grad_output2d, input2d)
        data_w = grad_in.mul(grad_in).mean(dim=0).reshape((c_out, -1, *conv2d.kernel_size))
        data_b = grad_output2d.mul(grad_output2d).sum(dim=2).mean(dim=0)
        return [data_w, data_b]

    def step(self) -> None:  # update_ema, update_inv, update_std
        if self.ema is None:
            self.ema, self.l2_reg_ema = [d.clone() for d in self.data], self.l2_reg
        else:
            beta = self.ema_decay
            self.ema = [d.mul(beta).add(e, alpha=1 - beta) for d, e in zip(self.data, self.ema)]
            self.l2_reg_ema = self.l2_reg * beta + self.l2_reg_ema * (1 - beta)
        damping = self.damping_base + self.l2_reg_ema
        self.inv = [1 / e.add(e.new_ones(e.shape).mul(damping)) for e in self.ema]
        self.std = [inv.sqrt() for inv in self.inv]


class TorchssoVOGN:
    """A transcription of torchsso's ``VOGN`` (``torchsso.optim.vi.VIOptimizer.step`` with ``curv_type="Cov"``,
    diagonal curvature for ``Linear`` and ``Conv2d``; cybertronai/pytorch-sso, ``torchsso/optim/vi.py``,
    ``optim/secondorder.py``, ``curv/curvature.py``, ``curv/cov/{linear,conv}.py``): one parameter group per layer,
    per step the seed reset, ``num_mc_samples`` draws of the weights each with a forward and backward pass and the
    layer hooks' curvature, the accumulated gradient and curvature, then L2 (1 / (N v)), momentum on the raw gradient,
    the curvature's EMA, inverse and standard deviation, the preconditioned step on the mean, and the mean copied
    back to the network. Set to our update: ``momentum_type="raw"`` (m <- beta1 m + g), ``grad_ema_decay=1``,
    ``ema_decay`` = our beta2, no damping beyond the prior's, no KL warm-up."""

    def __init__(self, model: torch.nn.Module, n_train: int, prior_variance: float, lr: float, momentum: float,
                 ema_decay: float, num_mc_samples: int = 1, seed: int = 1):
        self.model, self.lr, self.momentum, self.num_mc_samples, self.seed = model, lr, momentum, num_mc_samples, seed
        self.l2_reg, self.std_scale = 1 / n_train / prior_variance, math.sqrt(1 / n_train)
        model.register_forward_hook(lambda module, inputs, output: setattr(module, "output", output))
        self.groups = []
        for module in model.modules():
            params = list(module.parameters(recurse=False))
            if not params:
                continue
            if not isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)):
                raise ValueError(f"TorchssoVOGN: no curvature for {type(module).__name__}")
            mean = [p.detach().clone() for p in params]
            self.groups.append({"params": params, "mean": mean, "curv": DiagCov(module, ema_decay, 0.0),
                                "acc_grads": Accumulator(), "acc_curv": Accumulator(),
                                "momentum_buffer": [torch.zeros_like(m) for m in mean]})
        self.steps = 0

    def sample_params(self) -> None:
        for group in self.groups:
            std = group["curv"].std
            for i, (p, m) in enumerate(zip(group["params"], group["mean"])):
                if std is None:
                    p.data.copy_(m.data)
                else:
                    p.data.copy_(torch.addcmul(m, torch.randn_like(m), std[i], value=self.std_scale))

    def step(self, closure: Callable[[], torch.Tensor]) -> torch.Tensor:
        m = self.num_mc_samples
        torch.manual_seed(self.steps + self.seed)
        acc_loss, acc_prob = Accumulator(), Accumulator()
        for _ in range(m):
            self.sample_params()
            loss = closure()
            prob = F.softmax(self.model.output, dim=1)
            acc_loss.update([loss], 1 / m)
            acc_prob.update([prob], 1)
            for group in self.groups:
                group["acc_grads"].update([p.grad.data for p in group["params"]], 1 / m)
                group["acc_curv"].update(group["curv"].data, 1 / m)
        for group in self.groups:  # backward_postprocess(target="mean")
            for mean, grad in zip(group["mean"], group["acc_grads"].get()):
                mean.grad = grad.clone()
            group["curv"].data = group["acc_curv"].get()
        self.steps += 1
        for group in self.groups:
            curv = group["curv"]
            for mean, buffer in zip(group["mean"], group["momentum_buffer"]):  # update_preprocess, "raw"
                mean.grad.add_(mean.data, alpha=self.l2_reg)
                buffer.mul_(self.momentum).add_(mean.grad)
                mean.grad.copy_(buffer)
            curv.l2_reg = self.l2_reg
            curv.step()
            for mean, inv in zip(group["mean"], curv.inv):  # precondition_grad, then update
                mean.grad.copy_(inv.mul(mean.grad))
                mean.data.add_(mean.grad, alpha=-self.lr)
            for p, mean in zip(group["params"], group["mean"]):
                p.data.copy_(mean.data)
                p.grad.copy_(mean.grad)
        return acc_loss.get()[0]

    def prediction(self, data: torch.Tensor, mc: int) -> torch.Tensor:
        torch.manual_seed(self.steps)
        total = Accumulator()
        for _ in range(mc):
            self.sample_params()
            total.update([F.softmax(self.model(data), dim=1)], 1 / mc)
        for group in self.groups:
            for p, mean in zip(group["params"], group["mean"]):
                p.data.copy_(mean.data)
        return total.get()[0]


def torchsso_peer(task, epochs: int) -> Callable[[], torch.Tensor]:
    c = config_of(task, "vogn")

    def run():
        generator, model = fresh_start(task)
        optimiser = TorchssoVOGN(model, task.n_train, task.prior_variance, c.lr, c.beta1, c.beta2, c.mc_samples)
        for _ in range(epochs):
            for idx in batches(task.n_train, c.batch_size, generator):
                x, y = task.x_train[idx], task.y_train[idx]

                def closure():
                    model.zero_grad()
                    loss = F.cross_entropy(model(x), y)
                    loss.backward()
                    return loss

                optimiser.step(closure)
        with torch.no_grad():
            return optimiser.prediction(task.x_test, c.samples)

    return run


def ivon_peer(task, epochs: int) -> Callable[[], torch.Tensor]:
    import ivon

    c = config_of(task, "vogn")

    def run():
        generator, model = fresh_start(task)
        # ivon-opt's suggested starting point (lr 0.1, hess_init 1), ess = N and the prior as weight decay 1 / (N v);
        # none of them changes the cost of a step.
        optimiser = ivon.IVON(model.parameters(), lr=0.1, ess=task.n_train, beta1=c.beta1,
                              weight_decay=1 / (task.n_train * task.prior_variance), mc_samples=c.mc_samples)
        for _ in range(epochs):
            for idx in batches(task.n_train, c.batch_size, generator):
                x, y = task.x_train[idx], task.y_train[idx]
                for _ in range(c.mc_samples):
                    with optimiser.sampled_params(train=True):
                        optimiser.zero_grad()
                        F.cross_entropy(model(x), y).backward()
                optimiser.step()
        probabilities = 0
        with torch.no_grad(), torch.profiler.record_function(PREDICTIVE):
            for _ in range(c.samples):
                with optimiser.sampled_params():
                    probabilities = probabilities + F.softmax(model(task.x_test), dim=1)
        return probabilities / c.samples

    return run


# --- Laplace: laplace-torch ----------------------------------------------------------------------------------------

def adam_map(task, model: torch.nn.Module, c, epochs: int, generator: torch.Generator) -> None:
    """MAP as ours trains it (``c``: an :class:`approximators.training.AdamConfig`): ``torch.optim.Adam`` with a
    cosine decay from lr to min_lr over the steps, the prior as L2 on the mean minibatch loss."""
    optimiser = torch.optim.Adam(model.parameters(), lr=c.lr, betas=(c.beta1, c.beta2),
                                 weight_decay=1 / (task.n_train * task.prior_variance))
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, epochs * math.ceil(task.n_train / c.batch_size),
                                                          eta_min=c.min_lr)
    loss = F.cross_entropy if task.kind == "classification" else \
        lambda outputs, targets: -task.likelihood.log_prob(outputs, targets).mean()
    for _ in range(epochs):
        for idx in batches(task.n_train, c.batch_size, generator):
            optimiser.zero_grad()
            loss(model(task.x_train[idx]), task.y_train[idx]).backward()
            optimiser.step()
            schedule.step()


def laplace_peer(task, epochs: int, predictive: str) -> Callable[[], torch.Tensor]:
    from laplace import Laplace

    c = config_of(task, "laplace")
    dataset = torch.utils.data.TensorDataset(task.x_train, task.y_train)
    # Whole minibatches by one indexing each (a BatchSampler, no per-row collation); .dataset is what fit reads N from.
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, sampler=torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(dataset), c.batch_size, drop_last=False))

    def run():
        generator, model = fresh_start(task)
        adam_map(task, model, c, epochs, generator)
        posterior = Laplace(model, "classification", subset_of_weights="last_layer", hessian_structure="kron",
                            prior_precision=1 / task.prior_variance)
        posterior.fit(loader)
        if predictive == "probit":
            return posterior(task.x_test, pred_type="glm", link_approx="probit")
        return posterior(task.x_test, pred_type="nn", link_approx="mc", n_samples=c.samples)

    return run


# --- SGLD: posteriors -----------------------------------------------------------------------------------------------

def posteriors_peer(task, epochs: int, chains: int) -> Callable[[], torch.Tensor]:
    import posteriors

    c = config_of(task, "sgld")
    n, v = task.n_train, task.prior_variance
    burn_in = round(c.burn_in * epochs)
    a = 2 * c.lr * c.decay_offset**c.decay_power / n  # our step sizes eps_t = a (b + t)^-gamma

    def run():
        generator = torch.Generator().manual_seed(0)
        probabilities, kept = 0, 0
        for chain in range(chains):
            torch.manual_seed(chain)
            model = task.model_factory()

            def log_posterior(params, batch):
                x, y = batch
                outputs = torch.func.functional_call(model, params, (x,))
                # posteriors' convention: the mean log-likelihood plus the log prior / N, at temperature 1 / N.
                log_prior = posteriors.diag_normal_log_prob(params, sd_diag=math.sqrt(v), normalize=False)
                return -F.cross_entropy(outputs, y) + log_prior / n, outputs

            # Its step size per N-scaled objective: eps_t / 2 on the full-data gradient is lr_t on the mean one.
            transform = posteriors.sgmcmc.sgld.build(
                log_posterior, lr=lambda t: n * a * (c.decay_offset + t) ** -c.decay_power / 2, temperature=1 / n)
            state = transform.init({k: p.detach() for k, p in model.named_parameters()})
            for epoch in range(epochs):
                for idx in batches(n, c.batch_size, generator):
                    state, _ = transform.update(state, (task.x_train[idx], task.y_train[idx]), inplace=True)
                if epoch >= burn_in:
                    with torch.no_grad(), torch.profiler.record_function(PREDICTIVE):
                        outputs = torch.func.functional_call(model, state.params, (task.x_test,))
                        probabilities, kept = probabilities + F.softmax(outputs, dim=1), kept + 1
        return probabilities / kept

    return run


# --- the pairs ------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Pair:
    method: str
    peer: str
    work: str
    differs: str
    ours: Callable[[], object]
    theirs: Callable[[], object]


def ours(task, method: str, budget: float, settings: dict | None = None) -> Callable[[], object]:
    return lambda: api.fit(task, method, budget, seed=0, settings=settings, threads=1)


def pairs(task, epochs: int, present: set[str]) -> list[Pair]:
    swag, vogn, sgld = (config_of(task, m) for m in ("swag", "vogn", "sgld"))
    batch = lambda c: f"batch {c.batch_size}"  # noqa: E731
    listed = []
    if "swag" in present:
        snapshots = epochs - round(swag.swa_start * epochs)
        listed.append(Pair(
            "`swag`", "swa_gaussian (authors')",
            f"{epochs} epochs, {batch(swag)}, {snapshots} snapshots, {swag.samples} draws",
            "ours: the flat parameter vector's moments updated in place; authors': per-tensor moments re-allocated "
            "each snapshot, a loss.item() and an accuracy per step",
            ours(task, "swag", epochs), swag_peer(task, epochs)))
    vogn_peers = {"torchsso VOGN (transcription)": (
        "same update, same per-example identity (Goodfellow's, im2col for convolutions); ours: one initial "
        "curvature minibatch more, buffers reused; torchsso: per-layer hooks and accumulators cloned every step",
        torchsso_peer)}
    if "ivon" in present:
        vogn_peers["IVON (ivon-opt)"] = (
            "ours: squared per-example gradients (Gauss-Newton); IVON: a reparameterisation estimate from the "
            "minibatch gradient alone (no per-example work)", ivon_peer)
    for peer, (differs, peer_run) in vogn_peers.items():
        # Our budget: the epochs, each of one MC sample, and the initial curvature minibatch (vogn's budget rule).
        work = f"{epochs} epochs, {batch(vogn)}, {vogn.mc_samples} MC sample, {vogn.samples} draws"
        listed.append(Pair("`vogn`", peer, work, differs, ours(task, "vogn", epochs + 1), peer_run(task, epochs)))
    if "laplace" in present:
        laplace = config_of(task, "laplace")
        for predictive, theirs in (("sampling", "`nn`, 30 MC draws"), ("probit", "`glm` probit")):
            listed.append(Pair(
                f"`laplace` ({predictive})", f"laplace-torch ({theirs})",
                f"{epochs - 1} MAP epochs, {batch(laplace)}, last-layer Kronecker curvature epoch, predictive",
                "ours: the curvature epoch through the meter; laplace-torch: features by a forward hook, "
                "Kronecker factors by its backend (curvlinops)",
                ours(task, "laplace", epochs, {"predictive": predictive}), laplace_peer(task, epochs - 1, predictive)))
    if "posteriors" in present:
        per_chain = max(2, epochs // 2)
        for chains in (4, 1):
            listed.append(Pair(
                f"`sgld` ({chains} chain{'s' * (chains > 1)})", "posteriors sgmcmc.sgld",
                f"{chains} x {per_chain} epochs, {batch(sgld)}, {per_chain - round(sgld.burn_in * per_chain)} "
                "samples a chain",
                ("ours: chains vectorised on one stacked network" if sgld.vectorise else
                 "ours: chains one after another (vectorise=false, sgld's default on LeNet-5)") if chains > 1 else
                "ours: the engine's fused step; posteriors: torch.func.grad of a functional call per step",
                ours(task, "sgld", chains * per_chain, {"chains": chains}),
                posteriors_peer(task, per_chain, chains)))
    return listed


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def measure(pair: Pair, repeats: int) -> dict:
    pair.ours(), pair.theirs()  # untimed: lazy initialisation, the authors' class loading
    ours_s, theirs_s = [], []
    for repeat in range(repeats):
        first, second = (pair.ours, pair.theirs) if repeat % 2 == 0 else (pair.theirs, pair.ours)
        a, b = timed(first), timed(second)
        ours_s.append(a if repeat % 2 == 0 else b)
        theirs_s.append(b if repeat % 2 == 0 else a)
    ratios = [o / t for o, t in zip(ours_s, theirs_s)]
    return {"ours s": statistics.median(ours_s), "peer s": statistics.median(theirs_s),
            "ours / peer": f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"}


def installed() -> set[str]:
    """The peers that import; one line on stderr for each that does not."""
    present = set()
    for module, (distribution, install) in PEERS.items():
        try:
            authors_swag() if module == "swag" else importlib.import_module(module)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: BLE001 - missing, or broken: a half-installed peer may raise anything
            state = "missing" if isinstance(error, ModuleNotFoundError) else "installed but fails to import"
            print(f"peers.py: {distribution} is {state} ({type(error).__name__}: {' '.join(str(error).split())[:200]}); "
                  f"its rows are skipped (install: {install})", file=sys.stderr)
        else:
            present.add(module)
    return present


def present_versions() -> dict[str, str]:
    """The installed version of torch and of each peer's distribution (those missing left out)."""
    versions = {"torch": torch.__version__}
    for distribution, _ in PEERS.values():
        try:
            versions[distribution] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def epochs_and_repeats(parser: argparse.ArgumentParser, args, full: dict) -> tuple[int, int]:
    """``--epochs`` and ``--repeats``, or their defaults (``full``, or :data:`QUICK` with ``--quick``); a parser
    error below :data:`QUICK`'s epochs (SWAG's low-rank part needs two snapshots: 4 epochs at swa_start 0.54)."""
    defaults = QUICK if args.quick else full
    epochs = defaults["epochs"] if args.epochs is None else args.epochs
    repeats = defaults["repeats"] if args.repeats is None else args.repeats
    if epochs < QUICK["epochs"] or repeats < 1:
        parser.error(f"--epochs must be at least {QUICK['epochs']} and --repeats at least 1, "
                     f"got {epochs} and {repeats}")
    return epochs, repeats


def main() -> None:
    parser = scripts.parser(__file__, __doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["digits", "digits-cnn", "dermamnist"],
                        choices=["digits", "digits-cnn", "dermamnist"])
    parser.add_argument("--epochs", type=positive_whole, help=f"epochs per run (default {FULL['epochs']})")
    parser.add_argument("--repeats", type=positive_whole, help=f"interleaved repeats (default {FULL['repeats']})")
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke run: {QUICK['epochs']} epochs, {QUICK['repeats']} repeat")
    scripts.out_option(parser)
    args = parser.parse_args()
    started = time.monotonic()
    epochs, repeats = epochs_and_repeats(parser, args, FULL)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=FutureWarning)  # tensordict's, on importing posteriors
    warnings.filterwarnings("ignore", message=".*non-full backward hook.*")  # torchsso's hooks, transcribed
    present = installed()
    rows = []
    for name in args.models:
        task = model_task(name)
        for pair in pairs(task, epochs, present):
            row = {"model": name, "ours": pair.method, "peer": pair.peer, "work (both sides)": pair.work,
                   **measure(pair, repeats), "where they differ": pair.differs}
            rows.append(row)
            print(tabulate([row], headers="keys", floatfmt=".3g"), flush=True)
    print(f"\ntorch {torch.__version__}, {torch.get_num_threads()} thread; whole runs (training and test "
          f"predictive), median (range) of {repeats} interleaved repeats of our time / the peer's; lower is better")
    print(tabulate(rows, headers="keys", floatfmt=".3g", tablefmt="github"))
    by_pair = {}  # the ratios alone, a column per model
    for row in rows:
        by_pair.setdefault((row["ours"], row["peer"]), {})[row["model"]] = row["ours / peer"]
    summary = [{"ours": method, "peer": peer, **{name: ratios.get(name, "") for name in args.models}}
               for (method, peer), ratios in by_pair.items()]
    print("\nours / peer, median (range):")
    print(tabulate(summary, headers="keys", tablefmt="github"))
    scripts.keep(args.out, __file__, started, {"ratios": summary, "pairs": rows}, epochs=epochs, repeats=repeats,
                 versions=present_versions())


if __name__ == "__main__":
    scripts.run(main)
