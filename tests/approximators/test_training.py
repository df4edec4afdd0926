"""MAP training with Adam on the engine: anchored MAP with a validation split in closed form; validation split sizes."""

import pytest
import torch
from torch import nn

from approximators.training import AdamConfig, ValidationSplit, initial_members, train_members
from bench.budget import BudgetMeter, MeteredData
from bench.functional import StackedModel
from bench.likelihoods import FixedNoiseGaussian


def _linear(d):
    return lambda: nn.Sequential(nn.Linear(d, 1))


def _anchored_mode(features, targets, anchor, noise, prior_variance, likelihood_scale):
    """argmax of likelihood_scale * log N(y; X theta, noise^2) + log N(theta; anchor, v I), in closed form."""
    precision = likelihood_scale * features.T @ features / noise**2 + torch.eye(features.shape[1]) / prior_variance
    return torch.linalg.solve(precision, likelihood_scale * features.T @ targets / noise**2 + anchor / prior_variance)


def test_anchored_map_with_a_validation_split_is_the_full_data_posterior_mode():
    """Members see the 90% fit rows, the likelihood is scaled to the full N_train and the prior (at its
    anchor) enters once, per the task's posterior: mode = solve(c X'X/s^2 + I/v, c X'y/s^2 + a/v), c = N/n_fit.
    The validation targets are chosen so that the selection's criterion, the anchored loss on the validation rows
    (N / n_val) sum_val NLL + |theta - a|^2 / (2 v), is lowest at the mode too, so best-validation selection keeps
    it: its gradient there, (N / n_val) Phi_v^T (Phi_v mode - y_v) / s^2 + (mode - a) / v, is zero."""
    g = torch.Generator().manual_seed(0)
    n, d, noise, prior_variance, atol = 40, 3, 1.0, 0.05, 2e-3
    x = torch.randn(n, d, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3 + noise * torch.randn(n, generator=g)
    split = ValidationSplit.random(n, 0.1, torch.Generator().manual_seed(1))
    features = torch.cat([x, torch.ones(n, 1)], 1).double()
    anchor = torch.randn(d + 1, generator=g).double() * prior_variance**0.5
    fit, c = split.fit, n / len(split.fit)
    mode = _anchored_mode(features[fit], y[fit].double(), anchor, noise, prior_variance, c)
    prior_scaled_by_fit_rows = _anchored_mode(features[fit], y[fit].double(), anchor, noise, prior_variance, 1.0)
    assert (mode - prior_scaled_by_fit_rows).abs().max() > 10 * atol, "the two scalings must be told apart"
    phi_v, n_val = features[split.validation], len(split.validation)  # 4 rows, 4 parameters: one solution
    residual = torch.linalg.solve(phi_v.T, -(n_val / n) * noise**2 * (mode - anchor) / prior_variance)
    y[split.validation] = (phi_v @ mode - residual).float()

    meter = BudgetMeter(600, n)
    trained = train_members(StackedModel(_linear(d)()), initial_members(_linear(d), [0]), MeteredData(x, y, meter),
                            FixedNoiseGaussian(noise), prior_variance, 600, AdamConfig(batch_size=64, lr=0.05,
                                                                                        min_lr=1e-4), [0],
                            anchors={"0.weight": anchor[:d].float().view(1, 1, d), "0.bias": anchor[d:].float().view(1, 1)},
                            split=split)
    found = torch.cat([trained["0.weight"][0, 0], trained["0.bias"][0]]).double()
    torch.testing.assert_close(found, mode, atol=atol, rtol=0)
    assert meter.epochs_used == 600, "an epoch reads the fit rows and the validation rows once: one epoch"


@pytest.mark.parametrize("fraction, expected", [(0.1, 4), (0.0, None)])
def test_validation_split_sizes(fraction, expected):
    split = ValidationSplit.random(40, fraction, torch.Generator().manual_seed(0))
    if expected is None:
        assert split is None
    else:
        assert len(split.validation) == expected and len(split.fit) == 36
        assert set(split.fit.tolist()).isdisjoint(split.validation.tolist())
