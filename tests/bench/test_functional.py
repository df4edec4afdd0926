"""StackedModel: every way it evaluates networks computes what the plain ``nn.Module`` computes."""

import pytest
import torch
from torch.func import vmap

from bench.functional import StackedModel, seeded_module
from bench.tasks import get_task
from bench.tasks.models import lenet5


def _one_network(name: str):
    if name == "lenet5":
        return lenet5, torch.randn(5, 3, 28, 28, generator=torch.Generator().manual_seed(0))
    task = get_task(name)
    return task.model_factory, task.x_test[:7]


@pytest.mark.parametrize("name", ["digits-cnn", "digits-lstm", "lenet5"])
def test_one_flat_parameter_set_gives_the_modules_outputs_and_gradients(name):
    """The direct call for one parameter set (what a chain sampled alone takes) against the module itself and the
    vmap path of several sets, on values and on the gradient with respect to the flat parameters."""
    factory, x = _one_network(name)
    modules = [seeded_module(factory, s).double() for s in (1, 2)]
    model = StackedModel(factory())
    flat = model.layout.flatten(StackedModel.stack(modules)).double().requires_grad_(True)
    alone = model.flat(flat[:1], x.double())
    together = model.flat(flat, x.double())
    with torch.no_grad():
        expected = modules[0](x.double())
    torch.testing.assert_close(alone[0], expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(alone, together[:1], rtol=1e-12, atol=1e-12)
    (grad_alone,) = torch.autograd.grad(alone.square().sum(), flat)
    (grad_together,) = torch.autograd.grad(together[:1].square().sum(), flat)
    torch.testing.assert_close(grad_alone, grad_together, rtol=1e-10, atol=1e-12)
    assert grad_alone[1].abs().sum() == 0 and grad_alone[0].abs().sum() > 0


def test_one_parameter_set_does_not_go_through_vmap(monkeypatch):
    """The direct call is the path taken (a silent fallback to vmap would keep the results and lose the speed)."""
    calls = []
    monkeypatch.setattr("bench.functional.vmap", lambda *a, **k: calls.append(1) or vmap(*a, **k))
    factory, x = _one_network("digits-lstm")
    model = StackedModel(factory())
    flat = model.layout.flatten(StackedModel.stack([seeded_module(factory, s) for s in (1, 2)]))
    model.flat(flat[:1], x)
    assert calls == []
    model.flat(flat, x)
    assert calls == [1]


@pytest.mark.parametrize("name", ["digits-cnn", "digits-lstm", "lenet5"])
def test_one_member_on_its_own_minibatch_gives_what_vmap_gives(name):
    """A one-member training step (per-member inputs ``(1, B, ...)``) called directly equals the same member within
    a vmap-ped stack of several, on values and on the gradient with respect to the flat parameters."""
    factory, x = _one_network(name)
    model = StackedModel(factory())
    flat = model.layout.flatten(StackedModel.stack([seeded_module(factory, s).double() for s in (1, 2)]))
    flat = flat.double().requires_grad_(True)
    inputs = torch.stack([x, x.flip(0)]).double()  # each member its own minibatch
    alone = model(model.layout.unflatten(flat[:1]), inputs[:1], shared_input=False)
    together = model(model.layout.unflatten(flat), inputs, shared_input=False)
    torch.testing.assert_close(alone, together[:1], rtol=1e-12, atol=1e-12)
    (grad_alone,) = torch.autograd.grad(alone.square().sum(), flat)
    (grad_together,) = torch.autograd.grad(together[:1].square().sum(), flat)
    torch.testing.assert_close(grad_alone, grad_together, rtol=1e-10, atol=1e-12)


def test_one_member_on_its_own_minibatch_does_not_go_through_vmap(monkeypatch):
    calls = []
    monkeypatch.setattr("bench.functional.vmap", lambda *a, **k: calls.append(1) or vmap(*a, **k))
    factory, x = _one_network("digits-cnn")
    model = StackedModel(factory())
    params = model.layout.unflatten(model.layout.flatten(StackedModel.stack([seeded_module(factory, 1)])))
    model(params, x.unsqueeze(0), shared_input=False)
    assert calls == []


def test_a_seeded_module_draws_from_its_seed_and_leaves_every_global_generator_alone(monkeypatch):
    """Its weights are those torch.manual_seed(seed) gives; the global CPU stream is where it was, and no CUDA generator
    is reseeded (torch.manual_seed would queue that on every device, and fork_rng(devices=[]) would not undo it)."""
    factory = get_task("digits").model_factory
    torch.manual_seed(3)
    expected = [p.clone() for p in factory().parameters()]
    cuda_seeds = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", cuda_seeds.append)
    before = torch.get_rng_state()
    module = seeded_module(factory, 3)
    assert all(torch.equal(p, q) for p, q in zip(module.parameters(), expected))
    assert torch.equal(torch.get_rng_state(), before) and cuda_seeds == []
