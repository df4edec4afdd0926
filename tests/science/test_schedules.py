"""Every method's schedule pinned: the engine steps after which it keeps a sample, collects a snapshot, adds noise,
restarts a cycle or switches phase (VOGN's initialisation minibatch and tempering, MFVI's MAP-to-VI switch,
Laplace's curvature epoch, HMC's burn-in and kept iterations, MC dropout's masks), spied on through the engine
(toy-gap, 80 rows), against each method's documented rule; and chains, runs and members draw from distinct streams.

A spy wraps :func:`approximators.engine.run` so that every step the rule takes is counted, and records the count
when the method keeps a sample (``PredictiveAccumulator.add``) or SWAG collects a snapshot (``Moments.collect``).
"""

import math

import pytest
import torch
import torch.nn.functional as F

from approximators import METHODS, engine, resolve_config
from approximators.base import PredictiveAccumulator
from approximators.swag import Moments
from approximators.updates import NoiseStream
from bench.api import fit, make_task, seeded_module
from bench.budget import BudgetMeter, MeteredData
from bench.tasks import get_task
from bench import hmc

N_TRAIN = 80  # toy-gap


@pytest.fixture
def spy(monkeypatch):
    """``events``: (what, engine steps taken when it happened); ``rules``: each engine run's update rule, ``starts``
    the steps taken before it, ``params`` and ``finals`` its initial and final parameters."""
    record = type("Spy", (), {})()
    record.events, record.rules, record.starts, record.params, record.finals = [], [], [], [], []
    record.steps = 0
    run = engine.run

    def counting_run(objective, rule, params, data, epochs, batch_size, seeds, **hooks):
        record.rules.append(rule)
        record.starts.append(record.steps)
        record.params.append(params.detach().clone())
        update = rule.update

        def counted(state, grads, step):
            record.steps += 1
            return update(state, grads, step)

        rule.update = counted
        state = run(objective, rule, params, data, epochs, batch_size, seeds, **hooks)
        record.finals.append(state.params.detach().clone())
        return state

    def when(what, method):
        def recorded(self, *args, **kwargs):
            record.events.append((what, record.steps))
            return method(self, *args, **kwargs)
        return recorded

    monkeypatch.setattr(engine, "run", counting_run)
    monkeypatch.setattr(PredictiveAccumulator, "add", when("sample", PredictiveAccumulator.add))
    monkeypatch.setattr(Moments, "collect", when("snapshot", Moments.collect))
    return record


def _steps(what, events):
    return [step for kind, step in events if kind == what]


def test_sgld_keeps_one_sample_per_epoch_after_half_of_each_chain_s_epochs(spy):
    config = resolve_config(METHODS["sgld"], "toy-gap", {"chains": "2", "thin": "2"})
    fitted = fit("toy-gap", "sgld", 24, settings={"chains": 2, "thin": 2})
    per_epoch = math.ceil(N_TRAIN / config.batch_size)
    epochs = 24 // 2  # E = floor(B / chains)
    burn_in = round(0.5 * epochs)  # 6: samples at the ends of epochs 8, 10 and 12 (every thin-th after burn-in)
    assert _steps("sample", spy.events) == [e * per_epoch for e in (8, 10, 12)]
    assert spy.steps == epochs * per_epoch and fitted.epochs_used == 24 and burn_in == 6


@pytest.mark.parametrize("form", ["sghmc", "sgld"])
def test_csgmcmc_restarts_each_cycle_adds_noise_from_its_last_tenth_and_samples_its_last_epochs(spy, form):
    config = resolve_config(METHODS["csgmcmc"], "toy-gap")
    fit("toy-gap", "csgmcmc", 40, settings={"cycles": 2, "samples_per_cycle": 2, "form": form})
    per_epoch = math.ceil(N_TRAIN / config.batch_size)
    cycle = 20 * per_epoch  # 2 cycles of 20 epochs
    ((rule,),) = [spy.rules]
    noisy = rule.noisy
    quiet = math.ceil(0.9 * cycle)  # the first step of a cycle whose proportion reaches exploration = 0.9
    assert noisy == ([False] * quiet + [True] * (cycle - quiet)) * 2
    rates = rule.schedule if form == "sghmc" else [eps / 2 for eps in rule.schedule]
    assert rates[0] == rates[cycle] == pytest.approx(config.lr / N_TRAIN)  # a restart at each cycle's first step
    assert rates[cycle - 1] == pytest.approx(rates[0] / 2 * (math.cos(math.pi * (cycle - 1) / cycle) + 1))
    assert _steps("sample", spy.events) == [e * per_epoch for e in (19, 20, 39, 40)]


@pytest.mark.parametrize("method, runs", [("swag", 1), ("swag-diag", 1), ("multiswag", 3)])
def test_swag_collects_one_snapshot_per_epoch_after_161_300_of_the_epochs(spy, method, runs):
    config = resolve_config(METHODS[method], "toy-gap")
    fitted = fit("toy-gap", method, 30 * runs)
    per_epoch = math.ceil(N_TRAIN / config.batch_size)
    first = round(161 / 300 * 30)  # 16 epochs before the first snapshot
    assert _steps("snapshot", spy.events) == [e * per_epoch for e in range(first + 1, 31)]
    assert fitted.report["snapshots_per_run"] == 30 - first
    assert _steps("sample", spy.events) == [30 * per_epoch] * config.samples  # the draws, after training


@pytest.mark.parametrize("method, budget, settings", [("sgld", 20, {"chains": 3}), ("csgmcmc", 150, {"chains": 3}),
                                                      ("multiswag", 60, {"runs": 3}), ("de", 30, {"members": 3})])
def test_chains_runs_and_members_draw_from_distinct_streams(method, budget, settings, monkeypatch):
    """Each of K stacked networks starts from its own initialisation and reads its own minibatch order (and noise):
    after one engine run no two of them hold the same parameters, and their first minibatches differ."""
    orders = []
    first_minibatch = engine.first_minibatch
    monkeypatch.setattr(engine, "member_order", lambda n, g: orders.append(torch.randperm(n, generator=g)) or orders[-1])
    kept = []
    add = PredictiveAccumulator.add
    monkeypatch.setattr(PredictiveAccumulator, "add", lambda self, members: kept.append(
        torch.cat([p.flatten(1) for p in members.values()], 1)) or add(self, members))
    fit("toy-gap", method, budget, settings=settings)
    params = kept[0]
    assert params.shape[0] == 3 and torch.cdist(params, params).fill_diagonal_(float("inf")).min() > 0
    firsts = torch.stack(orders[:3])
    assert len({tuple(o[:8].tolist()) for o in firsts}) == 3
    assert first_minibatch is engine.first_minibatch


@pytest.mark.parametrize("settings", [{}, {"mc_samples": 3, "tempering": 0.5}])
def test_vogn_trains_whole_epochs_after_its_initialisation_minibatch_drawing_weights_for_every_pass(
        spy, monkeypatch, settings):
    """The initialisation minibatch costs B / N of an epoch, then E = floor((budget - B / N) / K) epochs, each
    minibatch through the network once per MC sample (K), each pass at a fresh draw of the weights; tau rises
    linearly from tau_start to 1 over the first ``tempering`` of the steps; the predictive then draws ``samples``."""
    config = resolve_config(METHODS["vogn"], "toy-gap", {key: str(value) for key, value in settings.items()})
    draws = []
    next_draw = NoiseStream.next
    monkeypatch.setattr(NoiseStream, "next", lambda self: draws.append(1) or next_draw(self))
    fitted = fit("toy-gap", "vogn", 20, settings=settings)
    per_epoch, k = math.ceil(N_TRAIN / config.batch_size), config.mc_samples
    epochs = math.floor((20 - config.batch_size / N_TRAIN) / k)  # 19 epochs of one sample, 6 of three
    steps = epochs * per_epoch
    assert spy.steps == steps and fitted.epochs_used == pytest.approx(config.batch_size / N_TRAIN + epochs * k)
    assert len(draws) == steps * k + config.samples
    ((rule,),) = [spy.rules]
    ramp = round(config.tempering * steps)
    tau = config.tau_start
    assert rule.taus == pytest.approx([tau + (1 - tau) * t / ramp for t in range(ramp)] + [1.0] * (steps - ramp))


@pytest.mark.parametrize("method, budget", [("sgd", 7), ("de", 15), ("mc-dropout", 7)])
def test_plain_training_s_cosine_schedule_runs_from_lr_to_min_lr_over_exactly_the_steps_it_takes(spy, method, budget):
    """Issue 48: plain training's cosine schedule could end one epoch late unnoticed (a schedule over E + 1 epochs
    ends short of min_lr). Each run's rates are torch's CosineAnnealingLR from lr towards min_lr with T_max the
    steps the run takes, one rate per step taken: the first is lr, the last T_max - 1 steps along."""
    config = resolve_config(METHODS[method], "toy-gap")
    fit("toy-gap", method, budget)
    per_epoch = math.ceil(N_TRAIN / config.batch_size)
    (rule,) = spy.rules
    steps = budget // getattr(config, "members", 1) * per_epoch  # de's members train together, sharing the steps
    assert spy.steps == steps and len(rule.schedule) == steps
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimiser = torch.optim.SGD([parameter], lr=config.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=steps, eta_min=config.min_lr)
    expected = []
    for _ in range(steps):
        expected.append(optimiser.param_groups[0]["lr"])
        optimiser.step()
        scheduler.step()
    assert list(rule.schedule) == expected


def test_mfvi_switches_from_map_to_vi_after_a_tenth_of_the_budget(spy):
    """round(map_fraction B) epochs of MAP (Adam), then the rest of floor(B) of VI, which starts at the MAP
    phase's last weights with sigma = init_std."""
    config = resolve_config(METHODS["mfvi"], "toy-gap")
    fitted = fit("toy-gap", "mfvi", 20)
    per_epoch, map_epochs = math.ceil(N_TRAIN / config.batch_size), round(0.1 * 20)
    assert [type(rule).__name__ for rule in spy.rules] == ["Adam", "MFVIRule"]
    assert spy.starts == [0, map_epochs * per_epoch] and spy.steps == 20 * per_epoch and fitted.epochs_used == 20
    mu, rho = spy.params[1].chunk(2, dim=1)
    assert torch.equal(mu, spy.finals[0])
    torch.testing.assert_close(F.softplus(rho), torch.full_like(rho, config.init_std))


def test_laplace_trains_floor_b_minus_one_map_epochs_then_reads_every_row_once_for_its_curvature(spy, monkeypatch):
    """Budget 20.5: 19 epochs of MAP training, then one curvature epoch that reads each training row once."""
    config = resolve_config(METHODS["laplace"], "toy-gap")
    reads = []
    batch = MeteredData.batch
    monkeypatch.setattr(MeteredData, "batch", lambda self, indices, **passes: reads.append(
        (spy.steps, indices.flatten())) or batch(self, indices, **passes))
    fitted = fit("toy-gap", "laplace", 20.5)
    per_epoch = math.ceil(N_TRAIN / config.batch_size)
    assert len(spy.rules) == 1 and spy.steps == 19 * per_epoch and fitted.epochs_used == 20
    curvature = torch.cat([rows for steps, rows in reads if steps == spy.steps])
    assert torch.equal(curvature.sort().values, torch.arange(N_TRAIN))


def test_hmc_adapts_while_less_than_burn_in_of_the_budget_is_spent_then_keeps_every_iteration(monkeypatch):
    """Each iteration is charged its chains' leapfrog steps (one epoch per chain-gradient); it adapts the step size
    if it starts before burn_in of the budget is spent, and is kept as a sample otherwise; iterations run while
    the longest trajectory, ceil(L (1 + jitter)) steps per chain, still fits."""
    config = resolve_config(METHODS["hmc"], "toy-gap", {"chains": "2"})
    meters, iterations, kept = [], [], []
    charge = BudgetMeter.charge
    monkeypatch.setattr(BudgetMeter, "charge", lambda self, n: meters.append(self) or charge(self, n))
    step = hmc.step

    def recorded(state, *args, **kwargs):
        before = meters[-1].epochs_used
        new_state, info = step(state, *args, **kwargs)
        iterations.append((before, state.adaptation is not None, info.gradient_evaluations, meters[-1].epochs_used))
        return new_state, info

    monkeypatch.setattr(hmc, "step", recorded)
    add_outputs = PredictiveAccumulator.add_outputs
    monkeypatch.setattr(PredictiveAccumulator, "add_outputs", lambda self, outputs: kept.append(outputs.shape[0])
                        or add_outputs(self, outputs))
    budget, longest = 300, config.chains * math.ceil(config.leapfrog_steps * (1 + config.jitter))
    fitted = fit("toy-gap", "hmc", budget, settings={"chains": 2})
    for before, adapting, gradients, after in iterations:
        assert after - before == pytest.approx(gradients) and budget - before >= longest
        assert adapting == (before < config.burn_in * budget)
    assert budget - iterations[-1][3] < longest  # the next iteration could not have finished
    samples = sum(not adapting for _, adapting, _, _ in iterations)
    assert kept == [config.chains * samples] and fitted.report["samples_per_chain"] == samples > 0


def test_mc_dropout_draws_a_fresh_mask_for_every_example_at_every_step_and_every_predictive_pass(spy, monkeypatch):
    """One mask per training step, each row (example) its own, and one per predictive pass: none repeats."""
    config = resolve_config(METHODS["mc-dropout"], "toy-gap")
    masks = []
    bernoulli = torch.Tensor.bernoulli_

    def recording(self, *args, **kwargs):
        bernoulli(self, *args, **kwargs)
        masks.append(self.clone())
        return self

    monkeypatch.setattr(torch.Tensor, "bernoulli_", recording)
    fit("toy-gap", "mc-dropout", 4, settings={"rate": 0.5})
    steps = 4 * math.ceil(N_TRAIN / config.batch_size)
    assert spy.steps == steps and len(masks) == steps + config.samples
    hidden = 50
    assert all(mask.shape == (config.batch_size, hidden) for mask in masks[:steps])
    assert all(mask.shape == (121, hidden) for mask in masks[steps:])  # the test inputs
    for mask in masks:
        assert len({tuple(row.tolist()) for row in mask}) == mask.shape[0]
    assert len({tuple(mask.flatten().tolist()) for mask in masks}) == len(masks)


def test_hmc_chains_draw_from_distinct_streams(monkeypatch):
    """Chains start from their own initialisations; and chains started at one point (a network whose factory
    always gives the same weights) part: their momenta, jitter and Metropolis uniforms are their own."""
    toy = get_task("toy-gap")
    starts, positions = [], []
    init = hmc.init
    monkeypatch.setattr(hmc, "init", lambda position, *args, **kwargs: starts.append(position.clone())
                        or init(position, *args, **kwargs))
    fit("toy-gap", "hmc", 100, settings={"chains": 3, "leapfrog_steps": 3})
    assert torch.cdist(starts[0], starts[0]).fill_diagonal_(float("inf")).min() > 0
    from approximators import hmc as budgeted

    real = budgeted._test_outputs
    monkeypatch.setattr(budgeted, "_test_outputs", lambda problem, model, position: (
        positions.append(position.clone()), real(problem, model, position))[1])
    one_start = make_task("toy-gap-one-start", toy.x_train, toy.y_train, toy.x_test,
                          lambda: seeded_module(toy.model_factory, 0), toy.likelihood, toy.prior_variance)
    fit(one_start, "hmc", 300, settings={"chains": 3})
    assert torch.equal(starts[1][0], starts[1][1]) and torch.equal(starts[1][0], starts[1][2])
    assert torch.cdist(positions[-1], positions[-1]).fill_diagonal_(float("inf")).min() > 0
