"""MC dropout: the masks go where the task's table says, at the stated rate, and stay on at prediction."""

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from approximators.mc_dropout import SITES, DropoutNetwork
from bench.functional import StackedModel
from bench.tasks import task_names


def _mlp():
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2)).double()


def _params(module):
    return StackedModel.stack([module])


def test_the_dropout_network_drops_the_inputs_of_its_sites_and_rescales_the_kept_ones():
    """Against a plain forward pass with the same masks drawn by hand."""
    module, rate = _mlp(), 0.3
    x = torch.randn(7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    network = DropoutNetwork(module, ["2"], rate, torch.Generator().manual_seed(5))
    out = network(_params(module), x, shared_input=True)[0]

    hidden = torch.relu(module[0](x))
    keep = torch.empty_like(hidden).bernoulli_(1 - rate, generator=torch.Generator().manual_seed(5))
    expected = module[2](hidden * keep / (1 - rate))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    assert 0 < int((keep == 0).sum()) < keep.numel()  # the check above saw both dropped and kept units


def test_units_are_dropped_at_the_rate_and_the_mean_pass_is_the_plain_network():
    """Inverted dropout is unbiased before a linear layer: the mean over passes is the network without
    dropout, within 4.5 Monte Carlo standard errors; the dropped fraction is the rate within 4.5 of its
    binomial standard errors."""
    module, rate, passes = _mlp(), 0.2, 4000
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    network = DropoutNetwork(module, ["2"], rate, torch.Generator().manual_seed(3))
    params = {n: p.expand(passes, *p.shape[1:]) for n, p in _params(module).items()}
    outputs = network(params, x, shared_input=True)  # (passes, 4, 2), one mask per pass
    standard_error = outputs.std(0) / math.sqrt(passes)
    z = (outputs.mean(0) - module(x)) / standard_error
    assert z.abs().max() < 4.5, z

    dropped = []
    network.base[2].register_forward_pre_hook(lambda _m, inputs: dropped.append((inputs[0] == 0).double().mean()))
    positive = {n: p.abs() + 0.1 for n, p in params.items()}  # every hidden unit positive before dropout
    network(positive, torch.ones(4, 3, dtype=torch.float64), shared_input=True)
    hidden_units = 4 * 5
    fraction = torch.stack(dropped).mean()
    assert abs(fraction - rate) < 4.5 * math.sqrt(rate * (1 - rate) / (passes * hidden_units)), fraction


def test_every_task_names_sites_its_network_runs_as_modules():
    from bench.tasks.competition import SPECS, generated_task
    from bench.tasks import get_task

    assert set(SITES) == set(task_names()) | set(SPECS)
    for task_name, sites in SITES.items():
        task = generated_task(task_name, 2) if task_name in SPECS else get_task(task_name)
        module = task.model_factory()
        network = DropoutNetwork(module, sites.split(","), 0.5, torch.Generator().manual_seed(0))
        network(_params(module), task.x_train[:2], shared_input=True)  # raises if a site never ran


@pytest.mark.parametrize("setting", ["rate=0", "rate=1", "rate=nan", "samples=0", "sites=nosuchlayer", "sites=",
                                     "lr=-1"])
def test_nonsensical_settings_are_one_line_errors(setting, run_cli, tmp_path):
    code, _, err = run_cli("--method", "mc-dropout", "--task", "toy-gap", "--budget", "2", "--set", setting,
                           "--out", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_a_layer_the_network_does_not_call_is_refused(run_cli, tmp_path):
    """The CNN-LSTM's LSTM applies its linear map's weights functionally: a hook there would never run."""
    from approximators.mc_dropout import MCDropout
    from bench.errors import ConfigError
    from bench.tasks.competition import generated_task

    task = generated_task("imdb", 2)
    network = DropoutNetwork(task.model_factory(), ["lstm.linear"], 0.5, torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match="not called as a module"):
        network(_params(task.model_factory()), task.x_train[:2], shared_input=True)
    assert MCDropout.architecture_change is not None


def test_seeded_runs_reproduce_and_spend_the_budget(fit):
    first, meter = fit("mc-dropout", "digits", 3, samples=4)
    second, _ = fit("mc-dropout", "digits", 3, samples=4)
    other_seed, _ = fit("mc-dropout", "digits", 3, seed=1, samples=4)
    assert meter.epochs_used == 3
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, other_seed)
    np.testing.assert_allclose(first.sum(1), 1.0, atol=1e-12)


def test_the_architecture_change_is_shown_and_recorded(run_cli, tmp_path):
    code, out, _ = run_cli("methods")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("mc-dropout"))
    assert "changed" in row
    assert "changed" not in next(line for line in out.splitlines() if line.startswith("sgd "))

    code, _, err = run_cli("--method", "mc-dropout", "--task", "toy-gap", "--budget", "2", "--set", "samples=2",
                           "--out", tmp_path)
    assert code == 0, err
    record = json.loads(next(tmp_path.rglob("result.json")).read_text())
    assert record["architecture_change"] == "dropout (rate 0.01) on the inputs of layers 2"
    code, _, err = run_cli("--method", "sgd", "--task", "toy-gap", "--budget", "2", "--out", tmp_path)
    assert json.loads(next((tmp_path / "toy-gap" / "sgd").rglob("result.json")).read_text())[
        "architecture_change"] is None


def test_dropout_stays_on_at_prediction(fit):
    """Same training, one pass against two: with dropout off at prediction both passes would be the MAP network's."""
    one, _ = fit("mc-dropout", "digits", 2, samples=1)
    two, _ = fit("mc-dropout", "digits", 2, samples=2)
    assert np.abs(one - two).max() > 1e-3
