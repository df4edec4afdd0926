"""Every sampler's and SWAG's schedule pinned: the engine steps after which it keeps a sample, collects a snapshot,
adds noise or restarts a cycle, spied on through the engine (toy-gap, 80 rows), against each method's
documented rule; and chains and runs draw from distinct streams.

A spy wraps :func:`approximators.engine.run` so that every step the rule takes is counted, and records the count
when the method keeps a sample (``PredictiveAccumulator.add``) or SWAG collects a snapshot (``Moments.collect``).
"""

import math

import pytest
import torch

from approximators import METHODS, engine, resolve_config
from approximators.base import PredictiveAccumulator
from approximators.swag import Moments
from bench.api import fit

N_TRAIN = 80  # toy-gap


@pytest.fixture
def spy(monkeypatch):
    """``events``: (what, engine steps taken when it happened); ``rules``: each engine run's update rule."""
    record = type("Spy", (), {})()
    record.events, record.rules, record.steps = [], [], 0
    run = engine.run

    def counting_run(objective, rule, params, data, epochs, batch_size, seeds, **hooks):
        record.rules.append(rule)
        update = rule.update

        def counted(state, grads, step):
            record.steps += 1
            return update(state, grads, step)

        rule.update = counted
        return run(objective, rule, params, data, epochs, batch_size, seeds, **hooks)

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
